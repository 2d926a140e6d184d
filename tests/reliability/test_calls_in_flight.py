"""Ctrl-C and SIGTERM while LLM calls are in flight: one line, no asyncio noise (issue 33).

The run talks to ``populace serve-llm`` answering after 60 s, so every agent's call is an
HTTP request in flight (or queued behind the 16 connections) when the signal comes. The
stopped workers cancel those calls while the event loop still runs; before, the garbage
collector closed them after the loop had closed, printing thousands of lines ("Task was
destroyed but it is pending!", a traceback per call, "coroutine already executing").
"""

from __future__ import annotations

import json
import os
import signal
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from populace.results import read_summary

CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


def _in_flight(base_url: str) -> int:
    with urllib.request.urlopen(f"{base_url.removesuffix('/v1')}/stats", timeout=10) as r:
        return int(json.loads(r.read())["in_flight"])


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_with_calls_in_flight_prints_one_line(
        sig: signal.Signals, tmp_path: Path, populace: Callable[..., Any],
        helpers: Any) -> None:
    server = populace("serve-llm", "--port", "0", "--latency", "60")
    base_url = server.wait_for("serving dummy at ", timeout=60).split(" at ", 1)[1].split()[0]
    path = tmp_path / "run.yaml"
    path.write_text(json.dumps({
        "scenario": "guess_number", "name": "in-flight", "seed": 5, "agents": 300,
        "rounds": 2, "workers": 2,
        "models": {"llm": {"provider": "openai", "model": "dummy", "base_urls": [base_url],
                           "max_concurrency": 16, "timeout": 120}},
    }))
    out = tmp_path / "out"
    run = populace("run", path, "--out", out)
    helpers.wait_until(lambda: _in_flight(base_url) >= 16, 60, "16 calls in flight")
    os.kill(run.pid, sig)
    status, _, stderr = run.finish(timeout=30)
    assert status == CODES[sig], stderr
    # stopped by the run, not by the watchdog: its line would say "did not stop within"
    assert stderr.splitlines() == [
        f"error: stopped; finished steps are in {out}; continue with: "
        f"populace run --resume {out}"]
    assert read_summary(out)["status"] == "interrupted"
    # The cancelled requests were abandoned by the client, not left hanging in the server.
    helpers.wait_until(lambda: _in_flight(base_url) == 0, 30, "the server's requests ending")
