"""Persona scenarios as a user runs them: the tutorial's park vote (docs/scenarios.md) and
the gossip example, through the CLI — kill -9 and resume, Ray against local, interventions
read from the recorded prompts of exactly the agents chosen, interviews, bounded memory."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
import yaml

from cli_helpers import run_in_process, run_ok
from persona_helpers import prompt_text as prompt
from persona_helpers import recorded_calls as calls
from persona_helpers import tutorial_files
from populace.results import read_summary, read_table

ROOT = Path(__file__).resolve().parents[2]
GOSSIP = ROOT / "examples" / "gossip"
TOLD = "The park will bring noise and crowds at night: vote no."


def park(directory: Path, **changes: Any) -> Path:
    """The tutorial's park.py and park.yaml (from docs/scenarios.md) in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in tutorial_files("park.py", "park.yaml").items():
        (directory / name).write_text(text)
    data = yaml.safe_load((directory / "park.yaml").read_text())
    data.update(changes)
    path = directory / "park.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def gossip(directory: Path, **changes: Any) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy(GOSSIP / "gossip.py", directory / "gossip.py")
    data = yaml.safe_load((GOSSIP / "gossip.yaml").read_text())
    data.update(changes)
    path = directory / "gossip.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def ok(populace: Callable[..., Any], *args: Any, timeout: float = 180) -> str:
    rc, out, err = populace(*args).finish(timeout=timeout)
    assert rc == 0 and "Traceback" not in err, err
    return out


@pytest.fixture(scope="module")
def park_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tutorial's run (1,000 neighbours, 4 weeks), then an intervention to the old ones
    for week 3 and a fork from week 2 that carries it out."""
    here = tmp_path_factory.mktemp("park")
    path = park(here)
    run_ok("run", path, "--out", here / "runs" / "park")
    (here / "runs" / "park" / "interventions.jsonl").write_text(json.dumps(
        {"step": 3, "kind": "message", "text": TOLD, "where": 'age == "old"'}) + "\n")
    run_ok("run", "--fork", here / "runs" / "park", "--at", "2", "--out",
           here / "runs" / "told")
    return here / "runs"


def test_an_intervention_is_in_exactly_the_chosen_agents_next_prompts(park_run: Path) -> None:
    profiles = read_table(park_run / "told", "profiles")
    old = set(profiles.filter(pc.field("age") == "old").column("agent_id").to_pylist())
    told = calls(park_run / "told")
    assert len(told) == 2 * 1000  # weeks 3 and 4
    reached = {c["agent"] for c in told if TOLD in prompt(c)}
    assert reached == old
    week3 = [c for c in told if "[step 2, decision]" in prompt(c)
             and "[step 3, decision]" not in prompt(c)]
    assert len(week3) == 1000
    assert {c["agent"] for c in week3 if f"[step 3, intervention] {TOLD}" in prompt(c)} == old
    assert not any(TOLD in prompt(c) for c in calls(park_run / "park"))
    summary = read_summary(park_run / "told")
    assert summary["steps"][2]["interventions"][0]["agents"] == len(old)
    # ... and it changed what they decided, and nobody else's vote
    before = read_table(park_run / "park", "votes").filter(pc.field("step") == 3)
    after = read_table(park_run / "told", "votes").filter(pc.field("step") == 3)
    changed = {a for a, x, y in zip(before["agent_id"].to_pylist(), before["vote"].to_pylist(),
                                    after["vote"].to_pylist(), strict=True) if x != y}
    assert changed and changed <= old


def test_no_internal_column_reaches_a_prompt(park_run: Path, tmp_path: Path) -> None:
    for run in ("park", "told"):
        for c in calls(park_run / run):
            text = prompt(c)
            assert "arm" not in text and "control" not in text and "treated" not in text
            assert "group" not in text and "agent_id" not in text
            assert re.search(r"About you: age: [\w-]+; job: \w+\.", text)


def test_an_interview_through_the_cli_reads_memory_and_changes_nothing(
        park_run: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    run = park_run / "told"
    before = {p.name: p.read_bytes() for p in (run / "parts").iterdir()}
    code, out, err = run_in_process(capsys, monkeypatch, "interview", run,
                                    "Why did you vote as you did?", "--where", 'age == "old"',
                                    "--sample", "3", "--json")
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert len(rows) == 3 and all(TOLD.rstrip(".") in r["answer"] for r in rows)
    assert {p.name: p.read_bytes() for p in (run / "parts").iterdir()} == before


def test_kill_9_then_resume_equals_an_undisturbed_run(
        tmp_path: Path, populace: Callable[..., Any], park_run: Path) -> None:
    path = park(tmp_path, models={"scripted": {"provider": "scripted", "latency": 0.5}})
    out = tmp_path / "runs" / "killed"
    run = populace("run", path, "--out", out)
    run.wait_for("step 2/4")
    time.sleep(0.2)  # inside week 3
    os.kill(run.pid, signal.SIGKILL)
    assert run.finish(timeout=30)[0] == -signal.SIGKILL
    ok(populace, "run", "--resume", out)
    assert read_table(out, "votes").equals(read_table(park_run / "park", "votes"))


def test_ray_equals_local(tmp_path: Path, populace: Callable[..., Any], park_run: Path,
                         ray_address: str) -> None:
    out = tmp_path / "on-ray"
    ok(populace, "run", park(tmp_path), "--backend", "ray", "--address", ray_address,
       "--workers", "2", "--out", out, timeout=300)
    assert read_table(out, "votes").equals(read_table(park_run / "park", "votes"))


def test_gossip_memory_is_bounded_and_resumes_identically(
        tmp_path: Path, populace: Callable[..., Any]) -> None:
    path = gossip(tmp_path / "a", agents=200, steps=12)
    whole = tmp_path / "whole"
    ok(populace, "run", path, "--out", whole)
    tokens = [s["prompt_tokens"] for s in read_summary(whole)["steps"]]
    assert max(tokens[6:]) <= max(tokens[:6]) + 10, tokens  # stops growing at the budget
    summaries = [c for c in calls(whole) if "Summarise what you remember" in prompt(c)]
    assert summaries and all(c["text"] for c in summaries)  # written by the model, recorded
    days = read_table(whole, "days")
    assert days.num_rows == 200 * 12 and days.column("worry").null_count == 0

    killed = tmp_path / "killed"
    slow = gossip(tmp_path / "b", agents=200, steps=12,
                  models={"scripted": {"provider": "scripted", "latency": 0.3}})
    run = populace("run", slow, "--out", killed)
    run.wait_for("step 5/12")
    time.sleep(0.3)
    os.kill(run.pid, signal.SIGKILL)
    run.finish(timeout=30)
    ok(populace, "run", "--resume", killed)
    assert read_table(killed, "days").equals(days)
