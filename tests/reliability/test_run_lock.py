"""A run holds its directory: a second writer is refused, and a run killed without a word
is seen as interrupted (the studio and ``populace report`` no longer call it running)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from populace.results import RunDirectory, RunInUse, read_summary, run_snapshot

SLOW = {"dummy": {"provider": "dummy", "latency": 1.0}}


def test_a_held_run_is_in_use_and_a_second_holder_is_refused(tmp_path: Path) -> None:
    rd = RunDirectory.create(tmp_path / "run")
    assert not rd.in_use()
    with rd.hold():
        assert rd.in_use()
        with pytest.raises(RunInUse, match=r"another process .* is writing this run"), \
                RunDirectory(rd.path).hold():
            pass
    assert not rd.in_use()
    assert list(rd.path.iterdir()) == []  # nothing left behind: remove_if_empty still works


def test_a_running_summary_nobody_holds_reads_as_interrupted(tmp_path: Path) -> None:
    rd = RunDirectory.create(tmp_path / "run")
    rd.write_summary({"name": "x", "status": "running", "steps": []})
    with rd.hold():
        assert run_snapshot(rd.path).status == "running"
    snap = run_snapshot(rd.path)
    assert snap.status == "interrupted" and "--resume" in (snap.error or "")


def test_kill_9_then_a_second_resume_while_one_runs(
        tmp_path: Path, populace: Callable[..., Any], run_file: Callable[..., Path]) -> None:
    out = tmp_path / "out"
    run = populace("run", run_file(models=SLOW, rounds=5), "--out", out)
    run.wait_for("round 1/5:")
    run.popen.send_signal(signal.SIGKILL)
    run.finish(timeout=30)
    assert read_summary(out)["status"] == "running"  # what the killed process left
    assert run_snapshot(out).status == "interrupted"

    first = populace("run", "--resume", out)
    deadline = time.monotonic() + 60
    while not RunDirectory(out).in_use():  # the second starts as soon as the first holds
        assert time.monotonic() < deadline and first.popen.poll() is None, first.stderr()
        time.sleep(0.02)
    # Four rounds of 1 s left: the second process starts (imports included) well before.
    second = populace("run", "--resume", out)
    rc, _, stderr = second.finish(timeout=60)
    assert rc == 2, stderr
    assert stderr.splitlines() == [f"error: {out}: another process (pid {first.pid}) is "
                                   "writing this run; wait for it to end, or stop it first"]
    rc, _, stderr = first.finish(timeout=60)
    assert rc == 0, stderr
    assert read_summary(out)["status"] == "completed"
    assert not (out / ".lock").exists()
