"""``populace run`` shows the estimate and asks before a large run on a served model (issue
28): refused in one line without a terminal, asked in one, never with ``--yes``, a replay or
a model without a server; a resume, a fork and a sweep count what they are about to play.

Against ``populace serve-llm`` (the scripted game: one call per agent and round). The
in-process runs lower the threshold with ``confirm_above:``, so that they stay small."""

from __future__ import annotations

import io
import os
import pty
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import forkserver
from cli_helpers import environment, run_in_process, run_ok
from populace.launch import fork
from populace.results import read_summary

Cap = pytest.CaptureFixture[str]
Patch = pytest.MonkeyPatch


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A ``serve-llm`` answering the game's prompts, for the whole module."""
    log = tmp_path_factory.mktemp("server") / "server.txt"
    with log.open("w") as stdout:
        server = forkserver.spawn(
            [sys.executable, "-m", "populace.cli", "serve-llm", "--port", "0", "--policy",
             "scripted", "--model", "scripted"],
            stdout=stdout, stderr=subprocess.STDOUT, env=environment())
    try:
        deadline = time.monotonic() + 30
        while not (found := re.search(r"http://127\.0\.0\.1:\d+/v1", log.read_text())):
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        yield found.group(0)
    finally:
        server.kill()
        server.wait(timeout=30)


def game(directory: Path, url: str, agents: int, rounds: int = 1, **more: Any) -> Path:
    path = directory / "game.yaml"
    path.write_text(yaml.safe_dump({
        "scenario": "guess_number", "name": "game", "seed": 3, "agents": agents,
        "rounds": rounds, "models": {
            "scripted": {"provider": "openai", "model": "scripted", "base_urls": [url],
                         "max_concurrency": 64}}, **more}))
    return path


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def stdin(monkeypatch: Patch, text: str = "", *, terminal: bool = False) -> None:
    monkeypatch.setattr(sys, "stdin", (_Terminal if terminal else io.StringIO)(text))


def one_line(err: str) -> str:
    assert err.count("\n") == 1, err
    return " ".join(err.split())


# -- as a user meets it: the default threshold, a process of its own -------------------------

def test_a_large_run_without_a_terminal_is_refused_in_one_line(tmp_path: Path,
                                                               url: str) -> None:
    out = tmp_path / "out"
    done = forkserver.run(
        [sys.executable, "-m", "populace.cli", "run", game(tmp_path, url, 12_000), "--out",
         out], stdin=subprocess.DEVNULL, capture_output=True, text=True, env=environment(),
        timeout=120)
    assert done.returncode == 2, done.stderr
    line = one_line(done.stderr)
    assert line.startswith("error: the run is predicted to make 12,000 LLM calls"), line
    assert line.endswith("more than the 10,000 that populace run starts without asking; "
                         "pass --yes to start it"), line
    assert "predicted: 12,000 calls" in done.stdout  # the estimate, as populace estimate says
    assert "Traceback" not in done.stderr and not out.exists()


def test_in_a_terminal_it_asks_and_a_no_starts_nothing(tmp_path: Path, url: str) -> None:
    out = tmp_path / "out"
    terminal, inside = pty.openpty()
    os.write(terminal, b"n\n")  # waits in the terminal until the question reads it
    try:
        done = forkserver.run(
            [sys.executable, "-m", "populace.cli", "run", game(tmp_path, url, 12_000), "--out",
             out], stdin=inside, capture_output=True, text=True, env=environment(),
            timeout=120)
    finally:
        os.close(inside)
        os.close(terminal)
    assert done.returncode == 1, done.stderr
    assert "more than the 10,000 that populace run starts without asking. Start it? [y/N]" \
        in " ".join(done.stdout.split())
    assert one_line(done.stderr) == "error: the run was not started (the answer was no)"
    assert not out.exists()


# -- in this process, a lower threshold -----------------------------------------------------

def test_yes_starts_it_without_a_pilot(tmp_path: Path, url: str, capsys: Cap,
                                       monkeypatch: Patch) -> None:
    stdin(monkeypatch)
    path = game(tmp_path, url, 300, confirm_above=100)
    code, _, err = run_in_process(capsys, monkeypatch, "run", path, "--out", tmp_path / "no")
    assert code == 2 and "pass --yes to start it" in one_line(err)
    assert not (tmp_path / "no").exists()
    code, out, err = run_in_process(capsys, monkeypatch, "run", path, "--out",
                                    tmp_path / "yes", "--yes")
    assert code == 0, err
    assert "estimating" not in out and "predicted" not in out
    assert read_summary(tmp_path / "yes")["status"] == "completed"


def test_in_a_terminal_a_yes_starts_it(tmp_path: Path, url: str, capsys: Cap,
                                       monkeypatch: Patch) -> None:
    stdin(monkeypatch, "y\n", terminal=True)
    code, out, err = run_in_process(capsys, monkeypatch, "run",
                                    game(tmp_path, url, 300, confirm_above=100),
                                    "--out", tmp_path / "out")
    assert code == 0, err
    text = " ".join(out.split())
    assert "predicted: 300 calls" in text
    assert ("the run is predicted to make 300 LLM calls (" in text
            and "more than the 100 that populace run starts without asking. Start it?" in text)
    assert read_summary(tmp_path / "out")["status"] == "completed"


def test_below_the_threshold_it_says_the_estimate_and_starts(tmp_path: Path, url: str,
                                                              capsys: Cap,
                                                              monkeypatch: Patch) -> None:
    stdin(monkeypatch)  # 300 agents could make 3,000 calls: worth a pilot
    code, out, err = run_in_process(capsys, monkeypatch, "run",
                                    game(tmp_path, url, 300, confirm_above=1000),
                                    "--out", tmp_path / "out")
    assert code == 0, err
    assert "predicted for the run: 300 LLM calls" in out and "Start it?" not in out


