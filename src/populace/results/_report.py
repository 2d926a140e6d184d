"""``populace report RUN_DIR``: PNG figures and one self-contained ``report.html``.

For a run directory::

    RUN_DIR/figures/numbers_by_round.png   histogram of the numbers, one panel per round
    RUN_DIR/figures/by_<column>.png        the same per education, profession, model, group …
    RUN_DIR/figures/mean_by_round.png      mean ± sd, median and target per round
    RUN_DIR/figures/groups_by_round.png    group-level play: each group's report per round
    RUN_DIR/figures/invalid_by_round.png   share of invalid answers per round
    RUN_DIR/figures/usage_by_round.png     tokens and LLM calls per round
    RUN_DIR/figures/wall_by_round.png      wall time per round
    RUN_DIR/report.html                    all of it, images embedded as data URIs

For a sweep (a directory with ``sweep.json``): ``sweep_<key>.png`` (last-round mean and sd
against each swept key), the points' means per round and last-round distributions overlaid,
and a report for every point directory. Partial runs (only ``parts/``, or a summary that
says ``running``/``interrupted``) are reported as far as they got.
"""

from __future__ import annotations

import base64
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
import numpy as np
import yaml
from rich import box
from rich.table import Table

from ._runs import RunData, load_run, show_value

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DPI = 100


@dataclass(frozen=True)
class Report:
    """What :func:`write_report` wrote."""

    path: Path  # the report.html
    figures: dict[str, Path]  # figure name → PNG
    kind: str  # "run" or "sweep"
    tables: tuple[Table, ...] = ()  # what to print in a terminal
    points: tuple[Report, ...] = ()  # a sweep's per-point reports


def _fmt(value: Any, spec: str = ".2f") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, int) and spec == ".2f":
        return f"{value:,}"
    return format(value, spec)


def run_figures(run: RunData) -> dict[str, Figure]:
    """Every figure the run has data for, by name (the PNG's file stem)."""
    from . import _figures as f

    figures: dict[str, Figure | None] = {
        "numbers_by_round": f.round_histograms(run),
        "mean_by_round": f.mean_by_round(run),
    }
    for column in run.categories():
        figures[f"by_{column}"] = f.category_histograms(run, column)
    figures["groups_by_round"] = f.groups_by_round(run)
    figures["invalid_by_round"] = f.invalid_by_round(run)
    figures["usage_by_round"] = f.usage_by_round(run)
    figures["wall_by_round"] = f.wall_by_round(run)
    return {name: fig for name, fig in figures.items() if fig is not None}


def sweep_figures(index: dict[str, Any], runs: list[tuple[str, RunData]]
                  ) -> dict[str, Figure]:
    """The figures of a sweep: metrics against each swept key, overlays of the points."""
    from . import _figures as f

    figures: dict[str, Figure | None] = {}
    for key in index.get("keys") or []:
        figures[f"sweep_{key}"] = f.sweep_metrics(index["points"], key)
    if any(len(run.round_numbers()) > 1 for _, run in runs):
        figures["sweep_mean_by_round"] = f.overlay_means(runs)
    figures["sweep_last_round"] = f.overlay_final_histograms(runs)
    return {name: fig for name, fig in figures.items() if fig is not None}


def _png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def save_figures(figures: dict[str, Figure], directory: Path) -> dict[str, tuple[Path, str]]:
    """Write each figure to ``directory/NAME.png``; returns the paths and base64 data."""
    directory.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, fig in figures.items():
        data = _png(fig)
        path = directory / f"{name}.png"
        path.write_bytes(data)
        out[name] = (path, base64.b64encode(data).decode("ascii"))
    return out


# -- tables ------------------------------------------------------------------------------------
_ROUND_COLUMNS = ("round", "valid", "invalid %", "mean", "median", "std", "target", "winner",
                  "LLM calls", "tokens", "wall s")
_TERMINAL_COLUMNS = ("round", "valid", "inv %", "mean", "sd", "target", "winner", "calls",
                     "tokens", "wall s")  # narrow enough for 80 columns


def _short(n: int) -> str:
    """``1,234`` / ``235k`` / ``12.3M``: counts that fit a narrow terminal column."""
    if n >= 10_000_000:
        return f"{n / 1e6:.1f}M"
    if n >= 100_000:
        return f"{n / 1e3:.0f}k"
    return f"{n:,}"


def terminal_table(title: str) -> Table:
    """A rich table without side borders: fits 80 columns where a boxed one would not."""
    return Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                 padding=(0, 1, 0, 0))


def _round_cells(row: dict[str, Any]) -> list[str]:
    invalid = row["invalid_rate"]
    return [str(row["round"]), f"{row['n_valid']:,}/{row['n']:,}",
            _fmt(None if invalid is None else 100 * invalid, ".1f"), _fmt(row["mean"]),
            _fmt(row["median"]), _fmt(row["std"]), _fmt(row["target"]),
            _fmt(row["winner_number"], "g"), f"{row['calls']:,}", f"{row['tokens']:,}",
            _fmt(row["wall_s"])]


