"""``populace report RUN_DIR``: PNG figures and one self-contained ``report.html``.

For a run directory of any scenario::

    RUN_DIR/figures/metric_NAME.png        each metric over steps (a mapping metric such as
                                           usage: one panel per series)
    RUN_DIR/figures/distribution_NAME.png  each declared distribution, in a few steps spread
                                           over the run
    RUN_DIR/figures/TABLE_by_COLUMN.png    per categorical profile column: the mean of every
                                           per-agent numeric column of TABLE per category,
                                           over every step
    RUN_DIR/figures/NAME.png               the scenario's own figures (``extra_figures``)
    RUN_DIR/report.html                    all of it, images embedded as data URIs

For a sweep (a directory with ``sweep.json``): ``sweep_<key>.png`` (each metric's last value
against each swept key), every common metric of the points overlaid, their last
distributions overlaid, and a report for every point directory. Partial runs (only
``parts/``, or a summary that says ``running``/``interrupted``) are reported as far as they
got.
"""

from __future__ import annotations

import base64
import io
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
import yaml
from rich import box
from rich.table import Table

from ._rundir import RunDirectory
from ._runs import RunData, headline, load_run, show_value

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DPI = 100
#: Metric columns of a terminal table, at most (report.html has them all).
TERMINAL_METRICS = 8
#: Keys of a sweep point's ``final`` that describe the run rather than its last step.
RUN_KEYS = ("step", "steps_done", "status", "calls", "tokens")

#: ``extra_figures(run) -> {name: figure}``: a scenario's own figures for its report.
ExtraFigures = Callable[[RunData], "dict[str, Figure]"]
#: ``extra_tables(run) -> [{"title", "head", "rows"}]``: a scenario's own report tables.
ExtraTables = Callable[[RunData], "list[dict[str, Any]]"]


@dataclass(frozen=True)
class Report:
    """What :func:`write_report` wrote."""

    path: Path  # the report.html
    figures: dict[str, Path]  # figure name → PNG
    kind: str  # "run" or "sweep"
    tables: tuple[Table, ...] = ()  # what to print in a terminal
    points: tuple[Report, ...] = ()  # a sweep's per-point reports


def _fmt(value: Any) -> str:
    """A cell: ``-`` for nothing, ``1,234`` for counts, 4 significant digits otherwise."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool):
        return show_value(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return f"{int(value):,}"
        return f"{value:,.0f}" if abs(value) >= 1e3 else f"{value:.4g}"
    return str(value)


def _short(n: int) -> str:
    """``1,234`` / ``235k`` / ``12.3M``: counts that fit a narrow terminal column."""
    if n >= 10_000_000:
        return f"{n / 1e6:.1f}M"
    if n >= 100_000:
        return f"{n / 1e3:.0f}k"
    return f"{n:,}"


def _count(n: int | None) -> str:
    return "-" if n is None else _short(n)


def figure_name(*parts: str) -> str:
    """A figure's file stem from its parts: safe in a path and an HTML id."""
    return "_".join(re.sub(r"[^A-Za-z0-9._=+-]+", "-", p).strip("-") or "x" for p in parts)


# -- figures ------------------------------------------------------------------------------------
def _captioned_run_figures(run: RunData, extra_figures: ExtraFigures | None
                           ) -> dict[str, tuple[Figure, str]]:
    from . import _figures as f

    out: dict[str, tuple[Figure, str]] = {}

    def add(name: str, fig: Figure | None, caption: str) -> None:
        if fig is not None:
            out[name] = (fig, caption)

    for group in f.metric_groups(run.metrics()):
        add(figure_name("metric", group), f.metric_figure(run, group),
            f"Metric {group} per step.")
    for name in run.distribution_names():
        add(figure_name("distribution", name), f.distribution_figure(run, name),
            f"Distribution of {name} in steps spread over the run (dashed: the mean).")
    for table in run.tables:
        for column in run.categories():
            add(figure_name(table, "by", column), f.breakdown_figure(run, table, column),
                f"Mean of each per-agent column of {table} by {column}, per step.")
    if extra_figures is not None:
        for name, fig in extra_figures(run).items():
            out.pop(name, None)  # the scenario's own figure replaces a generic namesake
            add(name, fig, fig.get_suptitle() or name)
    return out


def run_figures(run: RunData, extra_figures: ExtraFigures | None = None
                ) -> dict[str, Figure]:
    """Every figure the run has data for, by name (the PNG's file stem): its metrics, its
    distributions, breakdowns by each profile category, and ``extra_figures(run)``."""
    return {n: fig for n, (fig, _) in _captioned_run_figures(run, extra_figures).items()}


