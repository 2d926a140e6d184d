"""SIGINT and SIGTERM end a run whose step hangs, within the grace period (issue 33).

The scenario's step 2 hangs in the way ``HANG`` names: an ``await`` that swallows its
cancellation, ``time.sleep`` in the step, a busy loop, or ``time.sleep`` in one agent's
method (the local backend's worker runs on the event loop: the loop itself is stuck). The
signal ends the process ``POPULACE_STOP_GRACE`` (2) s later with 130 or 143, one line, the
status ``stopped``; ``--resume`` without the hang then equals an undisturbed run.
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
import yaml

from populace.results import read_summary, read_table

HANG = '''
import asyncio, os, sys, time

from populace.core import Agent
from populace.launch import Run, Scenario


class Walker(Agent):
    __slots__ = ("x",)

    def __init__(self, id, profile=None):
        super().__init__(id, profile)
        self.x = 0

    async def walk(self, t):
        kind = os.environ.get("HANG", "")
        if t == 2 and self.id == 3:
            if kind == "agent":
                print("hanging now", flush=True)
                time.sleep(3600)
            if kind == "exit":
                sys.exit(0)
        self.x += (self.id * 7 + t) % 5
        return self.x

    def get_state(self):
        return {"x": self.x}

    def set_state(self, state):
        if os.environ.get("HANG") == "set_state":
            raise RuntimeError("cannot restore")
        if os.environ.get("HANG") == "set_state_exit":
            sys.exit(0)
        self.x = state["x"]


class Hang(Scenario):
    name = "hang"

    async def setup(self, run: Run) -> None:
        self.walkers = await run.create(Walker)

    async def step(self, run: Run, t: int) -> None:
        kind = os.environ.get("HANG", "")
        if t == 2 and kind in ("await", "sleep", "busy"):
            print("hanging now", flush=True)
            if kind == "await":  # an await that never returns, even when cancelled
                while True:
                    try:
                        await asyncio.sleep(3600)
                    except asyncio.CancelledError:
                        pass
            if kind == "sleep":
                time.sleep(3600)
            while True:
                pass
        xs = await run.collect(self.walkers.map(Walker.walk, t))
        run.record("walks", {"agent_id": self.walkers.ids, "x": xs})
        run.metric("total", sum(xs))
'''

RUN = {"scenario": "hang.py:Hang", "agents": 20, "steps": 3, "workers": 2, "seed": 3}
CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


def scenario(directory: Path) -> Path:
    (directory / "hang.py").write_text(HANG)
    path = directory / "hang.yaml"
    path.write_text(yaml.safe_dump(RUN))
    return path


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory: pytest.TempPathFactory) -> pa.Table:
    import asyncio

    from populace.launch import launch, load_run_file
    from populace.results import RunDirectory

    tmp = tmp_path_factory.mktemp("undisturbed-hang")
    out = RunDirectory.create(tmp / "out")
    asyncio.run(launch(load_run_file(scenario(tmp)), out))
    return read_table(out.path, "walks")


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("kind", ["await", "sleep", "busy", "agent"])
def test_a_hanging_step_is_stopped_then_resumed(
        kind: str, sig: signal.Signals, tmp_path: Path, populace: Callable[..., Any],
        undisturbed: pa.Table, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    monkeypatch.setenv("HANG", kind)
    monkeypatch.setenv("POPULACE_STOP_GRACE", "2")
    run = populace("run", scenario(tmp_path), "--out", out, cwd=tmp_path)
    run.wait_for("hanging now", timeout=60)
    time.sleep(0.2)
    signalled = time.monotonic()
    os.kill(run.pid, sig)
    status, _, stderr = run.finish(timeout=15)
    assert time.monotonic() - signalled < 15
    assert status == CODES[sig], stderr
    line = one_line(stderr)
    assert line.startswith(f"error: stopped: the run did not stop within 2 s of {sig.name}")
    assert f"continue with: populace run --resume {out}" in line
    summary = read_summary(out)
    assert summary["status"] == "stopped"
    assert [e["step"] for e in summary["steps"]] == [1]
    assert "the main thread was here" in (out / "error.txt").read_text()

    monkeypatch.delenv("HANG")
    resumed = populace("run", "--resume", out, cwd=tmp_path)
    status, _, stderr = resumed.finish(timeout=60)
    assert (status, stderr) == (0, "")
    summary = read_summary(out)
    assert summary["status"] == "completed"
    assert [e["step"] for e in summary["steps"]] == [1, 2, 3]
    assert read_table(out, "walks").equals(undisturbed)


def test_an_agent_calling_sys_exit_fails_the_run(
        tmp_path: Path, populace: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    monkeypatch.setenv("HANG", "exit")
    status, _, stderr = populace("run", scenario(tmp_path), "--out", out,
                                 cwd=tmp_path).finish(timeout=60)
    assert status == 1, stderr
    line = one_line(stderr)
    assert "hang.py, line" in line and "SystemExit: 0" in line, line
    assert read_summary(out)["status"] == "failed"


@pytest.mark.parametrize("kind", ["set_state", "set_state_exit"])
def test_set_state_that_fails_fails_the_resume(
        kind: str, tmp_path: Path, populace: Callable[..., Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    monkeypatch.setenv("HANG", "sleep")
    monkeypatch.setenv("POPULACE_STOP_GRACE", "2")
    run = populace("run", scenario(tmp_path), "--out", out, cwd=tmp_path)
    run.wait_for("hanging now", timeout=60)
    os.kill(run.pid, signal.SIGTERM)
    assert run.finish(timeout=15)[0] == 143
    monkeypatch.setenv("HANG", kind)
    status, _, stderr = populace("run", "--resume", out, cwd=tmp_path).finish(timeout=60)
    assert status == 1, stderr
    line = one_line(stderr)
    assert "hang.py, line" in line and "Walker.set_state()" in line, line
    assert read_summary(out)["status"] == "failed"
