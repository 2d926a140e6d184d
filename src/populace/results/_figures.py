"""The report's figures, as matplotlib ``Figure`` objects (Agg, no pyplot, no global state).

Every function returns a figure (or None when the run has nothing to show for it); the
caller saves it. Returning the objects lets tests count the bars and lines they hold.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ._runs import RunData, show_value

_WIDTH = 10.0  # inches; PNGs are saved at 100 dpi
_MAX_PANELS = 12


def _figure(height: float, ncols: int = 1) -> tuple[Figure, list[Axes]]:
    """One row of ``ncols`` axes. Margins are set by hand: matplotlib's automatic layouts
    would double the time a report takes."""
    fig = Figure(figsize=(_WIDTH, height))
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.6 / height, top=1 - 0.45 / height,
                        wspace=0.25)
    axes = fig.subplots(1, ncols, squeeze=False).ravel().tolist()
    return fig, axes


def _grid(n: int, height: float = 2.4) -> tuple[Figure, list[Axes]]:
    ncols = max(1, min(n, 3 if n <= 6 else 5))
    nrows = math.ceil(n / ncols)
    total = 1.4 + height * nrows
    fig = Figure(figsize=(_WIDTH, total))
    fig.subplots_adjust(left=0.05, right=0.99, bottom=0.55 / total, top=1 - 0.95 / total,
                        hspace=0.6, wspace=0.22)
    axes = fig.subplots(nrows, ncols, sharex=True, squeeze=False).ravel().tolist()
    for ax in axes[n:]:
        ax.set_visible(False)
    for ax in axes[max(0, n - ncols):n]:  # the lowest panel of each column shows its scale
        ax.xaxis.set_tick_params(labelbottom=True)
    return fig, axes[:n]


def _edges(run: RunData) -> list[float]:
    low, high = run.bounds
    return [float(x) for x in np.linspace(low, high, 51)]


def _panel(ax: Axes, values: np.ndarray, edges: list[float], title: str, color: Any = None
           ) -> None:
    counts, _ = np.histogram(values, bins=edges)
    ax.stairs(counts, edges, fill=True, color=color)  # one patch, not one per bar: faster
    if values.size:
        ax.axvline(float(values.mean()), color="black", linestyle="--", linewidth=1)
        title += f"\nn={values.size}, mean={values.mean():.1f}, sd={values.std():.1f}"
    else:
        title += "\n(no valid answer)"
    ax.set_title(title, fontsize=8.5)
    ax.tick_params(labelsize=8)


def _spread(rounds: Sequence[int]) -> list[int]:
    """At most ``_MAX_PANELS`` rounds, first and last included, evenly spread."""
    if len(rounds) <= _MAX_PANELS:
        return list(rounds)
    picks = np.linspace(0, len(rounds) - 1, _MAX_PANELS).round().astype(int)
    return [rounds[i] for i in sorted(set(picks.tolist()))]


def round_histograms(run: RunData) -> Figure | None:
    """Distribution of the reported numbers, one panel per round."""
    rounds = _spread(run.round_numbers())
    if not rounds:
        return None
    fig, axes = _grid(len(rounds))
    edges = _edges(run)
    for ax, r in zip(axes, rounds, strict=True):
        _panel(ax, run.numbers(r), edges, f"round {r}")
    fig.suptitle(f"{run.name}: numbers reported per round")
    fig.supxlabel("number")
    return fig


def category_histograms(run: RunData, column: str, round_no: int | None = None
                        ) -> Figure | None:
    """Distribution of the numbers per value of ``column`` (education, model, group …) in
    round ``round_no`` (default: the last round with responses)."""
    rounds = run.round_numbers()
    if not rounds:
        return None
    round_no = rounds[-1] if round_no is None else round_no
    split = run.numbers_by(column, round_no)
    if not split:
        return None
    fig, axes = _grid(len(split))
    edges = _edges(run)
    colors = [f"C{i % 10}" for i in range(len(split))]
    for ax, (value, numbers), color in zip(axes, split.items(), colors, strict=True):
        _panel(ax, numbers, edges, f"group {value}" if column == "group" else str(value),
               color)
    fig.suptitle(f"{run.name}: numbers by {column}, round {round_no}")
    fig.supxlabel("number")
    return fig


def mean_by_round(run: RunData) -> Figure | None:
    """Mean (± one standard deviation), median and target of every round."""
    rows = [r for r in run.round_rows() if r["mean"] is not None]
    if not rows:
        return None
    x = np.array([r["round"] for r in rows])
    mean = np.array([r["mean"] for r in rows])
    std = np.array([r["std"] for r in rows])
    fig, (ax,) = _figure(4.2)
    ax.fill_between(x, mean - std, mean + std, alpha=0.2, label="mean ± sd")
    ax.errorbar(x, mean, yerr=std, fmt="o-", capsize=4, label="mean")
    ax.plot(x, [r["median"] for r in rows], marker=".", linestyle=":", label="median")
    targets = [r["target"] if r["target"] is not None else np.nan for r in rows]
    ax.plot(x, targets, marker="x", linestyle="--", label="target")
    ax.set_xticks(x)
    ax.set_xlabel("round")
    ax.set_ylabel("number")
    low, high = run.bounds
    ax.set_ylim(low, high)
    ax.legend(fontsize=8)
    ax.set_title(f"{run.name}: mean and spread per round")
    return fig


def invalid_by_round(run: RunData) -> Figure | None:
    """Share of invalid answers (unparsable, out of range or failed) per round."""
    rows = run.round_rows()
    if not rows:
        return None
    fig, (ax,) = _figure(3.2)
    rates = [100 * (r["invalid_rate"] or 0.0) for r in rows]
    ax.bar([str(r["round"]) for r in rows], rates, color="C3")
    ax.set_xlabel("round")
    ax.set_ylabel("invalid answers (%)")
    ax.set_ylim(0, max(5.0, max(rates) * 1.2))
    ax.set_title(f"{run.name}: invalid answers per round")
    return fig


def usage_by_round(run: RunData) -> Figure | None:
    """Tokens (prompt and completion, stacked) and LLM calls per round."""
    rows = run.round_rows()
    if not rows:
        return None
    fig, (tokens_ax, calls_ax) = _figure(3.6, 2)
    labels = [str(r["round"]) for r in rows]
    prompt = np.array([r["prompt_tokens"] for r in rows])
    completion = np.array([r["completion_tokens"] for r in rows])
    tokens_ax.bar(labels, prompt, label="prompt")
    tokens_ax.bar(labels, completion, bottom=prompt, label="completion")
    tokens_ax.set_title(f"{run.name}: tokens per round", fontsize=10)
    tokens_ax.set_xlabel("round")
    tokens_ax.legend(fontsize=8)
    calls_ax.bar(labels, [r["calls"] for r in rows], color="C2")
    calls_ax.set_title("LLM calls per round", fontsize=10)
    calls_ax.set_xlabel("round")
    return fig


def wall_by_round(run: RunData) -> Figure | None:
    """Wall time of every round the summary recorded."""
    rows = [r for r in run.round_rows() if r["wall_s"] is not None]
    if not rows:
        return None
    fig, (ax,) = _figure(3.2)
    ax.bar([str(r["round"]) for r in rows], [r["wall_s"] for r in rows], color="C4")
    ax.set_xlabel("round")
    ax.set_ylabel("wall time (s)")
    ax.set_title(f"{run.name}: wall time per round")
    return fig


def groups_by_round(run: RunData) -> Figure | None:
    """Group-level play: each group's report per round, the target, the winning group."""
    rows = [r for r in run.round_rows() if r.get("groups")]
    if not rows:
        return None
    fig, (ax,) = _figure(4.2)
    x = [r["round"] for r in rows]
    ids = sorted({g["group"] for r in rows for g in r["groups"]})
    for gid in ids:
        reports = [next((g["report"] for g in r["groups"] if g["group"] == gid), None)
                   for r in rows]
        ax.plot(x, [np.nan if v is None else v for v in reports], marker=".", linewidth=0.8,
                alpha=0.7)
    ax.plot(x, [np.nan if r["target"] is None else r["target"] for r in rows], color="black",
            linestyle="--", marker="x", label="target")
    ax.set_xticks(x)
    ax.set_xlabel("round")
    ax.set_ylabel("group report (mean of members)")
    ax.legend(fontsize=8)
    ax.set_title(f"{run.name}: {len(ids)} groups' reports per round")
    return fig


