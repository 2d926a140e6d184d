"""The game's own report figures (``GuessNumber.figures``), next to the generic ones that
``populace report`` draws for every scenario (metrics, distributions, breakdowns).

Drawn from the ``responses`` table through :class:`populace.results.RunData`, so a partial
run (a summary that lags, or none) shows every round that has answers::

    numbers_by_round   histogram of the numbers, one panel per round
    mean_by_round      mean ± sd, median and target per round
    by_<column>        the last round's numbers per education, profession, model, group …
    groups_by_round    group-level play: each group's report per round
    invalid_by_round   share of invalid answers per round
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from populace.results import panel_grid

from ._rules import parse_ratio, score_round

if TYPE_CHECKING:
    from populace.results import RunData

TABLE = "responses"
_WIDTH = 10.0  # inches, as the generic figures
_MAX_PANELS = 12


def _figure(height: float) -> tuple[Figure, Axes]:
    fig = Figure(figsize=(_WIDTH, height))
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.6 / height, top=1 - 0.45 / height)
    return fig, fig.subplots()


def _game(run: RunData) -> dict[str, Any]:
    game = run.config.get("game")
    return game if isinstance(game, dict) else {}


def _edges(run: RunData) -> list[float]:
    game = _game(run)
    low, high = float(game.get("low", 0.0)), float(game.get("high", 100.0))
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


def _rounds(run: RunData) -> list[int]:
    return run.table_steps(TABLE) if TABLE in run.tables else []


def round_rows(run: RunData) -> list[dict[str, Any]]:
    """Per round with answers: the statistics of every valid answer, the invalid share,
    and the target (the summary's, which group play takes from the groups; computed from
    the answers when the summary lacks the round)."""
    game = _game(run)
    try:
        ratio = parse_ratio(game.get("ratio", "2/3"))
    except ValueError:
        ratio = parse_ratio("2/3")
    offset = float(game.get("offset", 0.0) or 0.0)
    rows = []
    for r in _rounds(run):
        numbers = run.values(TABLE, "number", r, dropna=False)
        outcome = score_round(r, numbers, ratio, offset)
        row: dict[str, Any] = outcome.as_dict()
        row["invalid_rate"] = 1 - outcome.n_valid / outcome.n if outcome.n else None
        entry = run.entry(r)
        if entry is not None and "target" in entry:
            row["target"] = entry["target"]
        row["groups"] = entry.get("groups") if entry is not None else None
        rows.append(row)
    return rows


def round_histograms(run: RunData) -> Figure | None:
    """Distribution of the reported numbers, one panel per round."""
    rounds = _spread(_rounds(run))
    if not rounds:
        return None
    fig, axes = panel_grid(len(rounds), sharex=True)
    edges = _edges(run)
    for ax, r in zip(axes, rounds, strict=True):
        _panel(ax, run.values(TABLE, "number", r), edges, f"round {r}")
    fig.suptitle(f"{run.name}: numbers reported per round")
    fig.supxlabel("number")
    return fig


def category_histograms(run: RunData, column: str, round_no: int | None = None
                        ) -> Figure | None:
    """Distribution of the numbers per value of ``column`` (education, model, group …) in
    round ``round_no`` (default: the last round with answers)."""
    rounds = _rounds(run)
    if not rounds:
        return None
    round_no = rounds[-1] if round_no is None else round_no
    split = run.values_by(TABLE, "number", column, round_no)
    if not split:
        return None
    fig, axes = panel_grid(len(split), sharex=True)
    edges = _edges(run)
    for i, (ax, (value, numbers)) in enumerate(zip(axes, split.items(), strict=True)):
        _panel(ax, numbers, edges, f"group {value}" if column == "group" else str(value),
               f"C{i % 10}")
    fig.suptitle(f"{run.name}: numbers by {column}, round {round_no}")
    fig.supxlabel("number")
    return fig


def mean_by_round(run: RunData) -> Figure | None:
    """Mean (± one standard deviation), median and target of every round."""
    rows = [r for r in round_rows(run) if r["mean"] is not None]
    if not rows:
        return None
    x = np.array([r["round"] for r in rows])
    mean = np.array([r["mean"] for r in rows])
    std = np.array([r["std"] for r in rows])
    fig, ax = _figure(4.2)
    ax.fill_between(x, mean - std, mean + std, alpha=0.2, label="mean ± sd")
    ax.errorbar(x, mean, yerr=std, fmt="o-", capsize=4, label="mean")
    ax.plot(x, [r["median"] for r in rows], marker=".", linestyle=":", label="median")
    ax.plot(x, [np.nan if r["target"] is None else r["target"] for r in rows], marker="x",
            linestyle="--", label="target")
    ax.set_xticks(x)
    ax.set_xlabel("round")
    ax.set_ylabel("number")
    edges = _edges(run)
    ax.set_ylim(edges[0], edges[-1])
    ax.legend(fontsize=8)
    ax.set_title(f"{run.name}: mean and spread per round")
    return fig


def invalid_by_round(run: RunData) -> Figure | None:
    """Share of invalid answers (unparsable, out of range or failed) per round."""
    rows = round_rows(run)
    if not rows:
        return None
    fig, ax = _figure(3.2)
    rates = [100 * (r["invalid_rate"] or 0.0) for r in rows]
    ax.bar([str(r["round"]) for r in rows], rates, color="C3")
    ax.set_xlabel("round")
    ax.set_ylabel("invalid answers (%)")
    ax.set_ylim(0, max(5.0, max(rates) * 1.2))
    ax.set_title(f"{run.name}: invalid answers per round")
    return fig


def groups_by_round(run: RunData) -> Figure | None:
    """Group-level play: each group's report per round, the target, the winning group."""
    rows = [r for r in round_rows(run) if r.get("groups")]
    if not rows:
        return None
    fig, ax = _figure(4.2)
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


def figures(run: RunData) -> dict[str, Figure]:
    """The game's figures of ``run`` by name (``GuessNumber.figures``); none for a run
    without answers.

    >>> from populace.results import load_run, write_report           # doctest: +SKIP
    >>> write_report("runs/demo", extra_figures=figures)               # doctest: +SKIP
    """
    drawn: dict[str, Figure | None] = {
        "numbers_by_round": round_histograms(run),
        "mean_by_round": mean_by_round(run),
    }
    for column in run.categories():
        drawn[f"by_{column}"] = category_histograms(run, column)
    drawn["groups_by_round"] = groups_by_round(run)
    drawn["invalid_by_round"] = invalid_by_round(run)
    return {name: fig for name, fig in drawn.items() if fig is not None}
