"""``populace intervene``: a message scheduled in a finished run of the tutorial's park vote
(docs/scenarios.md) reaches, in a fork, exactly the agents its query chooses; every bad
request is one line, exit 2, and leaves the run directory as it was."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.compute as pc
import pytest
import yaml

from cli_helpers import run_in_process, run_ok
from persona_helpers import prompt_text, recorded_calls, tutorial_files
from populace.launch import fork, read_interventions
from populace.results import RunDirectory, read_summary, read_table

TOLD = "The park will bring noise and crowds at night: vote no."

Cap = pytest.CaptureFixture[str]
Patch = pytest.MonkeyPatch


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tutorial's park.py and park.yaml (300 neighbours, 4 weeks), run to the end."""
    here = tmp_path_factory.mktemp("park")
    for name, text in tutorial_files("park.py", "park.yaml").items():
        (here / name).write_text(text)
    data = yaml.safe_load((here / "park.yaml").read_text())
    (here / "park.yaml").write_text(yaml.safe_dump({**data, "agents": 300}))
    run_ok("run", here / "park.yaml", "--out", here / "park")
    return here / "park"


def _copy(run: Path, tmp_path: Path) -> Path:
    shutil.copytree(run, tmp_path / "park")
    return tmp_path / "park"


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file()}


def test_intervene_then_fork_tells_exactly_the_old_agents_at_step_3(
        finished: Path, tmp_path: Path, capsys: Cap, monkeypatch: Patch) -> None:
    run = _copy(finished, tmp_path)
    before = _tree(run)
    code, out, err = run_in_process(capsys, monkeypatch, "intervene", run, "--step", "3",
                                    "--text", TOLD, "--where", 'age == "old"')
    assert code == 0, err
    profiles = read_table(run, "profiles")
    old = set(profiles.filter(pc.field("age") == "old").column("agent_id").to_pylist())
    line = " ".join(out.split())
    assert len(out.strip().splitlines()) == 1, out
    assert f"scheduled for step 3: message to where age == \"old\": {TOLD}" in line
    assert f"it reaches {len(old)} agents" in line
    assert f"populace run --fork {run} --at 2 --out {run}-fork2" in line
    # one line added to interventions.jsonl; nothing else of the run changed
    after = _tree(run)
    assert {k: v for k, v in after.items() if k != "interventions.jsonl"} == before
    [written] = read_interventions(run)
    assert (written.step, written.kind, written.text, written.where) == \
        (3, "message", TOLD, 'age == "old"') and written.made is not None

    code, _, err = run_in_process(capsys, monkeypatch, "run", "--fork", run, "--at", "2",
                                  "--out", tmp_path / "told")
    assert code == 0, err
    told = recorded_calls(tmp_path / "told")
    week3 = [c for c in told if "[step 2, decision]" in prompt_text(c)
             and "[step 3, decision]" not in prompt_text(c)]
    assert len(week3) == 300
    assert {c["agent"] for c in week3 if f"[step 3, intervention] {TOLD}" in prompt_text(c)} == old
    assert {c["agent"] for c in told if TOLD in prompt_text(c)} == old
    assert read_summary(tmp_path / "told")["steps"][2]["interventions"][0]["agents"] == len(old)


def test_an_environment_change_and_an_interrupted_run(
        finished: Path, tmp_path: Path, capsys: Cap, monkeypatch: Patch) -> None:
    """A run that has not played the step yet (here a fork made but not run, as a stopped
    run is) carries it out when it resumes: the line says so."""
    half = tmp_path / "half"
    fork(finished, 2, {}, half)
    code, out, err = run_in_process(capsys, monkeypatch, "intervene", half, "--step", "4",
                                    "--key", "announcement", "--value", '"Week 3 was void."')
    assert code == 0, err
    line = " ".join(out.split())
    assert 'scheduled for step 4: set announcement = "Week 3 was void."' in line
    assert "reaches" not in line
    assert f"it is carried out when it resumes: populace run --resume {half}" in line
    [written] = read_interventions(half)
    assert (written.kind, written.key, written.value) == ("environment", "announcement",
                                                          "Week 3 was void.")
    code, out, err = run_in_process(capsys, monkeypatch, "intervene", half, "--step", "3",
                                    "--text", "Hello.", "--agent", "4", "--agent", "7")
    assert code == 0, err
    assert "it reaches 2 agents" in out and "--resume" in out


@pytest.mark.parametrize(("args", "expected"), [
    (["--step", "3", "--text", "x", "--where", "income > 3"],
     "error: where 'income > 3': no profile column 'income'"),
    (["--step", "0", "--text", "x"], "error: Invalid value for '--step'"),
    (["--step", "5", "--text", "x"], "error: step 5: the run plays steps 1 to 4"),
    (["--step", "1", "--text", "x"], "error: step 1: the run has played it, and no fork"),
    (["--step", "3", "--text", "x", "--key", "k", "--value", "1"], "error: give either --text"),
    (["--step", "3"], "error: give either --text"),
    (["--step", "3", "--key", "k", "--value", "1", "--where", 'age == "old"'],
     "error: --where goes with --text"),
    (["--step", "3", "--text", "x", "--env", "kids"], "error: --env goes with --key"),
    (["--step", "3", "--key", "k"], "error: --key needs --value"),
    (["--step", "3", "--key", "k", "--value", "soon"], "error: --value soon: not JSON"),
    (["--step", "3", "--key", "k", "--value", "NaN"], "error: --value NaN: not JSON"),
    (["--step", "3", "--text", " "], "error: --text: empty"),
    (["--step", "3", "--text", "x" * 4001], "error: --text: String should have at most"),
    (["--step", "3", "--text", "x", "--agent", "5000"], "error: agent 5000: no such agent"),
    (["--step", "3", "--text", "x", "--where", 'age == "ancient"'],
     "error: where 'age == \"ancient\"': no agent matches"),
])
def test_bad_requests_are_one_line_exit_2_and_change_nothing(
        finished: Path, capsys: Cap, monkeypatch: Patch, args: list[str],
        expected: str) -> None:
    before = _tree(finished)
    code, _, err = run_in_process(capsys, monkeypatch, "intervene", finished, *args)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(expected), lines[0]
    assert _tree(finished) == before and not (finished / "interventions.jsonl").exists()


def test_not_a_run_directory(tmp_path: Path, capsys: Cap, monkeypatch: Patch) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    code, _, err = run_in_process(capsys, monkeypatch, "intervene", tmp_path, "--step", "3",
                                  "--text", "x")
    assert code == 2
    assert err.strip() == f"error: {tmp_path}: no config.yaml there (not a run directory?)"
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_a_live_run_is_refused_with_a_pointer_to_its_studio(
        finished: Path, capsys: Cap, monkeypatch: Patch) -> None:
    before = _tree(finished)
    with RunDirectory(finished).hold():  # as a run being played (or resumed) holds it
        code, _, err = run_in_process(capsys, monkeypatch, "intervene", finished, "--step",
                                      "4", "--text", "x")
    line = " ".join(err.split())
    assert code == 2 and "Traceback" not in err
    assert line == (f"error: {finished}: the run is live in another process; intervene from "
                    "the studio that runs it (populace run --studio), which writes it for the "
                    "next step, or fork the run once it has ended")
    assert _tree(finished) == before
