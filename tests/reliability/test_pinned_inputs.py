"""The data files a run read are pinned (issue 33): replaced or removed between a run and
its resume, fork, interview or report, they are refused in one line naming the file — a
social run resumed on an edge list replaced by one edge finished on that graph, exit 0."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

import forkserver
from populace.launch import check_inputs
from populace.results import read_summary

EDGES = "follower,followee\n" + "".join(f"{i},{(i + d) % 40}\n" for i in range(40)
                                        for d in (1, 3, 7))
SOCIAL = {"scenario": "social", "agents": 40, "steps": 4, "seed": 3,
          "models": {"dummy": {"provider": "dummy", "latency": 0.5}},
          "population": {"aspects": {"politics": {"values": ["left", "right"]}}},
          "settings": {"graph": {"edges": "edges.csv"}}}


def social(tmp_path: Path, **changes: Any) -> Path:
    (tmp_path / "edges.csv").write_text(EDGES)
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({**SOCIAL, **changes}))
    return path


@pytest.fixture
def populace_proc(populace: Callable[..., Any]) -> Callable[..., Any]:
    """The reliability suite's ``populace`` fixture: a command whose output is read live."""
    return populace


def run_cli(*args: str | Path, cwd: Path) -> tuple[int, str, str]:
    done = forkserver.run([sys.executable, "-m", "populace.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=120, cwd=cwd,
                          env={**os.environ, "NO_COLOR": "1"})
    return done.returncode, done.stdout, done.stderr


def tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file()}


def test_the_run_pins_what_it_read(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, _, stderr = run_cli("run", social(tmp_path, steps=1), "--out", out, cwd=tmp_path)
    assert (code, stderr) == (0, "")
    pinned = json.loads((out / "inputs.json").read_text())
    (entry,) = pinned["files"]
    assert entry["key"] == "settings.graph.edges"
    assert entry["path"] == str(tmp_path / "edges.csv")
    assert entry["bytes"] == len(EDGES)
    check_inputs(out)  # as it was read


@pytest.mark.parametrize("change", ["replaced", "removed"])
def test_a_changed_edge_list_is_refused_by_resume_fork_interview_and_report(
        tmp_path: Path, populace_proc: Callable[..., Any], change: str) -> None:
    out = tmp_path / "out"
    run = populace_proc("run", social(tmp_path), "--out", out, cwd=tmp_path)
    run.wait_for("step 2/4", timeout=60)
    os.kill(run.pid, signal.SIGTERM)  # interrupted after a step or two, resumable
    assert run.finish(timeout=60)[0] == 143
    assert read_summary(out)["status"] == "interrupted"
    edges = tmp_path / "edges.csv"
    if change == "replaced":  # a valid graph still: only the pin tells
        edges.write_text("follower,followee\n0,1\n")
        says = f"{edges}: changed since the run read it (settings.graph.edges"
    else:  # (the scenario's own check of its run file may tell first)
        edges.unlink()
        says = str(edges)
    before = tree(out)
    for args in (["run", "--resume", out], ["run", "--fork", out, "--at", "1", "--out",
                                            tmp_path / "fork"],
                 ["interview", out, "Why?", "--sample", "2"]):
        code, _, stderr = run_cli(*args, cwd=tmp_path)
        lines = stderr.strip().splitlines()
        assert code == 2 and len(lines) == 1 and "Traceback" not in stderr, stderr
        assert says in lines[0], lines[0]
        assert tree(out) == before
    assert not (tmp_path / "fork").exists()
    code, _, stderr = run_cli("report", out, cwd=tmp_path)
    assert code == 0 and stderr.startswith(f"warning: {out}: no scenario figures: "), stderr
    assert says in stderr and len(stderr.strip().splitlines()) == 1, stderr

    edges.write_text(EDGES)  # put back as it was: the run goes on
    code, _, stderr = run_cli("run", "--resume", out, cwd=tmp_path)
    assert (code, stderr) == (0, "")
    assert read_summary(out)["status"] == "completed"


SURVEY = """\
scenario: survey
agents: 30
seed: 3
models: {dummy: {provider: dummy}}
population:
  aspects:
    party: {values: [Democrat, Republican]}
settings:
  questionnaire: questionnaire.yaml
  reference: ref.csv
"""
QUESTIONNAIRE = """\
instructions: A short survey.
questions:
  - {id: happy, type: single_choice, text: "Happy?", options: ["yes", "no"]}
"""
REFERENCE = "question,option,share\nhappy,yes,0.6\nhappy,no,0.4\n"


def test_a_survey_pins_its_reference_and_keeps_its_questionnaire(tmp_path: Path) -> None:
    """The reference is read again by the report, a resume, a fork and an interview:
    changed, each refuses it; the questionnaire is written into config.yaml whole, so a
    questionnaire file changed after the run changes nothing of it."""
    (tmp_path / "questionnaire.yaml").write_text(QUESTIONNAIRE)
    (tmp_path / "ref.csv").write_text(REFERENCE)
    (tmp_path / "run.yaml").write_text(SURVEY)
    out = tmp_path / "out"
    assert run_cli("run", "run.yaml", "--out", out, cwd=tmp_path)[::2] == (0, "")
    (tmp_path / "questionnaire.yaml").write_text(QUESTIONNAIRE.replace("Happy?", "Sad?"))
    code, stdout, stderr = run_cli("run", "--resume", out, cwd=tmp_path)
    assert (code, stderr) == (0, "") and "already complete" in stdout
    (tmp_path / "ref.csv").write_text(REFERENCE.replace("0.6", "0.7").replace("0.4", "0.3"))
    before = tree(out)
    for args in (["run", "--resume", out], ["run", "--fork", out, "--at", "1", "--out",
                                            tmp_path / "fork"]):
        code, _, stderr = run_cli(*args, cwd=tmp_path)
        assert code == 2 and stderr.strip().splitlines() == [
            f"error: {tmp_path / 'ref.csv'}: changed since the run read it (settings.reference:"
            f" {len(REFERENCE)} bytes, sha256 " + stderr.split("sha256 ", 1)[1].strip()], stderr
    code, _, stderr = run_cli("report", out, cwd=tmp_path)
    assert code == 0 and f"{tmp_path / 'ref.csv'}: changed since the run read it" in stderr
    assert tree(out) == {**before, **{k: v for k, v in tree(out).items()
                                      if k.startswith(("figures/", "report.html"))}}
