"""Values that would make nonsense are refused before anything runs: one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import run_in_process


@pytest.mark.parametrize(("text", "message"), [
    ("agents: true\n", "agents: Input should be a valid integer"),
    ("rounds: 2.5\n", "steps: Input should be a valid integer"),
    ("game: {low: .nan}\n", "game.low: Input should be a finite number"),
    ("game: {offset: .inf}\n", "game.offset: Input should be a finite number"),
    ("models: {d: {provider: dummy, latency: .inf}}\n",
     "models.d.latency: Input should be a finite number"),
    ("agents: 10\nagents: 20\n", "the key 'agents' is given twice"),
    ("game: {ratio: 1/2, ratio: 2/3}\n", "the key 'ratio' is given twice"),
    ("", "the run file is empty"),
    ("# only a comment\n", "the run file is empty"),
], ids=["bool-agents", "float-rounds", "nan-low", "inf-offset", "inf-latency",
        "duplicate-key", "duplicate-nested-key", "empty", "comment-only"])
def test_a_value_that_makes_nonsense_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    text: str, message: str,
) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", path, "--out", tmp_path / "o")
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}"), stderr
    assert message in lines[0]
    assert not (tmp_path / "o").exists()
