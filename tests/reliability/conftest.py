"""Helpers for the fault-injection tests: runs in their own processes, the undisturbed result.

Every test here disturbs a run (kills a worker or the whole run, sends a signal, breaks the
LLM server, feeds a bad config) and then checks the one property that matters: the run
directory ends with exactly one row per agent per round, and the numbers equal those of an
undisturbed run with the same seed. Runs are small (2,000 agents, 3 rounds) and loopback
only; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import yaml

import forkserver
from game_helpers import game_file
from populace.results import RunDirectory, read_summary, read_table
from populace.scenarios.guess_number import play

#: The run every process test disturbs: long enough rounds (1 s) to hit one in the middle.
RUN = {
    "scenario": "guess_number", "name": "reliability", "seed": 11, "agents": 2000,
    "rounds": 3, "workers": 2,
    "backend": "local", "models": {"dummy": {"provider": "dummy", "latency": 1.0}},
}

#: Columns that must be equal to the undisturbed run's (latency and retries may differ).
SAME = ["round", "agent_id", "group", "model", "number", "valid", "raw", "extract_raw", "error"]


class Proc:
    """A ``populace`` command in its own process; its output is read as it comes."""

    def __init__(self, *args: str | Path, cwd: Path | None = None) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR")}
        env["NO_COLOR"] = "1"
        env.pop("RAY_ADDRESS", None)  # a run of ours starts its own Ray, never joins one
        self.args = [str(a) for a in args]
        self.popen = forkserver.spawn(
            [sys.executable, "-m", "populace.cli", *self.args], cwd=cwd,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )
        self.lines: list[str] = []  # stdout lines seen by wait_for and finish
        self._stdout: queue.Queue[str | None] = queue.Queue()
        self._stderr: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(self.popen.stdout, self._stdout.put),
                             daemon=True),
            threading.Thread(target=self._read, args=(self.popen.stderr, self._stderr.append),
                             daemon=True),
        ]
        for t in self._readers:
            t.start()

    @property
    def pid(self) -> int:
        return self.popen.pid

    @staticmethod
    def _read(pipe: Any, put: Callable[[Any], None]) -> None:
        for line in pipe:
            put(line.rstrip("\n"))
        put(None)

    def wait_for(self, prefix: str, timeout: float = 90) -> str:
        """The first stdout line starting with ``prefix``; fails after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._stdout.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                line = None
            if line is None:  # end of output, or out of time
                self.kill()
                pytest.fail(f"no line starting with {prefix!r} within {timeout} s from "
                            f"populace {' '.join(self.args)}; stdout: {self.lines}; "
                            f"stderr: {self.stderr()}")
            self.lines.append(line)
            if line.startswith(prefix):
                return line

    def finish(self, timeout: float = 90) -> tuple[int, str, str]:
        """Wait for the exit: ``(status, all stdout, stderr)``."""
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"populace {' '.join(self.args)} still running after {timeout} s; "
                        f"stdout: {self.lines}; stderr: {self.stderr()}")
        for t in self._readers:
            t.join(timeout=10)
        while True:
            try:
                line = self._stdout.get_nowait()
            except queue.Empty:
                break
            if line is not None:
                self.lines.append(line)
        return self.popen.returncode, "\n".join(self.lines), self.stderr()

    def stderr(self) -> str:
        return "\n".join(line for line in self._stderr if line is not None)

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(timeout=30)


@pytest.fixture
def populace() -> Iterator[Callable[..., Proc]]:
    """``populace("run", path, ...)`` starts the command; whatever is left is killed at the end."""
    started: list[Proc] = []

    def start(*args: str | Path, cwd: Path | None = None) -> Proc:
        started.append(Proc(*args, cwd=cwd))
        return started[-1]

    yield start
    for p in started:
        p.kill()
        for t in p._readers:
            t.join(timeout=10)
        for pipe in (p.popen.stdout, p.popen.stderr):
            if pipe is not None:
                pipe.close()


