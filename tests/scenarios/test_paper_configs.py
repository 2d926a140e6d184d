"""Every experiment config under examples/paper/ runs, reports, and shows the scripted rule.

Each config is run once per session through the real ``populace run`` command (in-process,
at 200 agents and at most 3 rounds), then ``populace report`` draws its figures. The tests
check the figures' content (panels, bars, lines — not just files) and that the scripted
model's documented rule shows in the results: higher education and game-theory professions
report lower numbers, more guidance lowers answers, rounds converge, temperature spreads.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from matplotlib.figure import Figure
from matplotlib.image import imread
from matplotlib.patches import StepPatch

from populace.cli import app
from populace.launch import load_run_file
from populace.results import load_run, read_summary, write_report
from populace.results._report import run_figures, sweep_figures
from populace.scenarios.guess_number import GuessNumber

PAPER = Path(__file__).resolve().parents[2] / "examples" / "paper"
CONFIGS = sorted(p.stem for p in PAPER.glob("*.yaml") if p.stem != "scale_1m")
AGENTS = 200
game_figures = GuessNumber().figures
BASE_FIGURES = {"numbers_by_round", "mean_by_round", "invalid_by_round"}  # the game's own
EXTRA_FIGURES = {"education": {"by_education"}, "professions": {"by_profession"},
                 "mixed_models": {"by_model"}, "group_play": {"by_group", "groups_by_round"}}


def _raw(name: str) -> dict[str, Any]:
    data = yaml.safe_load((PAPER / f"{name}.yaml").read_text())
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def paper_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """Run and report every config once: name → its run (or sweep) directory."""
    root = tmp_path_factory.mktemp("paper")
    runs = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)  # the background cache lives in the working directory
        for name in CONFIGS:
            rounds = min(int(_raw(name).get("rounds", 1)), 3)
            out = root / name
            app(["run", str(PAPER / f"{name}.yaml"), "--agents", str(AGENTS), "--rounds",
                 str(rounds), "--out", str(out)], standalone_mode=False)
            if "sweep" in _raw(name) and name != "multi_round":
                # Drawing dominates the time: one sweep has every point reported by
                # `populace report`; the others report their first point on its own.
                app(["report", str(_run_dirs(out)[0])], standalone_mode=False)
                app(["report", str(out), "--no-points"], standalone_mode=False)
            else:
                app(["report", str(out)], standalone_mode=False)
            runs[name] = out
        yield runs


def _run_dirs(path: Path) -> list[Path]:
    if (path / "sweep.json").exists():
        index = json.loads((path / "sweep.json").read_text())
        return [path / p["dir"] for p in index["points"]]
    return [path]


def _visible(fig: Figure) -> list[Any]:
    return [ax for ax in fig.axes if ax.get_visible()]


def _heights(ax: Any) -> list[float]:
    """Heights of a bar chart's bars."""
    return [p.get_height() for p in ax.patches]


def _counts(ax: Any) -> np.ndarray:
    """The bin counts of a histogram panel (drawn as one filled step patch)."""
    (patch,) = ax.patches
    assert isinstance(patch, StepPatch)
    return np.asarray(patch.get_data().values)


def _not_blank(png: Path) -> None:
    pixels = imread(png)
    assert pixels.shape[0] > 200 and pixels.shape[1] > 600
    assert float(pixels[..., :3].std()) > 0.05  # drawn on, not one flat colour


def test_the_paper_configs_are_all_there() -> None:
    assert set(CONFIGS) == {"education", "equilibrium_10", "group_play", "mixed_models",
                            "multi_round", "professions", "prompt_levels", "ratios",
                            "temperature"}
    for name in CONFIGS:
        text = (PAPER / f"{name}.yaml").read_text()
        assert "provider: scripted" in text  # offline out of the box …
        assert "provider: openai" in text and "base_urls" in text  # … and how to go real


def test_the_million_agent_config_is_valid() -> None:
    cfg = load_run_file(PAPER / "scale_1m.yaml")
    o = cfg.options
    assert (o.agents, o.backend, o.steps) == (1_000_000, "ray", 1)
    assert o.models[cfg.config.model_name].provider == "dummy"
    assert o.workers >= 16


