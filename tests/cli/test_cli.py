"""The ``populace`` command, run as a user runs it: a separate process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

import forkserver
from populace.results import read_summary, read_table

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "guess_number.yaml"


def populace(*args: str | Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run the command in a new process, as a user would."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR")}
    env["NO_COLOR"] = "1"
    return forkserver.run(
        [sys.executable, "-m", "populace.cli", *map(str, args)],
        capture_output=True, text=True, timeout=timeout, env=env,
    )


@pytest.fixture
def fast_example(tmp_path: Path) -> Path:
    """The shipped example with a 10 ms model, so that a run takes well under a second."""
    data = yaml.safe_load(EXAMPLE.read_text())
    assert data["models"]["dummy"]["latency"] > 0.01  # the edit below must change something
    data["models"]["dummy"]["latency"] = 0.01
    path = tmp_path / "example.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_run_writes_a_complete_run_directory(tmp_path: Path, fast_example: Path) -> None:
    out = tmp_path / "a-rather-long-directory-name-for-the-results-of-this-run"
    proc = populace("run", fast_example, "--agents", "300", "--rounds", "2", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stdout.splitlines()
    for r in (1, 2):
        assert any(line.startswith(f"round {r}/2: n=300 valid=300 mean=") and "winner=" in line
                   for line in lines), proc.stdout
    # The result directory is printed whole, on one line, even in a narrow pipe.
    assert any(line.startswith("wall time") and line.endswith(f"results in {out}")
               for line in lines), proc.stdout

    config = yaml.safe_load((out / "config.yaml").read_text())
    assert (config["agents"], config["rounds"], config["seed"]) == (300, 2, 42)
    assert config["name"] == "guess-number-demo"
    assert config["models"]["dummy"] == {"provider": "dummy", "latency": 0.01, "jitter": 0.0,
                                         "low": 0, "high": 100}
    game = config["game"]
    assert game["ratio"] == "2/3"
    # The default prompt: the rules, then the level's instruction; what happened in earlier
    # rounds reaches participants through their conversation, not through {history}.
    assert "{n_players}" in game["prompt"] and game["prompt"].endswith(" {instruction}")
    assert "{history}" not in game["prompt"]
    assert (game["level"], game["famous_note"], game["protocol"]) == ("P1", False, "auto")
    assert (game["memory_rounds"], game["max_tokens"]) == (5, None)
    for key in ("offset", "low", "high", "feedback", "temperature", "groups"):
        assert key in game  # every default is written out, not just what the file set
    assert {"scenario", "workers", "backend", "model", "assign"} <= set(config)
    assert config["assign"] is None

    profiles = pq.read_table(out / "profiles.parquet")
    assert profiles.num_rows == 300
    assert profiles.column("agent_id").to_pylist() == list(range(300))

    responses = read_table(out)
    assert (out / "responses.parquet").exists()
    assert responses.num_rows == 600
    assert sorted(set(responses.column("round").to_pylist())) == [1, 2]
    # auto is the direct protocol for the dummy model: one call each, nothing to extract.
    assert set(responses.column("calls").to_pylist()) == {1}
    assert responses.column("extract_raw").null_count == 600

    summary = read_summary(out)
    assert summary["status"] == "completed"
    assert summary["models"] == ["dummy"]
    assert isinstance(summary["wall_s"], float) and summary["wall_s"] > 0
    assert [r["round"] for r in summary["steps"]] == [1, 2]
    for entry in summary["steps"]:
        assert {"round", "n", "n_valid", "mean", "median", "std", "target",
                "winner_number"} <= set(entry)
        assert (entry["n"], entry["n_valid"]) == (300, 300)
        assert entry["target"] == pytest.approx(entry["mean"] * 2 / 3)
        assert entry["usage"] == {"dummy": {"agents": 300, "calls": 300, "retries": 0,
                                            "prompt_tokens": 0, "completion_tokens": 0}}
        assert f"winner={entry['winner_number']:g} " in proc.stdout

    # The same output directory again: refused, and the first run is untouched.
    again = populace("run", fast_example, "--agents", "10", "--out", out)
    assert again.returncode == 2
    assert again.stderr.strip().splitlines() == [f"error: {out} already holds a run; "
                                                 "choose another output directory"]
    assert read_summary(out)["agents"] == 300


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bad-run.yaml"
    path.write_text(text)
    return path


def test_bad_run_file_in_a_process(tmp_path: Path) -> None:
    path = _write(tmp_path, "scenario: guess_number\nagents: 10\ngame:\n  ratio: 1/2\n"
                            "  ratoi: 1/2\n")
    proc = populace("run", path, "--out", tmp_path / "out")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    # The hint lists every key game: accepts, in the schema's order.
    from populace.scenarios.guess_number import GameConfig

    keys = list(GameConfig.model_fields)
    assert keys[:4] == ["ratio", "offset", "low", "high"] and "ratoi" not in keys
    assert proc.stderr.strip().splitlines() == [
        f"error: {path}: game.ratoi: unknown key (did you mean ratio?) (expected one of: "
        f"{', '.join(keys)})"]


def test_missing_run_file(tmp_path: Path) -> None:
    proc = populace("run", tmp_path / "nope.yaml")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [f"error: {tmp_path / 'nope.yaml'}: no such file"]


def test_bad_override_names_the_key(tmp_path: Path, fast_example: Path) -> None:
    proc = populace("run", fast_example, "--agents", "0", "--out", tmp_path / "out")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert lines[0] == "error: --agents 0: Input should be greater than or equal to 1"


def test_ctrl_c_keeps_finished_rounds(tmp_path: Path, fast_example: Path) -> None:
    data = yaml.safe_load(fast_example.read_text())
    data["models"]["dummy"]["latency"] = 0.3
    fast_example.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    env = {**os.environ, "NO_COLOR": "1"}
    proc = forkserver.spawn(
        [sys.executable, "-m", "populace.cli", "run", str(fast_example), "--agents", "200",
         "--rounds", "30", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("round 1/30"):
                break
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines() == [
        f"error: stopped; finished steps are in {out}; continue with: "
        f"populace run --resume {out}"]
    summary = read_summary(out)
    assert summary["status"] == "interrupted"
    done = len(summary["steps"])
    assert 1 <= done < 30
    assert sorted(set(read_table(out).column("round").to_pylist())) == list(range(1, done + 1))


def test_bench_json() -> None:
    proc = populace("bench", "--agents", "2000", "--latency", "0.01", "--json")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1
    result = json.loads(lines[0])
    assert {"agents", "create_s", "round_s", "cpu_us_per_agent", "peak_rss_mb"} <= set(result)
    assert result["agents"] == 2000
    assert result["create_s"] >= 0
    assert len(result["round_s"]) == len(result["cpu_us_per_agent"]) == 1
    assert result["round_s"][0] >= 0.01  # every agent waited for the dummy model
    assert result["cpu_us_per_agent"][0] > 0
    assert result["peak_rss_mb"] > 10
    # Shared pages counted once: less than the RSS sum, more than nothing (Linux ≥ 4.14).
    assert 5 < result["peak_pss_mb"] <= result["peak_rss_mb"]


def test_peak_memory_sums_a_process_tree_and_counts_shared_pages_once() -> None:
    """A child that maps the same 64 MB as its parent (fork, pages shared): the RSS sum
    counts them twice, the PSS sum once."""
    import os
    import signal
    import time

    from populace._procmem import PeakMemory

    block = bytearray(64 << 20)
    block[::4096] = b"x" * len(block[::4096])  # resident now
    with PeakMemory(interval=0.05) as peak:
        child = os.fork()
        if child == 0:  # pragma: no cover - the child only sleeps, sharing the block
            time.sleep(5)
            os._exit(0)
        time.sleep(1.2)  # a PSS read at most every second
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
    assert peak.pss_mb is not None
    assert peak.mb - peak.pss_mb > 50  # the shared 64 MB counted twice by RSS, once by PSS
    assert peak.pss_mb > 64


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["bench", "--agents", "0"], "Invalid value for '--agents'"),
        (["run"], "missing the run file: populace run CONFIG.yaml"),
    ],
)
def test_usage_errors(args: list[str], expected: str) -> None:
    proc = populace(*args)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert expected in proc.stderr


def test_no_arguments_shows_help() -> None:
    proc = populace()
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "run" in proc.stdout and "bench" in proc.stdout