def test_a_run_too_small_to_reach_it_is_not_piloted(tmp_path: Path, url: str, capsys: Cap,
                                                    monkeypatch: Patch) -> None:
    stdin(monkeypatch)  # the default threshold: 300 agents × 1 step × 10 calls is below it
    code, out, err = run_in_process(capsys, monkeypatch, "run", game(tmp_path, url, 300),
                                    "--out", tmp_path / "out")
    assert code == 0, err
    assert "estimating" not in out and "predicted" not in out


@pytest.mark.parametrize("model", [{"provider": "dummy", "latency": 0.0},
                                   {"provider": "scripted"}])
def test_a_model_without_a_server_never_asks(tmp_path: Path, model: dict[str, Any],
                                             capsys: Cap, monkeypatch: Patch) -> None:
    stdin(monkeypatch)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"scenario": "guess_number", "agents": 50, "rounds": 2,
                                    "models": {"m": model}, "confirm_above": 0}))
    code, out, err = run_in_process(capsys, monkeypatch, "run", path, "--out", tmp_path / "out")
    assert code == 0, err
    assert "estimating" not in out


# -- what a resume, a fork, a sweep and a replay are about to spend --------------------------

@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory, url: str) -> Path:
    """A finished run of 300 agents × 3 rounds: 900 calls."""
    directory = tmp_path_factory.mktemp("played")
    run_ok("run", game(directory, url, 300, 3), "--out", directory / "run", "--yes")
    return directory / "run"


def test_a_resume_counts_the_steps_it_still_plays(tmp_path: Path, played: Path, capsys: Cap,
                                                  monkeypatch: Patch) -> None:
    stdin(monkeypatch)
    stopped = tmp_path / "stopped"
    # a run directory that has played 1 of its 3 steps; the 2 steps left make 600 calls
    fork(played, 1, {"confirm_above": 500}, stopped)
    code, out, err = run_in_process(capsys, monkeypatch, "run", "--resume", stopped)
    assert code == 2
    assert one_line(err).startswith("error: the resume is predicted to make 600 LLM calls")
    assert "the resume plays 2 of the 3 steps: 600 LLM calls" in " ".join(out.split())
    assert read_summary(stopped)["status"] == "interrupted"  # refused, not removed
    config = stopped / "config.yaml"  # the whole run's 900 are above 700; what is left not
    config.write_text(config.read_text().replace("confirm_above: 500", "confirm_above: 700"))
    code, out, err = run_in_process(capsys, monkeypatch, "run", "--resume", stopped)
    assert code == 0, err
    assert "predicted for the resume: 600 LLM calls" in out
    assert read_summary(stopped)["status"] == "completed"


def test_a_fork_counts_the_steps_after_at_and_a_refused_one_leaves_nothing(
        tmp_path: Path, played: Path, capsys: Cap, monkeypatch: Patch) -> None:
    stdin(monkeypatch)
    target = tmp_path / "fork"
    code, _, err = run_in_process(capsys, monkeypatch, "run", "--fork", played, "--at", "2",
                                  "--set", "confirm_above=200", "--out", target)  # 300 calls
    assert code == 2
    assert one_line(err).startswith("error: the fork is predicted to make 300 LLM calls")
    assert not target.exists()
    code, out, err = run_in_process(capsys, monkeypatch, "run", "--fork", played, "--at", "2",
                                    "--set", "confirm_above=400", "--out", target)
    assert code == 0, err
    assert "predicted for the fork: 300 LLM calls" in out
    assert read_summary(target)["status"] == "completed"


def test_a_sweep_asks_once_for_all_its_points(tmp_path: Path, url: str, capsys: Cap,
                                              monkeypatch: Patch) -> None:
    stdin(monkeypatch)  # two points of 300 calls each
    path = game(tmp_path, url, 300, sweep={"seed": [1, 2]}, confirm_above=500)
    code, out, err = run_in_process(capsys, monkeypatch, "run", path, "--out", tmp_path / "out")
    assert code == 2
    assert one_line(err).startswith("error: the sweep is predicted to make 600 LLM calls")
    assert out.count("estimating seed=") == 2 and "seed=1: predicted: 300 calls" in out
    assert not (tmp_path / "out").exists()


def test_a_replay_never_asks(tmp_path: Path, url: str, played: Path, capsys: Cap,
                             monkeypatch: Patch) -> None:
    stdin(monkeypatch)
    code, out, err = run_in_process(capsys, monkeypatch, "run",
                                    game(tmp_path, url, 300, 3, confirm_above=0),
                                    "--replay", played, "--out", tmp_path / "out")
    assert code == 0, err
    assert "estimating" not in out


@pytest.mark.parametrize(("value", "why"), [
    (-1, "Input should be greater than or equal to 0 (got -1)"),
    ("lots", "Input should be a valid integer (got 'lots')"),
    (1.5, "Input should be a valid integer (got 1.5)"),
])
def test_a_bad_confirm_above_is_one_line_naming_it(tmp_path: Path, url: str, value: Any,
                                                   why: str, capsys: Cap,
                                                   monkeypatch: Patch) -> None:
    stdin(monkeypatch)
    path = game(tmp_path, url, 300, confirm_above=value)
    code, _, err = run_in_process(capsys, monkeypatch, "run", path, "--out", tmp_path / "out")
    assert code == 2
    assert one_line(err) == f"error: {path}: confirm_above: {why}"
    assert not (tmp_path / "out").exists()
