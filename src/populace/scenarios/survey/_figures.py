"""The survey's report figures, as matplotlib ``Figure`` objects (Agg, no pyplot)::

    marginals           option shares per question, one panel each (numeric: histograms);
                        past 12 questions, marginals_2, marginals_3 …
    by_<column>         shares per value of a profile column of 2 to 12 values (heatmaps)
    treatment_effects   forest plot of every arm − control difference with its 95% CI
    position_bias       share of answers per shown position against 1/k
    reference           model against reference shares, TVD in each panel's title

Everything is drawn from :mod:`._analysis`'s aggregates, so ten million answers cost the
counting, not the drawing. A figure without data is left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from populace.results import panel_grid

from ._analysis import (
    QuestionInfo,
    as_reference,
    compare_reference,
    crosstab,
    crosstab_columns,
    marginals,
    no_profiles,
    position_bias,
    treatment_effects,
    weights_table,
)

_WIDTH = 10.0  # inches, as the generic figures
_MAX_PANELS = 12
_MAX_EFFECTS = 40  # rows of the forest plot
_BINS = 20  # of a numeric question's histogram


def _short(label: str, most: int = 28) -> str:
    return label if len(label) <= most else label[:most - 1] + "…"


def _grouped(rows: list[dict[str, Any]], *keys: str) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    out: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(tuple(r[k] for k in keys), []).append(r)
    return out


def _bars(ax: Axes, options: Sequence[str], series: Sequence[tuple[str, Sequence[float]]],
          marks: Sequence[float] | None = None) -> None:
    """Horizontal bars of shares, one group per option (top to bottom in canonical order),
    one bar per series; option labels inside the axes, so long ones never clip."""
    y = np.arange(len(options), dtype=np.float64)
    height = 0.8 / max(len(series), 1)
    for i, (label, shares) in enumerate(series):
        ax.barh(y - 0.4 + height * (i + 0.5), shares, height=height, label=label,
                color=f"C{i % 10}", alpha=0.75)
    if marks is not None:
        ax.plot(marks, y, "D", color="black", markersize=3.5, label="weighted")
    ax.set_yticks(y, [_short(o) for o in options], fontsize=7)
    ax.tick_params(axis="y", length=0, pad=-4)
    for tick in ax.get_yticklabels():
        tick.set_horizontalalignment("left")
    ax.set_ylim(len(options) - 0.5, -0.5)
    ax.set_xlim(0, 1)
    ax.xaxis.set_major_formatter("{x:.0%}")


def _respondents(rows: list[dict[str, Any]]) -> int:
    """Respondents behind a question's marginal rows (n / share of any chosen option)."""
    return next((round(r["n"] / r["share"]) for r in rows if r["share"]), 0)


def _numeric_values(answers: pa.Table, question: QuestionInfo) -> dict[int, np.ndarray]:
    """The valid values of a numeric question, per wave."""
    mask = pc.and_(pc.equal(answers["question"], question.id),
                   pc.fill_null(answers["valid"], False))
    part = answers.filter(mask).select(["wave", "code"]).drop_null()
    waves = np.asarray(part["wave"].to_numpy(), dtype=np.int64)
    codes = np.asarray(part["code"].to_numpy(), dtype=np.float64)
    return {int(w): codes[waves == w] for w in np.unique(waves)}


def _histogram(ax: Axes, question: QuestionInfo, per_wave: dict[int, np.ndarray]) -> None:
    every = np.concatenate(list(per_wave.values()))
    low, high = question.range or (float(every.min()), float(every.max()))
    if high <= low:
        low, high = low - 0.5, high + 0.5
    edges = np.linspace(low, high, _BINS + 1)
    for i, (wave, values) in enumerate(per_wave.items()):
        counts, _ = np.histogram(np.clip(values, low, high), bins=edges)
        ax.stairs(counts / max(values.size, 1), edges, fill=len(per_wave) == 1,
                  color=f"C{i % 10}", label=f"wave {wave}", linewidth=1.2)
    ax.yaxis.set_major_formatter("{x:.0%}")


