"""The game's environment service (a Ray actor on the Ray backend) killed mid-round.

Like a lost worker, the run recovers by itself from the last checkpoint, which holds the
environment as well as the agents.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from populace.results import latest_checkpoint, read_summary


def test_environment_actor_killed_mid_round_is_recovered(
    tmp_path: Path, populace: Callable[..., Any], run_file: Callable[..., Path],
    undisturbed: pa.Table, helpers: Any,
) -> None:
    pytest.importorskip("ray")
    if not Path("/proc/self/stat").exists():
        pytest.skip("finds the actor's process in /proc")
    out = tmp_path / "out"
    run = populace("run", run_file(backend="ray"), "--out", out)
    run.wait_for("round 1/3:", timeout=120)
    time.sleep(0.3)  # inside round 2 (1 s)
    actors = [p for p, cmd in helpers.descendants(run.pid).items() if "ServiceActor" in cmd]
    assert len(actors) == 1, actors
    os.kill(actors[0], signal.SIGKILL)

    rc, stdout, stderr = run.finish(timeout=120)
    assert rc == 0, stderr
    helpers.assert_recovered_once(stdout, stderr, "the environment service is gone")
    helpers.assert_complete_and_equal(out, undisturbed)
    assert read_summary(out)["resumed_from_step"] == 1
    point = latest_checkpoint(out)
    assert point is not None and point[0] == 3
    winners = [r["winner_number"] for r in read_summary(out)["steps"]]
    assert point[1]["envs"][0]["data"]["winners"] == winners  # round 1's came from the checkpoint
