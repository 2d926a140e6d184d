"""The run file, read once: the common run options, the scenario and its settings.

A run file is YAML::

    scenario: rumour.py:Rumour   # required: a built-in name, entry point, or file.py:Class
    name: rumour
    agents: 5000
    steps: 10                    # `rounds:` means the same
    seed: 7
    settings:                    # the scenario's own settings (top-level keys work too)
      radius: 5.0

Overrides from the command line go through :func:`load_run_file` too, so a key that the
scenario cannot take is refused the same way whether it came from the file or a flag.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
import re
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa
from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator

from populace._strict import (
    MAX_AGENTS,
    MAX_SEED,
    MAX_STEPS,
    MAX_WORKERS,
    BackendName,
    KeepCheckpoints,
    StrictModel,
    address_checked,
    fail_at,
    only_with_address,
)
from populace.config import format_error, key_text, read_yaml, unknown_key
from populace.core import ConfigError, backend_kind
from populace.llm import DummyConfig, ModelConfig, load_factory
from populace.population import PopulationConfig, sample_population
from populace.results import RunDirectory

from ._scenario import COMMON_OPTIONS, Scenario, ScenarioSettings

#: Scenarios that come with Populace, by name (module:class, imported on use).
BUILTIN: dict[str, str] = {
    "guess_number": "populace.scenarios.guess_number:GuessNumber",
    "survey": "populace.scenarios.survey:Survey",
    "social": "populace.scenarios.social:Social",
}
#: The entry point group through which an installed package adds scenarios.
ENTRY_POINTS = "populace.scenarios"
#: Modules imported from scenario files are named with this prefix.
USER_MODULE_PREFIX = "populace_user_"
#: The longest wait between two checkpoints inside a step, minutes (a day).
MAX_CHECKPOINT_MINUTES = 1440.0
#: Predicted LLM calls above which ``populace run`` asks before a run on a served model
#: starts, unless the run file says otherwise (``confirm_above:``): the guessing game
#: with 1,000 agents for 10 rounds.
CONFIRM_ABOVE = 10_000


def _default_models() -> dict[str, ModelConfig]:
    return {"dummy": DummyConfig()}


class RunOptions(StrictModel):
    """The options of every run, whatever its scenario (the run file's top-level keys)."""

    scenario: str = Field(min_length=1, description="built-in name, entry point, or file.py:Class")
    name: str = Field("run", min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    seed: int = Field(0, strict=True, ge=0, le=MAX_SEED,
                      description="one seed for the whole run")
    agents: int = Field(100, strict=True, ge=1, le=MAX_AGENTS, description="number of agents")
    steps: int = Field(1, strict=True, ge=1, le=MAX_STEPS, description="steps (rounds, days, "
                       "ticks) to play; the run file may call them rounds:")
    workers: int = Field(1, strict=True, ge=1, le=MAX_WORKERS,
                         description="worker count (each hosts many agents)")
    backend: BackendName = Field("local", description="where workers live: local, ray or a "
                                 "registered backend")
    address: str | None = Field(None, description="Ray cluster to join ('auto', 'ray://…')")
    models: dict[str, ModelConfig] = Field(default_factory=_default_models, min_length=1)
    population: PopulationConfig | None = Field(None, description="aspects sampled per agent")
    checkpoint_minutes: float = Field(
        5.0, gt=0, le=MAX_CHECKPOINT_MINUTES,
        description="inside a long step, save the answers received so far this often "
        "(at most once a day: 1440)")
    keep_checkpoints: KeepCheckpoints = Field(
        "all", description="checkpoints kept: all (any step can be forked or interviewed) "
        "or the newest N (at least 2)")
    confirm_above: int = Field(
        CONFIRM_ABOVE, strict=True, ge=0, description="predicted LLM calls above which "
        "populace run shows the estimate and asks before starting (--yes skips it; 0: "
        "always ask)")
    settings: dict[str, Any] = Field(default_factory=dict, description="the scenario's own")

    @field_validator("address")
    @classmethod
    def _address_form(cls, value: str | None, info: ValidationInfo) -> str | None:
        return address_checked(value, info.data.get("backend"))

    @model_validator(mode="after")
    def _address(self) -> RunOptions:
        only_with_address(self.address, self.backend)
        return self

    @model_validator(mode="after")
    def _population(self) -> RunOptions:
        if self.population is not None:
            self.population.check_agents(self.agents)
            model = self.population.backgrounds.model
            if model is not None and model not in self.models:
                fail_at(("population", "backgrounds", "model"), f"{model!r} is not under "
                        f"models: (have: {', '.join(self.models)})")
        return self

    def backend_options(self) -> dict[str, Any]:
        return backend_kind(self.backend).options(self.address)


@dataclass(frozen=True)
class RunFile:
    """A run file, read and checked: options, the scenario class and its settings."""

    path: Path
    options: RunOptions
    scenario: type[Scenario]
    settings: ScenarioSettings
    #: ``options.scenario`` with a file's path made absolute (resumable from anywhere).
    scenario_ref: str
    #: What the scenario's :meth:`Scenario.check` made of the whole run file.
    config: Any = None

    @property
    def name(self) -> str:
        return self.options.name

    def sample_population(self, *, seed: int | None = None, size: int | None = None
                          ) -> pa.Table | None:
        """The population this run samples (backgrounds not yet written): ``size`` agents
        (default the run's ``agents``) drawn with ``seed`` (default the run's seed); None
        without a ``population:`` block. What the launcher gives the scenario, and what
        ``populace population sample RUN_FILE`` previews.

        >>> run_file = load_run_file("examples/paper/education.yaml")  # doctest: +SKIP
        >>> run_file.sample_population().num_rows  # doctest: +SKIP
        1000
        """
        o = self.options
        if o.population is None:
            return None
        return sample_population(o.population, seed=o.seed if seed is None else seed,
                                 size=o.agents if size is None else size)

    def resolved(self) -> dict[str, Any]:
        """Everything the run used, defaults included (what ``config.yaml`` records); the
        scenario is written as resolved, so the run directory resumes on its own."""
        own = self.scenario.resolved(self)
        if own is not None:
            return own
        data = self.options.model_dump(mode="json", exclude={"settings"})
        data["scenario"] = self.scenario_ref
        data["settings"] = self.settings.model_dump(mode="json")
        return data


def where(error: BaseException, path: Path) -> str:
    """``"opinions.py, line 134: "``: the deepest frame of ``error`` in the file ``path``."""
    if isinstance(error, SyntaxError) and error.lineno is not None:
        return f"{path.name}, line {error.lineno}: "
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if Path(f.filename).resolve() == path.resolve()]
    return f"{path.name}, line {frames[-1].lineno}: " if frames else ""


def _import_file(source: Path, path: Path) -> ModuleType:
    if not path.is_file():
        raise ConfigError(f"{source}: scenario: no such file {path}")
    name = f"{USER_MODULE_PREFIX}{path.stem}"
    known = sys.modules.get(name)
    if known is not None and Path(getattr(known, "__file__", "") or "").resolve() == path:
        return known  # the same file again (a sweep, a recovery): the same classes
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{source}: scenario: cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look modules up here
    if str(path.parent) not in sys.path:  # as for a script: its neighbours import
        sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except SystemExit as e:  # sys.exit() at import time: the run never started, not a success
        del sys.modules[name]
        raise ConfigError(f"{source}: scenario: {path.name} does not import: it calls "
                          f"sys.exit({e.code!r}) when imported") from None
    except Exception as e:  # the user's file: say where it broke, in one line
        del sys.modules[name]
        what = e.msg if isinstance(e, SyntaxError) else e  # its str() repeats the line
        raise ConfigError(f"{source}: scenario: {path.name} does not import: "
                          f"{where(e, path)}{type(e).__name__}: {what}") from None
    return module


def _pick(source: Path, module: ModuleType, attr: str | None, what: str) -> type[Scenario]:
    if attr is not None:
        found = getattr(module, attr, None)
        if not (inspect.isclass(found) and issubclass(found, Scenario)):
            raise ConfigError(f"{source}: scenario: {what} has no Scenario class {attr!r}")
        return found
    classes = [v for v in vars(module).values() if inspect.isclass(v)
               and issubclass(v, Scenario) and v is not Scenario
               and v.__module__ == module.__name__]
    if not classes and inspect.iscoroutinefunction(getattr(module, "run", None)):
        raise ConfigError(f"{source}: scenario: {what} has the old `async def run(config)` "
                          "form, which is gone: write a Scenario class (see docs/scenarios.md)")
    if len(classes) != 1:
        names = ", ".join(c.__name__ for c in classes) or "none"
        raise ConfigError(f"{source}: scenario: {what} defines {len(classes)} Scenario classes "
                          f"({names}); name one as {what}:ClassName")
    return classes[0]


def _entry_point(name: str) -> str | None:
    for ep in importlib.metadata.entry_points(group=ENTRY_POINTS):
        if ep.name == name:
            return str(ep.value)
    return None


def _import_target(source: Path, target: str) -> type[Scenario]:
    """``package.module:Class`` → the class."""
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:
        raise ConfigError(f"{source}: scenario: cannot import {module_name}: "
                          f"{type(e).__name__}: {e}") from None
    return _pick(source, module, attr or None, module_name)


def resolve_scenario(ref: str, source: Path) -> type[Scenario]:
    """The Scenario class named by ``ref``: a built-in name, an entry point of group
    ``populace.scenarios``, ``path/to/file.py[:Class]`` (relative to the run file) or
    ``package.module:Class``."""
    file_part, _, attr = ref.partition(":") if ".py" in ref else (ref, "", "")
    if file_part.endswith(".py"):
        path = (source.parent / file_part).resolve()
        return _pick(source, _import_file(source, path), attr or None, Path(file_part).name)
    target = BUILTIN.get(ref) or _entry_point(ref)
    if target is None and ":" in ref:
        target = ref
    if target is None:
        raise ConfigError(f"{source}: scenario: unknown scenario {ref!r} (expected "
                          f"{_expected()})")
    return _import_target(source, target)


def _expected() -> str:
    """The scenarios a run file may name, as an error line lists them."""
    known = sorted({*BUILTIN, *(ep.name for ep in
                                importlib.metadata.entry_points(group=ENTRY_POINTS))})
    return f"one of: {', '.join(known)}; or path/to/file.py:Class"


def _validate(model: type[BaseModel], data: dict[str, Any], source: str, prefix: str) -> Any:
    from pydantic import ValidationError

    try:
        return model.model_validate(data)
    except ValidationError as e:
        line = format_error(source, e, model)
        if prefix:  # name the key as the run file writes it
            line = line.replace(f"{source}: ", f"{source}: {prefix}", 1)
        raise ConfigError(line) from None


def _model_files(data: dict[str, Any], source: Path) -> dict[str, Any]:
    """``data`` with each ``provider: python`` factory file made absolute (relative to the
    run file as written, and still found from the run directory's copy on resume), and
    each factory checked: it imports and names a callable."""
    models = data.get("models")
    if not isinstance(models, dict):
        return data
    changed = {}
    for name, model in models.items():
        factory = model.get("factory") if isinstance(model, dict) else None
        if not (isinstance(factory, str) and model.get("provider") == "python"):
            continue
        if ".py:" in factory:
            file_part, _, attr = factory.rpartition(":")
            factory = f"{(source.parent / file_part).resolve()}:{attr}"
            changed[name] = {**model, "factory": factory}
        try:
            load_factory(factory)
        except ConfigError as e:
            raise ConfigError(f"{source}: models.{name}.factory: {e}") from None
    return {**data, "models": {**models, **changed}} if changed else data


def parse_run_file(data: dict[str, Any], source: Path,
                   overrides: dict[str, Any] | None = None) -> RunFile:
    """Check ``data`` (a run file's mapping) with ``overrides`` applied (None values are
    not set). Scenario settings are the ``settings:`` block plus any top-level key that is
    not a run option."""
    if not data:
        raise ConfigError(f"{source}: the run file is empty (expected at least scenario: "
                          "and the run's options)")
    if "scenario" not in data:  # no default: each scenario is named, the game too
        raise ConfigError(f"{source}: scenario: missing (expected {_expected()})")
    if not isinstance(data["scenario"], str):
        raise ConfigError(f"{source}: scenario: unknown scenario {data['scenario']!r} "
                          "(expected a name or path/to/file.py:Class)")
    cls = resolve_scenario(data["scenario"], source)
    option_keys = {*RunOptions.model_fields, "rounds"}
    settings = data.pop("settings", None) or {}
    if not isinstance(settings, dict):
        raise ConfigError(f"{source}: settings: expected a mapping, got {settings!r}")
    settings = dict(settings)
    prefix = "settings." if settings else ""
    top: set[str] = set()  # settings written at the top level
    for key in [k for k in data if k not in option_keys]:
        if key not in cls.Settings.model_fields:
            raise ConfigError(f"{source}: {_unknown(key, cls, option_keys)}")
        if key in settings:
            raise ConfigError(f"{source}: {key}: set both at the top and under settings:")
        settings[key] = data.pop(key)
        top.add(key)
        prefix = ""  # a mistake is named as written: at the top
    if "rounds" in data and "steps" in data:
        raise ConfigError(f"{source}: rounds: give steps or rounds, not both")
    if "rounds" in data:
        data["steps"] = data.pop("rounds")
    given = set(data)
    for key, value in (overrides or {}).items():
        if value is not None:
            if key in COMMON_OPTIONS - cls.options:
                raise ConfigError(f"--{_FLAGS.get(key, key)}: scenario {cls.name!r} does not "
                                  f"take {key} (it takes: {_taken(cls)})")
            _check_flag(key, value)
            data[key] = value
    refused = sorted((given & COMMON_OPTIONS) - cls.options)
    if refused:
        flag = refused[0]
        raise ConfigError(f"{source}: {flag}: scenario {cls.name!r} does not take {flag} "
                          f"(it takes: {_taken(cls)})")
    data = _model_files(data, source)
    options = _validate(RunOptions, {"name": cls.name, **cls.defaults, **data}, str(source), "")
    checked = _validate(cls.Settings, settings, str(source), prefix)
    try:
        config = cls.check(options, checked, str(source))
    except ConfigError as e:
        raise ConfigError(_as_written(str(e), str(source), top)) from None
    planned = cls.planned_steps(config)
    if planned is not None and "steps" not in data:
        options = options.model_copy(update={"steps": planned})
    return RunFile(source, options, cls, checked, _absolute(options.scenario, source), config)


def _as_written(line: str, source: str, top: set[str]) -> str:
    """A check's ``SOURCE: settings.KEY…`` line with the key named as the run file writes
    it: ``KEY…`` when the file sets ``KEY`` at the top level."""
    head = f"{source}: settings."
    if line.startswith(head):
        rest = line[len(head):]
        if re.split(r"[.:\s]", rest, maxsplit=1)[0] in top:
            return f"{source}: {rest}"
    return line


def _absolute(ref: str, source: Path) -> str:
    file_part, colon, attr = ref.partition(":")
    if not file_part.endswith(".py"):
        return ref
    return f"{(source.parent / file_part).resolve()}{colon}{attr}"


#: The command-line flag of each overridable run option.
_FLAGS = {"steps": "rounds"}


def _taken(cls: type[Scenario]) -> str:
    return ", ".join(sorted(cls.options)) or "none"


def _unknown(key: Any, cls: type[Scenario], option_keys: set[str]) -> str:
    """``KEY: unknown key (did you mean …?) (expected one of: …)``, run options and the
    scenario's settings both named."""
    options = [k for k in RunOptions.model_fields if k != "settings"] + ["rounds"]
    fields = list(cls.Settings.model_fields)
    own = f"; or a setting of {cls.name}: {', '.join(fields)}" if fields else ""
    return f"{key_text(key)}: {unknown_key(key, options, also=[*fields, 'settings'], more=own)}"


def _check_flag(key: str, value: Any) -> None:
    """A bad value given on the command line is blamed on the flag, not the run file."""
    from pydantic import ValidationError

    try:
        RunOptions.model_validate({"scenario": "-", key: value,
                                   **({"backend": "ray"} if key == "address" else {})})
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        if tuple(first["loc"]) == (key,):
            raise ConfigError(f"--{_FLAGS.get(key, key)} {value}: "
                              f"{first['msg'].removeprefix('Value error, ')}") from None


def load_run_file(path: str | Path, overrides: dict[str, Any] | None = None) -> RunFile:
    """Read and check run file ``path``; every problem is one :class:`ConfigError` line."""
    return parse_run_file(read_yaml(path), Path(path), overrides)


def scenario_of(run_dir: Path) -> type[Scenario] | None:
    """The scenario class that made run directory ``run_dir`` (from its ``config.yaml``,
    which has named it since the first version), None when it names none;
    :class:`ConfigError` when it cannot be loaded any more."""
    config = RunDirectory(run_dir).config_path
    data = read_yaml(config) if config.exists() else {}
    ref = data.get("scenario")
    if not isinstance(ref, str):
        return None
    return resolve_scenario(ref, config)