def marginal_figures(answers: pa.Table, questions: Iterable[QuestionInfo], *,
                     weights: pa.Table | None = None) -> dict[str, Figure]:
    """Option shares per question (every wave's bars side by side; with ``weights``, the
    weighted share as a black diamond, for the last wave), numeric answers as histograms:
    12 panels a figure."""
    qs = list(questions)
    by_q = _grouped(marginals(answers, qs, weights=weights).to_pylist(), "question")
    panels: list[tuple[QuestionInfo, Any]] = []
    for x in qs:
        if x.type == "numeric":
            values = _numeric_values(answers, x)
            if values:
                panels.append((x, values))
        elif (x.id,) in by_q:
            panels.append((x, by_q[(x.id,)]))
    out: dict[str, Figure] = {}
    pages = [panels[i:i + _MAX_PANELS] for i in range(0, len(panels), _MAX_PANELS)]
    for page, chunk in enumerate(pages, 1):
        fig, axes = panel_grid(len(chunk), 2.6)
        for ax, (x, data) in zip(axes, chunk, strict=True):
            if x.type == "numeric":
                _histogram(ax, x, data)
                n = sum(v.size for v in data.values())
            else:
                per_wave = _grouped(data, "wave")
                series = [(f"wave {w}", [r["share"] for r in rows])
                          for (w,), rows in per_wave.items()]
                last = list(per_wave.values())[-1]
                marks = [r["weighted_share"] for r in last] if weights is not None else None
                _bars(ax, x.options, series,
                      None if marks is None else [np.nan if m is None else m for m in marks])
                n = _respondents(last)
            ax.set_title(f"{_short(x.id, 40)} ({x.type})\nn={n:,}", fontsize=8.5)
        handles, labels = axes[0].get_legend_handles_labels()
        if len(labels) > 1:
            fig.legend(handles, labels, loc="upper right", fontsize=7, ncols=min(6, len(labels)))
        of = f" ({page} of {len(pages)})" if len(pages) > 1 else ""
        fig.suptitle(f"answers per question{of}", x=0.07, ha="left")
        out["marginals" if page == 1 else f"marginals_{page}"] = fig
    return out


def crosstab_figure(answers: pa.Table, profiles: pa.Table, questions: Iterable[QuestionInfo],
                    by: str) -> Figure | None:
    """The last wave's option shares per value of profile column ``by``: a heatmap per
    question (rows: values, columns: options), the first 12 questions."""
    qs = list(questions)
    rows = crosstab(answers, profiles, qs, by).to_pylist()
    if not rows:
        return None
    last = max(r["wave"] for r in rows)
    by_q = _grouped([r for r in rows if r["wave"] == last], "question")
    shown = [x for x in qs if (x.id,) in by_q]
    fig, axes = panel_grid(min(len(shown), _MAX_PANELS), 2.8)
    for ax, x in zip(axes, shown, strict=False):
        cells = by_q[(x.id,)]
        values = list(dict.fromkeys(r["value"] for r in cells))
        grid = np.array([r["share"] for r in cells]).reshape(len(values), len(x.options))
        ax.imshow(grid, vmin=0, vmax=1, cmap="Blues", aspect="auto")
        if grid.size <= 60:
            for (i, j), share in np.ndenumerate(grid):
                ax.text(j, i, f"{share:.0%}", ha="center", va="center", fontsize=6,
                        color="white" if share > 0.6 else "black")
        ax.set_xticks(range(len(x.options)), [_short(o, 10) for o in x.options],
                      fontsize=6.5, rotation=30, ha="right")
        ax.set_yticks(range(len(values)), [_short(v, 12) for v in values], fontsize=7)
        ax.set_title(_short(x.id, 40), fontsize=8.5)
    more = f", first {_MAX_PANELS} of {len(shown)} questions" if len(shown) > _MAX_PANELS \
        else ""
    fig.suptitle(f"answers by {by} (wave {last}{more})", x=0.07, ha="left")
    return fig


