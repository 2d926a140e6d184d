"""Bytes per agent in one process: idle, and while waiting on the dummy model.

    .venv/bin/python benchmarks/agent_memory.py --agents 200000

Creates ``--agents`` guessing-game participants in one local worker (resident size before
and after), broadcasts one round to them on a dummy model slow enough (30 s) that every
call is still waiting when the resident size is read again, and prints both differences
per agent. Run it on two trees (``PYTHONPATH=TREE/src``) for a before/after.
"""

from __future__ import annotations

import argparse
import asyncio
import os

from populace.core import Msg, Simulation
from populace.llm.offline import DummyModel
from populace.scenarios.guess_number import Participant, Rules


def rss() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def measure(n: int) -> tuple[float, float]:
    async with Simulation(workers=1) as sim:
        before = rss()
        group = await sim.create(Participant, n, init={
            "models": {"dummy": DummyModel(latency=30)}, "rules": Rules(1, 0, 100, None),
            "env": None})
        idle = rss()
        group.broadcast(Msg("moderator", "guess", metadata={"seed": 5}))
        # Until every call started (4,096 per loop tick); none is answered before 30 s.
        while sim.statistics().workers[0].calls_started < n:  # noqa: ASYNC110 (a counter)
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        waiting = rss()
    return (idle - before) / n, (waiting - idle) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=200_000)
    args = parser.parse_args()
    idle, waiting = asyncio.run(measure(args.agents))
    print(f"{args.agents:,} agents: {idle:.0f} B per idle agent, {waiting:.0f} B more per "
          f"agent waiting on the model")


if __name__ == "__main__":
    main()
