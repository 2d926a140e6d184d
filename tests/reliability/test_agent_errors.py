"""Agents that raise are isolated: their rows are invalid with the error, the run completes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest

from fault_models import FAILURES
from populace import cli
from populace.results import read_summary, read_table

AGENTS, ROUNDS, SEED = 60, 2, 3

def test_agents_that_raise_are_isolated_and_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    helpers: Any,
) -> None:
    # A model of the user's own (provider: python) with bugs: it raises, not ModelError.
    path = helpers.write_run_file(
        tmp_path, agents=AGENTS, rounds=ROUNDS, seed=SEED, game={"protocol": "direct"},
        models={"brittle": {"provider": "python", "factory": "fault_models:Brittle",
                            "options": {"agents": AGENTS, "rounds": ROUNDS, "seed": SEED}}})
    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", ["populace", "run", str(path), "--out", str(out)])
    cli.main()  # no exception, no warning (pytest turns warnings into errors)

    captured = capsys.readouterr()
    n_valid = AGENTS - AGENTS // 6 * len(FAILURES)
    # Every round says, in one warning line, how many answers failed and why; the run's
    # last line counts the steps that warned.
    assert captured.err.splitlines() == [
        *(f"warning: step {r}: {AGENTS - n_valid} of {AGENTS} answers failed (most common: "
          f"ZeroDivisionError ×{AGENTS // 6}: division by zero)" for r in range(1, ROUNDS + 1)),
        f"warning: {ROUNDS} of {ROUNDS} steps warned (see each step's warnings in "
        "summary.json)"]
    for r in range(1, ROUNDS + 1):  # the count of valid answers is shown for every round
        assert f"round {r}/{ROUNDS}: n={AGENTS} valid={n_valid} " in captured.out
    table = read_table(out)
    assert table.num_rows == AGENTS * ROUNDS
    for row in table.to_pylist():
        failure = FAILURES.get(row["agent_id"] % 6)
        if failure is None:
            assert (row["valid"], row["number"], row["error"]) == (
                True, row["agent_id"] + row["round"], None)
        else:
            assert (row["valid"], row["number"], row["raw"]) == (False, None, None)
            assert row["error"] == f"{type(failure).__name__}: {failure}"
    summary = read_summary(out)
    assert summary["status"] == "completed"
    assert [r["n_valid"] for r in summary["steps"]] == [n_valid] * ROUNDS
    assert pc.sum(table.column("valid")).as_py() == n_valid * ROUNDS
