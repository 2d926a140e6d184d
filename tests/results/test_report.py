"""``populace report`` and ``populace compare``: partial runs, content, HTML in a browser."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cli_helpers import run_in_process as cli
from populace.results import (
    RunDirectory,
    headline,
    load_run,
    read_summary,
    write_comparison,
    write_report,
)
from populace.results._report import run_figures
from populace.scenarios.guess_number import RunConfig, play

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def make_run(path: Path, **changes: Any) -> Path:
    """Play a small game on the scripted model into ``path``."""
    data: dict[str, Any] = {
        "name": path.name, "seed": 1, "agents": 60, "rounds": 3, "workers": 1,
        "models": {"s": {"provider": "scripted"}},
        "population": {"aspects": {"education": {
            "values": ["primary school", "bachelor's degree", "doctorate"]}}},
    }
    data.update(changes)
    asyncio.run(play(RunConfig.model_validate(data), RunDirectory.create(path)))
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


def test_report_of_a_finished_run(runs: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    copy = runs["edu"].parent / "edu-report"
    shutil.copytree(runs["edu"], copy)
    code, out, err = cli(capsys, monkeypatch, "report", copy)
    assert (code, err) == (0, "")
    names = {"numbers_by_round", "mean_by_round", "by_education", "invalid_by_round",
             "usage_by_round", "wall_by_round"}
    assert {p.stem for p in (copy / "figures").glob("*.png")} == names
    html = (copy / "report.html").read_text()
    images = _images(html)
    assert len(images) == len(names) and all(i.startswith(b"\x89PNG\r\n") for i in images)
    assert not re.search(r'(src|href)="(https?:)?//', html)  # nothing fetched from elsewhere
    assert "By education (round 3)" in html and "is completed" not in html
    for word in ("round", "mean", "target", "calls", "tokens", "by education, round 3",
                 "primary school", "doctorate", "6 figures in"):
        assert word in out
    summary = read_summary(copy)
    assert f"{summary['rounds'][-1]['mean']:.2f}" in out


def test_report_of_a_partial_run_from_round_files_only(runs: dict[str, Path]) -> None:
    partial = runs["edu"].parent / "partial"
    shutil.copytree(runs["edu"], partial)
    summary = read_summary(partial)
    (partial / "responses.parquet").unlink()
    (partial / "parts" / "responses-r00003.parquet").unlink()
    summary["status"] = "interrupted"
    summary["rounds"] = summary["rounds"][:1]  # the summary lags: round 2 is in parts/ only
    (partial / "summary.json").write_text(json.dumps(summary))
    report = write_report(partial)
    run = load_run(partial)
    rows = run.round_rows()
    assert [r["round"] for r in rows] == [1, 2]
    assert rows[1]["wall_s"] is None  # only the summary knows it
    assert rows[1]["target"] == pytest.approx(2 / 3 * rows[1]["mean"])
    assert rows[1]["calls"] == 2 * 60  # usage from the responses themselves
    assert len([ax for ax in run_figures(run)["numbers_by_round"].axes
                if ax.get_visible()]) == 2
    html = report.path.read_text()
    assert "This run is interrupted: the report shows the 2 round(s) that finished." in html

    (partial / "summary.json").unlink()  # killed before the first summary was written
    again = write_report(partial)
    assert load_run(partial).status == "partial"
    assert "wall_by_round" not in again.figures and "numbers_by_round" in again.figures


def test_report_refuses_a_directory_without_a_run(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = cli(capsys, monkeypatch, "report", tmp_path)
    assert code == 2 and out == ""
    assert err.strip() == f"error: {tmp_path} holds no run (no summary.json, config.yaml or " \
                          "responses)"
    code, _, err = cli(capsys, monkeypatch, "report", tmp_path / "nope")
    assert code == 2 and "no such directory" in err


def test_invalid_answers_and_usage_are_counted(runs: dict[str, Path]) -> None:
    run = load_run(runs["half"])
    figures = run_figures(run)
    rates = [p.get_height() for p in figures["invalid_by_round"].axes[0].patches]
    assert len(rates) == 3 and all(10 < r < 30 for r in rates)  # invalid: 0.2
    rows = run.round_rows()
    summary = read_summary(runs["half"])
    for row, entry in zip(rows, summary["rounds"], strict=True):
        assert row["invalid_rate"] == pytest.approx(1 - entry["n_valid"] / entry["n"])
        assert row["calls"] == entry["usage"]["s"]["calls"] == 120
        assert row["tokens"] == (entry["usage"]["s"]["prompt_tokens"]
                                 + entry["usage"]["s"]["completion_tokens"])
    assert "by_education" not in figures and run.categories() == {}
    top = headline(summary)
    assert top["rounds_done"] == 3 and top["calls"] == 360
    assert top["mean"] == summary["rounds"][-1]["mean"]


def test_compare_puts_runs_side_by_side(runs: dict[str, Path], tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "cmp"
    done = write_comparison([runs["edu"], runs["half"]], out)
    assert [r["run"] for r in done.rows] == ["edu", "half"]
    assert done.rows[0]["invalid_rate"] == 0 and 0.1 < done.rows[1]["invalid_rate"] < 0.3
    assert done.rows[1]["mean"] < done.rows[0]["mean"]
    assert {p.name for p in (out / "figures").iterdir()} == {
        "overlay_mean_by_round.png", "overlay_last_round.png"}
    assert len(_images((out / "compare.html").read_text())) == 2

    monkeypatch.chdir(tmp_path)
    code, stdout, err = cli(capsys, monkeypatch, "compare", runs["edu"], runs["half"],
                            runs["edu"])
    assert (code, err) == (0, "")
    (made,) = tmp_path.glob("compare-*")
    assert (made / "compare.html").exists()
    assert "edu (2)" in stdout and "half" in stdout and "compare.html" in stdout
    code, _, err = cli(capsys, monkeypatch, "compare", tmp_path / "nothing")
    assert code == 2 and "no such directory" in err


def test_overlays_have_one_series_per_run(runs: dict[str, Path]) -> None:
    from populace.results._figures import overlay_final_histograms, overlay_means

    pair = [("a", load_run(runs["edu"])), ("b", load_run(runs["half"]))]
    means = overlay_means(pair)
    assert means is not None
    lines = means.axes[0].get_lines()
    assert [line.get_label() for line in lines] == ["a", "b"]
    assert all(list(line.get_xdata()) == [1, 2, 3] for line in lines)
    assert np.all(np.diff(lines[1].get_ydata()) < 0)  # convergence on the scripted model
    hist = overlay_final_histograms(pair)
    assert hist is not None and len(hist.axes[0].patches) == 2


def test_report_command_in_a_new_process(runs: dict[str, Path], tmp_path: Path) -> None:
    copy = tmp_path / "half"
    shutil.copytree(runs["half"], copy)
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "100"}
    proc = subprocess.run([sys.executable, "-m", "populace.cli", "report", str(copy)],
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
    pages = {edu / "report.html": len(write_report(edu).figures)}
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
