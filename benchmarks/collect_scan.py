"""What ``Run.collect`` costs once a million answers are in, in the central process.

    .venv/bin/python benchmarks/collect_scan.py SRC_DIR

``SRC_DIR`` is the ``src`` folder of the tree to measure (a worktree of an older commit for
a before/after pair in one session). A million agents each return their id; the timed part
is ``collect`` of the finished set (best of 5): what a step pays after its last answer.
"""

from __future__ import annotations

import asyncio
import sys
import time
from types import SimpleNamespace

sys.path.insert(0, sys.argv[1])

from populace.core import Agent, Simulation
from populace.launch import Run


class Counter(Agent):
    def value(self) -> int:
        return self.id


async def main() -> None:
    async with Simulation(workers=1) as sim:
        answers = (await sim.create(Counter, 1_000_000)).map(Counter.value)
        await answers
        run = object.__new__(Run)  # only what collect reads: no run directory, no monitor
        run.__dict__.update(_monitor=None, _observers=(), _collecting=None, step=1,
                            _failed=None, sim=sim,
                            options=SimpleNamespace(checkpoint_minutes=5))
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            await run.collect(answers)
            best = min(best, time.perf_counter() - t0)
        print(f"{sys.argv[1]}: collect of 1,000,000 finished answers: {best * 1e3:.0f} ms")


if __name__ == "__main__":
    asyncio.run(main())
