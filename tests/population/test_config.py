"""Population configs: the accepted forms, and one clear line for every mistake."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ConfigDict

from populace.config import validate
from populace.core import ConfigError
from populace.population import (
    TEMPLATES,
    BackgroundConfig,
    PopulationConfig,
    load_population_config,
    sample_population,
)
from populace.population._specs import Categorical


def write(tmp_path: Path, data: dict[str, Any], name: str = "pop.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def error_of(tmp_path: Path, data: dict[str, Any]) -> str:
    path = write(tmp_path, data)
    with pytest.raises(ConfigError) as info:
        load_population_config(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    return message.removeprefix(f"{path}: ")


ONE = {"values": ["a"]}


def probs(aspects: dict[str, Any]) -> list[float]:
    """The normalised probabilities of the single aspect ``a``."""
    spec = PopulationConfig.model_validate({"aspects": aspects}).aspects["a"].spec
    assert isinstance(spec, Categorical)
    return [float(p) for p in spec.probs]


@pytest.mark.parametrize("aspects,expected", [
    ({"edu": {"weights": {"a": 0.5, "b": 0.4}}},
     "aspects.edu.weights: weights sum to 0.9, expected 1"),
    ({"edu": {"percentages": {"a": 50, "b": 40}}},
     "aspects.edu.percentages: percentages sum to 90, expected 100"),
    ({"edu": {"template": "education", "weights": {"high school": 0.7, "doctorate": 0.2}}},
     "aspects.edu.weights: weights sum to 0.9, expected 1"),
    ({"edu": {"weights": {"a": "half", "b": 0.5}}},
     "aspects.edu.weights.a: expected a number or a fraction like 1/6, got 'half'"),
    ({"edu": {"weights": {"a": -0.5, "b": 1.5}}},
     "aspects.edu.weights.a: weights must be finite and >= 0, got -0.5"),
    ({"edu": {}}, "aspects.edu: an aspect needs template:"),
    ({"edu": {"values": ["a"], "weights": {"a": 1}}},
     "aspects.edu.weights: give only one of values:, weights:, percentages:"),
    ({"edu": {"values": ["a", "a"]}}, "aspects.edu.values: value 'a' is listed twice"),
    ({"edu": ONE, "job": {"given": "ed", "weights": {"a": {"x": 1}}}},
     "aspects.job.given: 'ed' is not an aspect (aspects: edu, job)"),
    ({"edu": {"values": ["a", "b"]}, "job": {"given": "edu", "weights": {"a": {"x": 1}}}},
     "aspects.job.weights: no row for edu value 'b'"),
    ({"edu": ONE, "job": {"given": "edu", "weights": {"a": {"x": 1}, "c": {"x": 1}}}},
     "aspects.job.weights.c: 'c' is not a value of edu (values: a)"),
    ({"edu": ONE, "job": {"given": "edu", "weights": {"a": {"x": 0.5, "y": 0.4}}}},
     "aspects.job.weights.a: weights sum to 0.9, expected 1"),
    ({"edu": ONE, "job": {"given": "edu", "values": ["x"]}},
     "aspects.job.weights: a conditional aspect needs weights:"),
    ({"x": {"distribution": "normal", "mean": 1, "std": 1},
      "job": {"given": "x", "weights": {"1": {"y": 1}}}},
     "aspects.job.given: 'x' is numeric; a conditional aspect needs a categorical one"),
    ({"edu": ONE, "job": {"given": "edu", "weights": {"a": 0.5}}},
     "aspects.job.weights.a: expected a mapping of value: weight, got 0.5"),
    ({"a": {"given": "b", "weights": {"x": {"x": 1}}},
      "b": {"given": "a", "weights": {"x": {"x": 1}}}},
     "aspects.a.given: conditional aspects form a cycle: a → b → a"),
    ({"x": {"distribution": "normal", "mean": 1}},
     "aspects.x.std: required for distribution: normal (it takes mean and std)"),
    ({"x": {"distribution": "uniform", "low": 1, "high": 2, "mean": 1}},
     "aspects.x.mean: not a parameter of distribution: uniform"),
    ({"x": {"distribution": "uniform", "low": 2, "high": 1}},
     "aspects.x.high: high (1) must be greater than low (2)"),
    ({"x": {"distribution": "normal", "mean": 0, "std": 1, "min": 3, "max": 2}},
     "aspects.x.max: max (2) must be greater than min (3)"),
    ({"x": {"distribution": "normal", "mean": 0, "std": 1, "min": 30}},
     "aspects.x.min: the bounds [30, inf] keep less than 0.01% of the distribution"),
    ({"x": {"distribution": "uniform", "low": 1, "high": 2, "min": 1.2, "max": 1.4, "round": 0}},
     "aspects.x.round: no value rounded to 0 decimals lies within [1.2, 1.4]"),
    ({"x": {"distribution": "normal", "mean": 0, "std": 1, "weights": {"a": 1}}},
     "aspects.x.weights: a numeric aspect (distribution: normal) takes no weights:"),
    ({"x": {"mean": 3}}, "aspects.x.mean: applies to numeric aspects only"),
    ({"x": {"distribution": "gamma"}}, "aspects.x.distribution: Input should be"),
    ({"x": {"valuez": ["a"]}}, "aspects.x.valuez: unknown key"),
    ({"agent_id": ONE}, "aspects.agent_id: aspect name 'agent_id' must be an identifier"),
    ({"two words": ONE}, "aspects.two words: aspect name 'two words' must be an identifier"),
    ({"edu": {"template": "age", "distribution": "normal"}},
     "aspects.edu.distribution: a template aspect is categorical"),
])
def test_each_mistake_is_one_line_naming_the_key(tmp_path: Path, aspects: dict[str, Any],
                                                 expected: str) -> None:
    assert error_of(tmp_path, {"size": 10, "aspects": aspects}).startswith(expected)


def test_unknown_template_lists_the_known_ones(tmp_path: Path) -> None:
    message = error_of(tmp_path, {"size": 10, "aspects": {"edu": {"template": "educaton"}}})
    assert message == ("aspects.edu.template: unknown template 'educaton'; known templates: "
                       "age, education, gender, nationality, occupation")


@pytest.mark.parametrize("data,expected", [
    ({"aspects": {"a": ONE}}, "size: required key is missing"),
    ({"size": 0, "aspects": {"a": ONE}}, "size: Input should be greater than or equal to 1"),
    ({"size": 5, "aspects": {"a": ONE}, "groups": {"by": "b"}},
     "groups.by: 'b' is not an aspect (aspects: a)"),
    ({"size": 5, "aspects": {"x": {"distribution": "normal", "mean": 0, "std": 1}},
      "groups": {"by": "x"}}, "groups.by: 'x' is numeric"),
    ({"size": 5, "aspects": {"a": ONE}, "groups": {}},
     "groups: give exactly one of by: (an aspect) or count: (a number)"),
    ({"size": 5, "aspects": {"a": ONE}, "backgrounds": {"template": "{{ nope }}"}},
     "backgrounds.template: unknown template variable 'nope'; expected one of a, agent_id,"),
    ({"size": 5, "aspects": {"a": ONE}, "backgrounds": {"template": "{% if %}"}},
     "backgrounds.template: Jinja2 syntax error on line 1"),
    ({"size": 5, "aspects": {"a": ONE}, "backgrounds": {"temperature": [1.5, 0.5]}},
     "backgrounds.temperature: expected 0 <= low <= high <= 2, got [1.5, 0.5]"),
    ({"size": 5, "aspects": {"a": ONE}, "backgrounds": {"concurency": 3}},
     "backgrounds.concurency: unknown key (did you mean concurrency?) (expected one of: "
     "model, system, template"),
    ({"size": 5, "aspects": {"a": ONE}, "sizes": 3},
     "sizes: unknown key (did you mean size?) (expected one of: size, seed, aspects, groups, "
     "backgrounds)"),
])
def test_top_level_mistakes(tmp_path: Path, data: dict[str, Any], expected: str) -> None:
    assert error_of(tmp_path, data).startswith(expected)


def test_run_file_population_block_is_read_with_its_path(tmp_path: Path) -> None:
    run: dict[str, Any] = {"scenario": "guess_number", "agents": 10,
           "population": {"size": 10, "aspects": {"edu": {"weights": {"a": 0.5, "b": 0.4}}}}}
    message = error_of(tmp_path, run)
    assert message == "population.aspects.edu.weights: weights sum to 0.9, expected 1"
    run["population"]["aspects"]["edu"]["weights"]["b"] = 0.5
    config = load_population_config(write(tmp_path, run), {"size": 4})
    assert config.size == 4 and config.aspects["edu"].kind == "categorical"


def test_embedding_in_another_model_keeps_the_path() -> None:
    class Run(BaseModel):
        model_config = ConfigDict(extra="forbid")
        agents: int = 10
        population: PopulationConfig

    bad = {"population": {"aspects": {"edu": {"given": "nope", "weights": {"a": {"x": 1}}}}}}
    with pytest.raises(ConfigError) as info:
        validate(bad, Run, "run.yaml")
    assert str(info.value) == ("run.yaml: population.aspects.edu.given: 'nope' is not an "
                               "aspect (aspects: edu)")
    run = validate({"population": {"aspects": {"edu": {"template": "education"}}}}, Run, "r")
    assert sample_population(run.population, 1, size=run.agents).num_rows == 10


def test_weights_percentages_values_and_fractions_agree() -> None:
    forms = [
        {"weights": {"x": 0.5, "y": 0.25, "z": 0.25}},
        {"weights": {"x": "1/2", "y": "1/4", "z": 0.25}},
        {"percentages": {"x": 50, "y": 25, "z": 25}},
    ]
    for form in forms:
        assert probs({"a": form}) == [0.5, 0.25, 0.25]
    assert probs({"a": {"values": ["x", "y"]}}) == [0.5, 0.5]


def test_weights_within_tolerance_are_normalised() -> None:
    thirds = {"aspects": {"a": {"weights": {"x": 0.333, "y": 0.333, "z": 0.333}}}}
    assert sum(probs(thirds["aspects"])) == pytest.approx(1.0)


def test_template_defaults_and_overrides() -> None:
    config = PopulationConfig.model_validate({"aspects": {
        "edu": {"template": "education"},
        "gender": {"template": "gender", "percentages": {"female": 50, "male": 50}},
    }})
    assert config.values("edu") == tuple(TEMPLATES["education"])
    assert config.targets()["edu"]["high school"] == pytest.approx(0.40)
    assert config.values("gender") == ("female", "male")
    for name, table in TEMPLATES.items():
        assert sum(table.values()) == pytest.approx(100.0), name


def test_targets_mix_conditional_rows() -> None:
    config = PopulationConfig.model_validate({"aspects": {
        "job": {"given": "edu", "weights": {"lo": {"x": 1.0}, "hi": {"x": 0.5, "y": 0.5}}},
        "edu": {"weights": {"lo": 0.75, "hi": 0.25}},
    }})
    assert config.sampling_order == ("edu", "job")
    assert config.targets()["job"] == pytest.approx({"x": 0.875, "y": 0.125})


def test_config_round_trips_through_its_dump(tmp_path: Path) -> None:
    config = load_population_config(
        Path(__file__).resolve().parents[2] / "examples" / "population" / "education_200x5.yaml")
    again = PopulationConfig.model_validate(config.model_dump(mode="json"))
    assert sample_population(again, 3).equals(sample_population(config, 3))
    dumped = PopulationConfig.model_validate(
        {"aspects": {"e": {"template": "education"}}}).model_dump(mode="json")
    assert dumped["aspects"]["e"]["percentages"] == dict(TEMPLATES["education"])


def test_background_config_accepts_a_single_temperature() -> None:
    assert BackgroundConfig.model_validate({"temperature": 0.3}).temperature == (0.3, 0.3)
    assert BackgroundConfig().temperature == (0.7, 1.0)
