"""``populace bench``: the guessing game on the dummy model, timed."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from populace._procmem import PeakMemory
from populace._strict import MAX_AGENTS, MAX_LATENCY_S, MAX_STEPS, MAX_WORKERS
from populace.core import ConfigError
from populace.launch import ConsoleObserver, parse_run_file
from populace.scenarios.guess_number import Timings, play

from ._app import EXIT_CONFIG, Fail, bool_option, check_seconds, err, out


def bench(
    agents: Annotated[int, typer.Option(min=1, max=MAX_AGENTS, help="number of agents")
                      ] = 100_000,
    latency: Annotated[float, typer.Option(min=0, max=MAX_LATENCY_S,
                                           help="dummy model latency, seconds")] = 1.0,
    rounds: Annotated[int, typer.Option(min=1, max=MAX_STEPS)] = 1,
    workers: Annotated[int, typer.Option(min=1, max=MAX_WORKERS)] = 1,
    backend: Annotated[str, typer.Option(help="local or ray")] = "local",
    address: Annotated[str | None, typer.Option(help="Ray cluster to join")] = None,
    as_json: Annotated[bool, bool_option("json", "print one JSON object")] = False,
) -> None:
    """Time the guessing game on the dummy model: creation, rounds, CPU per agent, memory.

    Bars on stderr show the agents being created and each round's answers (in a terminal).
    """
    check_seconds("--latency", latency, MAX_LATENCY_S)
    try:
        run_file = parse_run_file({
            "scenario": "guess_number", "name": "bench", "agents": agents, "rounds": rounds,
            "workers": workers, "models": {"dummy": {"provider": "dummy", "latency": latency}},
            "backend": backend, "address": address,
        }, Path("bench"))
    except ConfigError as e:  # name the flag: "--backend: ..."
        key, _, why = str(e).removeprefix("bench: ").partition(": ")
        flag = "--latency" if key == "models.dummy.latency" else f"--{key}"
        raise Fail(f"{flag}: {why}" if why else str(e), EXIT_CONFIG) from None
    timings = Timings()
    with PeakMemory() as peak:
        asyncio.run(play(run_file, None, None, timings,
                         observers=[ConsoleObserver(err, err, lines=False)]))
    cpu_us = [c / agents * 1e6 for c in timings.round_cpu_s]
    result = {
        "agents": agents, "latency_s": latency, "rounds": rounds, "workers": workers,
        "backend": run_file.options.backend, "create_s": round(timings.create_s, 4),
        "round_s": [round(w, 4) for w in timings.round_wall_s],
        "overhead_s": [round(w - latency, 4) for w in timings.round_wall_s],
        "cpu_us_per_agent": [round(c, 2) for c in cpu_us],
        "peak_rss_mb": round(peak.mb, 1),
        "peak_pss_mb": None if peak.pss_mb is None else round(peak.pss_mb, 1),
        "python": sys.version.split()[0],
    }
    if as_json:
        print(json.dumps(result))
        return
    table = Table(title=f"bench: {agents:,} agents, latency {latency} s, {workers} worker(s)")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("agent creation", f"{timings.create_s:.3f} s")
    for i, (w, c) in enumerate(zip(timings.round_wall_s, cpu_us, strict=True), 1):
        table.add_row(f"round {i} wall", f"{w:.3f} s")
        table.add_row(f"round {i} CPU per agent", f"{c:.2f} µs")
    table.add_row("peak RSS, all processes", f"{result['peak_rss_mb']:.0f} MB")
    if peak.pss_mb is not None:  # shared pages counted once: the memory really held
        table.add_row("peak PSS, all processes", f"{peak.pss_mb:.0f} MB")
    out.print(table)
