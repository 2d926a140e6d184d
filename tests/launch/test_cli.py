"""``populace run`` on scenarios of the Scenario API: overrides, errors, signals, studio."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

import forkserver
from cli_helpers import run_in_process
from populace.results import read_summary, read_table

OPINIONS = Path(__file__).parents[2] / "examples" / "opinions" / "opinions.yaml"
NAN_VOTES = Path(__file__).with_name("nan_votes.py")


def test_the_opinions_example_takes_the_common_overrides(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = tmp_path / "out"
    code, stdout, stderr = run_in_process(capsys, monkeypatch, "run", OPINIONS, "--agents",
                                          "500", "--rounds", "3", "--out", out)
    assert code == 0, stderr
    assert "step 3/3: date=2024-03-04" in stdout
    summary = read_summary(out)
    assert (summary["status"], summary["agents"], len(summary["steps"])) == ("completed", 500, 3)
    table = read_table(out, "opinions")
    assert table.num_rows == 1500
    assert sorted(set(table["step"].to_pylist())) == [1, 2, 3]
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert (config["agents"], config["steps"], config["settings"]["radius"]) == (500, 3, 3.0)


def test_an_override_a_scenario_cannot_take_is_exit_2(
    votes_file: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = votes_file(cls="FixedTown")
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", path, "--agents", "5",
                                     "--out", tmp_path / "o")
    assert code == 2
    assert stderr.strip() == ("error: --agents: scenario 'fixed-town' does not take agents "
                              "(it takes: address, backend, seed, steps, workers)")
    assert not (tmp_path / "o").exists()  # nothing created


def test_a_bad_setting_is_one_line_and_exit_2(
    votes_file: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = votes_file(settings={"think": "slow"})
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", path, "--out", tmp_path / "o")
    assert code == 2
    assert stderr.strip() == (f"error: {path}: settings.think: Input should be a valid number, "
                              "unable to parse string as a number (got 'slow')")
    assert not (tmp_path / "o").exists()


def test_a_scenario_that_raises_is_one_line_with_the_traceback_kept(
    votes_file: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path, out = votes_file(settings={"fail_at": 2}), tmp_path / "out"
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", path, "--out", out)
    assert code == 1
    lines = stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"error: {path}: scenario votes.py, line ")
    assert lines[0].endswith(f": RuntimeError: step 2 breaks on purpose (traceback in "
                             f"{out / 'error.txt'})")
    assert "Traceback" in (out / "error.txt").read_text()
    summary = read_summary(out)
    assert (summary["status"], summary["error"]) == ("failed",
                                                     "RuntimeError: step 2 breaks on purpose")
    assert len(summary["steps"]) == 1  # the finished step is kept


def test_an_agent_that_raises_fails_the_run_naming_its_error(
    votes_file: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path, out = votes_file(settings={"broken": 7}), tmp_path / "out"
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", path, "--out", out)
    assert code == 1
    lines = stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"error: {path}: scenario votes.py, line ")
    assert ": ValueError: voter 7 cannot decide (raised by agent 7 in Voter.vote()) " \
        "(traceback in " in lines[0]
    assert read_summary(out)["status"] == "failed"


def test_a_scenario_file_that_does_not_import_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "mine.py").write_text("class Mine(:\n")
    path = tmp_path / "run.yaml"
    path.write_text("scenario: mine.py:Mine\n")
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", path)
    assert code == 2
    assert stderr.strip().startswith(f"error: {path}: scenario: mine.py does not import: "
                                     "mine.py, line 1: SyntaxError:")


@pytest.mark.parametrize("broken", ["raise RuntimeError('now broken')\n",
                                    "import sys\nsys.exit(0)\n"], ids=["raises", "exits"])
def test_a_scenario_file_that_stops_importing_after_its_run_is_one_line(
        tmp_path: Path, broken: str) -> None:
    """Issue 33: a scenario file failing at import (or exiting there) never leaves a run
    directory without summary.json: nothing is made before it imports; a run whose file
    breaks afterwards keeps its summary, is read by report, and its resume is one line."""
    def populace(*args: str | Path) -> tuple[int, str]:  # a process each: a fresh import
        done = forkserver.run([sys.executable, "-m", "populace.cli", *map(str, args)],
                              capture_output=True, text=True, timeout=120, cwd=tmp_path,
                              env={**os.environ, "NO_COLOR": "1"})
        return done.returncode, done.stderr

    (tmp_path / "mine.py").write_text(broken)
    path = tmp_path / "run.yaml"
    path.write_text("scenario: mine.py:Mine\nagents: 3\n")
    code, stderr = populace("run", path, "--out", tmp_path / "o")
    assert code == 2 and len(stderr.strip().splitlines()) == 1, stderr
    assert not (tmp_path / "o").exists()

    (tmp_path / "mine.py").write_text(
        "from populace.launch import Scenario\n\n\nclass Mine(Scenario):\n"
        "    async def step(self, run, t):\n        run.metric('x', t)\n")
    assert populace("run", path, "--out", tmp_path / "o") == (0, "")
    (tmp_path / "mine.py").write_text(broken)
    code, stderr = populace("run", "--resume", tmp_path / "o")
    assert code == 2 and len(stderr.strip().splitlines()) == 1, stderr
    assert "scenario: mine.py does not import" in stderr and "Traceback" not in stderr
    assert read_summary(tmp_path / "o")["status"] == "completed"
    code, stderr = populace("report", tmp_path / "o")
    assert code == 0 and stderr.startswith("warning: "), stderr
    assert (tmp_path / "o" / "report.html").is_file()


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["SIGINT", "SIGTERM"])
def test_a_scenario_stops_cleanly_on_a_signal_and_resumes(
        votes_file: Callable[..., Path], tmp_path: Path, sig: signal.Signals,
        status: int) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "NO_COLOR": "1"}
    path = votes_file(agents=100, steps=3, settings={"think": 0.5})
    proc = forkserver.spawn([sys.executable, "-m", "populace.cli", "run", str(path), "--out",
                             str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while not proc.stdout.readline().startswith("step 1/3:"):
        assert time.monotonic() < deadline
    time.sleep(0.2)  # inside step 2
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == status, stderr
    assert stderr.strip() == (f"error: stopped; finished steps are in {out}; continue with: "
                              f"populace run --resume {out}")
    summary = read_summary(out)
    assert summary["status"] == "interrupted" and "error" not in summary  # a clean stop
    done = forkserver.run([sys.executable, "-m", "populace.cli", "run", "--resume", str(out)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    summary = read_summary(out)
    assert (summary["status"], [e["step"] for e in summary["steps"]]) == ("completed",
                                                                          [1, 2, 3])
    assert read_table(out, "votes").num_rows == 300


def test_a_scenario_run_can_be_watched_in_the_studio(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = tmp_path / "out"
    code, stdout, stderr = run_in_process(capsys, monkeypatch, "run", OPINIONS, "--agents",
                                          "200", "--rounds", "2", "--studio", "--studio-port",
                                          "0", "--out", out)
    assert code == 0, stderr
    assert f"#/run/{out.name}" in stdout and "studio: http://127.0.0.1:" in stdout
    assert read_summary(out)["status"] == "completed"


def test_opinions_gives_the_same_tables_on_local_and_ray(tmp_path: Path,
                                                         ray_address: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    tables = {}
    for backend, join in (("local", []), ("ray", ["--address", ray_address])):
        out = tmp_path / backend
        done = forkserver.run([sys.executable, "-m", "populace.cli", "run", str(OPINIONS),
                               "--agents", "400", "--rounds", "2", "--backend", backend, *join,
                               "--out", str(out)], capture_output=True, text=True, env=env,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        assert read_summary(out)["backend"] == backend
        tables[backend] = read_table(out, "opinions")
    assert tables["local"].num_rows == 800
    assert tables["local"].equals(tables["ray"])


def test_an_address_without_ray_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", OPINIONS, "--address", "auto",
                                     "--out", tmp_path / "o")
    assert code == 2
    assert stderr.strip() == (f"error: {OPINIONS}: address: is only meaningful with "
                              "backend: ray")
    assert not (tmp_path / "o").exists()


def test_sys_exit_in_a_scenario_is_a_failure_not_an_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "quits.py").write_text(
        "import sys\nfrom populace.launch import Scenario\n\n\nclass Quits(Scenario):\n"
        "    async def step(self, run, t):\n        sys.exit(0)\n")
    path, out = tmp_path / "quits.yaml", tmp_path / "out"
    path.write_text("scenario: quits.py:Quits\n")
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", path, "--out", out)
    assert code == 1
    assert stderr.strip().startswith(f"error: {path}: scenario quits.py, line 7: SystemExit: 0")
    assert read_summary(out)["status"] == "failed"


def test_a_scenario_file_imports_its_neighbours_on_every_backend(tmp_path: Path,
                                                                ray_address: str) -> None:
    (tmp_path / "people.py").write_text(
        "from populace.core import Agent\n\n\nclass Counter(Agent):\n"
        "    async def count(self, t):\n        return self.id * t\n")
    (tmp_path / "count.py").write_text(
        "from people import Counter\nfrom populace.launch import Scenario\n\n\n"
        "class Count(Scenario):\n    async def setup(self, run):\n"
        "        self.people = await run.create(Counter)\n\n"
        "    async def step(self, run, t):\n"
        "        run.metric('total', sum(await run.collect(self.people.map(Counter.count, t))))\n")
    path = tmp_path / "count.yaml"
    path.write_text("scenario: count.py:Count\nagents: 10\nsteps: 2\nworkers: 2\n")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    # on Ray, a cluster joined (not started by the run): its workers see none of our files
    for backend, join in (("local", []), ("ray", ["--address", ray_address])):
        out = tmp_path / backend
        done = forkserver.run([sys.executable, "-m", "populace.cli", "run", str(path),
                               "--backend", backend, *join, "--out", str(out)], cwd="/",
                              capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr
        assert [e["total"] for e in read_summary(out)["steps"]] == [45, 90]


def test_wall_time_counts_every_attempt(votes_file: Callable[..., Path],
                                        tmp_path: Path) -> None:
    import asyncio

    from populace.launch import launch, load_run_file
    from populace.results import RunDirectory

    path = votes_file(agents=20, steps=2, settings={"think": 0.3})
    run_dir = RunDirectory.create(tmp_path / "out")
    first = asyncio.run(launch(load_run_file(path, {"steps": 1}), run_dir))
    summary = read_summary(run_dir.path)
    summary.update(status="interrupted", steps_planned=2)
    run_dir.write_summary(summary)
    whole = asyncio.run(launch(load_run_file(path), run_dir, resume=True))
    assert whole["wall_s"] >= first["wall_s"] + 0.3


def test_out_into_a_directory_with_other_files_is_refused(
    votes_file: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.yaml").write_text("my own notes\n")
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", votes_file(), "--out", mine)
    assert code == 2
    assert stderr.strip() == (f"error: {mine} is not empty and holds no run; choose a new or "
                              "empty output directory")
    assert (mine / "config.yaml").read_text() == "my own notes\n"


def test_a_full_disk_is_one_line_and_resumable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "full.py").write_text(
        "import errno\nfrom populace.launch import Scenario\n\n\nclass Full(Scenario):\n"
        "    async def step(self, run, t):\n        if t == 2:\n"
        "            raise OSError(errno.ENOSPC, 'No space left on device', '/data/parts')\n"
        "        run.metric('t', t)\n")
    path, out = tmp_path / "full.yaml", tmp_path / "out"
    path.write_text("scenario: full.py:Full\nsteps: 3\n")
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", path, "--out", out)
    assert code == 1
    assert stderr.strip() == (f"error: /data/parts: No space left on device; finished steps "
                              f"are in {out}; continue with: populace run --resume {out}")
    summary = read_summary(out)
    assert (summary["status"], len(summary["steps"])) == ("failed", 1)


def test_a_failed_preflight_leaves_no_run_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    votes_file: Callable[..., Path],
) -> None:
    path = votes_file(models={"m": {"provider": "openai", "model": "m",
                                    "base_urls": ["http://127.0.0.1:9/v1"]}})
    out = tmp_path / "out"
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", path, "--out", out)
    assert code == 2
    assert stderr.startswith("error: models.m: cannot reach http://127.0.0.1:9/v1")
    assert not out.exists()


def test_a_step_reporting_nan_still_writes_the_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = tmp_path / "out"
    path = tmp_path / "nan.yaml"
    path.write_text(yaml.safe_dump({"scenario": f"{NAN_VOTES}:NaNVotes", "agents": 20,
                                    "steps": 2}))
    code, stdout, stderr = run_in_process(capsys, monkeypatch, "run", path, "--out", out)
    assert code == 0, stderr
    assert "Traceback" not in stdout + stderr
    text = (out / "summary.json").read_text()
    assert ": NaN" not in text and "Infinity" not in text  # JSON, not Python's extension
    summary = read_summary(out)
    assert summary["status"] == "completed" and len(summary["steps"]) == 2
    step = summary["steps"][0]
    assert (step["nan"], step["np_nan"], step["inf"]) == (None, None, None)
    assert (step["series"], step["by_side"]) == ([1.0, None], {"yes": None, "no": 0.5})
    assert step["distributions"]["all_nan"]["missing"] == 3
    assert step["distributions"]["all_nan"]["mean"] is None
    values = read_table(out, "nan_rows").column("value").to_pylist()
    assert values[1::2] == [1.0, 1.0] and all(v != v for v in values[::2])  # NaN kept


def test_every_file_of_a_run_honours_the_umask(
    votes_file: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = tmp_path / "out"
    path = votes_file(agents=20, steps=2)
    for mask, mode in ((0o022, 0o644), (0o077, 0o600)):
        before = os.umask(mask)
        try:
            code, _, stderr = run_in_process(capsys, monkeypatch, "run", path, "--out",
                                             out / oct(mask))
        finally:
            os.umask(before)
        assert code == 0, stderr
        files = [p for p in (out / oct(mask)).rglob("*") if p.is_file()]
        assert {p.name for p in files} >= {"summary.json", "config.yaml", "votes.parquet",
                                           "votes-r00001.parquet", "step-00002.ckpt"}
        assert {str(p): oct(p.stat().st_mode & 0o777) for p in files} == {
            str(p): oct(mode) for p in files}
