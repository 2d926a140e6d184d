"""The report's figures, as matplotlib ``Figure`` objects (Agg, no pyplot, no global state).

Every function returns a figure (or None when the run has nothing to show for it); the
caller saves it. Returning the objects lets tests count the panels, bars and lines they
hold. Nothing here knows a scenario: metrics, distributions, tables and profile columns are
drawn by their names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ._grid import panel_grid
from ._runs import RunData, show_value

_MAX_PANELS = 12  # panels of one figure, at most
_MAX_STEPS = 6  # steps shown of a distribution: first and last included, evenly spread


def _spread(steps: Sequence[int], most: int = _MAX_STEPS) -> list[int]:
    """At most ``most`` steps, first and last included, evenly spread."""
    if len(steps) <= most:
        return list(steps)
    picks = np.linspace(0, len(steps) - 1, most).round().astype(int)
    return [steps[i] for i in sorted(set(picks.tolist()))]


def _steps_axis(ax: Axes) -> None:
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step", fontsize=8)


def metric_groups(series: dict[str, np.ndarray]) -> dict[str, list[str]]:
    """Series by the metric that reported them (``usage.m.calls`` → ``usage``)."""
    groups: dict[str, list[str]] = {}
    for name in series:
        groups.setdefault(name.split(".", 1)[0], []).append(name)
    return groups


def _panels(group: str, names: Sequence[str]) -> dict[str, list[tuple[str | None, str]]]:
    """Panels of metric ``group``'s series: ``{title: [(line label, series name)]}``. A
    mapping of mappings (``usage: {model: {calls, tokens}}``) gets one panel per inner key
    and one line per outer key; other mappings one panel per series."""
    rests = [n[len(group) + 1:] if n != group else "" for n in names]
    parts = [r.split(".") for r in rests]
    panels: dict[str, list[tuple[str | None, str]]] = {}
    if all(len(p) == 2 for p in parts):
        for (outer, inner), name in zip(parts, names, strict=True):
            panels.setdefault(inner, []).append((outer, name))
    else:
        for rest, name in zip(rests, names, strict=True):
            panels[rest or group] = [(None, name)]
    return panels


def _more(panels: dict[str, Any]) -> str:
    return f" (first {_MAX_PANELS} of {len(panels)} panels)" if len(panels) > _MAX_PANELS \
        else ""


def metric_figure(run: RunData, group: str) -> Figure | None:
    """Metric ``group`` over steps: one line, or one panel per series of a metric that is a
    mapping (``usage``: one panel per counter, one line per model)."""
    series = run.metrics()
    names = [n for n in metric_groups(series).get(group, []) if not np.isnan(series[n]).all()]
    if not names:
        return None
    steps = run.metric_steps()
    panels = _panels(group, names)
    fig, axes = panel_grid(min(len(panels), _MAX_PANELS), 3.0 if len(panels) == 1 else 2.4)
    for ax, (title, lines) in zip(axes, panels.items(), strict=False):
        for label, name in lines:
            ax.plot(steps, series[name], marker="o", markersize=3, label=label)
        ax.set_title(title, fontsize=9)
        _steps_axis(ax)
    if any(label is not None for lines in panels.values() for label, _ in lines):
        axes[0].legend(fontsize=7)
    fig.suptitle(f"{run.name}: {group} per step{_more(panels)}")
    return fig


def distribution_figure(run: RunData, name: str) -> Figure | None:
    """Distribution ``name`` as declared in a few steps spread over the run (dashed: the
    mean)."""
    per_step = run.distribution(name)
    shown = _spread(sorted(per_step))
    if not shown:
        return None
    fig, axes = panel_grid(len(shown))
    for ax, step in zip(axes, shown, strict=True):
        d = per_step[step]
        ax.stairs(d["counts"], d["edges"], fill=True)
        title = f"step {step}\nn={d['n']:,}"
        if d.get("mean") is not None:
            ax.axvline(d["mean"], color="black", linestyle="--", linewidth=1)
            title += f", mean={d['mean']:.3g}"
        if d.get("missing"):
            title += f", missing={d['missing']:,}"
        ax.set_title(title, fontsize=8.5)
    of = (f" ({len(shown)} of {len(per_step)} steps, spread over the run)"
          if len(shown) < len(per_step) else "")
    fig.suptitle(f"{run.name}: distribution of {name}{of}")
    fig.supxlabel(name)
    return fig


def breakdown_figure(run: RunData, table: str, by: str) -> Figure | None:
    """The mean of every per-agent column of ``table`` per value of profile column ``by``,
    over every step: one panel per column, one line per value."""
    columns = run.agent_columns(table)[:_MAX_PANELS]
    if not columns:
        return None
    fig, axes = panel_grid(len(columns))
    schema = run.table(table).schema
    for ax, column in zip(axes, columns, strict=True):
        b = run.breakdown(table, column, by)
        what = "share" if pa.types.is_boolean(schema.field(column).type) else "mean"
        for i, value in enumerate(b.values):
            ax.plot(b.steps, b.means[i], marker="o", markersize=3, linewidth=1,
                    label=value, color=f"C{i % 10}")
        ax.set_title(f"{what} {column}", fontsize=9)
        _steps_axis(ax)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", fontsize=7, ncols=min(len(labels), 6),
               title=by, title_fontsize=7)
    fig.suptitle(f"{run.name}: {table} by {by}", x=0.07, ha="left")
    return fig


# -- several runs -----------------------------------------------------------------------------
def common_metrics(runs: Sequence[tuple[str, RunData]]) -> dict[str, list[str]]:
    """The metric series every run has (and some run has a value of), by metric."""
    if not runs:
        return {}
    names = list(runs[0][1].metrics())
    for _, run in runs[1:]:
        have = run.metrics()
        names = [n for n in names if n in have]
    names = [n for n in names if any(not np.isnan(r.metric(n)).all() for _, r in runs)]
    return metric_groups(dict.fromkeys(names, np.empty(0)))


def overlay_metric(runs: Sequence[tuple[str, RunData]], group: str) -> Figure | None:
    """Metric ``group`` over steps for several runs: one line per run (per run and outer key
    of a mapping metric, one panel per series or inner key)."""
    names = common_metrics(runs).get(group)
    if not names:
        return None
    panels = _panels(group, names)
    fig, axes = panel_grid(min(len(panels), _MAX_PANELS), 3.4 if len(panels) == 1 else 2.6)
    for ax, (title, lines) in zip(axes, panels.items(), strict=False):
        for run_label, run in runs:
            for label, name in lines:
                ax.plot(run.metric_steps(), run.metric(name), marker="o", markersize=3,
                        label=run_label if label is None else f"{run_label} {label}")
        ax.set_title(title, fontsize=9)
        _steps_axis(ax)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"{group} per step{_more(panels)}")
    return fig


def overlay_distribution(runs: Sequence[tuple[str, RunData]], name: str) -> Figure | None:
    """Each run's last declared distribution ``name``, as shares of its values (outlines)."""
    fig, (ax,) = panel_grid(1, 3.4)
    drawn = 0
    for label, run in runs:
        per_step = run.distribution(name)
        if not per_step:
            continue
        step = max(per_step)
        d = per_step[step]
        counts = np.asarray(d["counts"], dtype=np.float64)
        ax.stairs(counts / max(counts.sum(), 1.0), d["edges"], linewidth=1.5,
                  label=f"{label} (step {step})")
        drawn += 1
    if not drawn:
        return None
    ax.set_xlabel(name)
    ax.set_ylabel("share")
    ax.legend(fontsize=7)
    fig.suptitle(f"last step's distribution of {name}")
    return fig


