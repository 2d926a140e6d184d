"""``populace compare RUN_DIR...``: several runs side by side, in a table and overlaid plots.

Works on the runs of any scenario: the table has each run's size, steps and the last value
of every metric the runs share; ``OUT/figures/overlay_METRIC.png`` draws each common metric
per step (one line per run) and ``overlay_distribution_NAME.png`` each declared
distribution's last step. ``OUT/compare.html`` holds it all. A sweep directory stands for
all of its points.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table

from ._report import (
    RUN_KEYS,
    TERMINAL_METRICS,
    _count,
    _fmt,
    _html,
    _overlays,
    _save,
    terminal_table,
)
from ._runs import RunData, headline, load_run


@dataclass(frozen=True)
class Comparison:
    """What :func:`write_comparison` wrote."""

    path: Path  # compare.html
    figures: dict[str, Path]
    rows: list[dict[str, Any]]  # per run: run, path, status, agents, steps, final
    table: Table  # the side-by-side table, for a terminal


def _expand(run_dirs: Sequence[str | Path]) -> list[tuple[str, RunData]]:
    """``(label, run)`` for every run; a sweep contributes its points; labels are unique."""
    found: list[tuple[Path, str]] = []
    for d in map(Path, run_dirs):
        if (d / "sweep.json").exists():
            index = json.loads((d / "sweep.json").read_text())
            found += [(d / p["dir"], f"{d.name}/{p['dir']}") for p in index["points"]
                      if (d / p["dir"]).is_dir()]
        else:
            found.append((d, d.name))
    runs = []
    seen: dict[str, int] = {}
    for path, label in found:
        if label in seen:
            seen[label] += 1
            label = f"{label} ({seen[label]})"
        else:
            seen[label] = 1
        runs.append((label, load_run(path)))
    return runs


def comparison_rows(runs: Sequence[tuple[str, RunData]]) -> list[dict[str, Any]]:
    """Per run: its label, path, status, agents, steps and ``final``: the last step's
    metrics with the run's totals (:func:`~populace.results.headline`)."""
    return [{"run": label, "path": str(run.path), "status": run.status, "agents": run.agents,
             "steps": len(run.steps()), "final": headline(run.summary or {}),
             "forked_from": (run.summary or {}).get("forked_from")}
            for label, run in runs]


def common_last_metrics(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The last-step metrics every run has, in the first run's order."""
    if not rows:
        return []
    names = [k for k in rows[0]["final"] if k not in RUN_KEYS]
    return [n for n in names if all(n in r["final"] for r in rows[1:])]


def _cells(row: dict[str, Any], metrics: Sequence[str], usage: bool) -> list[str]:
    final = row["final"]
    cells = [row["run"], row["status"], _fmt(row["agents"]), str(row["steps"]),
             *(_fmt(final.get(m)) for m in metrics)]
    if usage:
        cells += [_count(final.get("calls")), _count(final.get("tokens"))]
    return cells


def compare_table(rows: Sequence[dict[str, Any]]) -> Table:
    """The side-by-side table ``populace compare`` prints (the first
    :data:`~populace.results._report.TERMINAL_METRICS` common metrics)."""
    table = terminal_table(f"{len(rows)} runs (metrics of each run's last step)")
    metrics = common_last_metrics(rows)
    shown = metrics[:TERMINAL_METRICS]
    notes = [f"{r['run']} is forked from {Path(r['forked_from']['run']).name} after step "
             f"{r['forked_from']['step']}" for r in rows if r.get("forked_from")]
    if len(shown) < len(metrics):
        notes.append(f"{len(metrics) - len(shown)} more metrics in compare.html")
    if notes:
        table.caption = "; ".join(notes)
    usage = any("calls" in r["final"] for r in rows)
    table.add_column("run", overflow="fold")
    for col in ("agents", "steps", *shown, *(("calls", "tokens") if usage else ())):
        table.add_column(col, justify="right", overflow="fold")
    for row in rows:
        cells = _cells(row, shown, usage)
        if row["status"] != "completed":  # shown after the name
            cells[0] += f" ({row['status']})"
        del cells[1]
        table.add_row(*cells)
    return table


def _branches(runs: Sequence[tuple[str, RunData]]) -> list[dict[str, Any]]:
    """Runs forked from another of the runs compared: step by step from the fork point,
    each branch's metrics beside its source's (a table per fork)."""
    by_path = {str(run.path.resolve()): (label, run) for label, run in runs}
    out = []
    for label, run in runs:
        forked = (run.summary or {}).get("forked_from") or {}
        source = by_path.get(str(forked.get("run")))
        if source is None:
            continue
        at = int(forked.get("step", 0))
        mine = {e["step"]: e for e in (run.summary or {}).get("steps", [])}
        theirs = {e["step"]: e for e in (source[1].summary or {}).get("steps", [])}
        names = [k for k, v in next(iter(mine.values()), {}).items()
                 if k not in ("step", "wall_s") and isinstance(v, int | float)
                 and not isinstance(v, bool)]
        changes = ", ".join(f"{k}={v}" for k, v in (forked.get("set") or {}).items())
        rows = [[str(t), *(c for n in names for c in (_fmt(theirs.get(t, {}).get(n)),
                                                     _fmt(mine[t].get(n))))]
                for t in sorted(mine) if t > at]
        out.append({"title": f"{label}: forked from {source[0]} after step {at}"
                             f"{f' ({changes})' if changes else ''}",
                    "head": ("step", *(f"{n} {who}" for n in names
                                       for who in (source[0], label))), "rows": rows})
    return out


def write_comparison(run_dirs: Sequence[str | Path], out: str | Path) -> Comparison:
    """Compare ``run_dirs`` into directory ``out``; raises FileNotFoundError for a directory
    that holds no run.

    >>> done = write_comparison(["runs/a", "runs/b"], "compare")  # doctest: +SKIP
    >>> done.path, sorted(done.figures)  # doctest: +SKIP
    """
    runs = _expand(run_dirs)
    out = Path(out)
    saved, captions = _save(_overlays(runs, "run"), out / "figures")
    rows = comparison_rows(runs)
    metrics = common_last_metrics(rows)
    usage = any("calls" in r["final"] for r in rows)
    meta = "Runs: " + ", ".join(f"{r['run']} ({r['path']})" for r in rows)
    head = ("run", "status", "agents", "steps", *metrics,
            *(("LLM calls", "tokens") if usage else ()))
    tables = [{"title": "Side by side (last step)", "head": head,
               "rows": [_cells(r, metrics, usage) for r in rows]}, *_branches(runs)]
    path = out / "compare.html"
    _html(path, f"Comparison of {len(rows)} runs", meta, None, tables, saved, captions, None)
    return Comparison(path, {n: p for n, (p, _) in saved.items()}, rows, compare_table(rows))
