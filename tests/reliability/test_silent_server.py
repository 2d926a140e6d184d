"""A server that never answers is reported within the model's ``timeout`` (issue 33): a
warning line naming the model, the endpoint and what was tried, said again each time the
wait doubles — not minutes of silence until the calls give up."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from populace.results import read_summary


def test_a_server_that_never_answers_is_reported_within_the_timeout(
        tmp_path: Path, populace: Callable[..., Any], helpers: Any) -> None:
    server = populace("serve-llm", "--port", "0", "--error-timeout", "1")  # never answers
    base_url = server.wait_for("serving dummy at ", timeout=60).split(" at ", 1)[1].split()[0]
    path = tmp_path / "run.yaml"
    path.write_text(json.dumps({
        "scenario": "guess_number", "name": "silent", "seed": 5, "agents": 2, "rounds": 1,
        "workers": 1,
        "models": {"llm": {"provider": "openai", "model": "dummy", "base_urls": [base_url],
                           "timeout": 2, "max_retries": 1}},
    }))
    out = tmp_path / "out"
    run = populace("run", path, "--out", out)
    run.wait_for("silent: ", timeout=60)
    started = time.monotonic()
    helpers.wait_until(lambda: "no answer" in run.stderr(), 30, "a line about the silence")
    assert time.monotonic() - started < 15  # the timeout (2 s) and the start-up, not minutes
    first = next(line for line in run.stderr().splitlines() if "no answer" in line)
    assert first.startswith("warning: step 1: no answer for 2 s (0 of 2 answered); model "
                            f"'llm': 2 calls waiting ({base_url}: "), first
    assert first.endswith("an attempt times out after 2 s and is retried up to 1 time")
    status, _, stderr = run.finish(timeout=120)
    assert status == 1, stderr  # every answer failed: the run fails, resumably
    assert "Traceback" not in stderr
    assert stderr.splitlines()[-1].startswith("error: ")
    assert read_summary(out)["status"] == "failed"


def test_a_server_that_answers_slowly_is_not_reported(
        tmp_path: Path, populace: Callable[..., Any]) -> None:
    """A respondent asks three questions of 1.5 s each: no answer of the step for 4.5 s,
    more than the timeout, while the server answers every call — nothing to report."""
    server = populace("serve-llm", "--port", "0", "--latency", "1.5")
    base_url = server.wait_for("serving dummy at ", timeout=60).split(" at ", 1)[1].split()[0]
    path = tmp_path / "run.yaml"
    path.write_text(json.dumps({
        "scenario": "survey", "name": "slow", "seed": 5, "agents": 3,
        "models": {"llm": {"provider": "openai", "model": "dummy", "base_urls": [base_url],
                           "timeout": 2}},
        "settings": {"questionnaire": {"instructions": "A survey.", "questions": [
            {"id": f"q{i}", "type": "single_choice", "text": f"Question {i}?",
             "options": ["yes", "no"]} for i in range(3)]}},
    }))
    status, _, stderr = populace("run", path, "--out", tmp_path / "out").finish(timeout=120)
    assert (status, stderr) == (0, "")


def test_sigterm_while_backgrounds_wait_on_a_silent_server_is_one_line(
        tmp_path: Path, populace: Callable[..., Any], helpers: Any) -> None:
    """`populace backgrounds` (no run directory, no summary) stopped by SIGTERM while its
    calls wait: one line and 143, as `populace run` — not a traceback and 1."""
    import os
    import signal

    server = populace("serve-llm", "--port", "0", "--error-timeout", "1")  # never answers
    base_url = server.wait_for("serving dummy at ", timeout=60).split(" at ", 1)[1].split()[0]
    path = tmp_path / "run.yaml"
    path.write_text(json.dumps({
        "scenario": "guess_number", "name": "writers", "seed": 5, "agents": 4,
        "models": {"llm": {"provider": "openai", "model": "dummy", "base_urls": [base_url],
                           "timeout": 30}},
        "population": {"aspects": {"age": {"values": ["young", "old"]}},
                       "backgrounds": {"model": "llm", "words": 20}},
    }))
    run = populace("backgrounds", path, "--out", tmp_path / "b.parquet",
                   "--cache", tmp_path / "cache")
    # connected to the server: the command is past its imports and waits under its handler
    port = int(base_url.rstrip("/").rsplit(":", 1)[1].split("/")[0])
    helpers.wait_until(lambda: _connected(port), 60, "a connection to the server")
    os.kill(run.pid, signal.SIGTERM)
    status, _, stderr = run.finish(timeout=60)
    assert status == 143, stderr
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == "terminated", stderr


def _connected(port: int) -> bool:
    """Whether a TCP connection to local ``port`` is established (from /proc/net/tcp)."""
    try:
        rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return True  # not Linux: go on at once (the test then only checks the exit)
    for row in rows:
        remote, state = row.split()[2:4]
        if state == "01" and int(remote.rsplit(":", 1)[1], 16) == port:
            return True
    return False
