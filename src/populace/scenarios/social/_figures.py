"""The social scenario's report figures, as matplotlib ``Figure`` objects (Agg, no pyplot)::

    cascades        CCDF of cascade sizes (log-log) and depths, one line per news label
                    and one for all posts
    adoption        cumulative and new reposts of each news post per step
    reach_by_<col>  share of each value's population reposting the news, bars per label
    echo_chamber    same-value share of exposures per value over steps, against random
                    exposure (dashed), and their ratio
    race            claim against correction: reposters so far per step, the overtaking
                    step marked

Everything is drawn from :mod:`._analysis`'s aggregates, so a million agents cost the
counting, not the drawing. A figure without data is left out.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import PercentFormatter

from populace.results import panel_grid

from ._analysis import (
    RACE,
    adoption,
    cascade_groups,
    cascades,
    ccdf,
    echo_chamber,
    race,
    reach_by,
    reach_columns,
)

_MAX_VALUES = 40  # bars of a reach figure (the most populous values)
_MAX_LEGEND = 12


def _short(label: str, most: int = 28) -> str:
    return label if len(label) <= most else label[:most - 1] + "…"


def _legend(ax: Axes, **kwargs: Any) -> None:
    handles, labels = ax.get_legend_handles_labels()
    if labels:
        ax.legend(handles[:_MAX_LEGEND], labels[:_MAX_LEGEND], fontsize=7, **kwargs)


def cascade_figure(posts: pa.Table) -> Figure | None:
    """P(size ≥ x) of cascade sizes on log-log axes (size 0 left out, so a line starts at
    the share reposted at all) and P(depth ≥ x), per news label and for all posts."""
    made = cascades(posts)
    parts = cascade_groups(made)
    if not made.num_rows or not np.any(made["size"].to_numpy()):
        return None
    fig, (size_ax, depth_ax) = panel_grid(2, 3.2)
    for i, (name, part) in enumerate(parts):
        style: dict[str, Any] = {"color": "black" if name == "all posts" else f"C{i % 10}",
                 "linewidth": 1.4, "marker": "o", "markersize": 2.5}
        x, p = ccdf(part["size"])
        if (x > 0).any():
            size_ax.loglog(x[x > 0], p[x > 0], label=f"{name} (n={part.num_rows:,})", **style)
        x, p = ccdf(part["depth"])
        depth_ax.plot(x, p, label=name, drawstyle="steps-post", **style)
    size_ax.set_xlabel("cascade size (reposts) x", fontsize=8)
    size_ax.set_ylabel("P(size ≥ x)", fontsize=8)
    depth_ax.set_yscale("log")
    depth_ax.set_xlabel("cascade depth x", fontsize=8)
    depth_ax.set_ylabel("P(depth ≥ x)", fontsize=8)
    _legend(size_ax)
    fig.suptitle("cascade sizes and depths", x=0.07, ha="left")
    return fig


def adoption_figure(posts: pa.Table) -> Figure | None:
    """Reposts of each news post so far, and new ones, per step (a colour per label)."""
    rows = adoption(posts).to_pylist()
    if not any(r["new"] for r in rows):
        return None
    per_root: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        per_root.setdefault(r["root"], []).append(r)
    colours = {label: f"C{i % 10}" for i, label in
               enumerate(dict.fromkeys(r["label"] for r in rows))}
    fig, (total_ax, new_ax) = panel_grid(2, 3.0)
    named: set[Any] = set()
    for root_rows in per_root.values():
        label = root_rows[0]["label"]
        steps = [r["step"] for r in root_rows]
        shown = "unlabelled" if label is None else label
        style: dict[str, Any] = {"color": colours[label], "linewidth": 1.1, "alpha": 0.8,
                 "label": None if label in named else shown}
        named.add(label)
        total_ax.plot(steps, [r["cumulative"] for r in root_rows], marker="o",
                      markersize=2.5, **style)
        new_ax.plot(steps, [r["new"] for r in root_rows], **style)
    total_ax.set_title("reposts so far", fontsize=9)
    new_ax.set_title("new reposts per step", fontsize=9)
    for ax in (total_ax, new_ax):
        ax.set_xlabel("step", fontsize=8)
    _legend(total_ax)
    fig.suptitle(f"adoption of the news ({len(per_root):,} news posts)", x=0.07, ha="left")
    return fig


def reach_figure(posts: pa.Table, profiles: pa.Table | None, aspect: str) -> Figure | None:
    """Share of each value of ``aspect``'s population that reposted news of each label,
    the 40 most populous values."""
    rows = reach_by(posts, profiles, aspect, per="label").to_pylist()
    if not rows or not any(r["adopters"] for r in rows):
        return None
    labels = list(dict.fromkeys(r["label"] for r in rows))
    population = {r["value"]: r["population"] for r in rows}
    values = sorted(population, key=lambda v: -population[v])[:_MAX_VALUES]
    values = [v for v in population if v in values]  # back in sorted order
    share = {(r["label"], r["value"]): r["share"] for r in rows}
    fig, (ax,) = panel_grid(1, max(2.4, 0.28 * len(values) * max(1, len(labels) / 2)))
    y = np.arange(len(values), dtype=np.float64)
    height = 0.8 / max(len(labels), 1)
    for i, label in enumerate(labels):
        ax.barh(y - 0.4 + height * (i + 0.5),
                [share.get((label, v), 0.0) for v in values], height=height,
                color=f"C{i % 10}", alpha=0.8, label=label)
    ax.set_yticks(y, [_short(f"{v} (n={population[v]:,})", 36) for v in values], fontsize=7)
    ax.tick_params(axis="y", length=0, pad=-4)  # labels inside the axes: long ones never clip
    for tick in ax.get_yticklabels():
        tick.set_horizontalalignment("left")
    ax.set_ylim(len(values) - 0.5, -0.5)
    ax.xaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlabel(f"share of the {aspect} group who reposted it", fontsize=8)
    _legend(ax, loc="lower right")
    more = f", {_MAX_VALUES} most populous of {len(population)}" \
        if len(population) > _MAX_VALUES else ""
    fig.suptitle(f"reach of the news by {aspect}{more}", x=0.07, ha="left")
    return fig


def echo_figure(actions: pa.Table | None, profiles: pa.Table | None, aspect: str
                ) -> Figure | None:
    """Per value of the homophily ``aspect``: the mean share of an agent's feed written by
    its own value, per step, against that value's population share (dashed: random
    exposure), and their ratio (1: no echo chamber)."""
    rows = echo_chamber(actions, profiles, aspect).to_pylist()
    if not rows:
        return None
    per_value: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        per_value.setdefault(r["value"], []).append(r)
    fig, (share_ax, ratio_ax) = panel_grid(2, 3.0)
    for i, (value, part) in enumerate(per_value.items()):
        colour = f"C{i % 10}"
        steps = [r["step"] for r in part]
        share_ax.plot(steps, [r["same_share"] for r in part], marker="o", markersize=2.5,
                      color=colour, label=_short(value))
        share_ax.axhline(part[0]["expected"], color=colour, linestyle="--", linewidth=0.9)
        ratio_ax.plot(steps, [r["ratio"] for r in part], marker="o", markersize=2.5,
                      color=colour)
    ratio_ax.axhline(1.0, color="black", linestyle="--", linewidth=0.9)
    share_ax.set_title("feed share from the own value (dashed: random)", fontsize=9)
    share_ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ratio_ax.set_title("ratio to random exposure", fontsize=9)
    for ax in (share_ax, ratio_ax):
        ax.set_xlabel("step", fontsize=8)
    _legend(share_ax)
    fig.suptitle(f"echo chamber by {aspect}", x=0.07, ha="left")
    return fig


def race_figure(posts: pa.Table, population: int | None = None,
                labels: tuple[str, str] = RACE) -> Figure | None:
    """Reposters so far of each label (a share of ``population`` when given) per step;
    a dotted line where the second label overtakes the first."""
    table, overtakes = race(posts, labels, population=population)
    rows = table.to_pylist()
    if not any(r["adopters"] for r in rows):
        return None
    fig, (ax,) = panel_grid(1, 3.0)
    for i, label in enumerate(labels):
        part = [r for r in rows if r["label"] == label]
        ax.plot([r["step"] for r in part],
                [r["share"] if population else r["adopters"] for r in part],
                marker="o", markersize=3, color=f"C{3 if i == 0 else 2}", label=label)
    if overtakes is not None:
        ax.axvline(overtakes, color="black", linestyle=":", linewidth=1,
                   label=f"{labels[1]} overtakes (step {overtakes})")
    if population:
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylabel("share of agents who reposted it" if population else "reposters",
                  fontsize=8)
    ax.set_xlabel("step", fontsize=8)
    _legend(ax)
    fig.suptitle(f"{labels[0]} against {labels[1]}", x=0.07, ha="left")
    return fig


def figures(posts: pa.Table, actions: pa.Table | None, follows: pa.Table | None,
            profiles: pa.Table | None, *, aspect: str | None = None) -> dict[str, Figure]:
    """The social scenario's figures by name (see the module docstring); the caller saves
    them. ``aspect``: the homophily aspect (reach by it alone, and the echo chamber);
    without it, reach by each profile column of 2 to 12 values and no echo chamber.
    ``follows`` is not drawn yet; it is taken to match :func:`report_tables`.

    >>> for name, fig in figures(posts, actions, follows, profiles).items():  # doctest: +SKIP
    ...     fig.savefig(f"{name}.png")
    """
    del follows
    population = profiles.num_rows if profiles is not None and profiles.num_rows else None
    drawn: dict[str, Figure | None] = {"cascades": cascade_figure(posts),
                                       "adoption": adoption_figure(posts)}
    for by in reach_columns(profiles, aspect):
        drawn[f"reach_by_{by}"] = reach_figure(posts, profiles, by)
    if aspect is not None:
        drawn["echo_chamber"] = echo_figure(actions, profiles, aspect)
    drawn["race"] = race_figure(posts, population)
    return {name: fig for name, fig in drawn.items() if fig is not None}