def effects_figure(answers: pa.Table, questions: Iterable[QuestionInfo], control: str
                   ) -> Figure | None:
    """Forest plot: every arm − control difference with its 95% CI, mean differences and
    share differences in their own panels (red: p < 0.05)."""
    rows = treatment_effects(answers, questions, control=control).to_pylist()
    if not rows:
        return None
    several = len({r["wave"] for r in rows}) > 1
    kinds = [(title, part[:_MAX_EFFECTS]) for title, part in (
        ("difference in mean", [r for r in rows if r["measure"] == "mean"]),
        ("difference in share", [r for r in rows if r["measure"] != "mean"])) if part]
    heights = [len(part) for _, part in kinds]
    total = 1.3 + 0.22 * sum(heights) + 0.8 * len(kinds)
    fig = Figure(figsize=(_WIDTH, total))
    fig.subplots_adjust(left=0.36, right=0.98, bottom=0.5 / total, top=1 - 0.6 / total,
                        hspace=0.5 * len(kinds) / max(sum(heights), 1) * 4)
    axes = fig.subplots(len(kinds), 1, squeeze=False, gridspec_kw={"height_ratios": heights})
    for ax, (title, part) in zip(axes[:, 0], kinds, strict=True):
        y = np.arange(len(part))
        est = np.array([r["estimate"] for r in part], dtype=np.float64)
        low = np.array([np.nan if r["ci_low"] is None else r["ci_low"] for r in part])
        high = np.array([np.nan if r["ci_high"] is None else r["ci_high"] for r in part])
        strong = np.array([r["p_value"] is not None and r["p_value"] < 0.05 for r in part])
        for mask, color in ((~strong, "C0"), (strong, "C3")):
            ax.errorbar(est[mask], y[mask], xerr=np.abs(np.vstack([est - low, high - est])[:,
                        mask]), fmt="o", color=color, markersize=3.5, capsize=2, linewidth=1)
        ax.axvline(0, color="black", linewidth=0.8)
        labels = [" · ".join([r["question"], *([] if r["measure"] == "mean" else [
                      r["measure"].removeprefix("share: ")]), r["arm"],
                      *([f"wave {r['wave']}"] if several else [])]) for r in part]
        ax.set_yticks(y, [_short(s, 60) for s in labels], fontsize=7)
        ax.set_ylim(len(part) - 0.5, -0.5)
        ax.tick_params(axis="x", labelsize=8)
        shown = sum(1 for r in rows if (r["measure"] == "mean") == (title.endswith("mean")))
        ax.set_title(title + (f" (first {len(part)} of {shown})" if shown > len(part) else ""),
                     fontsize=9)
    fig.suptitle(f"treatment effects against {control} (95% Welch CI; red: p < 0.05)",
                 x=0.07, ha="left")
    return fig


def position_figure(answers: pa.Table, questions: Iterable[QuestionInfo]) -> Figure | None:
    """Share of answers per shown position of the chosen option, against 1/k (dashed)."""
    by_q = _grouped(position_bias(answers, questions).to_pylist(), "question")
    if not by_q:
        return None
    shown = list(by_q.items())[:_MAX_PANELS]
    fig, axes = panel_grid(len(shown))
    for ax, ((qid,), rows) in zip(axes, shown, strict=True):
        pos = [r["position"] for r in rows]
        ax.bar(pos, [r["share"] for r in rows], color="C0", alpha=0.8)
        ax.stairs([r["expected"] for r in rows], np.arange(len(pos) + 1) + 0.5,
                  baseline=None, color="black", linestyle="--", linewidth=1)
        ax.set_xticks(pos)
        ax.yaxis.set_major_formatter("{x:.0%}")
        p = rows[0]["p_value"]
        test = "-" if p is None else "<0.001" if p < 0.001 else f"{p:.3f}"
        n = sum(r["n"] for r in rows)
        ax.set_title(f"{_short(qid, 40)}\nn={n:,}, p(uniform)={test}", fontsize=8.5)
    fig.supxlabel("position at which the chosen option was shown", fontsize=9)
    more = f" (first {_MAX_PANELS} of {len(by_q)})" if len(by_q) > _MAX_PANELS else ""
    fig.suptitle(f"position of the chosen option{more}", x=0.07, ha="left")
    return fig


