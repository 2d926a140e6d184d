"""The survey and the social network are persona scenarios: a message to a profile query
lands in exactly the chosen agents' memories, is in their next prompts (the recorded
calls) and in a fork's, and survives the checkpoint; interviews see persona and memory."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import yaml

from cli_helpers import run_in_process
from persona_helpers import prompt_text
from persona_helpers import recorded_calls as calls
from populace.results import read_table

ROOT = Path(__file__).resolve().parents[2]
TOLD = "Your neighbours say the new clinic opens next month."


def told(call: dict[str, Any]) -> bool:
    return TOLD in prompt_text(call)


def run_and_fork(tmp_path: Path, capsys: Any, monkeypatch: Any, data: dict[str, Any],
                 where: str, at: int) -> tuple[Path, Path]:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    source, fork = tmp_path / "source", tmp_path / "fork"
    code, _, err = run_in_process(capsys, monkeypatch, "run", path, "--out", source)
    assert code == 0, err
    (source / "interventions.jsonl").write_text(json.dumps(
        {"step": at + 1, "kind": "message", "text": TOLD, "where": where}) + "\n")
    code, _, err = run_in_process(capsys, monkeypatch, "run", "--fork", source, "--at",
                                  str(at), "--out", fork)
    assert code == 0, err
    return source, fork


def chosen(run_dir: Path, column: str, value: str) -> set[int]:
    profiles = read_table(run_dir, "profiles")
    return set(profiles.filter(pc.field(column) == value).column("agent_id").to_pylist())


def test_a_survey_respondent_reads_a_message_in_the_next_wave(
        tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
    source = ROOT / "examples" / "survey"
    for name in ("questionnaire.yaml", "gss2018.csv"):
        shutil.copy(source / name, tmp_path / name)
    q = yaml.safe_load((tmp_path / "questionnaire.yaml").read_text())
    q["waves"] = [["happy", "trust"], ["trust_science", "flu_vaccine"]]
    (tmp_path / "questionnaire.yaml").write_text(yaml.safe_dump(q))
    data = yaml.safe_load((source / "survey.yaml").read_text())
    data.update(agents=300, population={**data["population"], "size": 300})
    before, fork = run_and_fork(tmp_path, capsys, monkeypatch, data, 'gender == "female"', 1)
    women = chosen(fork, "gender", "female")
    wave2 = calls(fork)
    assert wave2 and {c["agent"] for c in wave2 if told(c)} == women
    assert all(told(c) for c in wave2 if c["agent"] in women)
    assert not any(told(c) for c in calls(before))
    code, out, err = run_in_process(capsys, monkeypatch, "interview", fork, "How are you?",
                                    "--agent", str(min(women)), "--json")
    assert code == 0, err
    assert json.loads(out)["answer"]


def test_a_social_persona_reads_a_message_before_its_feed(
        tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
    data = yaml.safe_load((ROOT / "examples" / "social" / "llm.yaml").read_text())
    data.update(agents=300, steps=3, models={"scripted": {"provider": "scripted"}},
                population={**data["population"], "size": 300})
    before, fork = run_and_fork(tmp_path, capsys, monkeypatch, data, 'politics == "left"', 1)
    left = chosen(fork, "politics", "left")
    after = calls(fork)
    reached = {c["agent"] for c in after if told(c)}
    acted = {c["agent"] for c in after if c["agent"] in left}
    assert reached == acted and reached  # every left persona that acted, and no other
    assert not any(told(c) for c in calls(before))
    rows = read_table(fork, "actions") if (fork / "actions.parquet").exists() else None
    assert rows is None or rows.num_rows