def _axis(values: list[Any]) -> tuple[list[float], list[str] | None]:
    """Positions for a swept parameter: the values themselves when all are numbers."""
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return [float(v) for v in values], None
    return list(map(float, range(len(values)))), [show_value(v) for v in values]


def sweep_metrics(points: Sequence[dict[str, Any]], key: str, metrics: Sequence[str]
                  ) -> Figure | None:
    """The last step's value of each of ``metrics`` against swept parameter ``key``: one
    panel per metric; with more than one swept key, one line per combination of the
    others. ``points`` are ``sweep.json`` entries."""
    done = [p for p in points if p.get("final")]
    metrics = [m for m in metrics if any(isinstance(p["final"].get(m), int | float)
                                         for p in done)][:_MAX_PANELS]
    if not metrics:
        return None
    values = list(dict.fromkeys(p["values"][key] for p in points))
    xs, ticks = _axis(values)
    where = {repr(v): x for v, x in zip(values, xs, strict=True)}
    lines: dict[str, list[dict[str, Any]]] = {}
    for p in done:
        rest = ", ".join(f"{k}={show_value(v)}" for k, v in p["values"].items() if k != key)
        lines.setdefault(rest, []).append(p)
    fig, axes = panel_grid(len(metrics))
    for ax, metric in zip(axes, metrics, strict=True):
        for rest, members in lines.items():
            members.sort(key=lambda p: where[repr(p["values"][key])])
            y = [p["final"].get(metric) for p in members]
            ax.plot([where[repr(p["values"][key])] for p in members],
                    [np.nan if v is None else float(v) for v in y], marker="o",
                    markersize=3, label=rest or None)
        ax.set_title(metric, fontsize=9)
        ax.set_xlabel(key, fontsize=8)
        if ticks is not None:
            ax.set_xticks(xs, ticks)
    if len(lines) > 1:
        axes[0].legend(fontsize=7)
    fig.suptitle(f"last step's metrics against {key}")
    return fig