def reference_figure(answers: pa.Table, profiles: pa.Table,
                     questions: Iterable[QuestionInfo], reference: pa.Table) -> Figure | None:
    """The last wave's option shares against the reference's, one panel per question and
    aspect value (TVD in the title), the first 12."""
    qs = list(questions)
    compared = compare_reference(answers, profiles, qs, reference).to_pylist()
    if not compared:
        return None
    last = max(r["wave"] for r in compared)
    compared = [r for r in compared if r["wave"] == last]
    model: dict[tuple[Any, ...], float] = {}
    for r in marginals(answers, qs).to_pylist():
        model[(r["wave"], r["question"], None, None, r["option"])] = r["share"]
    for aspect in {r["aspect"] for r in compared} - {None}:
        for r in crosstab(answers, profiles, qs, aspect).to_pylist():
            model[(r["wave"], r["question"], aspect, r["value"], r["option"])] = r["share"]
    ref: dict[tuple[Any, ...], float] = {}
    for r in reference.to_pylist():
        key = (r["question"], r.get("aspect"), r.get("value"))
        ref[(*key, r["option"])] = ref.get((*key, r["option"]), 0.0) + r["share"]
    options = {x.id: x.options for x in qs}
    shown = compared[:_MAX_PANELS]
    fig, axes = panel_grid(len(shown), 2.6)
    for ax, r in zip(axes, shown, strict=True):
        key = (r["question"], r["aspect"], r["value"])
        opts = options[r["question"]]
        theirs = np.array([ref.get((*key, o), 0.0) for o in opts])
        _bars(ax, opts, [("model", [model.get((last, *key, o), 0.0) for o in opts]),
                         ("reference", list(theirs / theirs.sum()))])
        among = "" if r["aspect"] is None else f" ({r['aspect']} = {r['value']})"
        ax.set_title(f"{_short(r['question'] + among, 44)}\nTVD {r['tvd']:.3f}, n={r['n']:,}",
                     fontsize=8.5)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", fontsize=7, ncols=2)
    more = f", first {_MAX_PANELS} of {len(compared)}" if len(compared) > _MAX_PANELS else ""
    fig.suptitle(f"model against reference (wave {last}{more})", x=0.07, ha="left")
    return fig


def figures(answers: pa.Table, profiles: pa.Table | None, questions: Iterable[QuestionInfo], *,
            control: str | None = None, reference: pa.Table | str | Path | None = None,
            targets: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, Figure]:
    """The survey's figures by name (see the module docstring); the caller saves them.

    >>> for name, fig in figures(answers, profiles, questions).items():  # doctest: +SKIP
    ...     fig.savefig(f"{name}.png")
    """
    qs = list(questions)
    profiles = no_profiles(profiles)
    weights = None if targets is None else weights_table(profiles, targets)
    out = marginal_figures(answers, qs, weights=weights)
    drawn: dict[str, Figure | None] = {}
    for by in crosstab_columns(profiles):
        drawn[f"by_{by}"] = crosstab_figure(answers, profiles, qs, by)
    if control is not None:
        drawn["treatment_effects"] = effects_figure(answers, qs, control)
    drawn["position_bias"] = position_figure(answers, qs)
    if reference is not None:
        drawn["reference"] = reference_figure(answers, profiles, qs, as_reference(reference))
    out.update({name: fig for name, fig in drawn.items() if fig is not None})
    return out
