"""The guessing game's run file (``scenarios/guess_number/_config.py``): every mistake in it is
one line naming the file and the key, exit status 2, and nothing is created.

In-process, to keep the many cases fast; ``tests/cli/test_cli.py`` covers the process
boundary (``test_bad_run_file_in_a_process``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from populace.cli import main

GAME = "scenario: guess_number\n"
TWO_MODELS = "models:\n  a: {provider: dummy}\n  b: {provider: dummy}\n"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bad-run.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(GAME + "rounds_: 3\n",
                     ["rounds_: unknown key", "expected one of:", "rounds"], id="unknown-key"),
        pytest.param(GAME + "game:\n  ratio: 3/0\n", ["game.ratio:", "division by zero"],
                     id="ratio"),
        pytest.param(GAME + "agents: -5\n", ["agents:", "greater than or equal to 1", "-5"],
                     id="negative-agents"),
        pytest.param(GAME + "workers: zero\n", ["workers:", "'zero'"], id="workers-not-int"),
        pytest.param(GAME + "model: gpt9\n",
                     ["model: 'gpt9' is not under models: (have: dummy)"], id="unknown-model"),
        pytest.param(GAME + "models:\n  a: {provider: dummy}\n  b: {provider: dummy}\n",
                     ["models: several are configured (a, b); set model:", "or assign:"],
                     id="ambiguous-model"),
        pytest.param(GAME + f"{TWO_MODELS}assign: {{a: 1/3, c: 2/3}}\n",
                     ["assign: 'c' is not under models: (have: a, b)"],
                     id="assign-unknown-model"),
        pytest.param(GAME + f"{TWO_MODELS}assign: {{a: 1/3, b: 1/2}}\n",
                     ["assign: fractions add up to 0.833333, expected 1"],
                     id="assign-fractions-sum"),
        pytest.param(GAME + f"agents: 10\n{TWO_MODELS}assign: {{a: 3, b: 4}}\n",
                     ["assign: counts add up to 7, but agents is 10"], id="assign-counts-sum"),
        pytest.param(GAME + f"{TWO_MODELS}model: a\nassign: {{a: 1/2, b: 1/2}}\n",
                     ["either model:", "or assign:", "not both"], id="assign-and-model"),
        pytest.param(GAME + f"{TWO_MODELS}assign: {{a: 0, b: 0}}\n",
                     ["assign: give at least one positive share"], id="assign-all-zero"),
        pytest.param(GAME + f"{TWO_MODELS}assign: {{a: lots, b: 1}}\n",
                     ["assign.a:", "expected a fraction like 1/3 or a count", "'lots'"],
                     id="assign-not-a-share"),
        pytest.param(GAME + "game: {ratoi: 1/2}\n", ["game.ratoi: unknown key", "ratio"],
                     id="nested-typo"),
        pytest.param(GAME + "models:\n  dummy:\n    provider: dummy\n    latency: -1\n",
                     ["models.dummy.latency:", "greater than or equal to 0"],
                     id="negative-latency"),
        pytest.param(GAME + "models:\n  m: {provider: gpt}\n",
                     ["models.m.provider: unknown value 'gpt' (expected one of: dummy, openai, "
                      "scripted, python)"], id="unknown-provider"),
        pytest.param(GAME + "game: {prompt: 'Pick {colour}'}\n", ["game.prompt:", "{colour}"],
                     id="template-field"),
        pytest.param("agents: 3\n  rounds: 2\n", [":2:", "invalid YAML"], id="yaml-syntax"),
        pytest.param("- agents\n", ["expected a mapping"], id="not-a-mapping"),
        pytest.param("scenario: chess\n", ["scenario:", "unknown scenario 'chess'"],
                     id="unknown-scenario"),
        pytest.param("agents: 3\nmodel: gpt9\n",
                     ["scenario: missing (expected one of: guess_number, social, survey; or "
                      "path/to/file.py:Class)"], id="no-scenario"),
    ],
)
def test_bad_run_file(tmp_path: Path, text: str, expected: list[str],
                      monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # An unexpected exception here fails the test like a traceback would.
    path = _write(tmp_path, text)
    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", ["populace", "run", str(path), "--out", str(out)])
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"error: {path}:"), lines[0]
    for fragment in expected:
        assert fragment in lines[0], lines[0]
    assert not out.exists()  # nothing is created before the config is valid
