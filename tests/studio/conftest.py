"""Shared pieces of the studio tests: a workspace with run files and a finished run."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from populace.launch import load_run_file
from populace.results import RunDirectory
from populace.scenarios.guess_number import play
from populace.studio import Runs, create_app

HOST = "http://127.0.0.1:8765"  # what TestClient sends as Host: a loopback studio checks it

RUN_FILE = """\
scenario: guess_number
name: {name}
agents: {agents}
rounds: {rounds}
workers: 2
seed: 7
models:
{models}
population:
  aspects:
    profession:
      values: [economist, artist, writer]
  groups: {{by: profession}}
"""


def write_run_file(path: Path, *, name: str = "tiny", agents: int = 300, rounds: int = 2,
                   latency: float = 0.0, assign: dict[str, float] | None = None) -> Path:
    if assign:
        models = "".join(f"  {m}: {{provider: dummy, latency: {lat}}}\n"
                         for m, lat in assign.items())
        models += "assign: {" + ", ".join(f"{m}: 1/{len(assign)}" for m in assign) + "}\n"
    else:
        models = f"  dummy: {{provider: dummy, latency: {latency}}}\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(RUN_FILE.format(name=name, agents=agents, rounds=rounds, models=models))
    return path


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A project folder: run files, a runs/ directory with one finished run, and a file
    outside the allowed roots."""
    root = tmp_path / "project"
    write_run_file(root / "tiny.yaml")
    write_run_file(root / "experiments" / "slow.yaml", name="slow", rounds=5, latency=0.5)
    (root / "notes.yaml").write_text("just: notes\n")  # not a run file: not listed
    (tmp_path / "outside.yaml").write_text((root / "tiny.yaml").read_text())
    cfg = load_run_file(root / "tiny.yaml")
    asyncio.run(play(cfg, RunDirectory.create(root / "runs" / "finished")))
    return root


@pytest.fixture
def runs(workspace: Path) -> Iterator[Runs]:
    r = Runs(workspace / "runs", roots=[workspace])
    yield r
    r.shutdown(timeout=30)


@pytest.fixture
def client(runs: Runs) -> TestClient:
    """The studio over ``runs``, reached as a loopback studio is: Host 127.0.0.1."""
    return TestClient(create_app(runs, interval=0.1), base_url=HOST)


def _wait_for(condition: Callable[[], bool], timeout: float = 20.0, step: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(step)


@pytest.fixture
def wait_for() -> Callable[..., None]:
    """``wait_for(condition, timeout=20)``: poll until true, fail after the timeout."""
    return _wait_for


@pytest.fixture
def run_file() -> Callable[..., Path]:
    """``run_file(path, name=, agents=, rounds=, latency=, assign=)`` writes a run file."""
    return write_run_file
