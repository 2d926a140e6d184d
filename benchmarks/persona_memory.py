"""Bytes a persona's memory costs beyond its text, in one worker process.

    .venv/bin/python benchmarks/persona_memory.py --agents 100000 --items 20 --chars 100

Creates ``--agents`` persona agents (:class:`populace.agents.Persona`) in one local worker
(resident size before and after), then has each remember ``--items`` events of ``--chars``
characters (resident size again), and prints what the memories cost against the raw
text's bytes (``--items × --chars`` per agent). Agents remember through ``observe``, as
messages and interventions reach them in a run; every text is distinct.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os

from populace.agents import Persona, PersonaOptions
from populace.core import Msg, Simulation
from populace.llm.offline import DummyModel


def rss() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Remembering(Persona):
    __slots__ = ()

    def fill(self, items: int, chars: int) -> None:
        for k in range(items):
            head = f"{self.id}:{k} "
            self.observe(Msg("n", head + "x" * (chars - len(head) - 3),
                             metadata={"step": k}))  # "n: " + text = chars


async def measure(n: int, items: int, chars: int) -> tuple[float, float]:
    options = PersonaOptions(memory_tokens=100_000, event_tokens=chars)
    async with Simulation(workers=1) as sim:
        gc.collect()
        before = rss()
        group = await sim.create(Remembering, n, init={
            "models": {"dummy": DummyModel(latency=0)}, "persona": options})
        gc.collect()
        idle = rss()
        await group.map(Remembering.fill, items, chars)
        gc.collect()
        full = rss()
    return (idle - before) / n, (full - idle) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=100_000)
    parser.add_argument("--items", type=int, default=20)
    parser.add_argument("--chars", type=int, default=100)
    args = parser.parse_args()
    idle, memory = asyncio.run(measure(args.agents, args.items, args.chars))
    raw = args.items * args.chars
    print(f"{args.agents:,} personas: {idle:.0f} B per agent without memory; "
          f"{args.items} events of {args.chars} characters: {memory:.0f} B per agent "
          f"= {memory / raw:.2f}x the raw text ({raw:,} B)")


if __name__ == "__main__":
    main()
