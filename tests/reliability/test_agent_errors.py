"""Agents that raise are isolated: their rows are invalid with the error, the run completes."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest

from populace import cli
from populace.core import derive_seed, seed_for
from populace.llm import ChatMessage, Completion, ModelStats
from populace.llm import _modelset as modelset_module
from populace.results import read_summary, read_table

AGENTS, ROUNDS, SEED = 60, 2, 3

#: Agent id modulo 6 → what its model does instead of answering.
FAILURES: dict[int, BaseException] = {
    1: ZeroDivisionError("division by zero"),
    2: KeyError("missing"),
    3: RuntimeError("the model fell over"),
}


class Brittle:
    """Answers ``agent id + round``, or raises ``FAILURES[agent % 6]``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.who = {seed_for(derive_seed(SEED, r), a): (a, r)
                    for a in range(AGENTS) for r in range(1, ROUNDS + 1)}

    async def complete(self, messages: Sequence[ChatMessage], *, seed: int | None = None,
                       **params: Any) -> Completion:
        assert seed is not None
        agent, round_no = self.who[seed]
        failure = FAILURES.get(agent % 6)
        if failure is not None:
            raise failure
        return Completion(f"I pick {agent + round_no}", self.name)

    def statistics(self) -> ModelStats:
        return ModelStats(self.name, 0, 0, 0, 0, 0)

    async def aclose(self) -> None:
        pass


def test_agents_that_raise_are_isolated_and_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    helpers: Any,
) -> None:
    monkeypatch.setattr(modelset_module, "build_model", lambda name, config, **_: Brittle(name))
    path = helpers.write_run_file(
        tmp_path, agents=AGENTS, rounds=ROUNDS, seed=SEED,
        models={"dummy": {"provider": "dummy", "latency": 0.0}})
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