def _category_rows(run: RunData) -> dict[str, list[list[str]]]:
    rounds = run.round_numbers()
    out: dict[str, list[list[str]]] = {}
    if not rounds:
        return out
    for column in run.categories():
        rows = []
        for value, numbers in run.numbers_by(column, rounds[-1]).items():
            k = int(numbers.size)
            rows.append([value, str(k), _fmt(float(numbers.mean()) if k else None),
                         _fmt(float(np.median(numbers)) if k else None),
                         _fmt(float(numbers.std()) if k else None)])
        out[column] = rows
    return out


def run_table(run: RunData) -> Table:
    """The per-round table ``populace report`` prints."""
    agents = f"{run.agents:,} agents, " if run.agents is not None else ""
    table = terminal_table(f"{run.name}: {agents}{', '.join(run.models)}, {run.status}")
    for col in _TERMINAL_COLUMNS:
        table.add_column(col, justify="right")
    for row in run.round_rows():
        cells = _round_cells(row)
        cells[1] = f"{row['n_valid']:,}"
        cells[8], cells[9] = _short(row["calls"]), _short(row["tokens"])
        del cells[4]  # the median: in report.html
        table.add_row(*cells)
    return table


def category_tables(run: RunData) -> list[Table]:
    """Last-round statistics per value of each category column."""
    tables = []
    rounds = run.round_numbers()
    for column, rows in _category_rows(run).items():
        table = terminal_table(f"by {column}, round {rounds[-1]}")
        for col in (column, "valid", "mean", "median", "std"):
            table.add_column(col, justify="left" if col == column else "right")
        for cells in rows:
            table.add_row(*cells)
        tables.append(table)
    return tables


_POINT_COLUMNS = ("point", "status", "rounds", "mean", "std", "target", "winner", "LLM calls",
                  "tokens", "wall s")


def _point_cells(point: dict[str, Any]) -> list[str]:
    final = point.get("final") or {}
    return [point["dir"], point["status"], str(final.get("rounds_done", "-")),
            _fmt(final.get("mean")), _fmt(final.get("std")), _fmt(final.get("target")),
            _fmt(final.get("winner_number"), "g"), f"{final.get('calls', 0):,}",
            f"{final.get('tokens', 0):,}", _fmt(point.get("wall_s"))]


def sweep_table(index: dict[str, Any]) -> Table:
    """One row per sweep point: its values, status and last-round statistics."""
    table = terminal_table(f"sweep {index.get('name', '')}: {len(index['points'])} points, "
                           f"{index.get('status', 'unknown')}")
    keys = list(index.get("keys") or [])
    for col in (*keys, "status", "mean", "sd", "target", "winner", "calls", "tokens"):
        table.add_column(col, justify="left" if col in (*keys, "status") else "right")
    for point in index["points"]:
        final = point.get("final") or {}
        values = [show_value(point["values"].get(k)) for k in keys]
        table.add_row(*values, point["status"], _fmt(final.get("mean")),
                      _fmt(final.get("std")), _fmt(final.get("target")),
                      _fmt(final.get("winner_number"), "g"), _short(final.get("calls", 0)),
                      _short(final.get("tokens", 0)))
    return table


# -- HTML ------------------------------------------------------------------------------------
_ENV = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1060px;
       color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; margin-bottom: .2em; } h2 { font-size: 1.15em; margin-top: 2em; }
