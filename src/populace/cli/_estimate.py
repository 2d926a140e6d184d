"""``populace estimate``: a run's LLM calls, tokens, cost and wall time, predicted from a
small pilot run."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from populace.config import read_yaml
from populace.launch import Estimate

from ._app import bool_option, out


def estimate(
    config: Annotated[Path, typer.Argument(help="run file (YAML)")],
    agents: Annotated[int | None, typer.Option(help="override agents:")] = None,
    rounds: Annotated[int | None, typer.Option(
        "--rounds", "--steps", help="override rounds: (the steps of any scenario)")] = None,
    workers: Annotated[int | None, typer.Option(help="override workers:")] = None,
    seed: Annotated[int | None, typer.Option(help="override seed:")] = None,
    pilot: Annotated[int | None, typer.Option(
        min=1, help="agents in the pilot run (default 50; at most the run's agents)")] = None,
    json_out: Annotated[bool, bool_option("json", "print the estimate as JSON")] = False,
) -> None:
    """Predict a run's LLM calls, tokens, cost and wall time from a small pilot run."""
    from populace.launch import estimate as run_estimate

    overrides = {"agents": agents, "steps": rounds, "seed": seed, "workers": workers}
    result = asyncio.run(run_estimate(read_yaml(config), config, overrides, pilot=pilot))
    if json_out:
        out.print_json(json.dumps(result.as_dict()))
        return
    show(result, config)


def show(result: Estimate, config: Path) -> None:
    """The estimate of run file ``config`` as `populace estimate` prints it: a table by
    model, then the predicted calls, cost and model time."""
    table = Table(title=f"{escape(str(config))}: {result.agents:,} agents × {result.steps} "
                        f"steps, from a pilot of {result.pilot_agents} × "
                        f"{result.pilot_steps} ({result.pilot_wall_s:.1f} s)")
    for column in ("model", "calls", "prompt tokens", "completion tokens", "cost",
                   "latency s", "in flight", "wall s"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for m in result.all_models:
        table.add_row(escape(m.model), f"{m.calls:,}", f"{m.prompt_tokens:,}",
                      f"{m.completion_tokens:,}", "-" if m.cost is None else f"{m.cost:,.2f}",
                      "-" if m.latency_s is None else f"{m.latency_s:.3f}",
                      "unbounded" if m.concurrency is None else f"{m.concurrency:,}",
                      "-" if m.wall_s is None else f"{m.wall_s:,.1f}")
    out.print(table)
    for m in result.all_models:
        if m.individual is not None:
            out.print(f"{escape(m.model)} samples archetypes: {m.calls:,} calls; asking every "
                      f"agent: ~{m.individual['calls']:,} calls, "
                      f"{m.individual['prompt_tokens']:,} prompt tokens", soft_wrap=True)
    if result.cpu is not None and result.cpu.waves:
        c = result.cpu
        pace = "" if not c.pace_s else (f"; {c.pace_s * 1e3:.3f} ms per call in their steps, "
                                        f"busy {c.per_call_s / c.pace_s:.0%}")
        out.print(f"client CPU per call {c.per_call_s * 1e3:.3f} ms, measured in {c.waves} "
                  f"wave(s) of {c.wave_agents or 0:,} agents after the pilot "
                  f"({c.measured_s:.1f} s of CPU over {c.calls:,} calls, {c.wall_s:.1f} s{pace})",
                  soft_wrap=True)
    out.print(predicted(result), soft_wrap=True)


def predicted(result: Estimate) -> str:
    """The estimate in one line: calls, cost, the models' time and its range."""
    wall, span = result.wall_s, result.wall_range
    return (f"predicted: {result.calls:,} calls"
            f"{'' if result.cost is None else f', cost {result.cost:,.2f}'}"
            f"{'' if wall is None else f', about {duration(wall)} of model time'}"
            f"{'' if span is None else f' ({duration(span[0])} to {duration(span[1])})'}"
            " (the platform's own time per agent is not included)")


def duration(seconds: float) -> str:
    """``seconds`` as people read them: seconds up to two minutes, minutes beyond."""
    return f"{seconds:,.1f} s" if seconds < 120 else f"{seconds / 60:,.1f} min"
