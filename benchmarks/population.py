"""Time population sampling (and, optionally, the background pipeline's own overhead).

    .venv/bin/python benchmarks/population.py                 # 1,000,000 agents, 5 runs
    .venv/bin/python benchmarks/population.py --agents 100000 --backgrounds 20000

The population has all five shipped templates, a conditional aspect (employment given the
age band) and a numeric one (income, lognormal, bounded, rounded). The target
is 1,000,000 agents in at most 5 s. ``--backgrounds N`` also generates N backgrounds with a
zero-latency dummy model, which measures the pipeline's per-agent cost (prompt rendering,
hashing, cache and log writes), not a model.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from populace.llm.offline import DummyModel
from populace.population import (
    TEMPLATES,
    PopulationConfig,
    generate_backgrounds,
    sample_population,
)


def population(size: int) -> PopulationConfig:
    aspects: dict[str, Any] = {name: {"template": name} for name in TEMPLATES}
    # Conditional: the chance of being a student, working or retired depends on the age band.
    aspects["employment"] = {"given": "age", "percentages": {
        "18-24": {"student": 45, "employed": 45, "unemployed": 10},
        "25-34": {"student": 8, "employed": 84, "unemployed": 8},
        "35-44": {"employed": 92, "unemployed": 8},
        "45-54": {"employed": 91, "unemployed": 9},
        "55-64": {"employed": 70, "unemployed": 8, "retired": 22},
        "65+": {"employed": 12, "retired": 88},
    }}
    aspects["income"] = {"distribution": "lognormal", "mu": 10.0, "sigma": 0.7, "min": 1000,
                         "max": 500000, "round": 0}
    return PopulationConfig.model_validate({"size": size, "aspects": aspects})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--backgrounds", type=int, default=0,
                        help="also generate this many backgrounds with a dummy model")
    args = parser.parse_args()

    started = time.perf_counter()
    config = population(args.agents)
    validate_s = time.perf_counter() - started
    times = []
    for seed in range(args.repeat):
        started = time.perf_counter()
        table = sample_population(config, seed)
        times.append(time.perf_counter() - started)
    print(f"agents            {args.agents:,}  ({len(config.aspects)} aspects: "
          f"{', '.join(config.aspects)})")
    print(f"validate config   {validate_s * 1000:.1f} ms")
    print(f"sample            median {statistics.median(times):.3f} s, best {min(times):.3f} s, "
          f"worst {max(times):.3f} s over {args.repeat} runs "
          f"({'OK' if max(times) <= 5.0 else 'OVER'} the 5 s budget at 1M)")
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        pq.write_table(table, Path(tmp) / "profiles.parquet", compression="zstd")
        size = (Path(tmp) / "profiles.parquet").stat().st_size
        print(f"write parquet     {time.perf_counter() - started:.3f} s, {size / 1e6:.1f} MB")

        if args.backgrounds:
            n = min(args.backgrounds, table.num_rows)
            subset = table.slice(0, n)
            client = DummyModel(latency=0)
            cfg = config.backgrounds.model_copy(update={"concurrency": 256})
            for label in ("generate", "resume"):
                started = time.perf_counter()
                result = asyncio.run(generate_backgrounds(
                    subset, client, cfg, Path(tmp) / "cache", Path(tmp) / "bg.parquet",
                    progress=False))
                elapsed = time.perf_counter() - started
                print(f"backgrounds {label:9s}{n:,} agents in {elapsed:.2f} s "
                      f"({elapsed / n * 1e6:.0f} us/agent; {result.requests:,} requests, "
                      f"{result.cached:,} cached)")


if __name__ == "__main__":
    main()
