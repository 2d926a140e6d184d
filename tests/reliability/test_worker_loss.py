"""A Ray worker process killed (kill -9) mid-round: the run recovers from its last checkpoint.

Then the same run is stopped with SIGTERM (Ray installs its own SIGTERM handler in the
driver, a stack dump and death; the run must keep its own) and finished on the local
backend. Also the recovery policy of ``populace run`` itself, with a stand-in for the game
that loses workers on purpose (no Ray needed).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from populace import cli
from populace.launch import MAX_RECOVERIES
from populace.results import read_summary


def test_ray_worker_killed_mid_round_then_sigterm_then_resume(
    tmp_path: Path, populace: Callable[..., Any], run_file: Callable[..., Path],
    undisturbed: pa.Table, helpers: Any,
) -> None:
    pytest.importorskip("ray")
    if not Path("/proc/self/stat").exists():
        pytest.skip("finds the worker processes in /proc")
    out = tmp_path / "out"
    run = populace("run", run_file(backend="ray"), "--out", out)
    run.wait_for("round 1/3:", timeout=120)
    time.sleep(0.3)  # inside round 2 (1 s)
    tree = helpers.descendants(run.pid)  # Ray's own processes and the workers
    workers = helpers.ray_workers(run.pid)
    assert len(workers) == 2, workers
    victim = min(workers)
    os.kill(victim, signal.SIGKILL)

    # The run recovers by itself: new workers, state from the checkpoint of round 1,
    # round 2 played again and reported once.
    run.wait_for("round 2/3:", timeout=120)
    time.sleep(0.3)  # inside round 3
    tree |= helpers.descendants(run.pid)
    run.popen.send_signal(signal.SIGTERM)
    rc, stdout, stderr = run.finish(timeout=60)
    helpers.assert_recovered_once(stdout, stderr, f"(pid {victim}) died")

    # SIGTERM: a clean stop, as on the local backend.
    assert rc == 143, stderr
    assert stderr.splitlines()[-1] == (f"error: stopped; finished steps are in {out}; "
                                       f"continue with: populace run --resume {out}")
    summary = read_summary(out)
    assert (summary["status"], summary["resumed_from_step"]) == ("interrupted", 1)
    assert [r["round"] for r in summary["steps"]] == [1, 2]
    # Nothing of Ray outlives the run.
    helpers.wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in tree), 30,
                       "the exit of Ray's processes")

    # Where the run continues is free: results do not depend on the backend.
    rc, _, stderr = populace("run", "--resume", out, "--backend", "local").finish(timeout=90)
    assert rc == 0, stderr
    helpers.assert_complete_and_equal(out, undisturbed)
    assert read_summary(out)["resumed_from_step"] == 2


# -- the recovery policy, without Ray ---------------------------------------------------------
FLAKY = """
from pathlib import Path

from populace.core import WorkerLost
from populace.launch import Scenario, ScenarioSettings


class Flaky(Scenario):
    \"\"\"Loses a worker in step 2 of its first ``losses`` attempts.\"\"\"

    class Settings(ScenarioSettings):
        losses: int
        log: str

    async def step(self, run, t):
        log = Path(run.settings.log)
        if t == 2:
            attempts = log.read_text().count("x") if log.exists() else 0
            log.write_text("x" * (attempts + 1))
            if attempts < run.settings.losses:
                raise WorkerLost(f"worker 1 (pid 4242) died: killed; it held agents 5-9 "
                                 f"(attempt {attempts + 1})")
        run.metric("t", t)
"""


def flaky(tmp_path: Path, losses: int) -> Path:
    (tmp_path / "flaky.py").write_text(FLAKY)
    path = tmp_path / "flaky.yaml"
    path.write_text(f"scenario: flaky.py:Flaky\nsteps: 3\nsettings: {{losses: {losses}, "
                    f"log: {tmp_path / 'attempts'}}}\n")
    return path


@pytest.mark.parametrize("losses", [1, MAX_RECOVERIES])
def test_lost_workers_are_recovered_by_resuming(
    losses: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", ["populace", "run", str(flaky(tmp_path, losses)),
                                      "--out", str(out)])
    cli.main()
    # Every attempt after a loss resumes from the checkpoint of step 1.
    summary = read_summary(out)
    assert (summary["status"], summary["resumed_from_step"]) == ("completed", 1)
    assert [e["t"] for e in summary["steps"]] == [1, 2, 3]
    assert (tmp_path / "attempts").read_text() == "x" * (losses + 1)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == losses
    assert all(line.startswith("warning: worker 1 (pid 4242) died") for line in err)


def test_too_many_losses_stop_with_the_resume_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", ["populace", "run",
                                      str(flaky(tmp_path, MAX_RECOVERIES + 1)),
                                      "--out", str(out)])
    with pytest.raises(SystemExit) as info:
        cli.main()
    assert info.value.code == 1
    assert (tmp_path / "attempts").read_text() == "x" * (MAX_RECOVERIES + 1)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err[-1] == (f"error: worker 1 (pid 4242) died: killed; it held agents 5-9 (attempt "
                       f"{MAX_RECOVERIES + 1}); gave up after {MAX_RECOVERIES} "
                       f"recoveries; continue with: populace run --resume {out}")