def _point_metrics(points: list[dict[str, Any]]) -> list[str]:
    """The numeric last-step metrics of the sweep points' ``final``, in order first seen."""
    names: dict[str, None] = {}
    for p in points:
        for key, value in (p.get("final") or {}).items():
            if key not in RUN_KEYS and isinstance(value, int | float):
                names[key] = None
    return list(names)


def _captioned_sweep_figures(index: dict[str, Any], runs: list[tuple[str, RunData]]
                             ) -> dict[str, tuple[Figure, str]]:
    from . import _figures as f

    out: dict[str, tuple[Figure, str]] = {}
    metrics = _point_metrics(index["points"])
    for key in index.get("keys") or []:
        fig = f.sweep_metrics(index["points"], key, metrics)
        if fig is not None:
            out[figure_name("sweep", key)] = (fig, f"Each metric's last value against {key}.")
    out.update(_overlays(runs, "sweep point"))
    return out


def _overlays(runs: list[tuple[str, RunData]], what: str) -> dict[str, tuple[Figure, str]]:
    """Every common metric per step (when some run has several steps), one line per run,
    and each distribution's last step, one outline per run."""
    from . import _figures as f

    out: dict[str, tuple[Figure, str]] = {}
    if any(len(run.metric_steps()) > 1 for _, run in runs):
        for group in f.common_metrics(runs):
            fig = f.overlay_metric(runs, group)
            if fig is not None:
                out[figure_name("overlay", group)] = (fig, f"{group} per step of every {what}.")
    names: dict[str, None] = {}
    for _, run in runs:
        names.update(dict.fromkeys(run.distribution_names()))
    for name in names:
        fig = f.overlay_distribution(runs, name)
        if fig is not None:
            out[figure_name("overlay", "distribution", name)] = (
                fig, f"Last step's distribution of {name} of every {what} (share per bin).")
    return out


def sweep_figures(index: dict[str, Any], runs: list[tuple[str, RunData]]
                  ) -> dict[str, Figure]:
    """The figures of a sweep: metrics against each swept key, overlays of the points."""
    return {n: fig for n, (fig, _) in _captioned_sweep_figures(index, runs).items()}


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
def terminal_table(title: str) -> Table:
    """A rich table without side borders: fits 80 columns where a boxed one would not."""
    return Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                 padding=(0, 1, 0, 0))


def step_metrics(run: RunData) -> list[str]:
    """The plain (number, text, bool) metrics of the run's steps, in order first reported,
    ``wall_s`` last."""
    names: dict[str, None] = {}
    for entry in run.entries():
        for key, value in entry.items():
            if key not in ("step", "round", "distributions", "wall_s") and (
                    value is None or isinstance(value, bool | int | float | str)):
                names[key] = None
    if any("wall_s" in e for e in run.entries()):
        names["wall_s"] = None
    return list(names)


def _step_rows(run: RunData, metrics: list[str]) -> list[list[str]]:
    return [[str(e["step"]), *(_fmt(e.get(m)) for m in metrics)] for e in run.entries()]


def run_table(run: RunData) -> Table:
    """Steps × metrics, what ``populace report`` prints (the first
    :data:`TERMINAL_METRICS` metrics, and the wall time)."""
    agents = f"{run.agents:,} agents, " if run.agents is not None else ""
    models = f"{', '.join(run.models)}, " if run.models else ""
    table = terminal_table(f"{run.name}: {agents}{models}{run.status}")
    metrics = step_metrics(run)
    shown = [m for m in metrics if m != "wall_s"][:TERMINAL_METRICS]
    if "wall_s" in metrics:
        shown.append("wall_s")
    if len(shown) < len(metrics):
        table.caption = f"{len(metrics) - len(shown)} more metrics in report.html"
    table.add_column("step", justify="right")
    for m in shown:
        table.add_column(m, justify="right", overflow="fold")
    for cells in _step_rows(run, shown):
        table.add_row(*cells)
    return table


def _breakdown_tables(run: RunData) -> list[dict[str, Any]]:
    """Per table and profile category: the last step's rows and mean of each column."""
    out = []
    for table in run.tables:
        columns = run.agent_columns(table)
        if not columns:
            continue
        for by in run.categories():
            parts = [run.breakdown(table, c, by) for c in columns]
            if not parts[0].steps:
                continue
            step = parts[0].steps[-1]
            rows = [[value, _fmt(int(parts[0].counts[i, -1])),
                     *(_fmt(float(b.means[i, -1])) for b in parts)]
                    for i, value in enumerate(parts[0].values)]
            out.append({"title": f"{table} by {by} (step {step})",
                        "head": (by, "rows", *(f"mean {c}" for c in columns)), "rows": rows})
    return out


