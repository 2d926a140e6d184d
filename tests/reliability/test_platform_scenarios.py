"""The platform promise for the two new built-in scenarios, survey and social: the parts no
other test covers for them.

1. a Ray worker killed (kill -9) mid-step: the run recovers by itself and its tables equal
   an undisturbed run's;
2. sweeps: every point in its own directory, ``sweep.json``, ``populace report`` on the
   root; each point equals a standalone run with that setting;
3. the studio lists a survey's run file in the working directory and starts it;
4. ``--replay``: a social run with ``policy: dummy`` and a survey recorded from the scripted
   model, replayed against a model that cannot be reached;
5. ``--resume`` of a finished run: exit 0, the tables untouched.

And one bug found on the way, fixed: under ``policy: model`` the social scenario's
results depended on the worker count (a feed looked up by local index).
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import os
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
import yaml

from cli_helpers import run_in_process
from populace.launch import launch, load_run_file
from populace.results import RunDirectory, read_summary, read_table

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "examples" / "social" / "small.yaml"
SOCIAL_TABLES = ("posts", "actions", "follows", "profiles")
SURVEY_TABLES = ("answers", "profiles")

# -- the runs ---------------------------------------------------------------------------------
#: Two waves of two questions; the second wave's skip logic reads the first wave's answers
#: (state a resumed run must have restored).
QUESTIONNAIRE = {
    "instructions": "You are taking part in a survey about public life.",
    "questions": [
        {"id": "voted", "type": "single_choice", "text": "Did you vote in the last election?",
         "options": ["yes", "no"]},
        {"id": "trust", "type": "likert", "text": "How much do you trust elections?",
         "scale": ["none", "little", "some", "a lot"]},
        {"id": "why_not", "type": "open", "text": "Why did you not vote?",
         "ask_if": 'voted == "no"', "code_into": ["time", "interest", "other"]},
        {"id": "hours", "type": "numeric", "text": "Hours a week following the news?",
         "range": [0, 40], "unit": "hours"},
    ],
    "waves": [["voted", "trust"], ["why_not", "hours"]],
}
SURVEY = {
    "scenario": "survey", "name": "platform-survey", "agents": 300, "seed": 4,
    "models": {"scripted": {"provider": "scripted"}},
    "population": {"aspects": {"education": {"template": "education"}}},
    "settings": {
        "questionnaire": "q.yaml",
        "treatments": {"stratify_by": "education", "arms": {
            "control": {"share": 0.5},
            "note": {"share": 0.5, "message": "Elections are counted twice, by hand.",
                     "before": ["trust"]}}}},
}


def survey_file(directory: Path, name: str = "survey.yaml", **changes: Any) -> Path:
    """``q.yaml`` and the survey run file (SURVEY with top-level ``changes``) in
    ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "q.yaml").write_text(yaml.safe_dump(QUESTIONNAIRE, sort_keys=False))
    path = directory / name
    path.write_text(yaml.safe_dump({**copy.deepcopy(SURVEY), **changes}, sort_keys=False))
    return path


def social_data(**changes: Any) -> dict[str, Any]:
    """examples/social/small.yaml at 5,000 agents and 4 steps (the claim at step 1, the
    correction at step 4), with top-level ``changes`` and ``settings`` ones under
    ``settings_``."""
    data = yaml.safe_load(SMALL.read_text())
    data["agents"] = data["population"]["size"] = 5000
    data["steps"] = 4
    data["settings"].update(changes.pop("settings_", {}))
    return {**data, **changes}