def write_run_file(directory: Path, **changes: Any) -> Path:
    """``RUN`` with ``changes`` (top-level keys) as a run file in ``directory``."""
    path = directory / "run.yaml"
    path.write_text(yaml.safe_dump({**RUN, **changes}, sort_keys=False))
    return path


@pytest.fixture
def run_file(tmp_path: Path) -> Callable[..., Path]:
    """``run_file(**changes)``: the standard run, changed, written to a file."""
    return lambda **changes: write_run_file(tmp_path, **changes)


def play_into(directory: Path, data: dict[str, Any]) -> pa.Table:
    """Play ``data`` (a run file's mapping) in this process; its responses table."""
    config = game_file(data)
    asyncio.run(play(config, RunDirectory.create(directory)))
    return read_table(directory)


@pytest.fixture(scope="session")
def undisturbed(tmp_path_factory: pytest.TempPathFactory) -> pa.Table:
    """The standard run, undisturbed: local workers and a model that answers at once.

    Results do not depend on the backend or on the model's latency (every answer is
    decided by a seed derived from the run seed, the agent and the round), so this stands
    for any undisturbed run of ``RUN``.
    """
    data = {**RUN, "models": {"dummy": {"provider": "dummy", "latency": 0.0}}}
    return play_into(tmp_path_factory.mktemp("undisturbed"), data)


def by_agent_round(table: pa.Table) -> pa.Table:
    return table.select(SAME).sort_by([("round", "ascending"), ("agent_id", "ascending")])


def assert_complete_and_equal(run_dir: Path, expected: pa.Table) -> None:
    """``responses.parquet`` of ``run_dir``: one row per agent per round, equal to ``expected``."""
    table = read_table(run_dir)
    assert (run_dir / "responses.parquet").exists()
    summary = read_summary(run_dir)
    agents, rounds = summary["agents"], summary["steps_planned"]
    assert summary["status"] == "completed", summary.get("error")
    assert table.num_rows == agents * rounds
    pairs = pc.add(pc.multiply(pc.cast(table.column("round"), pa.int64()), agents),
                   table.column("agent_id"))
    assert pc.count_distinct(pairs).as_py() == agents * rounds  # no duplicate, none missing
    assert sorted(set(table.column("round").to_pylist())) == list(range(1, rounds + 1))
    got, want = by_agent_round(table), by_agent_round(expected)
    for name in SAME:
        assert got.column(name).equals(want.column(name)), f"column {name} differs"
    assert [r["round"] for r in summary["steps"]] == list(range(1, rounds + 1))


def descendants(pid: int) -> dict[int, str]:
    """``pid → command line`` of every process below ``pid`` (read from /proc)."""
    parent: dict[int, int] = {}
    command: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue  # gone meanwhile
        parent[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
        command[int(entry)] = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
    below: dict[int, str] = {}
    for p in parent:
        q = p
        while q in parent and q not in (0, 1):
            q = parent[q]
            if q == pid:
                below[p] = command[p]
                break
    return below


def ray_workers(pid: int) -> dict[int, str]:
    """``pid → command line`` of every Populace Ray worker (actor process) below ``pid``."""
    return {p: cmd for p, cmd in descendants(pid).items() if "WorkerActor" in cmd}


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout} s")
        time.sleep(0.02)


def assert_recovered_once(stdout: str, stderr: str, cause: str) -> None:
    """One automatic recovery from a loss in round 2: one warning line saying ``cause``,
    round 2 reported once, no traceback."""
    assert "Traceback" not in stderr
    assert stdout.count("round 2/3:") == 1
    warnings = [line for line in stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, stderr
    assert cause in warnings[0], warnings[0]
    assert "restarting the workers from the last checkpoint" in warnings[0]


@pytest.fixture
def helpers() -> Any:
    """The module's helper functions, for tests (conftest modules cannot be imported)."""
    import types

    return types.SimpleNamespace(
        assert_complete_and_equal=assert_complete_and_equal, descendants=descendants,
        ray_workers=ray_workers, wait_until=wait_until, play_into=play_into,
        write_run_file=write_run_file, RUN=RUN, SAME=SAME,
        assert_recovered_once=assert_recovered_once,
    )
