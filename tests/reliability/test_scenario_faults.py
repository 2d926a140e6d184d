"""Any scenario of the Scenario API survives what the game survives: kill -9 of the whole
run (then ``--resume``) and a Ray worker killed mid-step (recovered by itself), with every
table equal to an undisturbed run's."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from populace.results import read_summary, read_table

VOTES = Path(__file__).parents[1] / "launch" / "votes.py"
#: 3 steps of 0.6 s "thinking": long enough to land a kill inside step 2.
RUN = {"scenario": f"{VOTES}:Votes", "agents": 400, "steps": 3, "workers": 2, "seed": 5,
       "settings": {"think": 0.6}}


def write(tmp_path: Path, **changes: Any) -> Path:
    path = tmp_path / "votes.yaml"
    path.write_text(yaml.safe_dump({**RUN, **changes}))
    return path


@pytest.fixture(scope="module")
def votes_undisturbed(tmp_path_factory: pytest.TempPathFactory) -> pa.Table:
    import asyncio

    from populace.launch import launch, load_run_file
    from populace.results import RunDirectory

    tmp = tmp_path_factory.mktemp("undisturbed")
    out = RunDirectory.create(tmp / "out")
    asyncio.run(launch(load_run_file(write(tmp, settings={"think": 0.0})), out))
    return read_table(out.path, "votes")


def assert_equal_rows(out: Path, expected: pa.Table) -> None:
    summary = read_summary(out)
    assert summary["status"] == "completed", summary.get("error")
    assert [e["step"] for e in summary["steps"]] == [1, 2, 3]
    assert read_table(out, "votes").equals(expected)


def test_kill_9_mid_step_then_resume_equals_an_undisturbed_run(
    tmp_path: Path, populace: Callable[..., Any], votes_undisturbed: pa.Table,
) -> None:
    out = tmp_path / "out"
    run = populace("run", write(tmp_path), "--out", out)
    run.wait_for("step 1/3:", timeout=60)
    time.sleep(0.3)  # inside step 2
    os.kill(run.pid, signal.SIGKILL)
    run.finish(timeout=30)
    assert read_summary(out)["status"] == "running"  # what a killed run leaves
    resumed = populace("run", "--resume", out)
    rc, stdout, stderr = resumed.finish(timeout=120)
    assert rc == 0, stderr
    assert "step 1/3:" not in stdout and "step 3/3:" in stdout
    assert read_summary(out)["resumed_from_step"] == 1
    assert_equal_rows(out, votes_undisturbed)


def test_a_ray_worker_killed_mid_step_is_recovered(
    tmp_path: Path, populace: Callable[..., Any], votes_undisturbed: pa.Table, helpers: Any,
) -> None:
    pytest.importorskip("ray")
    if not Path("/proc/self/stat").exists():
        pytest.skip("finds the worker processes in /proc")
    out = tmp_path / "out"
    run = populace("run", write(tmp_path, backend="ray"), "--out", out)
    run.wait_for("step 1/3:", timeout=120)
    time.sleep(0.3)  # inside step 2
    workers = helpers.ray_workers(run.pid)
    assert len(workers) == 2, workers
    victim = min(workers)
    os.kill(victim, signal.SIGKILL)
    rc, stdout, stderr = run.finish(timeout=180)
    assert rc == 0, stderr
    assert "Traceback" not in stderr
    assert stdout.count("step 2/3:") == 1
    warnings = [line for line in stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and f"(pid {victim}) died" in warnings[0], stderr
    assert "restarting the workers from the last checkpoint" in warnings[0]
    assert_equal_rows(out, votes_undisturbed)
    assert read_summary(out)["resumed_from_step"] == 1