@pytest.mark.parametrize("name", CONFIGS)
def test_config_runs_to_completion(paper_runs: dict[str, Path], name: str) -> None:
    raw = _raw(name)
    dirs = _run_dirs(paper_runs[name])
    sweep = raw.get("sweep")
    assert len(dirs) == (math.prod(len(v) for v in sweep.values()) if sweep else 1)
    rounds = min(int(raw.get("rounds", 1)), 3)
    for d in dirs:
        summary = read_summary(d)
        assert summary["status"] == "completed", d
        assert summary["agents"] == AGENTS and len(summary["steps"]) == rounds
        assert all(r["n_valid"] > 0.9 * AGENTS for r in summary["steps"])
    if sweep:
        index = json.loads((paper_runs[name] / "sweep.json").read_text())
        assert index["status"] == "completed" and index["keys"] == list(sweep)
        assert [p["status"] for p in index["points"]] == ["completed"] * len(dirs)
        assert all(p["final"]["steps_done"] == rounds for p in index["points"])


@pytest.mark.parametrize("name", CONFIGS)
def test_report_draws_every_figure_with_content(paper_runs: dict[str, Path], name: str
                                                ) -> None:
    root = paper_runs[name]
    expected = BASE_FIGURES | EXTRA_FIGURES.get(name, set())
    for d in _run_dirs(root):
        run = load_run(d)
        figures = run_figures(run, game_figures)
        assert set(game_figures(run)) == expected
        assert {"metric_mean", "metric_usage", "metric_wall_s"} <= set(figures)
        if (d / "report.html").exists() or d == _run_dirs(root)[0]:
            assert {p.stem for p in (d / "figures").glob("*.png")} == set(figures)
            for png in (d / "figures").glob("*.png"):
                _not_blank(png)
            html = (d / "report.html").read_text()
            assert html.count('src="data:image/png;base64,') == len(figures)
        rows = read_summary(d)["steps"]

        hist = _visible(figures["numbers_by_round"])
        assert len(hist) == len(rows)
        for ax, row in zip(hist, rows, strict=True):
            counts = _counts(ax)
            assert counts.size == 50 and counts.sum() == row["n_valid"]
        lines = figures["mean_by_round"].axes[0].get_lines()
        assert len(lines) >= 3 and all(len(line.get_xdata()) == len(rows) for line in lines)
        assert len(figures["invalid_by_round"].axes[0].patches) == len(rows)
        models = read_summary(d)["models"]
        calls = sum(np.nan_to_num(run.metric(f"usage.{m}.calls")) for m in models
                    if f"usage.{m}.calls" in run.metrics())
        assert list(calls) == [2 * AGENTS] * len(rows)  # answer + extraction
        usage = figures["metric_usage"].axes  # a panel per counter, a line per model
        assert {ax.get_title() for ax in usage} == {
            "agents", "calls", "retries", "prompt_tokens", "completion_tokens"}
        assert all(len(ax.get_lines()) == len(models) for ax in usage)
        assert run.metric("wall_s").min() > 0
        for column in ("education", "profession", "model", "group"):
            if f"by_{column}" in expected:
                panels = _visible(figures[f"by_{column}"])
                split = run.values_by("responses", "number", column, len(rows))
                assert len(panels) == len(split) == len(run.categories()[column]) >= 3
                assert [_counts(ax).sum() for ax in panels] == [v.size for v in split.values()]
                assert sum(v.size for v in split.values()) == rows[-1]["n_valid"]
        if "groups_by_round" in expected:
            groups = len(rows[0]["groups"])
            assert len(figures["groups_by_round"].axes[0].get_lines()) == groups + 1


@pytest.mark.parametrize("name", [n for n in CONFIGS if "sweep" in _raw(n)])
def test_sweep_report_plots_metrics_against_the_swept_keys(paper_runs: dict[str, Path],
                                                           name: str) -> None:
    root = paper_runs[name]
    sweep = _raw(name)["sweep"]
    index = json.loads((root / "sweep.json").read_text())
    runs = [(p["dir"], load_run(root / p["dir"])) for p in index["points"]]
    figures = sweep_figures(index, runs)
    expected = {f"sweep_{k}" for k in sweep}
    if min(int(_raw(name).get("rounds", 1)), 3) > 1:
        expected |= {"overlay_mean", "overlay_std", "overlay_target", "overlay_usage"}
    assert expected <= set(figures)
    assert all(n.startswith(("sweep_", "overlay_")) for n in figures)
    assert {p.stem for p in (root / "figures").glob("*.png")} == set(figures)
    for key, values in sweep.items():
        combos = math.prod(len(v) for k, v in sweep.items() if k != key)
        for ax in figures[f"sweep_{key}"].axes:  # mean and sd panels
            lines = ax.get_lines()
            assert len(lines) == combos
            assert all(len(line.get_xdata()) == len(values) for line in lines)
    if "overlay_mean" in figures:  # one line per point
        assert len(figures["overlay_mean"].axes[0].get_lines()) == len(runs)
    html = (root / "report.html").read_text()
    reported = [p["dir"] for p in index["points"] if (root / p["dir"] / "report.html").exists()]
    assert reported == ([p["dir"] for p in index["points"]] if name == "multi_round"
                        else [index["points"][0]["dir"]])
    for d in reported:  # the sweep's page links the points' own reports
        assert f'href="{d}/report.html"' in html


