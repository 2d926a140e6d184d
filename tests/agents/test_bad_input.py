"""A persona scenario's bad input, as a user meets it on the command line: one line naming
the file and what was expected, exit 2, for an unknown shown column, a budget below one
event, a regex that cannot compile and a schema that is not a pydantic model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from cli_helpers import run_in_process
from persona_helpers import tutorial_files


def park() -> tuple[str, dict[str, Any]]:
    files = tutorial_files("park.py", "park.yaml")
    return files["park.py"], yaml.safe_load(files["park.yaml"])


@pytest.mark.parametrize(("persona", "source", "says"), [
    ({"shown": ["age", "salary"]}, None,
     "bad.yaml: settings.persona.shown.1: no profile column 'salary' (have: age, job, arm, "
     "group)"),
    ({"shown": ["age"], "memory_tokens": 10}, None,
     "bad.yaml: settings.persona: memory_tokens: 10 is below one event (event_tokens: 120)"),
    ({"shown": ["age"]}, ('VOTE = Choice(["yes", "no"])', 'VOTE = Regex("(yes")'),
     "bad.yaml: scenario: park.py does not import: park.py, line 7: ConfigError: "
     "Regex('(yes'): cannot compile: missing ), unterminated subpattern at position 0"),
    ({"shown": ["age"]}, ('VOTE = Choice(["yes", "no"])', "VOTE = Schema(dict)"),
     "ConfigError: Schema(<class 'dict'>): expected a pydantic model class"),
])
def test_bad_persona_input_is_one_line_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        persona: dict[str, Any], source: tuple[str, str] | None, says: str) -> None:
    code, data = park()
    if source is not None:
        code = code.replace(*source).replace(
            "from populace.agents import Choice,", "from populace.agents import Regex, Schema, "
            "Choice,")
    (tmp_path / "park.py").write_text(code)
    data["settings"]["persona"] = persona
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    monkeypatch.chdir(tmp_path)
    status, _, err = run_in_process(capsys, monkeypatch, "run", "bad.yaml", "--out", "runs/x")
    assert status == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], err
