"""Running the ``populace`` command, in the test process or as a user would in a shell
(shared by several test files)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import forkserver
from populace.cli import main


def run_in_process(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                   *args: str | Path) -> tuple[int, str, str]:
    """Run ``populace ARGS`` here; returns exit status, stdout, stderr (of this call only)."""
    monkeypatch.setattr(sys, "argv", ["populace", *map(str, args)])
    monkeypatch.setenv("COLUMNS", "200")
    capsys.readouterr()
    code = 0
    try:
        main()
    except SystemExit as e:
        code = int(e.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_ok(*args: str | Path) -> None:
    """Run ``populace ARGS`` here and require exit 0 (for module-scoped fixtures, which
    cannot take ``capsys``)."""
    saved = sys.argv
    sys.argv = ["populace", *map(str, args)]
    try:
        main()
    except SystemExit as e:
        assert not e.code, args
    finally:
        sys.argv = saved


def environment() -> dict[str, str]:
    """The environment of a ``populace`` subprocess: no colours, no terminal width, no Ray
    cluster of the test session."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR",
                                                             "RAY_ADDRESS")}
    env["NO_COLOR"] = "1"
    return env


def populace(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``populace ARGS`` in a subprocess (output captured as text; forked by
    :mod:`forkserver`, which spares it the interpreter's start-up)."""
    return forkserver.run([sys.executable, "-m", "populace.cli", *map(str, args)],
                          capture_output=True, text=True, env=environment(), timeout=timeout)


def kill_9_after(log: Path, marker: str, delay: float, *args: str | Path,
                 timeout: float = 60) -> None:
    """Start ``populace ARGS`` with its stdout in ``log``, and kill -9 it ``delay`` seconds
    after ``marker`` appears there (a run killed mid-step, say)."""
    with log.open("w") as stdout:
        proc = forkserver.spawn([sys.executable, "-m", "populace.cli", *map(str, args)],
                                stdout=stdout, stderr=subprocess.DEVNULL, env=environment())
    try:
        deadline = time.monotonic() + timeout
        while marker not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.02)
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
