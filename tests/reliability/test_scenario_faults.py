"""Any scenario of the Scenario API survives what the game survives: kill -9 of the whole
run (then ``--resume``) and a Ray worker killed mid-step (recovered by itself), with every
table equal to an undisturbed run's."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from populace.results import read_summary, read_table

ROOT = Path(__file__).parents[2]
VOTES = ROOT / "tests" / "launch" / "votes.py"
#: Each scenario's run: 3 steps of 0.6 s "thinking", long enough to land a kill in step 2.
RUNS = {
    "votes": ({"scenario": f"{VOTES}:Votes", "agents": 400, "steps": 3, "workers": 2,
               "seed": 5, "settings": {"think": 0.6}}, "votes"),
    # docs/scenarios.md's tutorial scenario, as a user copies it from the page
    "rumour": ({"scenario": "rumour.py:Rumour", "agents": 3000, "steps": 3, "workers": 2,
                "seed": 1, "models": {"dummy": {"provider": "dummy", "latency": 0.6}}},
               "heard"),
}


def tutorial_file(directory: Path) -> None:
    page = (ROOT / "docs" / "scenarios.md").read_text()
    code = re.search(r"<!-- file: rumour.py -->\n```python\n(.*?)```", page, re.S)
    assert code is not None
    (directory / "rumour.py").write_text(code.group(1))


def write(tmp_path: Path, name: str, **changes: Any) -> Path:
    tutorial_file(tmp_path)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**RUNS[name][0], **changes}))
    return path


@pytest.fixture(scope="module", params=sorted(RUNS))
def scenario(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
             ) -> tuple[str, pa.Table]:
    """A scenario's name and its undisturbed table (local backend, nothing killed)."""
    import asyncio

    from populace.launch import launch, load_run_file
    from populace.results import RunDirectory

    name = request.param
    tmp = tmp_path_factory.mktemp(f"undisturbed-{name}")
    out = RunDirectory.create(tmp / "out")
    asyncio.run(launch(load_run_file(write(tmp, name)), out))
    return name, read_table(out.path, RUNS[name][1])


def assert_equal_rows(out: Path, name: str, expected: pa.Table) -> None:
    summary = read_summary(out)
    assert summary["status"] == "completed", summary.get("error")
    assert [e["step"] for e in summary["steps"]] == [1, 2, 3]
    assert read_table(out, RUNS[name][1]).equals(expected)


def test_kill_9_mid_step_then_resume_equals_an_undisturbed_run(
    tmp_path: Path, populace: Callable[..., Any], scenario: tuple[str, pa.Table],
) -> None:
    name, undisturbed = scenario
    out = tmp_path / "out"
    run = populace("run", write(tmp_path, name), "--out", out)
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
    assert_equal_rows(out, name, undisturbed)


def test_a_ray_worker_killed_mid_step_is_recovered(
    tmp_path: Path, populace: Callable[..., Any], scenario: tuple[str, pa.Table],
    helpers: Any,
) -> None:
    name, undisturbed = scenario
    pytest.importorskip("ray")
    if not Path("/proc/self/stat").exists():
        pytest.skip("finds the worker processes in /proc")
    out = tmp_path / "out"
    run = populace("run", write(tmp_path, name, backend="ray"), "--out", out)
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
    assert_equal_rows(out, name, undisturbed)  # the local backend's rows, too
    assert read_summary(out)["resumed_from_step"] == 1


@pytest.mark.parametrize("harm", ["delete", "flip"])
def test_a_damaged_step_file_is_refused_on_resume_and_nothing_is_touched(
    tmp_path: Path, populace: Callable[..., Any], harm: str,
) -> None:
    import asyncio

    from populace.launch import launch, load_run_file
    from populace.results import RunDirectory

    path = write(tmp_path, "votes", settings={"think": 0.0})
    run_dir = RunDirectory.create(tmp_path / "out")
    asyncio.run(launch(load_run_file(path, {"steps": 2}), run_dir))
    summary = read_summary(run_dir.path)
    summary.update(status="interrupted", steps_planned=3)  # as a run stopped after step 2
    run_dir.write_summary(summary)
    (run_dir.path / "votes.parquet").unlink()
    victim = run_dir.path / "parts" / "votes-r00001.parquet"
    if harm == "delete":
        victim.unlink()
    else:
        data = bytearray(victim.read_bytes())
        data[len(data) // 2] ^= 0xFF
        victim.write_bytes(bytes(data))
    before = sorted(p.name for p in (run_dir.path / "parts").iterdir())
    rc, _, stderr = populace("run", "--resume", run_dir.path).finish(timeout=60)
    assert rc == 2, stderr
    state = "missing" if harm == "delete" else "damaged"
    assert stderr.strip() == (f"error: {run_dir.path}: cannot resume: parts/votes-r00001.parquet "
                              f"({state}) changed since step 2 was checkpointed; restore the "
                              "file(s), or start the run again")
    assert sorted(p.name for p in (run_dir.path / "parts").iterdir()) == before
