"""The whole run killed (kill -9) or stopped (Ctrl-C, SIGTERM) mid-round, then ``--resume``."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from populace.results import read_checkpoint, read_summary, read_table


def parts(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / "parts").glob("responses-r*.parquet"))


def checkpoints(run_dir: Path) -> list[int]:
    return sorted(read_checkpoint(p)[0] for p in (run_dir / "checkpoints").glob("*.ckpt"))


def resume(populace: Callable[..., Any], out: Path) -> str:
    rc, stdout, stderr = populace("run", "--resume", out).finish(timeout=90)
    assert rc == 0, stderr
    assert "Traceback" not in stderr
    return stdout


@pytest.mark.parametrize("killed_in", [1, 2], ids=["round-1", "round-2"])
def test_kill_9_mid_round_then_resume(
    tmp_path: Path, populace: Callable[..., Any], run_file: Callable[..., Path],
    undisturbed: pa.Table, helpers: Any, killed_in: int,
) -> None:
    out = tmp_path / "out"
    run = populace("run", run_file(), "--out", out)
    if killed_in == 1:  # the profiles are written just before the workers start round 1
        helpers.wait_until(lambda: (out / "profiles.parquet").exists(), 60, "profiles.parquet")
    else:
        run.wait_for(f"round {killed_in - 1}/3:")
    time.sleep(0.4)  # well inside the round (1 s)
    os.kill(run.pid, signal.SIGKILL)
    rc, _, _ = run.finish(timeout=30)
    assert rc == -signal.SIGKILL

    # What a kill -9 leaves: the finished rounds, durable, and nothing of the one it hit.
    finished = killed_in - 1
    assert parts(out) == [f"responses-r{r:05d}.parquet" for r in range(1, killed_in)]
    assert checkpoints(out) == list(range(1, killed_in))
    if finished:
        summary = read_summary(out)
        assert (summary["status"], len(summary["steps"])) == ("running", finished)
    else:
        assert not (out / "summary.json").exists()

    resume(populace, out)
    helpers.assert_complete_and_equal(out, undisturbed)
    assert read_summary(out)["resumed_from_step"] == finished


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["SIGINT", "SIGTERM"])
def test_signal_mid_round_stops_cleanly_then_resume(
    tmp_path: Path, populace: Callable[..., Any], run_file: Callable[..., Path],
    undisturbed: pa.Table, helpers: Any, sig: signal.Signals, status: int,
) -> None:
    out = tmp_path / "out"
    run = populace("run", run_file(), "--out", out)
    run.wait_for("round 1/3:")
    time.sleep(0.4)
    run.popen.send_signal(sig)
    rc, _, stderr = run.finish(timeout=30)

    assert rc == status
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines == [f"error: stopped; finished steps are in {out}; continue with: "
                     f"populace run --resume {out}"]
    # Partial results, consolidated; the round in progress was abandoned, not half-written.
    summary = read_summary(out)
    assert summary["status"] == "interrupted"
    assert [r["round"] for r in summary["steps"]] == [1]
    assert parts(out) == ["responses-r00001.parquet"]
    partial = read_table(out)
    assert (out / "responses.parquet").exists()
    assert partial.num_rows == 2000 and set(partial.column("round").to_pylist()) == {1}
    # The checkpoint after round 1 is there and verifies.
    round_no, state = read_checkpoint(out / "checkpoints" / "step-00001.ckpt")
    assert round_no == 1 and len(state["agents"]["participants"]) == 2000
    assert state["scenario"]["round"] == 1

    resume(populace, out)
    helpers.assert_complete_and_equal(out, undisturbed)
    assert read_summary(out)["resumed_from_step"] == 1