# -- several runs -----------------------------------------------------------------------------
def overlay_means(runs: Sequence[tuple[str, RunData]]) -> Figure | None:
    """Mean per round of several runs, one line each."""
    fig, (ax,) = _figure(4.2)
    drawn = 0
    for label, run in runs:
        rows = [r for r in run.round_rows() if r["mean"] is not None]
        if rows:
            ax.plot([r["round"] for r in rows], [r["mean"] for r in rows], marker="o",
                    label=label)
            drawn += 1
    if not drawn:
        return None
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("round")
    ax.set_ylabel("mean number")
    ax.legend(fontsize=8)
    ax.set_title("mean per round")
    return fig


def overlay_final_histograms(runs: Sequence[tuple[str, RunData]]) -> Figure | None:
    """The last round's distribution of several runs, as overlaid outlines."""
    fig, (ax,) = _figure(4.2)
    drawn = 0
    for label, run in runs:
        rounds = run.round_numbers()
        if rounds:
            values = run.numbers(rounds[-1])
            counts, edges = np.histogram(values, bins=_edges(run))
            ax.stairs(counts, edges, linewidth=1.5, label=f"{label} (round {rounds[-1]})")
            drawn += 1
    if not drawn:
        return None
    ax.set_xlabel("number")
    ax.set_ylabel("answers")
    ax.legend(fontsize=8)
    ax.set_title("last round's numbers")
    return fig