def _sampling_tables(run: RunData) -> list[dict[str, Any]]:
    """Archetype sampling: per step, model and decision, the audit's distance between the
    audited agents' own answers and their archetypes' (``summary.json``'s ``sampling``)."""
    rows = []
    for e in (run.summary or {}).get("steps", []):
        for model, got in (e.get("sampling") or {}).items():
            for decision, d in (got.get("decisions") or {}).items():
                kind, value = ("TV", d["tv"]) if "tv" in d else \
                    ("Wasserstein", d.get("wasserstein"))
                rows.append([str(e["step"]), model, decision[:120], _fmt(d.get("audited")),
                             kind, _fmt(value), f"{_fmt(d.get('low'))} – {_fmt(d.get('high'))}",
                             _fmt(got.get("shared"))])
    if not rows:
        return []
    return [{"title": "Archetype sampling: the audit (own answers vs the archetype's, same "
                      "agents; 95% interval)",
             "head": ("step", "model", "decision", "audited", "distance", "value",
                      "interval", "decisions shared"), "rows": rows}]


def _managed_tables(run: RunData) -> list[dict[str, Any]]:
    """What was done to the run: interventions carried out (from the steps' entries) and
    interviews held (``interviews.parquet``)."""
    out = []
    done = [[str(e["step"]), i.get("what", i.get("kind", "")), _fmt(i.get("agents"))]
            for e in (run.summary or {}).get("steps", []) for i in e.get("interventions", ())]
    if done:
        out.append({"title": "Interventions", "head": ("step", "what", "agents reached"),
                    "rows": done})
    try:  # a damaged one (or a FIFO in its place) is said, not a traceback or a hang
        table = RunDirectory(run.path).read_parquet("interviews.parquet")
        if table is not None:
            table = table.select(["interview", "step", "question", "answer"])
    except (ValueError, KeyError, OSError) as e:
        why = " ".join(str(e).split())[:300] or type(e).__name__
        out.append({"title": "Interviews", "head": ("interviews.parquet",),
                    "rows": [[f"not read: {why}"]]})
        table = None
    if table is not None:
        held: dict[int, list[Any]] = {}
        for r in table.to_pylist():
            row = held.setdefault(r["interview"], [r["interview"], r["step"], r["question"],
                                                   0, 0])
            row[3] += 1
            row[4] += r["answer"] is not None
        out.append({"title": "Interviews (answers in interviews.parquet)",
                    "head": ("interview", "after step", "question", "asked", "answered"),
                    "rows": [[str(a), str(b), str(c)[:200], _fmt(d), _fmt(e)]
                             for a, b, c, d, e in held.values()]})
    return out


def _point_cells(point: dict[str, Any], metrics: list[str], usage: bool) -> list[str]:
    final = point.get("final") or {}
    return [point["dir"], point["status"], _fmt(final.get("steps_done")),
            *(_fmt(final.get(m)) for m in metrics),
            *((_fmt(final.get("calls")), _fmt(final.get("tokens"))) if usage else ()),
            _fmt(point.get("wall_s"))]


def sweep_table(index: dict[str, Any]) -> Table:
    """One row per sweep point: its values, status, steps done and the final value of
    each metric (the first :data:`TERMINAL_METRICS` of them)."""
    table = terminal_table(f"sweep {index.get('name', '')}: {len(index['points'])} points, "
                           f"{index.get('status', 'unknown')}")
    keys = list(index.get("keys") or [])
    metrics = _point_metrics(index["points"])
    shown = metrics[:TERMINAL_METRICS]
    if len(shown) < len(metrics):
        table.caption = f"{len(metrics) - len(shown)} more metrics in report.html"
    usage = any("calls" in (p.get("final") or {}) for p in index["points"])
    for col in (*keys, "status", "steps", *shown, *(("calls", "tokens") if usage else ())):
        table.add_column(col, justify="left" if col in (*keys, "status") else "right",
                         overflow="fold")
    for point in index["points"]:
        final = point.get("final") or {}
        cells = [*(show_value(point["values"].get(k)) for k in keys), point["status"],
                 _fmt(final.get("steps_done")), *(_fmt(final.get(m)) for m in shown)]
        if usage:
            cells += [_count(final.get("calls")), _count(final.get("tokens"))]
        table.add_row(*cells)
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

def _html(path: Path, title: str, meta: str, warning: str | None,
          tables: list[dict[str, Any]], saved: dict[str, tuple[Path, str]],
          captions: dict[str, str], config: str | None) -> None:
    figures = [{"name": n, "data": data, "caption": captions.get(n, n)}
               for n, (_, data) in saved.items()]
    text = _PAGE.render(title=title, style=STYLE, meta=meta, warning=warning, tables=tables,
                        figures=figures, config=config)
    path.write_text(text, encoding="utf-8")


