"""``populace studio`` and ``populace run --studio``, run as separate processes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

import forkserver
import populace.studio
from populace.results import read_summary


def public_names(module: types.ModuleType) -> set[str]:
    return {name for name, value in vars(module).items()
            if not name.startswith("_") and not isinstance(value, types.ModuleType)}


def test_studio_all_is_exactly_the_public_names() -> None:
    listed = populace.studio.__all__
    assert listed == sorted(listed) and len(set(listed)) == len(listed)
    assert set(listed) == public_names(populace.studio)


def test_the_run_command_loads_the_web_stack_only_with_studio() -> None:
    code = "import populace.cli, sys; print(sorted({'fastapi', 'uvicorn'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"


def spawn(*args: str | Path, cwd: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR")}
    env.update(NO_COLOR="1", PYTHONUNBUFFERED="1", POPULACE_STUDIO_TOKEN="")
    return forkserver.spawn([sys.executable, "-m", "populace.cli", *map(str, args)], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def url_from(proc: subprocess.Popen[str], timeout: float = 20) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        seen.append(line)
        m = re.search(r"(http://127\.0\.0\.1:\d+/\S*)", line)
        if m:
            return m.group(1)
        if not line and proc.poll() is not None:
            break
    raise AssertionError(f"no URL printed: {seen!r}")


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_run_with_studio_serves_the_live_run(tmp_path: Path, run_file: Callable[..., Path],
                                             processes: list[subprocess.Popen[str]]) -> None:
    config = run_file(tmp_path / "live.yaml", name="live", agents=2000, rounds=3, latency=0.5)
    proc = spawn("run", config, "--out", tmp_path / "runs" / "live", "--studio",
                 "--studio-port", "0", cwd=tmp_path)
    processes.append(proc)
    url = url_from(proc)
    assert url.endswith("/#/run/live")
    base = url.split("#")[0].rstrip("/")
    snap = httpx.get(f"{base}/api/runs/live").json()
    assert snap["live"] is True and snap["status"] in ("starting", "running")
    assert httpx.get(f"{base}/").text.startswith("<!doctype html>")
    listed = httpx.get(f"{base}/api/runs").json()
    assert listed[0]["id"] == "live" and listed[0]["live"] is True
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert read_summary(tmp_path / "runs" / "live")["status"] == "completed"
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{base}/api/runs", timeout=2)  # the studio left with the run


def test_run_stopped_from_the_studio_exits_cleanly(tmp_path: Path,
                                                   run_file: Callable[..., Path],
                                                   processes: list[subprocess.Popen[str]]
                                                   ) -> None:
    config = run_file(tmp_path / "long.yaml", name="long", agents=500, rounds=20, latency=0.3)
    out_dir = tmp_path / "runs" / "long"
    proc = spawn("run", config, "--out", out_dir, "--studio", "--studio-port", "0",
                 cwd=tmp_path)
    processes.append(proc)
    base = url_from(proc).split("#")[0].rstrip("/")
    deadline = time.monotonic() + 20
    while httpx.get(f"{base}/api/runs/long").json()["steps_done"] < 1:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert httpx.post(f"{base}/api/runs/long/stop").json()["status"] == "stopping"
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "stopped from the studio; finished steps are in" in out
    assert f"populace run --resume {out_dir}" in out.replace("\n", "")
    summary = read_summary(out_dir)
    assert summary["status"] == "stopped" and 1 <= len(summary["steps"]) < 20


def test_studio_command_serves_until_interrupted(tmp_path: Path, run_file: Callable[..., Path],
                                                 processes: list[subprocess.Popen[str]]) -> None:
    run_file(tmp_path / "a.yaml")
    (tmp_path / "runs").mkdir()
    proc = spawn("studio", "--port", "0", "--runs", tmp_path / "runs", cwd=tmp_path)
    processes.append(proc)
    url = url_from(proc)
    assert "token" not in url  # loopback: no token
    base = url.rstrip("/")
    assert httpx.get(f"{base}/api/runs").json() == []
    assert httpx.get(f"{base}/api/configs").json() == ["a.yaml"]
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, err  # like any command stopped by Ctrl-C
    assert "studio stopped" in out and "Traceback" not in err


def test_studio_command_with_a_token(tmp_path: Path,
                                     processes: list[subprocess.Popen[str]]) -> None:
    proc = spawn("studio", "--port", "0", "--runs", tmp_path, "--token", "abc123", cwd=tmp_path)
    processes.append(proc)
    url = url_from(proc)
    assert url.endswith("/?token=abc123")
    base = url.split("?")[0].rstrip("/")
    assert httpx.get(f"{base}/api/runs").status_code == 401
    assert httpx.get(url).status_code == 200
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=20)


def test_a_busy_port_is_one_clear_line(tmp_path: Path) -> None:
    import socket

    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        proc = spawn("studio", "--port", port, "--runs", tmp_path, cwd=tmp_path)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 1
    assert err.strip().splitlines() == [
        f"error: studio: cannot listen on 127.0.0.1:{port}: Address already in use"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_to_the_studio_stops_its_runs_cleanly(
        tmp_path: Path, processes: list[subprocess.Popen[str]], sig: signal.Signals) -> None:
    votes = Path(__file__).parents[1] / "launch" / "votes.py"
    (tmp_path / "long.yaml").write_text(
        f"scenario: {votes}:Votes\nname: long\nagents: 50\nsteps: 50\n"
        "settings: {think: 0.3}\n")
    (tmp_path / "runs").mkdir()
    proc = spawn("studio", "--port", "0", "--runs", tmp_path / "runs", cwd=tmp_path)
    processes.append(proc)
    base = url_from(proc).rstrip("/")
    run_id = httpx.post(f"{base}/api/runs", json={"config": "long.yaml"}).json()["id"]
    deadline = time.monotonic() + 60
    while httpx.get(f"{base}/api/runs/{run_id}").json()["steps_done"] < 1:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert "Traceback" not in err and "studio stopped" in out
    assert proc.returncode == (130 if sig == signal.SIGINT else 143), err  # as populace run
    summary = json.loads((tmp_path / "runs" / run_id / "summary.json").read_text())
    assert summary["status"] == "stopped", summary  # not left "running"
    assert 1 <= len(summary["steps"]) < 50
