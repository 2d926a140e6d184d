"""Pause, single step and resume a live run from the studio page (issue 29), in real
Chromium at 1280×800.

A game of 100,000 agents on the dummy model (0.5 s an answer, 4 rounds) is started from the
page and paused: it holds once the step in progress is written, and holds on (its step
count does not move). Meanwhile an agent's Mind is read from the running simulation and the
agent is interviewed; **Step** plays one more step and holds again; **Resume** plays the
rest. While it holds, its summary says so (``paused_after``). Its tables equal those of the
same run file played without a pause.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from chromium_page import ARTIFACTS, open_page, require, run_coroutine
from populace.launch import launch, load_run_file
from populace.results import RunDirectory, read_summary, read_table
from populace.studio import Runs, StudioServer

require()


@pytest.fixture
def studio(tmp_path: Path, run_file: Callable[..., Path]) -> Iterator[tuple[StudioServer, Path]]:
    run_file(tmp_path / "hold.yaml", name="hold", agents=100_000, rounds=4, latency=0.5)
    runs = Runs(tmp_path / "runs", roots=[tmp_path])
    server = StudioServer(runs, port=0, interval=0.25)
    server.start()
    yield server, tmp_path
    server.stop()
    runs.shutdown(timeout=60)


def steps_done(server: StudioServer, run_id: str) -> int:
    with urllib.request.urlopen(f"{server.url.rstrip('/')}/api/runs/{run_id}") as r:
        return int(json.load(r)["steps_done"])


def paused_after(page: Any) -> int:
    page.wait_for_function("/paused after step \\d+/.test("
                           "document.querySelector('#pause-state').textContent)", timeout=60_000)
    return int(re.search(r"after step (\d+)", page.inner_text("#pause-state")).group(1))


def test_pause_step_and_resume_a_live_run(studio: tuple[StudioServer, Path]) -> None:
    server, root = studio
    with open_page(1280) as page:
        page.set_viewport_size({"width": 1280, "height": 800})
        page.goto(server.url)
        page.wait_for_selector("#start-form")
        page.fill("#config", "hold.yaml")
        page.click("#start")
        page.wait_for_url(re.compile(r"#/run/"), timeout=10_000)
        run_id = page.url.split("#/run/")[1]
        page.wait_for_selector("#pause:not([hidden])", timeout=60_000)
        page.click("#pause")
        page.wait_for_selector("#resume:not([hidden])")
        held = paused_after(page)
        assert held < 4
        page.wait_for_timeout(2000)  # it holds: no step is played meanwhile
        assert steps_done(server, run_id) == held
        assert page.inner_text("#status") == "running"
        # the game's own examples, once its scenario is known (the page opened before)
        page.wait_for_function("document.querySelector('#iv-question').placeholder"
                               ".includes('choose your number')", timeout=10_000)
        with urllib.request.urlopen(f"{server.url.rstrip('/')}/api/runs/{run_id}") as r:
            assert len(r.read()) <= 5_000  # the live update, pause included, stays small
        summary = read_summary(root / "runs" / run_id)  # the summary says so
        assert summary["paused_after"] == held and len(summary["steps"]) == held
        page.screenshot(path=str(ARTIFACTS / "25-paused-1280.png"), full_page=True)

        # While it holds: an agent's mind, live, and an interview of it.
        page.goto(f"{server.url}#/run/{run_id}/agent/5")
        page.wait_for_selector("#mind-source", timeout=30_000)
        assert "running simulation" in page.inner_text("#mind-source")
        page.fill("#aiv-question", "What do you expect next?")
        page.click("#aiv-ask")
        page.wait_for_selector("#aiv-answers-table tbody tr", timeout=30_000)
        row = page.locator("#aiv-answers-table tbody tr").first.inner_text()
        assert "live" in row, row
        assert steps_done(server, run_id) == held

        # One more step, then it holds again; then the rest.
        page.goto(f"{server.url}#/run/{run_id}")
        page.wait_for_selector("#step-once:not([hidden])", timeout=10_000)
        page.click("#step-once")
        page.wait_for_function(f"!/after step {held}\\b/.test("
                               "document.querySelector('#pause-state').textContent)",
                               timeout=60_000)
        assert paused_after(page) == held + 1
        page.wait_for_timeout(1000)
        assert steps_done(server, run_id) == held + 1
        page.click("#resume")
        page.wait_for_function("document.querySelector('#status').textContent == 'completed'",
                               timeout=120_000)
        assert page.is_hidden("#pause-state") and page.is_hidden("#resume")
        assert page.problems == []

    # The same tables as a run never paused.
    again = root / "unpaused"
    run_coroutine(launch(load_run_file(root / "hold.yaml"), RunDirectory.create(again),
                         cache=root / "cache"))
    path = root / "runs" / run_id
    assert read_summary(path)["status"] == "completed"
    assert "paused_after" not in read_summary(path)
    mine, theirs = read_table(path), read_table(again)
    keep = [c for c in theirs.column_names if "latency" not in c]
    assert mine.select(keep).equals(theirs.select(keep))
