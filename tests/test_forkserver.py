"""The tests' fork server (tests/forkserver.py) gives a command what a fresh process would:
its exit status, its output, its own pid to signal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

import forkserver
from cli_helpers import environment

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="the fork server is "
                                "Linux's (pidfd); elsewhere every command starts afresh")


def test_a_forked_command_exits_and_writes_as_a_fresh_one() -> None:
    for args, code, out, err in [
            (["-m", "populace.cli", "--help"], 0, "Usage: python -m populace.cli", ""),
            (["-m", "populace.cli", "frobnicate"], 2, "", "No such command 'frobnicate'"),
            (["-c", "import sys; print('hi'); sys.exit(3)"], 3, "hi", ""),
            (["-c", "raise ValueError('boom')"], 1, "", "ValueError: boom")]:
        forked = forkserver.run([sys.executable, *args], capture_output=True, text=True,
                                env=environment(), timeout=60)
        fresh = subprocess.run([sys.executable, *args], capture_output=True, text=True,
                               env=environment(), timeout=60)
        for done in (forked, fresh):
            assert done.returncode == code, (args, done.stderr)
            assert out in done.stdout and err in done.stderr, (args, done.stdout, done.stderr)


def test_a_forked_command_is_a_process_of_its_own() -> None:
    with forkserver.spawn([sys.executable, "-c", "import time; print('up', flush=True); "
                           "time.sleep(60)"], stdout=subprocess.PIPE, text=True,
                          env=environment(), start_new_session=True) as child:
        assert isinstance(child, forkserver.ForkedPopen)
        assert child.stdout is not None and child.stdout.readline() == "up\n"
        assert child.poll() is None and os.getsid(child.pid) == child.pid
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
