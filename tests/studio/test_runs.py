"""``Runs``: the runs the studio knows, resolved by id, listed newest first, live ones on top.

Which run files it lists and starts is ``tests/studio/test_configs.py``; starting and
stopping through the API is ``tests/studio/test_api.py``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from populace.core import PopulaceError
from populace.results import RunMonitor
from populace.studio import NotFound, Refused, Runs


def a_run(runs_dir: Path, name: str, *, mtime: float, steps: int = 1,
          **summary: Any) -> Path:
    path = runs_dir / name
    path.mkdir(parents=True)
    entries = [{"step": i, "mean": float(i)} for i in range(1, steps + 1)]
    (path / "summary.json").write_text(json.dumps(
        {"name": name, "status": "completed", "agents": 5, "steps": entries, **summary}))
    os.utime(path, (mtime, mtime))
    return path


@pytest.fixture
def runs(tmp_path: Path) -> Iterator[Runs]:
    r = Runs(tmp_path / "runs", roots=[tmp_path])
    yield r
    r.shutdown(timeout=30)


# -- ids and paths -------------------------------------------------------------------------------
def test_an_id_is_a_run_directory_directly_under_the_runs(runs: Runs, tmp_path: Path) -> None:
    run = a_run(runs.runs_dir, "r1", mtime=1_000)
    (runs.runs_dir / "notes.txt").write_text("not a run")
    (tmp_path / "outside").mkdir()
    (runs.runs_dir / "link").symlink_to(tmp_path / "outside")
    assert runs.path("r1") == run.resolve()
    for bad in ("nope", "notes.txt", "link", "..", "../runs/r1", "r1/..", ".hidden", "",
                "r1\x00", "a" * 200):
        with pytest.raises(NotFound):
            runs.path(bad)


def test_the_runs_errors_are_populace_errors_and_lookup_errors(runs: Runs) -> None:
    with pytest.raises(PopulaceError, match="nope"):
        runs.path("nope")
    with pytest.raises(LookupError):  # an existing `except LookupError` still catches it
        runs.path("nope")


def test_a_file_of_a_run_stays_inside_it_and_has_an_allowed_suffix(runs: Runs,
                                                                   tmp_path: Path) -> None:
    run = a_run(runs.runs_dir, "r1", mtime=1_000)
    other = a_run(runs.runs_dir, "r2", mtime=1_000)
    (other / "report.html").write_text("<html>another run</html>")
    (run / "figures").mkdir()
    (run / "figures" / "mean.png").write_bytes(b"png")
    (run / "report.html").write_text("<html></html>")
    (tmp_path / "secret.html").write_text("no")
    (run / "out.html").symlink_to(tmp_path / "secret.html")
    assert runs.file("r1", "figures/mean.png", (".png",)) == (run / "figures" / "mean.png")
    assert runs.file("r1", "report.html", (".html",)) == run / "report.html"
    for relative, suffixes in [("report.html", (".png",)),       # not an allowed type
                               ("summary.json", (".html",)),
                               ("figures", (".png",)),           # a folder
                               ("out.html", (".html",)),         # a link out of the run
                               ("../r2/report.html", (".html",)),  # another run
                               ("/etc/passwd", (".html",)),
                               ("figures\\mean.png", (".png",)),
                               ("", (".html",)),
                               ("missing.html", (".html",))]:
        with pytest.raises(NotFound):
            runs.file("r1", relative, suffixes)


# -- listing -------------------------------------------------------------------------------------
def test_the_listing_is_newest_first_and_skips_what_is_no_run(runs: Runs) -> None:
    a_run(runs.runs_dir, "old", mtime=1_000, steps=3)
    a_run(runs.runs_dir, "new", mtime=3_000, status="stopped")
    a_run(runs.runs_dir, "middle", mtime=2_000)
    (runs.runs_dir / "empty").mkdir()  # a folder, not a run
    (runs.runs_dir / ".hidden").mkdir()
    early = runs.runs_dir / "early"  # no summary yet, but its config: a run starting
    early.mkdir()
    (early / "config.yaml").write_text("name: early\nagents: 5\n")
    os.utime(early, (500, 500))
    rows = runs.listing()
    assert [r["id"] for r in rows] == ["new", "middle", "old", "early"]
    old = rows[2]
    assert (old["name"], old["status"], old["live"], old["agents"]) == ("old", "completed",
                                                                        False, 5)
    assert (old["steps_done"], old["modified"], old["report"]) == (3, 1_000, False)
    assert rows[0]["status"] == "stopped"
    assert (rows[3]["status"], rows[3]["steps_done"]) == ("unknown", 0)


def test_a_listing_without_a_runs_directory_is_empty(tmp_path: Path) -> None:
    assert Runs(tmp_path / "none", roots=[tmp_path]).listing() == []


def test_an_attached_run_is_live_listed_first_and_found_by_id(runs: Runs,
                                                              tmp_path: Path) -> None:
    a_run(runs.runs_dir, "newer", mtime=9_000_000_000)
    elsewhere = tmp_path / "elsewhere" / "going"
    elsewhere.mkdir(parents=True)
    monitor = RunMonitor()
    monitor.run_started(name="going", agents=7, steps=4)
    live = runs.attach(elsewhere, monitor)
    assert monitor.run_id == "going" and runs.live("going") is live
    assert runs.path("going") == elsewhere.resolve()  # outside the runs directory: attached
    rows = runs.listing()
    assert [(r["id"], r["live"]) for r in rows] == [("going", True), ("newer", False)]
    assert (rows[0]["agents"], rows[0]["steps_planned"]) == (7, 4)
    # Stopping asks the monitor; a finished run is listed by its date, no longer live.
    assert runs.stop("going") is live and monitor.snapshot().status == "stopping"
    monitor.run_finished("stopped")
    assert [(r["id"], r["live"]) for r in runs.listing()] == [("newer", False),
                                                              ("going", False)]


def test_only_a_live_run_can_be_stopped(runs: Runs) -> None:
    a_run(runs.runs_dir, "done", mtime=1_000)
    with pytest.raises(Refused, match="run done is not running in this studio"):
        runs.stop("done")
    with pytest.raises(NotFound):
        runs.stop("nope")
    assert runs.live("done") is None


def test_a_second_run_is_refused_while_one_is_going(runs: Runs, tmp_path: Path) -> None:
    (tmp_path / "tiny.yaml").write_text(
        "scenario: guess_number\nname: tiny\nagents: 5\nrounds: 1\nmodels:\n"
        "  dummy: {provider: dummy}\n")
    monitor = RunMonitor()
    runs.attach(tmp_path / "going", monitor)
    with pytest.raises(Refused, match="run going is still going"):
        runs.start("tiny.yaml")
    monitor.run_finished("completed")
    live = runs.start("tiny.yaml", {"agents": 3, "rounds": None})
    assert live.run_id.startswith("tiny-") and live.config == "tiny.yaml"
    assert live.path.parent == runs.runs_dir
    runs.shutdown(timeout=30)
    assert live.monitor.finished and live.monitor.snapshot().agents == 3
