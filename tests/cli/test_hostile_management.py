"""Hostile inputs to the commands that manage a run (issue 33): queries nested 1,900 deep,
numbers of 1,500 digits, text that is not UTF-8, management files edited into something
else or swapped for a FIFO, forks written into their source, four interviews at once. Each
is one line naming the file, line or flag, a non-zero exit, no traceback, no hang — and a
refused input leaves the run's files exactly as they were."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.compute as pc
import pytest
import yaml

import forkserver
from cli_helpers import run_in_process, run_ok
from populace.launch import read_interventions, read_interviews

Cap = pytest.CaptureFixture[str]
Patch = pytest.MonkeyPatch

GAME = {"scenario": "guess_number", "name": "g", "agents": 40, "rounds": 2, "workers": 1, "seed": 5,
        "models": {"llm": {"provider": "scripted"}},
        "population": {"aspects": {"education": {"values": ["PhD", "BA", "high school"]}}}}


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    here = tmp_path_factory.mktemp("hostile")
    (here / "g.yaml").write_text(yaml.safe_dump(GAME))
    run_ok("run", here / "g.yaml", "--out", here / "g")
    return here / "g"


@pytest.fixture
def run(finished: Path, tmp_path: Path) -> Path:
    shutil.copytree(finished, tmp_path / "g")
    return tmp_path / "g"


def tree(path: Path) -> dict[str, bytes]:
    """Every file of a run (names, kinds and contents): what a refusal must leave alone."""
    out = {}
    for p in sorted(path.rglob("*")):
        name = str(p.relative_to(path))
        out[name] = p.read_bytes() if p.is_file() else b"<not a file>"
    return out


def one_line(code: int, stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert code != 0 and len(lines) == 1 and "Traceback" not in stderr, (code, stderr)
    return lines[0]


def refused(capsys: Cap, monkeypatch: Patch, *args: str | Path) -> str:
    code, _, stderr = run_in_process(capsys, monkeypatch, *args)
    return one_line(code, stderr)


# -- queries ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("where", "says"), [
    ("~" * 1900 + "education", "nested too deeply"),
    ("education == " + "-" * 1900 + "1", "nested too deeply"),
    ("not " * 480 + "education", "nested too deeply"),
    ("education == " + "1+" * 900 + "1", "nested too deeply"),
    ("(" * 1000 + "education" + ")" * 990, "not an expression"),
    ("education == " + "9" * 1500, "a number of 1,500 digits is too large"),
    ("education == -" + "9" * 20, "a number of 20 digits is too large"),
    ('education == "\udc80"', "where: not UTF-8 text (a lone surrogate '\\udc80' at "
                              "character 15)"),
], ids=["tilde", "minus", "not", "plus", "brackets", "1500-digits", "20-digits",
        "surrogate"])
def test_a_hostile_query_is_one_line(run: Path, capsys: Cap, monkeypatch: Patch,
                                     where: str, says: str) -> None:
    before = tree(run)
    line = refused(capsys, monkeypatch, "interview", run, "why?", "--where", where)
    assert says in line and len(line) < 300, line
    line = refused(capsys, monkeypatch, "intervene", run, "--step", "2", "--text", "hi",
                   "--where", where)
    assert "where" in line and len(line) < 300, line  # (pydantic's words for a surrogate)
    assert tree(run) == before


def test_an_environment_value_nested_too_deeply_is_one_line(run: Path, capsys: Cap,
                                                            monkeypatch: Patch) -> None:
    before = tree(run)
    for depth, says in ((5000, "error: --value: nested too deeply"),
                        (100, "error: value: nested too deeply (at most 32 levels)")):
        line = refused(capsys, monkeypatch, "intervene", run, "--step", "2", "--key", "k",
                       "--value", "[" * depth + "]" * depth)
        assert line == says
    assert tree(run) == before


def test_a_question_that_is_not_utf8_is_one_line(run: Path, capsys: Cap,
                                                monkeypatch: Patch) -> None:
    before = tree(run)
    line = refused(capsys, monkeypatch, "interview", run, "why \udced?", "--sample", "2")
    assert line == ("error: the question: not UTF-8 text (a lone surrogate '\\udced' at "
                    "character 5)")
    line = refused(capsys, monkeypatch, "intervene", run, "--step", "2", "--text", "h\udcc3i")
    assert line.startswith("error: --text: ") and "unicode" in line, line
    assert tree(run) == before


# -- management files edited by hand ----------------------------------------------------------
DEEP = '{"step": 2, "kind": "environment", "key": "k", "value": ' + "[" * 5000 + "]" * 5000 + "}"


@pytest.mark.parametrize(("content", "says"), [
    ((json.dumps({"step": 2, "kind": "message", "text": "hi"}) + "\n" + DEEP + "\n").encode(),
     "interventions.jsonl: line 2: nested too deeply"),
    ((json.dumps({"step": 2, "kind": "environment", "key": "k",
                  "value": json.loads("[" * 40 + "]" * 40)}) + "\n").encode(),
     "interventions.jsonl: line 1: value: nested too deeply (at most 32 levels)"),
    ('{"step": 2, "kind": "message", "text": "h\xe9llo"}\n'.encode("latin-1"),
     "interventions.jsonl: line 1: not UTF-8 text (byte 0xe9)"),
    ((json.dumps({"step": 2, "kind": "message", "text": "hi",
                  "where": "not " * 400 + "education"}) + "\n").encode(),
     "interventions.jsonl: line 1: where 'not not"),
    (b'{"step": 2, "kind": "message", "text": "h\\udc80llo"}\n',
     "interventions.jsonl: line 1: text:"),
    ((json.dumps({"step": 2, "kind": "message", "text": "hi", "agents": [2**70]}) + "\n"
      ).encode(), "interventions.jsonl: line 1: agent 1180591620717411303424: not an agent id"),
    ((json.dumps({"step": 2, "kind": "message", "text": "hi"}) + "\n"
      + json.dumps({"step": 2, "kind": "message", "text": "hi", "agents": [99]}) + "\n"
      ).encode(), "interventions.jsonl: line 2: agent 99: no such agent"),
    ((json.dumps({"step": 2, "kind": "message", "text": "hi", "where": "nope == 1"}) + "\n"
      ).encode(), "interventions.jsonl: line 1: where 'nope == 1': no profile column 'nope'"),
], ids=["deep-json", "deep-value", "latin-1", "recursive-where", "escaped-surrogate",
        "huge-agent", "unknown-agent", "unknown-column"])
def test_an_edited_interventions_file_is_one_line_and_changes_nothing(
        run: Path, capsys: Cap, monkeypatch: Patch, content: bytes, says: str) -> None:
    (run / "interventions.jsonl").write_bytes(content)
    before = tree(run)
    for args in (["run", "--resume", run], ["run", "--fork", run, "--at", "1", "--out",
                                            run.parent / "fork"],
                 ["intervene", run, "--step", "2", "--text", "hi"]):
        line = refused(capsys, monkeypatch, *args)
        assert says in line, line
        assert str(run / "interventions.jsonl") in line, line
        assert tree(run) == before
    assert not (run.parent / "fork").exists()


def test_a_damaged_interviews_table_is_one_line(run: Path, capsys: Cap,
                                               monkeypatch: Patch) -> None:
    (run / "interviews.parquet").write_bytes(b"PAR1 not really")
    before = tree(run)
    line = refused(capsys, monkeypatch, "interview", run, "why?", "--sample", "2")
    assert line.startswith(f"error: {run / 'interviews.parquet'}: not a readable Parquet "
                           "file"), line
    assert line.endswith("move it away to keep interviewing")
    assert tree(run) == before
    code, _, stderr = run_in_process(capsys, monkeypatch, "report", run)
    assert (code, stderr) == (0, "")  # the report says so in its interviews table
    assert "interviews.parquet: not a readable Parquet file" in (run / "report.html").read_text()


def _in_a_process(*args: str | Path, timeout: float = 60) -> tuple[int, str]:
    """``populace ARGS`` in a process of its own (a FIFO could block this one for ever)."""
    done = forkserver.run([sys.executable, "-m", "populace.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "NO_COLOR": "1"})
    return done.returncode, done.stderr


@pytest.mark.parametrize("name", ["interventions.jsonl", "interviews.parquet"])
def test_a_fifo_for_a_management_file_is_refused(run: Path, name: str) -> None:
    os.mkfifo(run / name)
    before = tree(run)
    commands: list[list[str | Path]] = [["interview", run, "why?", "--sample", "2"]] \
        if name == "interviews.parquet" else [
            ["intervene", run, "--step", "2", "--text", "hi"], ["run", "--resume", run],
            ["run", "--fork", run, "--at", "1", "--out", run.parent / "fork"]]
    for args in commands:
        code, stderr = _in_a_process(*args)  # never blocks on the FIFO
        line = one_line(code, stderr)
        assert line.startswith(f"error: {run / name}: not a regular file (a FIFO)"), line
    assert tree(run) == before


# -- forks ------------------------------------------------------------------------------------
@pytest.mark.parametrize("inside", ["parts/x", "new", "checkpoints/../new"])
def test_a_fork_into_its_source_is_refused(run: Path, capsys: Cap, monkeypatch: Patch,
                                           inside: str) -> None:
    before = tree(run)
    target = run / inside
    line = refused(capsys, monkeypatch, "run", "--fork", run, "--at", "1", "--out", target)
    assert line == (f"error: {target}: inside the run it forks ({run}); a fork is a run "
                    "directory of its own: give one outside it"), line
    assert tree(run) == before


# -- writers at once --------------------------------------------------------------------------
SAVE_MANY = """
import sys
from pathlib import Path
from populace.launch import save_interview
run_dir, writer = Path(sys.argv[1]), int(sys.argv[2])
for i in range(25):
    save_interview(run_dir, [{"step": 2, "agent_id": writer, "question": f"q{i}",
                              "answer": f"a{writer}-{i}", "source": "test"}])