def _save(figures: dict[str, tuple[Figure, str]], directory: Path
          ) -> tuple[dict[str, tuple[Path, str]], dict[str, str]]:
    saved = save_figures({n: fig for n, (fig, _) in figures.items()}, directory)
    for fig, _ in figures.values():
        fig.clear()
    return saved, {n: caption for n, (_, caption) in figures.items()}


def _run_report(run: RunData, extra_figures: ExtraFigures | None,
                extra_tables: ExtraTables | None = None) -> Report:
    saved, captions = _save(_captioned_run_figures(run, extra_figures), run.path / "figures")
    steps = run.steps()
    planned = run.steps_planned
    meta = (f"status {run.status} · {_fmt(run.agents)} agents · steps {len(steps)}"
            f"{f' of {planned}' if planned else ''} · models {', '.join(run.models) or '-'}"
            f"{f' · scenario {run.scenario}' if run.scenario else ''}"
            f" · seed {_fmt(run.seed)}"
            f" · wall time {_fmt((run.summary or {}).get('wall_s'))} s")
    forked = (run.summary or {}).get("forked_from")
    if forked:
        changes = ", ".join(f"{k}={v}" for k, v in (forked.get("set") or {}).items())
        meta += (f" · forked from {forked.get('run')} after step {forked.get('step')}"
                 f"{f' with {changes}' if changes else ''}")
    warning = None
    if run.status != "completed":
        warning = (f"This run is {run.status}: the report shows the {len(steps)} step(s) "
                   "that finished.")
    metrics = step_metrics(run)
    tables = [{"title": "Per step", "head": ("step", *metrics),
               "rows": _step_rows(run, metrics)}, *_breakdown_tables(run),
              *(extra_tables(run) if extra_tables is not None else ()),
              *_sampling_tables(run), *_managed_tables(run)]
    config = yaml.safe_dump(run.config, sort_keys=False, allow_unicode=True) \
        if run.config else None
    path = run.path / "report.html"
    _html(path, f"{run.name}", meta, warning, tables, saved, captions, config)
    return Report(path, {n: p for n, (p, _) in saved.items()}, "run", (run_table(run),))


def _sweep_report(root: Path, points: bool, extra_figures: ExtraFigures | None,
                  extra_tables: ExtraTables | None = None) -> Report:
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
        if points and run.steps():
            point_reports.append(_run_report(run, extra_figures, extra_tables))
    saved, captions = _save(_captioned_sweep_figures(index, runs), root / "figures")
    metrics = _point_metrics(index["points"])
    usage = any("calls" in (p.get("final") or {}) for p in index["points"])
    rows = []
    for point in index["points"]:
        if point.get("final") is None and (root / point["dir"]).is_dir():
            try:  # a point whose index entry was never written: from its own summary
                point = {**point, "final": headline(load_run(root / point["dir"]).summary
                                                    or {})}
            except FileNotFoundError:
                pass
        cells: list[Any] = _point_cells(point, metrics, usage)
        if (root / point["dir"] / "report.html").exists():
            cells[0] = {"href": f"{point['dir']}/report.html", "text": point["dir"]}
        rows.append(cells)
    meta = (f"status {index.get('status', 'unknown')} · {len(index['points'])} points over "
            f"{', '.join(index.get('keys') or [])} · config {index.get('config', '-')}")
    tables = [{"title": "Points (last step of each)",
               "head": ("point", "status", "steps", *metrics,
                        *(("LLM calls", "tokens") if usage else ()), "wall s"),
               "rows": rows}]
    config_path = root / "sweep.yaml"
    config = config_path.read_text(encoding="utf-8") if config_path.exists() else None
    path = root / "report.html"
    _html(path, f"sweep {index.get('name', root.name)}", meta, None, tables, saved, captions,
          config)
    return Report(path, {n: p for n, (p, _) in saved.items()}, "sweep", (sweep_table(index),),
                  tuple(point_reports))


def write_report(run_dir: str | Path, *, points: bool = True,
                 extra_figures: ExtraFigures | None = None,
                 extra_tables: ExtraTables | None = None) -> Report:
    """Write the figures and ``report.html`` of a run or sweep directory.

    ``points``: for a sweep, also report every point directory. ``extra_figures(run)``
    adds a scenario's own figures (``Scenario.figures``) to every run's report; one named
    like a generic figure replaces it; ``extra_tables(run)`` adds its tables
    (``Scenario.tables``). Raises FileNotFoundError when ``run_dir`` holds
    neither a run nor a sweep.

    >>> report = write_report("runs/demo")  # doctest: +SKIP
    >>> report.path, sorted(report.figures)  # doctest: +SKIP
    """
    root = Path(run_dir)
    if (root / "sweep.json").exists():
        return _sweep_report(root, points, extra_figures, extra_tables)
    return _run_report(load_run(root), extra_figures, extra_tables)
