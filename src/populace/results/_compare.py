"""``populace compare RUN_DIR...``: several runs side by side, in a table and overlaid plots.

Writes ``OUT/compare.html`` (self-contained), ``OUT/figures/overlay_mean_by_round.png``
and ``OUT/figures/overlay_last_round.png``. A sweep directory stands for all of its points.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table

from ._report import _fmt, _html, _short, save_figures, terminal_table
from ._runs import RunData, load_run

_COLUMNS = ("run", "status", "agents", "rounds", "mean", "sd", "target", "winner",
            "inv %", "calls", "tokens")


@dataclass(frozen=True)
class Comparison:
    """What :func:`write_comparison` wrote."""

    path: Path  # compare.html
    figures: dict[str, Path]
    rows: list[dict[str, Any]]
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
    """Per run: size, rounds, the last round's statistics, invalid share and usage."""
    rows = []
    for label, run in runs:
        per_round = run.round_rows()
        last = per_round[-1] if per_round else {}
        n = sum(r["n"] for r in per_round)
        invalid = sum(r["n"] - r["n_valid"] for r in per_round)
        rows.append({
            "run": label, "path": str(run.path), "status": run.status, "agents": run.agents,
            "rounds": len(per_round), "mean": last.get("mean"), "std": last.get("std"),
            "target": last.get("target"), "winner_number": last.get("winner_number"),
            "invalid_rate": invalid / n if n else None,
            "calls": sum(r["calls"] for r in per_round),
            "tokens": sum(r["tokens"] for r in per_round),
        })
    return rows


def _cells(row: dict[str, Any]) -> list[str]:
    rate = row["invalid_rate"]
    return [row["run"], row["status"], _fmt(row["agents"]), str(row["rounds"]),
            _fmt(row["mean"]), _fmt(row["std"]), _fmt(row["target"]),
            _fmt(row["winner_number"], "g"), _fmt(None if rate is None else 100 * rate, ".1f"),
            _short(row["calls"]), _short(row["tokens"])]


def compare_table(rows: Sequence[dict[str, Any]]) -> Table:
    """The side-by-side table ``populace compare`` prints."""
    table = terminal_table(f"{len(rows)} runs (statistics of each run's last round)")
    for col in _COLUMNS:
        if col == "run":
            table.add_column(col, overflow="fold")
        elif col != "status":  # shown after the name when not completed
            table.add_column(col, justify="right")
    for row in rows:
        cells = _cells(row)
        if row["status"] != "completed":
            cells[0] += f" ({row['status']})"
        del cells[1]
        table.add_row(*cells)
    return table


def write_comparison(run_dirs: Sequence[str | Path], out: str | Path) -> Comparison:
    """Compare ``run_dirs`` into directory ``out``; raises FileNotFoundError for a directory
    that holds no run."""
    from . import _figures as f

    runs = _expand(run_dirs)
    out = Path(out)
    figures = {name: fig for name, fig in (
        ("overlay_mean_by_round", f.overlay_means(runs)),
        ("overlay_last_round", f.overlay_final_histograms(runs)),
    ) if fig is not None}
    saved = save_figures(figures, out / "figures")
    rows = comparison_rows(runs)
    meta = "Runs: " + ", ".join(f"{r['run']} ({r['path']})" for r in rows)
    tables = [{"title": "Side by side", "head": _COLUMNS, "rows": [_cells(r) for r in rows]}]
    path = out / "compare.html"
    _html(path, f"Comparison of {len(rows)} runs", meta, None, tables, saved, None)
    for fig in figures.values():
        fig.clear()
    return Comparison(path, {n: p for n, (p, _) in saved.items()}, rows, compare_table(rows))