def _axis(values: list[Any]) -> tuple[list[float], list[str] | None]:
    """Positions for a swept parameter: the values themselves when all are numbers."""
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return [float(v) for v in values], None
    return list(map(float, range(len(values)))), [show_value(v) for v in values]


def sweep_metrics(points: Sequence[dict[str, Any]], key: str) -> Figure | None:
    """Last-round mean and standard deviation against swept parameter ``key``.

    ``points`` are ``sweep.json`` entries; with more than one swept key, one line per
    combination of the other keys.
    """
    done = [p for p in points if p.get("final") and p["final"].get("mean") is not None]
    if not done:
        return None
    values = list(dict.fromkeys(p["values"][key] for p in points))
    xs, ticks = _axis(values)
    where = {repr(v): x for v, x in zip(values, xs, strict=True)}
    lines: dict[str, list[dict[str, Any]]] = {}
    for p in done:
        rest = ", ".join(f"{k}={show_value(v)}" for k, v in p["values"].items() if k != key)
        lines.setdefault(rest, []).append(p)
    fig, (mean_ax, std_ax) = _figure(3.8, 2)
    for rest, members in lines.items():
        members.sort(key=lambda p: where[repr(p["values"][key])])
        x = [where[repr(p["values"][key])] for p in members]
        mean_ax.plot(x, [p["final"]["mean"] for p in members], marker="o", label=rest or None)
        std_ax.plot(x, [p["final"]["std"] for p in members], marker="o", label=rest or None)
    for ax, what in ((mean_ax, "mean"), (std_ax, "standard deviation")):
        ax.set_xlabel(key)
        ax.set_ylabel(what)
        ax.set_title(f"last round's {what} vs {key}", fontsize=10)
        if ticks is not None:
            ax.set_xticks(xs, ticks)
        if len(lines) > 1:
            ax.legend(fontsize=7)
    return fig
