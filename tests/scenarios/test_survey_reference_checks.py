"""A survey's reference rows are checked against its questionnaire and its profiles by
``populace run``, before step 1, naming the file and the line (issue 33): a row for
``region = nowhere`` or an unknown aspect was accepted and failed only in
``populace report``, naming no file."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import run_in_process

RUN = """\
scenario: survey
agents: 40
seed: 3
models: {dummy: {provider: dummy}}
population:
  aspects:
    party: {values: [Democrat, Republican]}
    age: {distribution: uniform, low: 18, high: 90, round: 0}
settings:
  questionnaire:
    instructions: A short survey.
    questions:
      - {id: happy, type: single_choice, text: "Happy?", options: ["yes", "no"]}
      - {id: words, type: open, text: "In your own words?"}
  reference: ref.csv
"""
GOOD = ("question,option,share,aspect,value\n"
        "happy,yes,0.6,,\nhappy,no,0.4,,\n"
        "happy,yes,0.5,party,Democrat\nhappy,no,0.5,party,Democrat\n")


@pytest.mark.parametrize(("row", "says"), [
    ("happy,yes,1.0,region,nowhere", "line 6, column 'aspect': 'region' is not a profile "
                                     "column of the run (have: age, group, model, party)"),
    ("happy,yes,1.0,party,Pirate", "line 6, column 'value': 'Pirate' is not a value of party "
                                   "(values: Democrat, Republican)"),
    ("sad,yes,1.0,,", "line 6, column 'question': 'sad' is not a question of the "
                      "questionnaire (have: happy, words)"),
    ("happy,maybe,1.0,,", "line 6, column 'option': 'maybe' is not an option of 'happy' "
                          "(options: yes, no)"),
    ("words,x,1.0,,", "line 6, column 'question': 'words' is open: only single-choice, "
                      "likert and coded open questions have reference shares"),
], ids=["unknown-aspect", "unknown-value", "unknown-question", "unknown-option", "open"])
def test_a_reference_row_the_run_cannot_compare_is_refused_before_step_1(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        row: str, says: str) -> None:
    (tmp_path / "ref.csv").write_text(GOOD + row + "\n")
    path = tmp_path / "run.yaml"
    path.write_text(RUN)
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", path, "--out", tmp_path / "o")
    assert code == 2, stderr
    assert stderr.strip().splitlines() == [f"error: {tmp_path / 'ref.csv'}: {says}"]
    assert not (tmp_path / "o").exists()


def test_a_numeric_aspect_takes_any_value_and_a_good_reference_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ref.csv").write_text(GOOD)
    path = tmp_path / "run.yaml"
    path.write_text(RUN)
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", path, "--out", tmp_path / "o")
    assert (code, stderr) == (0, "")
    code, _, stderr = run_in_process(capsys, monkeypatch, "report", tmp_path / "o")
    assert (code, stderr) == (0, "")
