"""``populace run`` on a scenario file (``scenario: my_scenario.py``): runs, bad input, stops."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from cli_helpers import run_in_process
from populace.results import read_summary

OPINIONS = Path(__file__).parents[2] / "examples" / "opinions" / "opinions.yaml"

SCENARIO = '''
import asyncio

DEFAULTS = {"agents": 10, "days": 3, "speed": 1.5, "label": "x", "verbose": False}

async def run(config):
    cfg = {**DEFAULTS, **config}
    if cfg["label"] == "boom":
        raise ValueError("the label says boom")
    if cfg["label"] == "slow":
        print("started", flush=True)
        await asyncio.sleep(60)
    return {"agents": cfg["agents"], "total": cfg["agents"] * cfg["days"] * cfg["speed"]}

def report(result):
    print("total", result["total"])
'''


def scenario(tmp_path: Path, **settings: object) -> Path:
    (tmp_path / "mine.py").write_text(SCENARIO)
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"scenario": "mine.py", **settings}))
    return path


def test_the_opinions_example_runs_from_its_run_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = tmp_path / "out"
    code, stdout, stderr = run_in_process(capsys, monkeypatch, "run", OPINIONS,
                                          "--agents", "300", "--out", out)
    assert code == 0, stderr
    assert "final opinion mean" in stdout
    summary = read_summary(out)
    assert summary["status"] == "completed"
    assert summary["result"]["config"]["agents"] == 300
    assert len(summary["result"]["days"]) == 14
    assert yaml.safe_load((out / "config.yaml").read_text())["agents"] == 300


def test_settings_and_overrides_reach_the_scenario(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, stdout, stderr = run_in_process(
        capsys, monkeypatch, "run", scenario(tmp_path, days=4, speed=2), "--agents", "5",
        "--out", tmp_path / "out")
    assert code == 0, stderr
    assert "total 40" in stdout  # 5 agents × 4 days × speed 2 (an integer is a number)
    assert read_summary(tmp_path / "out")["result"] == {"agents": 5, "total": 40}


@pytest.mark.parametrize(("settings", "message"), [
    ({"speed": "fast"}, "speed: expected a number (like the default 1.5), got 'fast'"),
    ({"days": 2.5}, "days: expected an integer (like the default 3), got 2.5"),
    ({"days": True}, "days: expected an integer (like the default 3), got True"),
    ({"verbose": 1}, "verbose: expected true or false (like the default False), got 1"),
    ({"label": 7}, "label: expected a string (like the default 'x'), got 7"),
    ({"dayz": 3}, "dayz: unknown key (expected one of: agents, days, speed, label, verbose)"),
])
def test_a_bad_setting_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    settings: dict[str, object], message: str,
) -> None:
    path = scenario(tmp_path, **settings)
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", path, "--out", tmp_path / "o")
    assert code == 2
    assert stderr.strip() == f"error: {path}: {message}"
    assert not (tmp_path / "o").exists()  # nothing created


def test_a_scenario_that_raises_is_one_line_with_the_traceback_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    path, out = scenario(tmp_path, label="boom"), tmp_path / "out"
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", path, "--out", out)
    assert code == 1
    assert stderr.strip().splitlines() == [
        f"error: {path}: scenario mine.py, line 9: ValueError: the label says boom (traceback "
        f"in {out / 'error.txt'})"]
    assert "Traceback" in (out / "error.txt").read_text()
    summary = read_summary(out)
    assert (summary["status"], summary["error"]) == ("failed", "ValueError: the label says boom")


def test_a_scenario_file_that_does_not_import_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = scenario(tmp_path)
    (tmp_path / "mine.py").write_text("def run(config:\n")
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", path)
    assert code == 2
    assert stderr.strip().startswith(f"error: {path}: scenario: mine.py does not import: "
                                     "mine.py, line 1: SyntaxError:")


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["SIGINT", "SIGTERM"])
def test_a_scenario_stops_cleanly_on_a_signal(tmp_path: Path, sig: signal.Signals,
                                              status: int) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "NO_COLOR": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "populace.cli", "run",
                             str(scenario(tmp_path, label="slow")), "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    while "started" not in proc.stdout.readline():
        assert time.monotonic() < deadline
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == status, stderr
    assert "Traceback" not in stderr
    assert stderr.strip() == f"error: stopped; what the scenario wrote is in {out}"
    assert read_summary(out)["status"] == "interrupted"


def test_a_scenario_run_can_be_watched_in_the_studio(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = tmp_path / "out"
    code, stdout, stderr = run_in_process(capsys, monkeypatch, "run", OPINIONS, "--agents",
                                          "200", "--studio", "--studio-port", "0", "--out", out)
    assert code == 0, stderr
    assert f"#/run/{out.name}" in stdout and "studio: http://127.0.0.1:" in stdout
    assert read_summary(out)["status"] == "completed"