.meta { color: #555; } .warn { color: #9a3b00; }
table { border-collapse: collapse; margin: .5em 0 1em; font-variant-numeric: tabular-nums; }
th, td { border-bottom: 1px solid #ddd; padding: .25em .7em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
figure { margin: 1.2em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: .9em; } pre { background: #f6f6f6; padding: 1em;
overflow-x: auto; font-size: 12px; }
"""

_PAGE = _ENV.from_string("""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }}</title><style>{{ style }}</style></head>
<body>
<h1>{{ title }}</h1>
<p class="meta">{{ meta }}</p>
{% if warning %}<p class="warn">{{ warning }}</p>{% endif %}
{% for table in tables %}
<h2>{{ table.title }}</h2>
<table><thead><tr>{% for h in table.head %}<th>{{ h }}</th>{% endfor %}</tr></thead>
<tbody>{% for row in table.rows %}<tr>{% for cell in row %}<td>{% if cell is mapping %}<a
href="{{ cell.href }}">{{ cell.text }}</a>{% else %}{{ cell }}{% endif %}</td>{% endfor %}</tr>
{% endfor %}</tbody></table>
{% endfor %}
{% for fig in figures %}
<figure id="{{ fig.name }}"><img alt="{{ fig.caption }}" src="data:image/png;base64,{{ fig.data }}">
<figcaption>{{ fig.caption }}</figcaption></figure>
{% endfor %}
{% if config %}<h2>Configuration</h2><details><summary>config.yaml</summary>
<pre>{{ config }}</pre></details>{% endif %}
<p class="meta">Written by <code>populace report</code>.</p>
</body></html>
""")

CAPTIONS = {
    "numbers_by_round": "Numbers reported in each round (dashed: the mean).",
    "mean_by_round": "Mean (band: ± one standard deviation), median and target per round.",
    "groups_by_round": "Group-level play: each group's report (its members' mean) per round.",
    "invalid_by_round": "Share of answers that gave no valid number, per round.",
    "usage_by_round": "Prompt and completion tokens, and LLM calls, per round.",
    "wall_by_round": "Wall-clock time of each round.",
    "sweep_mean_by_round": "Mean per round of every sweep point.",
    "overlay_mean_by_round": "Mean per round of every run.",
    "overlay_last_round": "Distribution of each run's last-round numbers.",
    "sweep_last_round": "Distribution of the last round's numbers of every sweep point.",
}


def _caption(name: str) -> str:
    if name in CAPTIONS:
        return CAPTIONS[name]
    if name.startswith("by_"):
        return f"Numbers of the last round by {name[3:]} (dashed: each panel's mean)."
    if name.startswith("sweep_"):
        return f"Last round's mean and standard deviation against {name[6:]}."
    return name


def _html(path: Path, title: str, meta: str, warning: str | None,
          tables: list[dict[str, Any]], saved: dict[str, tuple[Path, str]],
          config: str | None) -> None:
    figures = [{"name": n, "data": data, "caption": _caption(n)}
               for n, (_, data) in saved.items()]
    text = _PAGE.render(title=title, style=STYLE, meta=meta, warning=warning, tables=tables,
                        figures=figures, config=config)
    path.write_text(text, encoding="utf-8")


def _run_report(run: RunData) -> Report:
    figures = run_figures(run)
    saved = save_figures(figures, run.path / "figures")
    rounds = run.round_numbers()
    planned = (run.summary or {}).get("rounds_planned", run.config.get("rounds"))
    meta = (f"status {run.status} · {_fmt(run.agents)} agents · rounds {len(rounds)}"
            f"{f' of {planned}' if planned else ''} · models {', '.join(run.models) or '-'}"
            f" · seed {run.config.get('seed', '-')}"
            f" · wall time {_fmt((run.summary or {}).get('wall_s'))} s")
    warning = None
    if run.status != "completed":
        warning = (f"This run is {run.status}: the report shows the {len(rounds)} round(s) "
                   "that finished.")
    tables = [{"title": "Per round", "head": _ROUND_COLUMNS,
               "rows": [_round_cells(r) for r in run.round_rows()]}]
    for column, rows in _category_rows(run).items():
        tables.append({"title": f"By {column} (round {rounds[-1]})",
                       "head": (column, "valid", "mean", "median", "std"), "rows": rows})
    config = yaml.safe_dump(run.config, sort_keys=False, allow_unicode=True) \
        if run.config else None
    path = run.path / "report.html"
    _html(path, f"{run.name}", meta, warning, tables, saved, config)
    for fig in figures.values():
        fig.clear()
    return Report(path, {n: p for n, (p, _) in saved.items()}, "run",
                  (run_table(run), *category_tables(run)))


def _sweep_report(root: Path, points: bool) -> Report:
    index = json.loads((root / "sweep.json").read_text())
    runs: list[tuple[str, RunData]] = []
    point_reports = []
    for point in index["points"]:
        directory = root / point["dir"]
        if not directory.is_dir():
            continue
        try:
            run = load_run(directory)
        except FileNotFoundError:
            continue
        runs.append((point["dir"], run))
        if points and run.responses is not None:
            point_reports.append(_run_report(run))
    figures = sweep_figures(index, runs)
    saved = save_figures(figures, root / "figures")
    rows = []
    for point in index["points"]:
        cells: list[Any] = _point_cells(point)
        if (root / point["dir"] / "report.html").exists():
            cells[0] = {"href": f"{point['dir']}/report.html", "text": point["dir"]}
        rows.append(cells)
    meta = (f"status {index.get('status', 'unknown')} · {len(index['points'])} points over "
            f"{', '.join(index.get('keys') or [])} · config {index.get('config', '-')}")
    tables = [{"title": "Points", "head": _POINT_COLUMNS, "rows": rows}]
    config_path = root / "sweep.yaml"
    config = config_path.read_text(encoding="utf-8") if config_path.exists() else None
    path = root / "report.html"
    _html(path, f"sweep {index.get('name', root.name)}", meta, None, tables, saved, config)
    for fig in figures.values():
        fig.clear()
    return Report(path, {n: p for n, (p, _) in saved.items()}, "sweep", (sweep_table(index),),
                  tuple(point_reports))


def write_report(run_dir: str | Path, *, points: bool = True) -> Report:
    """Write the figures and ``report.html`` of a run or sweep directory.

    ``points``: for a sweep, also report every point directory. Raises FileNotFoundError
    when ``run_dir`` holds neither a run nor a sweep.

    >>> report = write_report("runs/demo")  # doctest: +SKIP
    >>> report.path, sorted(report.figures)  # doctest: +SKIP
    """
    root = Path(run_dir)
    if (root / "sweep.json").exists():
        return _sweep_report(root, points)
    return _run_report(load_run(root))