# -- the scripted rule shows in the results ---------------------------------------------------
def _last_means(path: Path) -> dict[str, float]:
    index = json.loads((path / "sweep.json").read_text())
    return {",".join(str(v) for v in p["values"].values()): p["final"]["mean"]
            for p in index["points"]}


def test_higher_education_reports_lower_numbers(paper_runs: dict[str, Path]) -> None:
    run = load_run(paper_runs["education"])
    means = {k: float(v.mean())
             for k, v in run.values_by("responses", "number", "education", 1).items()}
    assert list(means) == ["primary school", "high school", "bachelor's degree",
                           "master's degree", "doctorate"]
    assert list(means.values()) == sorted(means.values(), reverse=True)
    assert means["primary school"] - means["doctorate"] > 10


def test_game_theory_professors_lowest_artists_highest(paper_runs: dict[str, Path]) -> None:
    run = load_run(paper_runs["professions"])
    means = {k: float(v.mean())
             for k, v in run.values_by("responses", "number", "profession", 1).items()}
    ranked = sorted(means, key=means.__getitem__)
    assert ranked == ["game theory professor", "economist", "psychologist", "writer",
                      "athlete", "artist"]


def test_more_guidance_lower_answers(paper_runs: dict[str, Path]) -> None:
    means = _last_means(paper_runs["prompt_levels"])
    assert means["P1"] == pytest.approx(50, abs=3)
    assert means["P1"] > means["P2"] > means["P3"] > means["P4"]


def test_rounds_converge_and_guidance_converges_faster(paper_runs: dict[str, Path]) -> None:
    finals = {}
    for d in _run_dirs(paper_runs["multi_round"]):
        means = [r["mean"] for r in read_summary(d)["steps"]]
        assert len(means) == 3 and means == sorted(means, reverse=True)
        assert means[-1] < 0.5 * means[0]
        finals[d.name] = means[-1]
    assert finals["game.level=P2"] < finals["game.level=P1"]
    group_means = [r["group_mean"] for r in read_summary(paper_runs["group_play"])["steps"]]
    assert group_means == sorted(group_means, reverse=True)


def test_equilibrium_ten_is_approached_from_above(paper_runs: dict[str, Path]) -> None:
    means = [r["mean"] for r in read_summary(paper_runs["equilibrium_10"])["steps"]]
    assert means == sorted(means, reverse=True)
    assert 10 < means[-1] < 15  # towards 10, not towards 0


def test_temperature_spreads_answers_and_keeps_the_mean(paper_runs: dict[str, Path]) -> None:
    index = json.loads((paper_runs["temperature"] / "sweep.json").read_text())
    final = {p["values"]["game.temperature"]: p["final"] for p in index["points"]}
    assert final[1.0]["std"] > final[0.05]["std"] + 1
    assert final[1.0]["mean"] == pytest.approx(final[0.05]["mean"], abs=3)


def test_mixed_models_differ_and_the_famous_note_lowers(paper_runs: dict[str, Path]) -> None:
    run = load_run(paper_runs["mixed_models"])
    split = run.values_by("responses", "number", "model", 1)
    assert [v.size for v in split.values()] == [67, 67, 66]  # exact thirds of 200
    assert float(np.mean(split["mixtral"])) < 3 < float(np.mean(split["llama"]))
    assert float(np.std(split["qwen"])) > 2 * float(np.std(split["llama"]))
    means = _last_means(paper_runs["ratios"])
    for ratio in ("2/3", "1/2", "51/100"):
        assert means[f"{ratio},True"] < means[f"{ratio},False"]


def test_paper_reports_are_complete_for_round_one_of_sweeps(paper_runs: dict[str, Path]
                                                            ) -> None:
    # A report can be redrawn; it overwrites the figures, not adds to them.
    before = sorted(p.name for p in (paper_runs["temperature"] / "figures").iterdir())
    report = write_report(paper_runs["temperature"], points=False)
    assert sorted(report.figures) == [p.removesuffix(".png") for p in before]
    assert report.kind == "sweep" and report.points == ()