"""


def test_interviews_saved_at_once_by_four_processes_are_all_kept(run: Path) -> None:
    writers = [forkserver.spawn([sys.executable, "-c", SAVE_MANY, str(run), str(w)],
                                stderr=subprocess.PIPE, text=True) for w in range(4)]
    for p in writers:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    table = read_interviews(run)
    assert table is not None and table.num_rows == 100
    assert sorted(table.column("interview").to_pylist()) == list(range(1, 101))
    assert sorted(table.column("answer").to_pylist()) == sorted(
        f"a{w}-{i}" for w in range(4) for i in range(25))


def test_four_interview_commands_at_once_lose_no_answer(run: Path) -> None:
    procs = [forkserver.spawn([sys.executable, "-m", "populace.cli", "interview", str(run),
                               f"question {n}?", "--agent", str(n)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for n in range(4)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    table = read_interviews(run)
    assert table is not None
    assert sorted(table.column("agent_id").to_pylist()) == [0, 1, 2, 3]
    assert sorted(table.column("interview").to_pylist()) == [1, 2, 3, 4]
    for n in range(4):
        asked = table.filter(pc.field("agent_id") == n)
        assert asked.column("question").to_pylist() == [f"question {n}?"]


def test_four_intervene_commands_at_once_are_all_kept(run: Path) -> None:
    procs = [forkserver.spawn([sys.executable, "-m", "populace.cli", "intervene", str(run),
                               "--step", "2", "--text", f"note {n}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for n in range(4)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    assert sorted(i.text or "" for i in read_interventions(run)) == [
        f"note {n}" for n in range(4)]
