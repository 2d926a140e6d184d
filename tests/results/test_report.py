"""``populace report`` and ``populace compare`` on the game: its figures (passed in as the
scenario's own), the generic ones, partial and old run directories, HTML in a browser.

The same for a scenario that is not the game is in ``test_generic_report.py``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import forkserver
from cli_helpers import run_in_process as cli
from game_helpers import game_file
from populace.results import (
    RunDirectory,
    headline,
    load_run,
    read_summary,
    write_comparison,
    write_report,
)
from populace.results._figures import overlay_metric
from populace.results._report import run_figures
from populace.scenarios.guess_number import GuessNumber, play

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
game_figures = GuessNumber().figures
#: What every game run reports, whatever the CLI adds: a figure per metric ...
GAME_METRICS = {"metric_n", "metric_n_valid", "metric_mean", "metric_median", "metric_std",
                "metric_target", "metric_winner_number", "metric_n_winners", "metric_usage",
                "metric_wall_s"}
#: ... and the game's own figures.
GAME_OWN = {"numbers_by_round", "mean_by_round", "invalid_by_round"}


def make_run(path: Path, **changes: Any) -> Path:
    """Play a small game on the scripted model into ``path``."""
    data: dict[str, Any] = {
        "name": path.name, "seed": 1, "agents": 60, "rounds": 3, "workers": 1,
        "models": {"s": {"provider": "scripted"}},
        "population": {"aspects": {"education": {
            "values": ["primary school", "bachelor's degree", "doctorate"]}}},
    }
    data.update(changes)
    asyncio.run(play(game_file(data), RunDirectory.create(path)))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    root = tmp_path_factory.mktemp("runs")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        yield {
            "edu": make_run(root / "edu"),
            "half": make_run(root / "half", game={"ratio": "1/2", "level": "P2"},
                             population=None,
                             models={"s": {"provider": "scripted", "invalid": 0.2}}),
        }


def _images(html: str) -> list[bytes]:
    found = re.findall(r'<img [^>]*src="data:image/png;base64,([^"]+)"', html)
    return [base64.b64decode(b) for b in found]


def _visible(fig: Any) -> list[Any]:
    return [ax for ax in fig.axes if ax.get_visible()]


def test_report_of_a_game_run_has_the_generic_and_the_game_figures(
        runs: dict[str, Path], tmp_path: Path) -> None:
    copy = tmp_path / "edu"
    shutil.copytree(runs["edu"], copy)
    report = write_report(copy, extra_figures=game_figures)
    names = GAME_METRICS | GAME_OWN | {"by_education", "responses_by_education"}
    assert set(report.figures) == names
    assert {p.stem for p in (copy / "figures").glob("*.png")} == names
    html = (copy / "report.html").read_text()
    images = _images(html)
    assert len(images) == len(names) and all(i.startswith(b"\x89PNG\r\n") for i in images)
    assert not re.search(r'(src|href)="(https?:)?//', html)  # nothing fetched from elsewhere
    assert "responses by education (step 3)" in html and "is completed" not in html
    assert "edu: numbers by education, round 3" in html  # a game figure's caption: its title

    run = load_run(copy)
    figures = game_figures(run)
    summary = read_summary(copy)
    hist = _visible(figures["numbers_by_round"])
    assert len(hist) == 3
    for ax, entry in zip(hist, summary["steps"], strict=True):
        (patch,) = ax.patches
        assert patch.get_data().values.sum() == entry["n_valid"]  # 50 bins over 0..100
        assert len(patch.get_data().edges) == 51
    lines = figures["mean_by_round"].axes[0].get_lines()
    assert [round(y, 6) for y in lines[-1].get_ydata()] == [  # the target line
        round(e["target"], 6) for e in summary["steps"]]
    panels = _visible(figures["by_education"])
    assert [ax.get_title().split("\n")[0] for ax in panels] == [
        "primary school", "bachelor's degree", "doctorate"]
    assert [ax.patches[0].get_data().values.sum() for ax in panels] == [20, 20, 20]


def test_populace_report_prints_steps_by_metrics(runs: dict[str, Path],
                                                 capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    copy = runs["edu"].parent / "edu-report"
    shutil.copytree(runs["edu"], copy)
    code, out, err = cli(capsys, monkeypatch, "report", copy)
    assert (code, err) == (0, "")
    drawn = {p.stem for p in (copy / "figures").glob("*.png")}
    assert GAME_METRICS | {"responses_by_education"} <= drawn
    head = next(line for line in out.splitlines() if line.strip().startswith("step"))
    assert head.split() == ["step", "n", "n_valid", "mean", "median", "std", "target",
                            "winner_number", "n_winners", "wall_s"]
    summary = read_summary(copy)
    last = next(line for line in out.splitlines() if line.strip().startswith("3 "))
    assert f"{summary['steps'][-1]['mean']:.4g}" in last.split()
    assert f"{len(drawn)} figures in" in out


def test_report_of_a_partial_run_from_step_files_only(runs: dict[str, Path]) -> None:
    partial = runs["edu"].parent / "partial"
    shutil.copytree(runs["edu"], partial)
    summary = read_summary(partial)
    (partial / "responses.parquet").unlink()
    (partial / "parts" / "responses-r00003.parquet").unlink()
    summary["status"] = "interrupted"
    summary["steps"] = summary["steps"][:1]  # the summary lags: step 2 is in parts/ only
    (partial / "summary.json").write_text(json.dumps(summary))
    report = write_report(partial, extra_figures=game_figures)
    run = load_run(partial)
    assert run.steps() == [1, 2] and run.metric_steps().tolist() == [1]
    assert run.table_steps("responses") == [1, 2]
    from populace.scenarios.guess_number._figures import round_rows

    rows = round_rows(run)
    assert [r["round"] for r in rows] == [1, 2]
    assert rows[1]["target"] == pytest.approx(2 / 3 * rows[1]["mean"])  # from the answers
    assert len(_visible(game_figures(run)["numbers_by_round"])) == 2
    html = report.path.read_text()
    assert "This run is interrupted: the report shows the 2 step(s) that finished." in html

    (partial / "summary.json").unlink()  # killed before the first summary was written
    again = write_report(partial, extra_figures=game_figures)
    assert load_run(partial).status == "partial"
    assert not any(n.startswith("metric_") for n in again.figures)
    assert {"numbers_by_round", "responses_by_education"} <= set(again.figures)


def test_an_old_game_run_directory_reads_the_same(runs: dict[str, Path]) -> None:
    """Run directories written before scenarios: ``rounds: [{round: ...}]``."""
    old = runs["edu"].parent / "old"
    shutil.copytree(runs["edu"], old)
    summary = read_summary(old)
    summary["rounds"] = [{k: v for k, v in e.items() if k != "step"}
                         for e in summary.pop("steps")]
    summary["rounds_planned"] = summary.pop("steps_planned")
    del summary["tables"], summary["scenario"]
    (old / "summary.json").write_text(json.dumps(summary))
    new, run = load_run(runs["edu"]), load_run(old)
    assert run.metric_steps().tolist() == [1, 2, 3] and run.steps_planned == 3
    assert run.tables == ["responses"]
    assert list(run.metrics()) == list(new.metrics())
    for name, values in new.metrics().items():
        if name != "wall_s":
            assert run.metric(name).tolist() == values.tolist()
    assert set(run_figures(run, game_figures)) == set(run_figures(new, game_figures))
    assert headline(summary)["steps_done"] == 3


def test_report_refuses_a_directory_without_a_run(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = cli(capsys, monkeypatch, "report", tmp_path)
    assert code == 2 and out == ""
    assert err.strip() == f"error: {tmp_path} holds no run (no summary.json, config.yaml or " \
                          "tables)"
    code, _, err = cli(capsys, monkeypatch, "report", tmp_path / "nope")
    assert code == 2 and "no such directory" in err


def test_invalid_answers_and_usage_are_counted(runs: dict[str, Path]) -> None:
    run = load_run(runs["half"])
    figures = run_figures(run, game_figures)
    rates = [p.get_height() for p in figures["invalid_by_round"].axes[0].patches]
    assert len(rates) == 3 and all(10 < r < 30 for r in rates)  # invalid: 0.2
    summary = read_summary(runs["half"])
    for r, entry in zip(rates, summary["steps"], strict=True):
        assert r == pytest.approx(100 * (1 - entry["n_valid"] / entry["n"]))
    assert run.metric("usage.s.calls").tolist() == [120.0] * 3
    usage = figures["metric_usage"]
    # usage: {model: {counter: n}}: a panel per counter, a line per model
    assert [ax.get_title() for ax in usage.axes] == [
        "agents", "calls", "retries", "prompt_tokens", "completion_tokens"]
    (calls,) = usage.axes[1].get_lines()
    assert calls.get_label() == "s" and list(calls.get_ydata()) == [120.0] * 3
    assert "by_education" not in figures and run.categories() == {}
    assert not any(n.startswith("responses_by_") for n in figures)
    top = headline(summary)
    assert top["steps_done"] == 3 and top["calls"] == 360 and top["step"] == 3
    assert top["mean"] == summary["steps"][-1]["mean"]
    tokens = sum(e["usage"]["s"]["prompt_tokens"] + e["usage"]["s"]["completion_tokens"]
                 for e in summary["steps"])
    assert top["tokens"] == tokens


def test_compare_puts_runs_side_by_side(runs: dict[str, Path], tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "cmp"
    done = write_comparison([runs["edu"], runs["half"]], out)
    assert [r["run"] for r in done.rows] == ["edu", "half"]
    assert [r["steps"] for r in done.rows] == [3, 3]
    assert done.rows[0]["final"]["n_valid"] == 60 and done.rows[1]["final"]["n_valid"] < 60
    assert done.rows[1]["final"]["mean"] < done.rows[0]["final"]["mean"]
    overlays = {f"overlay_{n[len('metric_'):]}" for n in GAME_METRICS}
    assert {p.stem for p in (out / "figures").iterdir()} == overlays == set(done.figures)
    assert len(_images((out / "compare.html").read_text())) == len(overlays)

    monkeypatch.chdir(tmp_path)
    code, stdout, err = cli(capsys, monkeypatch, "compare", runs["edu"], runs["half"],
                            runs["edu"])
    assert (code, err) == (0, "")
    (made,) = tmp_path.glob("compare-*")
    assert (made / "compare.html").exists()
    assert "edu (2)" in stdout and "half" in stdout and "compare.html" in stdout
    assert "n_valid" in stdout and "calls" in stdout
    code, _, err = cli(capsys, monkeypatch, "compare", tmp_path / "nothing")
    assert code == 2 and "no such directory" in err


def test_overlays_have_one_series_per_run(runs: dict[str, Path]) -> None:
    pair = [("a", load_run(runs["edu"])), ("b", load_run(runs["half"]))]
    means = overlay_metric(pair, "mean")
    assert means is not None
    lines = means.axes[0].get_lines()
    assert [line.get_label() for line in lines] == ["a", "b"]
    assert all(list(line.get_xdata()) == [1, 2, 3] for line in lines)
    assert np.all(np.diff(lines[1].get_ydata()) < 0)  # convergence on the scripted model
    usage = overlay_metric(pair, "usage")
    assert usage is not None and len(usage.axes) == 5
    assert [line.get_label() for line in usage.axes[1].get_lines()] == ["a s", "b s"]
    assert overlay_metric(pair, "no such metric") is None


def test_report_command_in_a_new_process(runs: dict[str, Path], tmp_path: Path) -> None:
    copy = tmp_path / "half"
    shutil.copytree(runs["half"], copy)
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "100"}
    proc = forkserver.run([sys.executable, "-m", "populace.cli", "report", str(copy)],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "half: 60 agents, s, completed" in proc.stdout
    assert f"report: {copy / 'report.html'}" in proc.stdout


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed at "
                    "/usr/bin/chromium (apt-get install chromium; `make test` does it as root)")
def test_reports_open_in_headless_chromium(runs: dict[str, Path], tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    edu = tmp_path / "edu"
    shutil.copytree(runs["edu"], edu)
    pages = {edu / "report.html": len(write_report(edu, extra_figures=game_figures).figures)}
    done = write_comparison([runs["edu"], runs["half"]], tmp_path / "cmp")
    pages[done.path] = len(done.figures)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            for path, count in pages.items():
                page = browser.new_page()
                problems: list[str] = []
                page.on("console", lambda m, problems=problems: problems.append(m.text)
                        if m.type in ("error", "warning") else None)
                page.on("pageerror", lambda e, problems=problems: problems.append(str(e)))
                page.on("requestfailed", lambda r, problems=problems: problems.append(r.url))
                page.goto(path.as_uri(), wait_until="load")
                state = page.evaluate("""() => Array.from(document.images).map(
                    i => [i.complete, i.naturalWidth, i.naturalHeight])""")
                assert len(state) == count > 0, path
                assert all(ok and w >= 600 and h >= 200 for ok, w, h in state), state
                assert problems == [], problems
                assert page.title() and page.locator("table").count() >= 1
                page.close()
        finally:
            browser.close()
