"""No internal column (arm, group, ids) reaches a prompt, in any scenario's recorded calls:
what a model is told about a persona is what the scenario declares, never the design of the
experiment (a survey respondent told its own arm is a broken experiment)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli_helpers import run_in_process

ROOT = Path(__file__).resolve().parents[2]
#: An internal column as a persona would show it ("arm: control"), or an arm's name.
INTERNAL = re.compile(r"(?<![\w])(arm|group|agent_id|model): |\bsafety_note\b")


def prompts(run_dir: Path) -> list[str]:
    out = []
    for path in sorted((run_dir / "llm_calls").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            call = json.loads(line)
            out.append("\n".join(m["content"] for m in call["request"]["messages"]))
    return out


def run(tmp_path: Path, capsys: Any, monkeypatch: Any, source: Path, **changes: Any) -> Path:
    for extra in source.parent.iterdir():
        if extra.is_file() and extra != source:
            shutil.copy(extra, tmp_path / extra.name)
    data = yaml.safe_load(source.read_text())
    data.update(changes)
    path = tmp_path / source.name
    path.write_text(yaml.safe_dump(data))
    out = tmp_path / "run"
    code, _, err = run_in_process(capsys, monkeypatch, "run", path, "--out", out)
    assert code == 0, err
    code, _, err = run_in_process(capsys, monkeypatch, "interview", out, "How are you?",
                                  "--sample", "5")
    assert code == 0, err
    return out


def check(run_dir: Path) -> None:
    told = prompts(run_dir)
    assert told
    for text in told:
        assert INTERNAL.search(text) is None, text


def interviewed(run_dir: Path) -> list[str]:
    import pyarrow.parquet as pq

    return pq.read_table(run_dir / "interviews.parquet").column("answer").to_pylist()


def test_the_survey(tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
    source = ROOT / "examples" / "survey" / "survey.yaml"
    data = yaml.safe_load(source.read_text())
    out = run(tmp_path, capsys, monkeypatch, source, agents=300,
              population={**data["population"], "size": 300})
    check(out)
    assert all(interviewed(out))


def test_the_social_network_with_a_model_policy(tmp_path: Path, capsys: Any,
                                                monkeypatch: Any) -> None:
    source = ROOT / "examples" / "social" / "llm.yaml"
    data = yaml.safe_load(source.read_text())
    out = run(tmp_path, capsys, monkeypatch, source, agents=300, steps=3,
              models={"scripted": {"provider": "scripted"}},
              population={**data["population"], "size": 300})
    check(out)
    assert all(interviewed(out))


@pytest.mark.parametrize("name", ["education.yaml", "professions.yaml", "group_play.yaml"])
def test_the_guessing_game(tmp_path: Path, capsys: Any, monkeypatch: Any, name: str) -> None:
    out = run(tmp_path, capsys, monkeypatch, ROOT / "examples" / "paper" / name)
    check(out)
