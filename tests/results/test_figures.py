"""The report's generic figures on edge inputs: one step, many steps, many panels, gaps,
nothing to draw. Each figure is checked by what it holds (panels, lines, data, titles)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from populace.results import RunData, RunDirectory
from populace.results._figures import (
    common_metrics,
    distribution_figure,
    metric_figure,
    overlay_distribution,
    overlay_metric,
    sweep_metrics,
)


def run_of(tmp_path: Path, steps: list[dict[str, Any]], name: str = "r") -> RunData:
    """A run whose summary has ``steps`` (numbered from 1 unless they say otherwise)."""
    entries = [{"step": i, **e} for i, e in enumerate(steps, 1)]
    return RunData(RunDirectory(tmp_path / name), {"name": name, "steps": entries}, {}, None)


def dist(counts: list[int], *, mean: float | None = None, missing: int = 0) -> dict[str, Any]:
    return {"edges": list(range(len(counts) + 1)), "counts": counts, "n": sum(counts),
            "missing": missing, "mean": mean}


def titles(fig: Any) -> list[str]:
    return [ax.get_title() for ax in fig.axes]


# -- one run -------------------------------------------------------------------------------------
def test_a_plain_metric_is_one_line_over_the_steps(tmp_path: Path) -> None:
    run = run_of(tmp_path, [{"mean": 3.0}, {"mean": 2.5}, {"mean": 1.0}])
    fig = metric_figure(run, "mean")
    assert fig is not None
    (ax,) = fig.axes
    (line,) = ax.get_lines()
    assert list(line.get_xdata()) == [1, 2, 3] and list(line.get_ydata()) == [3.0, 2.5, 1.0]
    assert fig.get_suptitle() == "r: mean per step"


def test_a_single_step_still_draws_its_point(tmp_path: Path) -> None:
    fig = metric_figure(run_of(tmp_path, [{"share": 0.25}]), "share")
    assert fig is not None
    (line,) = fig.axes[0].get_lines()
    assert list(line.get_ydata()) == [0.25]


def test_a_step_without_the_metric_is_a_gap(tmp_path: Path) -> None:
    run = run_of(tmp_path, [{"mean": 1.0}, {"other": 5}, {"mean": 3.0}])
    (line,) = metric_figure(run, "mean").axes[0].get_lines()  # type: ignore[union-attr]
    y = line.get_ydata()
    assert y[0] == 1.0 and np.isnan(y[1]) and y[2] == 3.0


@pytest.mark.parametrize("steps", [
    [{"winner": None}, {"winner": None}],  # never a number
    [{"label": "a"}, {"label": "b"}],  # text is not a series
    [{"mean": 1.0}],  # another metric altogether
    [],  # no steps at all
])
def test_nothing_to_draw_is_no_figure(tmp_path: Path, steps: list[dict[str, Any]]) -> None:
    run = run_of(tmp_path, steps)
    assert metric_figure(run, "winner") is None
    assert metric_figure(run, "label") is None


def test_a_mapping_of_mappings_is_a_panel_per_counter_and_a_line_per_key(tmp_path: Path
                                                                        ) -> None:
    usage = {"a": {"calls": 10, "tokens": 100}, "b": {"calls": 20, "tokens": 50}}
    fig = metric_figure(run_of(tmp_path, [{"usage": usage}, {"usage": usage}]), "usage")
    assert fig is not None
    assert titles(fig) == ["calls", "tokens"]
    assert [line.get_label() for line in fig.axes[0].get_lines()] == ["a", "b"]
    assert [list(line.get_ydata()) for line in fig.axes[1].get_lines()] == [[100, 100],
                                                                            [50, 50]]


def test_more_panels_than_fit_are_cut_and_said_so(tmp_path: Path) -> None:
    wide = {f"k{i:02d}": float(i) for i in range(14)}
    fig = metric_figure(run_of(tmp_path, [{"by": wide}]), "by")
    assert fig is not None
    assert titles(fig) == [f"k{i:02d}" for i in range(12)]
    assert fig.get_suptitle() == "r: by per step (first 12 of 14 panels)"


def test_a_long_run_shows_six_steps_of_a_distribution_first_and_last_included(
        tmp_path: Path) -> None:
    run = run_of(tmp_path, [{"distributions": {"x": dist([i, 1], mean=0.5)}}
                            for i in range(10)])
    fig = distribution_figure(run, "x")
    assert fig is not None
    shown = [int(t.split("\n")[0].removeprefix("step ")) for t in titles(fig)]
    assert len(shown) == 6 and shown[0] == 1 and shown[-1] == 10
    assert shown == sorted(set(shown))
    assert fig.get_suptitle() == "r: distribution of x (6 of 10 steps, spread over the run)"
    # The dashed line is the mean; the counts are drawn as declared.
    ax = fig.axes[-1]
    assert [list(line.get_xdata()) for line in ax.get_lines()] == [[0.5, 0.5]]
    values, edges, _ = ax.patches[0].get_data()
    assert list(values) == [9, 1] and list(edges) == [0, 1, 2]


def test_a_distribution_without_mean_and_with_missing_values(tmp_path: Path) -> None:
    run = run_of(tmp_path, [{"distributions": {"x": dist([3, 0, 2], missing=4)}}])
    fig = distribution_figure(run, "x")
    assert fig is not None
    assert titles(fig) == ["step 1\nn=5, missing=4"]
    assert fig.axes[0].get_lines() == []  # no mean: no dashed line
    assert fig.get_suptitle() == "r: distribution of x"
    assert distribution_figure(run, "y") is None


# -- several runs --------------------------------------------------------------------------------
def test_overlays_draw_only_what_every_run_has(tmp_path: Path) -> None:
    a = run_of(tmp_path, [{"mean": 1.0, "only_a": 1.0}, {"mean": 2.0, "only_a": 1.0}], "a")
    b = run_of(tmp_path, [{"mean": 4.0, "empty": None}], "b")
    runs = [("first", a), ("second", b)]
    assert common_metrics(runs) == {"mean": ["mean"]}
    assert common_metrics([]) == {}
    fig = overlay_metric(runs, "mean")
    assert fig is not None
    lines = fig.axes[0].get_lines()
    assert [line.get_label() for line in lines] == ["first", "second"]
    assert [list(line.get_ydata()) for line in lines] == [[1.0, 2.0], [4.0]]
    assert overlay_metric(runs, "only_a") is None
    assert overlay_metric(runs, "empty") is None


def test_overlaid_distributions_are_shares_of_each_run_s_last_step(tmp_path: Path) -> None:
    a = run_of(tmp_path, [{"distributions": {"x": dist([1, 1])}},
                          {"distributions": {"x": dist([3, 1])}}], "a")
    zero = run_of(tmp_path, [{"distributions": {"x": dist([0, 0])}}], "zero")
    without = run_of(tmp_path, [{"mean": 1.0}], "without")
    fig = overlay_distribution([("a", a), ("zero", zero), ("without", without)], "x")
    assert fig is not None
    ax = fig.axes[0]
    assert [p.get_label() for p in ax.patches] == ["a (step 2)", "zero (step 1)"]
    assert list(ax.patches[0].get_data()[0]) == [0.75, 0.25]
    assert list(ax.patches[1].get_data()[0]) == [0.0, 0.0]  # no values: no division by 0
    assert overlay_distribution([("without", without)], "x") is None
    assert overlay_distribution([], "x") is None


# -- sweeps --------------------------------------------------------------------------------------
def point(values: dict[str, Any], final: dict[str, Any] | None) -> dict[str, Any]:
    return {"values": values, "final": final, "status": "completed" if final else "failed"}


def test_a_numeric_sweep_plots_at_the_values_in_order() -> None:
    points = [point({"t": 1.0}, {"mean": 5.0}), point({"t": 0.1}, {"mean": 1.0}),
              point({"t": 0.5}, None)]  # a point that failed is left out
    fig = sweep_metrics(points, "t", ["mean"])
    assert fig is not None
    (line,) = fig.axes[0].get_lines()
    assert list(line.get_xdata()) == [0.1, 1.0] and list(line.get_ydata()) == [1.0, 5.0]
    assert fig.axes[0].get_xlabel() == "t"


def test_a_sweep_of_words_gets_one_tick_per_value_and_a_line_per_other_key() -> None:
    points = [point({"m": a, "flag": f}, {"mean": float(i), "label": "x"})
              for i, (a, f) in enumerate([("qwen", True), ("llama", True), ("qwen", False)])]
    fig = sweep_metrics(points, "m", ["mean", "label"])
    assert fig is not None
    assert titles(fig) == ["mean"]  # text is not plotted
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["qwen", "llama"]
    assert [line.get_label() for line in ax.get_lines()] == ["flag=true", "flag=false"]
    assert [list(line.get_xdata()) for line in ax.get_lines()] == [[0.0, 1.0], [0.0]]


def test_a_sweep_without_finished_points_or_numbers_is_no_figure() -> None:
    assert sweep_metrics([point({"t": 1}, None)], "t", ["mean"]) is None
    assert sweep_metrics([point({"t": 1}, {"mean": "n/a"})], "t", ["mean"]) is None
    assert sweep_metrics([], "t", ["mean"]) is None
