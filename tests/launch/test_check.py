"""``Scenario.check(options, settings, source)``: a scenario's checks across the run file get
the run options and its settings validated, and its messages name a setting as the run file
writes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from populace.core import ConfigError
from populace.launch import (
    RunOptions,
    Scenario,
    ScenarioSettings,
    parse_run_file,
    resolve_scenario,
    scenario_of,
)


class Spread(Scenario):
    name = "spread"
    #: What check was given, last (the run file imports this file as its own module).
    seen: tuple[Any, Any, str] | None = None

    class Settings(ScenarioSettings):
        seeds: int = 1
        reach: dict[str, int] = {}

    @classmethod
    def check(cls, options: RunOptions, settings: Spread.Settings, source: str) -> int:
        cls.seen = (options, settings, source)
        if settings.seeds > options.agents:
            raise ConfigError(f"{source}: settings.seeds: {settings.seeds} seeds for "
                              f"{options.agents} agents")
        if sum(settings.reach.values()) > options.agents:
            raise ConfigError(f"{source}: settings.reach.far more than the agents")
        if options.steps > 5:
            raise ConfigError(f"{source}: steps: at most 5")
        return settings.seeds * 2

    async def step(self, run: Any, t: int) -> None:
        pass


def spread() -> Any:
    return resolve_scenario(f"{__file__}:Spread", Path("run.yaml"))


def parse(data: dict[str, Any], overrides: dict[str, Any] | None = None) -> Any:
    return parse_run_file({"scenario": f"{__file__}:Spread", **data}, Path("run.yaml"),
                          overrides)


def test_check_gets_the_options_and_settings_validated() -> None:
    run_file = parse({"agents": 4, "rounds": 2, "settings": {"seeds": 3}}, {"agents": 5})
    options, settings, source = run_file.scenario.seen
    assert isinstance(options, RunOptions) and options.agents == 5 and options.steps == 2
    assert isinstance(settings, run_file.scenario.Settings) and settings.seeds == 3
    assert source == "run.yaml"
    assert run_file.config == 6  # what check returned: Run.config
    assert run_file.settings is settings


@pytest.mark.parametrize(("data", "line"), [
    ({"agents": 2, "settings": {"seeds": 3}}, "run.yaml: settings.seeds: 3 seeds for 2 agents"),
    ({"agents": 2, "seeds": 3}, "run.yaml: seeds: 3 seeds for 2 agents"),
    ({"agents": 2, "reach": {"far": 3}}, "run.yaml: reach.far more than the agents"),
    ({"agents": 2, "settings": {"reach": {"far": 3}}},
     "run.yaml: settings.reach.far more than the agents"),
    ({"steps": 6, "seeds": 1}, "run.yaml: steps: at most 5"),
])
def test_a_checks_message_names_the_key_as_written(data: dict[str, Any], line: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(data)
    assert str(info.value) == line


def test_settings_are_validated_before_check() -> None:
    spread().seen = None
    with pytest.raises(ConfigError, match=r"^run.yaml: settings.seeds: Input should be a "
                                          r"valid integer"):
        parse({"settings": {"seeds": "many"}})
    assert spread().seen is None


def test_a_run_file_names_its_scenario(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        parse_run_file({"agents": 3, "rounds": 2}, Path("run.yaml"))
    assert str(info.value) == ("run.yaml: scenario: missing (expected one of: guess_number, "
                               "social, survey; or path/to/file.py:Class)")
    (tmp_path / "config.yaml").write_text("agents: 3\nrounds: 2\n")
    assert scenario_of(tmp_path) is None  # the game's config.yaml has always named it
