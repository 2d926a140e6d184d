"""Nothing received inside a round is lost: answers are saved every ``checkpoint_minutes``
and when the run stops (Ctrl-C, SIGTERM), then the resumed run plays the round whole.

The model's waits are spread (``jitter``), so that inside a round some answers are in and
others are not.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from populace.results import read_partial, read_summary

SPREAD = {"dummy": {"provider": "dummy", "latency": 2.0, "jitter": 0.9}}  # 0.2–3.8 s


def assert_saved_rows_are_right(out: Path, round_no: int, undisturbed: pa.Table,
                                same: list[str]) -> int:
    """The saved part of round ``round_no``: a real part, each row as undisturbed."""
    partial = read_partial(out)
    assert partial is not None
    saved_round, rows = partial
    assert saved_round == round_no
    assert 0 < rows.num_rows < 2000, rows.num_rows
    assert pc.count_distinct(rows.column("agent_id")).as_py() == rows.num_rows
    want = undisturbed.filter(pc.and_(
        pc.equal(undisturbed.column("round"), round_no),
        pc.is_in(undisturbed.column("agent_id"), rows.column("agent_id"))))
    order = [("agent_id", "ascending")]
    got, want = rows.select(same).sort_by(order), want.select(same).sort_by(order)
    for name in same:
        assert got.column(name).equals(want.column(name)), f"column {name} differs"
    return int(rows.num_rows)


def test_ctrl_c_saves_the_answers_of_the_round_in_progress(
    tmp_path: Path, populace: Callable[..., Any], run_file: Callable[..., Path],
    undisturbed: pa.Table, helpers: Any,
) -> None:
    out = tmp_path / "out"
    run = populace("run", run_file(models=SPREAD), "--out", out)
    run.wait_for("round 1/3:", timeout=60)
    time.sleep(1.2)  # round 2: about a quarter of the answers are in
    run.popen.send_signal(signal.SIGINT)
    rc, _, stderr = run.finish(timeout=60)
    assert rc == 130, stderr
    assert "Traceback" not in stderr

    saved = assert_saved_rows_are_right(out, 2, undisturbed, helpers.SAME)
    summary = read_summary(out)
    assert (summary["status"], summary["partial_step"]) == ("interrupted", 2)
    assert summary["partial_answers"] == saved

    rc, _, stderr = populace("run", "--resume", out).finish(timeout=90)
    assert rc == 0, stderr
    helpers.assert_complete_and_equal(out, undisturbed)
    summary = read_summary(out)
    assert (summary["resumed_from_step"], summary["resumed_answers"]["responses"]) == (1, saved)
    assert read_partial(out) is None  # the round was written whole: its part is gone


def test_answers_are_saved_inside_a_long_round(
    tmp_path: Path, populace: Callable[..., Any], run_file: Callable[..., Path],
    undisturbed: pa.Table, helpers: Any,
) -> None:
    # Saved every 0.3 s; kill -9 gives the run no chance to save anything itself.
    out = tmp_path / "out"
    run = populace("run", run_file(models=SPREAD, checkpoint_minutes=0.005), "--out", out)
    helpers.wait_until(lambda: (out / "partial").exists(), 60, "a save inside round 1")
    time.sleep(0.5)
    os.kill(run.pid, signal.SIGKILL)
    rc, _, _ = run.finish(timeout=30)
    assert rc == -signal.SIGKILL

    saved = assert_saved_rows_are_right(out, 1, undisturbed, helpers.SAME)
    rc, _, stderr = populace("run", "--resume", out).finish(timeout=90)
    assert rc == 0, stderr
    helpers.assert_complete_and_equal(out, undisturbed)
    assert read_summary(out)["resumed_answers"]["responses"] == saved
