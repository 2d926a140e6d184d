"""The studio in a real browser: Debian's headless Chromium driven by Playwright.

A game of 10,000 dummy agents is started from the page; the test watches the progress
advance and the histogram fill, opens one agent and reads its rows, then starts a longer
run, stops it from the page and finds its finished steps on disk. A scenario written only
against ``populace.launch`` (``coins.py``) is started from the page and its metrics and
distribution appear while it runs; the opinions example is watched through ``populace run
--studio``. Screenshots go to ``test-artifacts/studio/``. Never downloads a browser: without
/usr/bin/chromium (``make test`` installs it where it can) the tests are skipped and say why.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import forkserver
from chromium_page import ARTIFACTS, open_page, require
from populace.results import read_summary, read_table
from populace.studio import Runs, StudioServer

require()
COINS = Path(__file__).resolve().parent / "coins.py"


@pytest.fixture
def studio(tmp_path: Path, run_file: Callable[..., Path]) -> Iterator[tuple[StudioServer, Path]]:
    # 10,000 agents on three models that answer after 0.4, 0.8 and 1.2 s: the progress bar
    # moves in thirds within every round.
    run_file(tmp_path / "watch.yaml", name="watch", agents=10_000, rounds=3,
             assign={"quick": 0.4, "steady": 0.8, "slow": 1.2})
    run_file(tmp_path / "long.yaml", name="long", agents=10_000, rounds=6, latency=1.0)
    # A scenario of our own: each step's answers arrive over 1.2 s, in four waves.
    shutil.copy(COINS, tmp_path / "coins.py")
    (tmp_path / "coins.yaml").write_text("scenario: coins.py:Coins\nagents: 4000\nsteps: 5\n"
                                         "workers: 2\nsettings: {bias: 0.4, delay: 1.2}\n")
    runs = Runs(tmp_path / "runs", roots=[tmp_path])
    server = StudioServer(runs, port=0, interval=0.25)
    server.start()
    yield server, tmp_path
    server.stop()
    runs.shutdown(timeout=30)


@pytest.fixture
def page() -> Iterator[Any]:
    with open_page(1400) as pg:
        yield pg


def shot(page: Any, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def answered(page: Any) -> tuple[int, int]:
    """(step, answers so far) as the page shows them."""
    text = page.inner_text("#step-text") + " " + page.inner_text("#progress-text")
    m = re.search(r"Step (\d+) of \d+ ([\d,]+) /", text.replace("\n", " "))
    return (int(m.group(1)), int(m.group(2).replace(",", ""))) if m else (0, 0)


def histogram_total(page: Any) -> int:
    return int(page.eval_on_selector_all(
        "#answers-svg rect.hbar", "rs => rs.reduce((a, r) => a + Number(r.dataset.count), 0)"))


def start_run(page: Any, config: str) -> str:
    page.fill("#config", config)
    page.click("#start")
    page.wait_for_url(re.compile(r"#/run/"), timeout=10_000)
    page.wait_for_selector("#step-text")
    return page.url.split("#/run/")[1]


def test_watch_a_run_then_read_an_agent(studio: tuple[StudioServer, Path], page: Any) -> None:
    server, root = studio
    page.goto(server.url)
    page.wait_for_selector("#start-form")
    shot(page, "01-runs-empty")
    run_id = start_run(page, "watch.yaml")

    # The page updates by itself: progress advances and the histogram fills.
    seen: set[tuple[int, int]] = set()
    filled: list[int] = []
    deadline = time.monotonic() + 40
    while page.inner_text("#status") != "completed":
        assert time.monotonic() < deadline, page.inner_text("#status")
        seen.add(answered(page))
        filled.append(histogram_total(page))
        if len(filled) == 12:
            shot(page, "02-live-run")
        page.wait_for_timeout(150)
    partial = {s for s in seen if 0 < s[1] < 10_000}
    assert len(partial) >= 2, seen  # mid-round progress, more than once
    assert len({r for r, _ in seen if r}) >= 2  # and from round to round
    assert any(0 < f < 10_000 for f in filled), filled  # a histogram partly filled
    assert histogram_total(page) == 10_000
    updates = int(page.get_attribute("#updates", "data-n") or 0)
    assert updates >= 8  # server-sent updates, without reloading
    assert page.inner_text("#state-done").endswith("10,000")
    assert page.locator("#metrics-table tbody tr").count() == 3
    # The game's rounds, through the generic metrics: a chart and a column each.
    headers = page.locator("#metrics-table thead th").all_inner_texts()
    assert {"mean", "target", "winner_number", "n_valid"} <= set(headers), headers
    assert page.locator("#metric-charts .spark[data-metric=mean] path.line").count() == 1
    assert page.locator("#workers-table tbody tr").count() == 2
    # The game's environment, as its monitors show it: the last round's announcement.
    environment = page.inner_text("#env")
    assert "announcement" in environment and "Round 3 is over." in environment, environment
    shot(page, "03-run-done")

    # The agent browser: filter, open one agent, read its messages.
    page.click("#agents-link")
    page.wait_for_selector("#agents-table")
    assert page.inner_text("#agents-total").startswith("10,000 agents")
    page.select_option("#f-attr", "model")
    page.select_option("#f-value", "slow")
    page.click("#agents-form button[type=submit]")
    page.wait_for_function("document.querySelector('#agents-total').textContent"
                           ".startsWith('3,333')")
    shot(page, "04-agents")
    page.click("#agents-table tbody tr:nth-child(2) a")
    page.wait_for_selector("#steps .step")
    assert page.locator("#steps .step").count() == 3
    raw = page.locator("#steps [data-column=raw] b").all_inner_texts()
    assert len(raw) == 3 and all(t.strip().isdigit() for t in raw), raw
    assert "slow" in page.inner_text("#profile-table")
    assert "winner_number" in page.inner_text("#steps")  # what everyone was told
    shot(page, "05-agent")
    assert page.problems == []
    assert read_summary(root / "runs" / run_id)["status"] == "completed"


def test_stop_a_run_from_the_page(studio: tuple[StudioServer, Path], page: Any) -> None:
    server, root = studio
    page.goto(server.url)
    page.wait_for_selector("#start-form")
    run_id = start_run(page, "long.yaml")
    page.wait_for_function("/Step [2-9] of 6/.test(document.querySelector('#step-text')"
                           ".textContent)", timeout=30_000)
    shot(page, "06-before-stop")
    page.click("#stop")
    page.wait_for_function("document.querySelector('#status').textContent == 'stopped'",
                           timeout=30_000)
    shot(page, "07-stopped")
    path = root / "runs" / run_id
    summary = read_summary(path)
    assert summary["status"] == "stopped"
    done = len(summary["steps"])
    assert 1 <= done < 6
    assert read_table(path).num_rows == 10_000 * done  # finished rounds, whole
    assert sorted(p.name for p in (path / "parts").iterdir()) == [
        f"responses-r{r:05d}.parquet" for r in range(1, done + 1)]
    page.goto(server.url)
    page.wait_for_selector("#runs-table")
    assert "stopped" in page.inner_text("#runs-table")
    shot(page, "08-runs")
    assert page.problems == []


def test_a_scenario_of_our_own_shows_its_metrics_live(studio: tuple[StudioServer, Path],
                                                        page: Any) -> None:
    server, root = studio
    page.goto(server.url)
    page.wait_for_selector("#start-form")
    run_id = start_run(page, "coins.yaml")
    # While it runs: its metrics appear step by step, as charts and as table rows.
    page.wait_for_selector("#metric-charts .spark[data-metric=total_heads]", timeout=30_000)
    assert page.inner_text("#status") in ("running", "stopping")
    rows_seen: set[int] = set()
    filled: list[int] = []
    deadline = time.monotonic() + 40
    while page.inner_text("#status") != "completed":
        assert time.monotonic() < deadline, page.inner_text("#status")
        if page.inner_text("#status") == "running":
            rows_seen.add(page.locator("#metrics-table tbody tr").count())
            filled.append(histogram_total(page) if page.locator("#answers-svg").count() else 0)
        if len(rows_seen) == 2 and len(filled) < 1000:
            shot(page, "09-scenario-live")
            filled.append(-1)  # one screenshot
        page.wait_for_timeout(120)
    assert len(rows_seen - {0}) >= 2, rows_seen  # rows arrived while the run went on
    assert any(0 < f < 4000 for f in filled), filled  # a step's answers, partly in
    headers = page.locator("#metrics-table thead th").all_inner_texts()
    assert headers[:4] == ["step", "share_heads", "total_heads", "leader"], headers
    assert page.locator("#metrics-table tbody tr").count() == 5
    summary = read_summary(root / "runs" / run_id)
    last = page.locator("#metrics-table tbody tr").last.inner_text()
    assert f"{summary['steps'][-1]['total_heads']:,}" in last and "agent " in last
    spark = page.locator("#metric-charts .spark[data-metric=share_heads]")
    assert spark.locator("path.line").count() == 1
    # Its declared distribution: heads so far, one bar per count, every agent in it.
    counts = page.eval_on_selector_all(
        ".dist[data-name=heads_so_far] rect.hbar", "rs => rs.map(r => Number(r.dataset.count))")
    assert counts == summary["steps"][-1]["distributions"]["heads_so_far"]["counts"]
    assert sum(counts) == 4000
    shot(page, "10-scenario-done")

    # Its agents: no profiles, one per-agent table (flips), browsed at any step.
    page.click("#agents-link")
    page.wait_for_selector("#agents-table")
    assert page.input_value("#f-table") == "flips" and page.input_value("#f-step") == "5"
    assert page.inner_text("#agents-total").startswith("4,000 agents")
    page.fill("#f-step", "1")
    page.dispatch_event("#f-step", "change")
    page.wait_for_function("document.querySelector('#agents-table-note').textContent"
                           ".includes('showing step 1')")
    page.select_option("#f-attr", "heads")
    page.select_option("#f-value", "1")
    page.click("#agents-form button[type=submit]")
    flips = read_table(root / "runs" / run_id, "flips").to_pylist()
    first = sum(1 for f in flips if f["step"] == 1 and f["heads"] == 1)
    page.wait_for_function(f"document.querySelector('#agents-total').textContent"
                           f".startsWith('{first:,} agents')")
    page.click("#agents-table tbody tr:nth-child(1) a")
    page.wait_for_selector("#steps .step")
    assert page.locator("#steps .step").count() == 5
    assert page.locator("#steps [data-column=heads_so_far]").count() == 5
    assert "total_heads" in page.inner_text("#steps")
    shot(page, "11-scenario-agent")
    assert page.problems == []


def test_watch_the_opinions_example_through_run_studio(tmp_path: Path, page: Any) -> None:
    # `populace run … --studio` on the opinions example: its days are steps, with their
    # metrics, the distribution of opinions and the environment's counters.
    opinions = Path(__file__).resolve().parents[2] / "examples" / "opinions" / "opinions.yaml"
    proc = forkserver.spawn(
        [sys.executable, "-m", "populace.cli", "run", str(opinions), "--agents", "6000",
         "--studio", "--studio-port", "0", "--out", str(tmp_path / "opinions")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"})
    try:
        assert proc.stdout is not None
        url = ""
        deadline = time.monotonic() + 60
        while not url:
            assert time.monotonic() < deadline, "no studio URL printed"
            line = proc.stdout.readline()
            if line.startswith("studio: "):
                url = line.split()[1]
        page.goto(url)
        page.wait_for_function(
            "document.querySelectorAll('#metrics-table tbody tr').length >= 2", timeout=60_000)
        assert page.inner_text("#run-title") == "opinions"
        assert page.locator(".spark[data-metric=mood_west]").count() == 1
        assert page.locator(".dist[data-name=opinion] rect.hbar").count() == 20
        assert "meetings" in page.inner_text("#env")
        page.wait_for_function(
            "document.querySelector('#status').textContent === 'completed'", timeout=60_000)
        assert page.locator("#metrics-table tbody tr").count() == 14
        shot(page, "12-opinions")
        assert page.problems == []
    finally:
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr


def test_the_workers_panel_fits_1280_px_and_shows_each_process(
        studio: tuple[StudioServer, Path], page: Any) -> None:
    # Each worker's process measures its own CPU and memory; the table fits its half of a
    # 1280 px page with no horizontal scrolling (it was clipped at 1400 px before).
    server, _root = studio
    page.set_viewport_size({"width": 1280, "height": 1000})
    page.goto(server.url)
    page.wait_for_selector("#start-form")
    start_run(page, "watch.yaml")
    page.wait_for_selector("#workers-table tbody tr", timeout=30_000)
    cpu_seen: set[str] = set()
    deadline = time.monotonic() + 40
    while page.inner_text("#status") != "completed":
        assert time.monotonic() < deadline, page.inner_text("#status")
        if page.locator("#workers-table").count():
            headers = page.locator("#workers-table thead th").all_inner_texts()
            cells = page.locator("#workers-table tbody tr").first.locator("td").all_inner_texts()
            row = dict(zip(headers, cells, strict=True))
            if re.fullmatch(r"[\d.,]+%", row["CPU"]):
                cpu_seen.add(row["CPU"])
            if len(cpu_seen) == 2:
                shot(page, "13-workers-1280")
        page.wait_for_timeout(150)
    widths = page.evaluate("""() => {
      const table = document.querySelector('#workers-table');
      const panel = document.querySelector('#workers');
      return {table: table.scrollWidth, scroller: table.parentElement.scrollWidth,
              scrollerBox: table.parentElement.clientWidth, panel: panel.clientWidth,
              page: document.documentElement.scrollWidth};
    }""")
    assert widths["table"] <= widths["panel"], widths
    assert widths["scroller"] <= widths["scrollerBox"], widths  # nothing to scroll to
    assert widths["page"] <= 1280, widths
    headers = page.locator("#workers-table thead th").all_inner_texts()
    assert headers[:4] == ["#", "node", "pid", "status"] and headers[-2:] == ["CPU", "memory"]
    rows = [dict(zip(headers, r.locator("td").all_inner_texts(), strict=True))
            for r in page.locator("#workers-table tbody tr").all()]
    assert len(rows) == 2 and {r["status"] for r in rows} == {"alive"}
    assert {r["pid"] for r in rows} == {str(os.getpid())}  # the local backend: this process
    assert all(re.fullmatch(r"[\d.,]+%", r["CPU"]) for r in rows), rows
    assert all(re.fullmatch(r"[\d.,]+ (MB|GB)", r["memory"]) and not r["memory"].startswith("0 ")
               for r in rows), rows
    assert len(cpu_seen) >= 2, cpu_seen  # measured again and again while the run went on
    assert any(float(c.rstrip("%").replace(",", "")) > 0 for c in cpu_seen), cpu_seen
    # Per node totals: one node, both workers in one process, counted once.
    total = page.inner_text("#workers-nodes")
    assert "2 workers in 1 process" in total and "10,000 agents" in total, total
    assert "memory " + rows[0]["memory"] in total, total
    assert "sharing a process" in page.inner_text("#workers-notes")
    assert page.problems == []