def write(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def launched(path: Path, out: Path, **options: Any) -> dict[str, Any]:
    """``path`` run here, as ``populace run`` does (without its console), into ``out``."""
    summary = asyncio.run(launch(load_run_file(path), RunDirectory.create(out), **options))
    assert summary["status"] == "completed", summary.get("error")
    return summary


def assert_same_tables(a: Path, b: Path, tables: tuple[str, ...]) -> None:
    for table in tables:
        left, right = read_table(a, table), read_table(b, table)
        assert left.num_rows == right.num_rows, (table, left.num_rows, right.num_rows)
        assert left.equals(right), f"table {table} differs between {a} and {b}"


def digests(run_dir: Path) -> dict[str, str]:
    """SHA-256 of every table file (consolidated and per step) of ``run_dir``."""
    return {str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(run_dir.rglob("*.parquet"))}


@pytest.fixture(scope="module")
def survey_done(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The survey (300 scripted respondents, 2 waves, 2 arms), finished and recorded."""
    base = tmp_path_factory.mktemp("survey")
    out = base / "out"
    summary = launched(survey_file(base), out)
    assert [e["step"] for e in summary["steps"]] == [1, 2]
    answers = read_table(out, "answers")
    assert set(answers.column("question").to_pylist()) == {"voted", "trust", "why_not",
                                                            "hours"}
    assert list((out / "llm_calls").glob("*.jsonl"))  # the scripted model's calls
    return out


@pytest.fixture(scope="module")
def social_dummy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """small.yaml at 5,000 agents, 4 steps, ``policy: dummy``: no model at all."""
    base = tmp_path_factory.mktemp("social-dummy")
    out = base / "out"
    launched(write(base / "social.yaml", social_data(settings_={"policy": "dummy"})), out)
    actions = set(read_table(out, "actions").column("action").to_pylist())
    assert actions == {"nothing", "post", "repost", "like", "follow"}, actions
    return out


# -- 1. a Ray worker killed mid-step ----------------------------------------------------------
def kill_a_worker_mid_step(populace: Callable[..., Any], helpers: Any, path: Path, out: Path,
                           first: str, second: str, into: float) -> None:
    """Run ``path`` on Ray (2 workers); ``into`` s after the line ``first``, kill -9 one
    worker actor's process; the run must recover by itself: exit 0, one warning naming the
    lost worker, the step after ``first`` (``second``) reported once."""
    pytest.importorskip("ray")
    if not Path("/proc/self/stat").exists():
        pytest.skip("finds the worker processes in /proc")
    run = populace("run", path, "--out", out)
    run.wait_for(first, timeout=120)
    time.sleep(into)  # inside the next step
    workers = helpers.ray_workers(run.pid)
    assert len(workers) == 2, workers
    victim = min(workers)
    os.kill(victim, signal.SIGKILL)
    rc, stdout, stderr = run.finish(timeout=120)
    assert rc == 0, stderr[-3000:]
    assert "Traceback" not in stderr
    assert stdout.count(second) == 1, stdout
    warnings = [line for line in stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, stderr
    assert f"(pid {victim}) died" in warnings[0], warnings[0]
    assert "restarting the workers from the last checkpoint" in warnings[0], warnings[0]
    summary = read_summary(out)
    assert (summary["status"], summary["backend"], summary["resumed_from_step"]) == \
        ("completed", "ray", 1), summary
    assert [e["step"] for e in summary["steps"]] == list(range(1, summary["steps_planned"] + 1))


def test_survey_recovers_from_a_ray_worker_killed_mid_wave(
        tmp_path: Path, populace: Callable[..., Any], helpers: Any) -> None:
    slow = {"dummy": {"provider": "dummy", "latency": 1.0}}  # 2 questions: 2 s a wave
    path = survey_file(tmp_path / "ray", models=slow, backend="ray", workers=2)
    kill_a_worker_mid_step(populace, helpers, path, tmp_path / "out", "step 1/2:",
                           "step 2/2:", into=0.5)
    # undisturbed: local, one worker, no latency (answers are seeded per call)
    fast = {"dummy": {"provider": "dummy", "latency": 0.0}}
    launched(survey_file(tmp_path / "local", models=fast), tmp_path / "undisturbed")
    assert_same_tables(tmp_path / "out", tmp_path / "undisturbed", SURVEY_TABLES)
    answers = read_table(tmp_path / "out", "answers").to_pylist()
    no = {r["agent_id"] for r in answers if r["question"] == "voted" and r["answer"] == "no"}
    assert 0 < len(no) < 300
    assert {r["agent_id"] for r in answers if r["question"] == "why_not"} == no


def test_social_recovers_from_a_ray_worker_killed_mid_step(
        tmp_path: Path, populace: Callable[..., Any], helpers: Any) -> None:
    # small.yaml's scripted policy plays a step of 5,000 agents in ~0.01 s: no step to kill a
    # worker in. The model policy with the scripted model, 1 s a call, makes each step 1 s.
    def data(latency: float, **changes: Any) -> dict[str, Any]:
        return social_data(models={"scripted": {"provider": "scripted", "latency": latency}},
                           settings_={"policy": "model"}, **changes)

    path = write(tmp_path / "ray.yaml", data(1.0, backend="ray", workers=2))
    kill_a_worker_mid_step(populace, helpers, path, tmp_path / "out", "step 1/4:",
                           "step 2/4:", into=0.3)
    # undisturbed: local, no latency
    launched(write(tmp_path / "local.yaml", data(0.0, workers=2)), tmp_path / "undisturbed")
    assert_same_tables(tmp_path / "out", tmp_path / "undisturbed", SOCIAL_TABLES)
    made = read_table(tmp_path / "out", "actions").column("action").to_pylist()
    assert made.count("repost") > 100 and made.count("post") > 100  # a run with cascades


def test_the_model_policy_gives_the_same_tables_on_one_and_two_workers(
        tmp_path: Path) -> None:
    def data(workers: int) -> dict[str, Any]:
        return social_data(models={"scripted": {"provider": "scripted", "latency": 0.0}},
                           settings_={"policy": "model"}, workers=workers, agents=2000,
                           population={**social_data()["population"], "size": 2000})

    for w in (1, 2):
        launched(write(tmp_path / f"w{w}.yaml", data(w)), tmp_path / f"w{w}")
    actions = read_table(tmp_path / "w2", "actions").to_pylist()
    # the second worker's agents (ids 1000-1999) read the news too
    assert any(r["exposed"] > 0 for r in actions if r["agent_id"] >= 1000)
    assert_same_tables(tmp_path / "w1", tmp_path / "w2", SOCIAL_TABLES)


# -- 2. sweeps ----------------------------------------------------------------------------------
def assert_sweep(root: Path, key: str, values: list[Any]) -> list[Path]:
    """``root`` holds a completed sweep over ``key``: one completed run directory per value,
    in order; their paths."""
    index = json.loads((root / "sweep.json").read_text())
    assert (index["status"], index["keys"]) == ("completed", [key]), index
    assert [p["values"] for p in index["points"]] == [{key: v} for v in values]
    assert all(p["status"] == "completed" and p["error"] is None for p in index["points"])
    dirs = [root / p["dir"] for p in index["points"]]
    for d, v in zip(dirs, values, strict=True):
        assert read_summary(d)["status"] == "completed"
        assert "sweep" not in yaml.safe_load((d / "config.yaml").read_text())
        node: Any = yaml.safe_load((d / "config.yaml").read_text())
        for part in key.split("."):
            node = node[part]
        assert node == v, (d, node)
    return dirs


def report_ok(root: Path, capsys: pytest.CaptureFixture[str],
              monkeypatch: pytest.MonkeyPatch) -> None:
    code, stdout, stderr = run_in_process(capsys, monkeypatch, "report", root)
    assert code == 0, stderr[-3000:]
    assert "warning" not in stderr, stderr
    assert (root / "report.html").stat().st_size > 1000
    assert list((root / "figures").glob("sweep_*.png")), stdout


def test_a_survey_sweep_runs_every_point_and_the_batch_changes_no_answer(
        tmp_path: Path, survey_done: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = survey_file(tmp_path, sweep={"settings.batch": [50, 1000]})
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", path, "--out",
                                     tmp_path / "sweep")
    assert code == 0, stderr[-3000:]
    dirs = assert_sweep(tmp_path / "sweep", "settings.batch", [50, 1000])
    # respondents asked 50 at a time (6 batches), or all at once, or by the default batch:
    # the same answers
    for d in dirs:
        assert_same_tables(d, survey_done, SURVEY_TABLES)
    report_ok(tmp_path / "sweep", capsys, monkeypatch)
    for d in dirs:  # and every point's own report
        assert (d / "report.html").is_file()


def test_a_social_sweep_over_the_recommender_equals_standalone_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    values = ["chronological", "popularity"]
    path = write(tmp_path / "sweep.yaml",
                 social_data(sweep={"settings.feed.recommender": values}))
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", path, "--out",
                                     tmp_path / "sweep")
    assert code == 0, stderr[-3000:]
    dirs = assert_sweep(tmp_path / "sweep", "settings.feed.recommender", values)
    # the recommender matters: the two points' posts differ
    assert not read_table(dirs[0], "posts").equals(read_table(dirs[1], "posts"))
    for d, value in zip(dirs, values, strict=True):
        data = social_data()
        data["settings"]["feed"]["recommender"] = value
        alone = tmp_path / f"alone-{value}"
        launched(write(tmp_path / f"{value}.yaml", data), alone)
        assert_same_tables(d, alone, SOCIAL_TABLES)
    report_ok(tmp_path / "sweep", capsys, monkeypatch)


# -- 3. the studio starts a survey --------------------------------------------------------------
def test_the_studio_lists_and_starts_a_survey_in_the_working_directory(
        tmp_path: Path, survey_done: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    testclient = pytest.importorskip("fastapi.testclient")
    from populace.studio import Runs, create_app

    survey_file(tmp_path)  # survey.yaml and q.yaml in the working directory
    monkeypatch.chdir(tmp_path)
    runs = Runs(tmp_path / "runs")  # roots: the working directory (and runs/)
    client = testclient.TestClient(create_app(runs, interval=0.1),
                                   base_url="http://127.0.0.1:8765")
    try:
        listed = client.get("/api/configs")
        assert listed.status_code == 200, listed.text
        assert listed.json() == ["survey.yaml"]  # the questionnaire is no run file
        started = client.post("/api/runs", json={"config": "survey.yaml"})
        assert started.status_code == 200, started.text
        run_id = started.json()["id"]
        deadline = time.monotonic() + 60
        while (snap := client.get(f"/api/runs/{run_id}").json())["status"] in (
                "starting", "running"):
            assert time.monotonic() < deadline, snap
            time.sleep(0.05)
        final = client.get(f"/api/runs/{run_id}").json()
    finally:
        runs.shutdown(timeout=60)
    assert (final["status"], final["steps_done"]) == ("completed", 2), final
    out = tmp_path / "runs" / run_id
    assert (out / "answers.parquet").is_file()
    assert_same_tables(out, survey_done, SURVEY_TABLES)  # the same file run by the CLI


# -- 4. replay --------------------------------------------------------------------------------
def test_a_social_run_with_the_dummy_policy_replays_to_the_same_tables(
        tmp_path: Path, social_dummy: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    config = social_dummy / "config.yaml"
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", config, "--out",
                                     tmp_path / "rep", "--replay", social_dummy)
    assert code == 0, stderr[-3000:]
    assert read_summary(tmp_path / "rep")["status"] == "completed"
    assert_same_tables(tmp_path / "rep", social_dummy, SOCIAL_TABLES)


def test_a_survey_replays_from_its_recording_with_the_model_unreachable(
        tmp_path: Path, survey_done: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The same model name (it keys the recording), now an OpenAI server nobody listens on:
    # no model answers live, and a recording of another model is refused up front.
    nobody = {"scripted": {"provider": "openai", "model": "nobody", "max_retries": 0,
                           "timeout": 2, "base_urls": ["http://127.0.0.1:9/v1"]}}
    path = survey_file(tmp_path, models=nobody)
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", path, "--out",
                                     tmp_path / "live")
    assert code == 2 and "cannot reach http://127.0.0.1:9/v1" in stderr, stderr  # no model
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", path, "--out",
                                     tmp_path / "other", "--replay", survey_done)
    assert code == 2 and stderr.count("\n") == 1, stderr
    assert "a recording answers only the models that made it" in stderr
    # The run file that made the recording replays it: every answer from the recording.
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", survey_file(tmp_path),
                                     "--out", tmp_path / "rep", "--replay", survey_done)
    assert code == 0, stderr[-3000:]
    summary = read_summary(tmp_path / "rep")
    assert summary["status"] == "completed"
    assert [e["step"] for e in summary["steps"]] == [1, 2]
    assert_same_tables(tmp_path / "rep", survey_done, SURVEY_TABLES)
    assert pc.all(read_table(tmp_path / "rep", "answers").column("valid")).as_py()


# -- 5. resume of a finished run ----------------------------------------------------------------
@pytest.mark.parametrize("scenario", ["survey", "social"])
def test_resuming_a_finished_run_changes_nothing(
        scenario: str, tmp_path: Path, survey_done: Path, social_dummy: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    done = tmp_path / "done"
    shutil.copytree(survey_done if scenario == "survey" else social_dummy, done)
    tables = SURVEY_TABLES if scenario == "survey" else SOCIAL_TABLES
    before, calls = digests(done), sorted(p.name for p in done.glob("llm_calls/*"))
    summary_before = (done / "summary.json").read_bytes()
    code, out, stderr = run_in_process(capsys, monkeypatch, "run", "--resume", done)
    assert code == 0, stderr[-3000:]
    assert "Traceback" not in stderr and "warning" not in stderr, stderr
    steps = 4 if scenario == "social" else 2
    assert f"already complete: {steps} of {steps} steps; nothing to run" in out
    assert (done / "summary.json").read_bytes() == summary_before  # not even rewritten
    assert digests(done) == before  # every table file byte for byte
    assert sorted(p.name for p in done.glob("llm_calls/*")) == calls  # no call made
    assert_same_tables(done, survey_done if scenario == "survey" else social_dummy, tables)
