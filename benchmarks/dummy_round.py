"""One dummy-model round, Populace vs plain asyncio (one Task per agent), side by side.

    .venv/bin/python benchmarks/dummy_round.py --agents 100000 --latency 1.0 --repeat 3

The baseline is what most agent frameworks do: every agent is a coroutine run as an asyncio
Task that sleeps ``latency`` seconds and returns a seeded random number; the round ends when
``asyncio.gather`` has all of them. Populace runs the same round through its runtime (the
guessing game on the dummy model, local backend). Both run in this process, alternately.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path

from populace.core import derive_seed, mix64, seed_for
from populace.launch import parse_run_file
from populace.scenarios.guess_number import Timings, play


async def plain_asyncio(n: int, latency: float, seed: int) -> float:
    base = derive_seed(seed, 1)

    async def agent(i: int) -> int:
        await asyncio.sleep(latency)
        return mix64(seed_for(base, i)) % 101

    t0 = time.perf_counter()
    numbers = await asyncio.gather(*(agent(i) for i in range(n)))
    assert len(numbers) == n
    return time.perf_counter() - t0


def populace_round(n: int, latency: float, workers: int) -> float:
    cfg = parse_run_file({
        "scenario": "guess_number", "agents": n, "rounds": 1, "workers": workers,
        "models": {"dummy": {"provider": "dummy", "latency": latency}},
    }, Path("dummy_round"))
    timings = Timings()
    asyncio.run(play(cfg, None, None, timings))
    return timings.round_wall_s[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=100_000)
    ap.add_argument("--latency", type=float, default=1.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    ours, base = [], []
    for _ in range(args.repeat):
        ours.append(populace_round(args.agents, args.latency, args.workers))
        base.append(asyncio.run(plain_asyncio(args.agents, args.latency, 0)))
    o, b = statistics.median(ours), statistics.median(base)
    print(f"{args.agents:,} agents, latency {args.latency} s, median of {args.repeat}:")
    print(f"  populace (game round, {args.workers} local workers): {o:.3f} s "
          f"(overhead {o - args.latency:.3f} s)")
    print(f"  plain asyncio, one Task per agent:       {b:.3f} s "
          f"(overhead {b - args.latency:.3f} s)")
    print(f"  overhead ratio asyncio/populace: {(b - args.latency) / (o - args.latency):.1f}x")


if __name__ == "__main__":
    main()
