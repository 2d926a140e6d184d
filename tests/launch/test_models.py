"""``ModelChoice``: which model each agent uses, one line per mistake, an exact and seeded
deal of mixed models."""

from __future__ import annotations

from collections import Counter
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from populace.core import ConfigError, derive_seed
from populace.launch import ModelChoice, RunOptions, ScenarioSettings


class One(ScenarioSettings):
    model: str | None = None


class Mixed(ScenarioSettings):
    model: str | None = None
    assign: dict[str, Fraction] | None = None


def options(*models: str, agents: int = 10) -> RunOptions:
    return RunOptions(scenario="x", agents=agents,
                      models={m: {"provider": "dummy"} for m in models or ("dummy",)})


def choose(settings: Any, *models: str, agents: int = 10) -> ModelChoice:
    return ModelChoice.of(options(*models, agents=agents), settings, "run.yaml")


def test_the_only_model_is_the_default() -> None:
    assert choose(One()) == ModelChoice("dummy")
    assert choose(Mixed(), "a") == ModelChoice("a")
    assert choose(One(model="b"), "a", "b").names == ("b",)


@pytest.mark.parametrize(("settings", "line"), [
    (One(model="c"), "run.yaml: settings.model: 'c' is not under models: (have: a, b)"),
    (One(), "run.yaml: models: several are configured (a, b); set model: to the one the "
            "agents use"),
    (Mixed(), "run.yaml: models: several are configured (a, b); set model: to the one the "
              "agents use, or assign: to mix them"),
    (Mixed(assign={"a": Fraction(1, 3), "c": Fraction(2, 3)}),
     "run.yaml: settings.assign: 'c' is not under models: (have: a, b)"),
    (Mixed(assign={"a": Fraction(0), "b": Fraction(0)}),
     "run.yaml: settings.assign: give at least one positive share"),
    (Mixed(model="a", assign={"a": Fraction(1)}),
     "run.yaml: set either model: (one model for all) or assign: (mixed), not both"),
    (Mixed(assign={"a": Fraction(3), "b": Fraction(4)}),
     "run.yaml: settings.assign: counts add up to 7, but agents is 10"),
    (Mixed(assign={"a": Fraction(1, 3), "b": Fraction(1, 2)}),
     "run.yaml: settings.assign: fractions add up to 0.833333, expected 1"),
])
def test_each_mistake_is_one_line(settings: Any, line: str) -> None:
    with pytest.raises(ConfigError) as info:
        choose(settings, "a", "b")
    assert str(info.value) == line


def test_shares_are_dealt_exactly_and_reproducibly() -> None:
    choice = choose(Mixed(assign={"a": Fraction(1, 3), "b": Fraction(2, 3)}), "a", "b",
                    agents=100)
    dealt = choice.assignment(100, seed=7)
    assert Counter(dealt.tolist()) == {"a": 33, "b": 67}  # 33.3 and 66.7: the larger remainder
    assert dealt.tolist() == choice.assignment(100, seed=7).tolist()
    assert dealt.tolist() != choice.assignment(100, seed=8).tolist()
    # the deal of the game since its first version: counts in order, one seeded shuffle
    expected = np.repeat(np.array(["a", "b"], dtype=object), [33, 67])
    np.random.default_rng(derive_seed(7, 0xA551)).shuffle(expected)
    assert dealt.tolist() == expected.tolist()
    counts = choose(Mixed(assign={"a": Fraction(3), "b": Fraction(7)}), "a", "b")
    assert Counter(counts.assignment(10, seed=0).tolist()) == {"a": 3, "b": 7}
    assert choose(One()).assignment(3, seed=0).tolist() == ["dummy"] * 3
