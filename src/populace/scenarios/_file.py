"""Scenario files: a run file naming ``scenario: my_scenario.py`` runs that file's code.

The file defines ``async def run(config)`` (or ``run(config, monitor)``, to report to the
studio) returning a JSON-able result, optionally a ``DEFAULTS`` dict (the keys a run file may
set; each value must be of its default's kind) and ``report(result)`` (prints it). Both
``populace run`` and the studio load and run scenario files through :class:`ScenarioFile`,
so they check settings and record outcomes the same way.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from populace.config import read_yaml
from populace.core import ConfigError
from populace.results import RunDirectory, RunMonitor

_KINDS: list[tuple[type, str]] = [(bool, "true or false"), (int, "an integer"),
                                  (float, "a number"), (str, "a string"), (list, "a list"),
                                  (dict, "a mapping")]


def is_scenario_file(config: Path) -> bool:
    """Does run file ``config`` name a scenario file (``scenario: something.py``)?"""
    scenario = read_yaml(config).get("scenario")
    return isinstance(scenario, str) and scenario.endswith(".py")


def where(error: BaseException, path: Path) -> str:
    """``"opinions.py, line 134: "``: the deepest frame of ``error`` in the file ``path``."""
    if isinstance(error, SyntaxError) and error.lineno is not None:
        return f"{path.name}, line {error.lineno}: "
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if Path(f.filename).resolve() == path.resolve()]
    return f"{path.name}, line {frames[-1].lineno}: " if frames else ""


def _import(config: Path, spec: str) -> ModuleType:
    path = (config.parent / spec).resolve()
    if not path.is_file():
        raise ConfigError(f"{config}: scenario: no such file {path}")
    module_spec = importlib.util.spec_from_file_location(f"populace_user_{path.stem}", path)
    if module_spec is None or module_spec.loader is None:
        raise ConfigError(f"{config}: scenario: cannot import {path}")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module  # dataclasses and pickling look modules up here
    try:
        module_spec.loader.exec_module(module)
    except Exception as e:  # the user's file: say where it broke, in one line
        raise ConfigError(f"{config}: scenario: {path.name} does not import: "
                          f"{where(e, path)}{type(e).__name__}: {e}") from None
    if not inspect.iscoroutinefunction(getattr(module, "run", None)):
        raise ConfigError(f"{config}: scenario: {path.name} has no `async def run(config)`")
    return module


def _check_like_defaults(config: Path, data: dict[str, Any], defaults: dict[str, Any]) -> None:
    """Each value must be of its default's kind (a number where the default is 3.0, …)."""
    for key, value in data.items():
        if key not in defaults:
            raise ConfigError(f"{config}: {key}: unknown key (expected one of: "
                              f"{', '.join(defaults)})")
        default = defaults[key]
        kind = next((k for k in _KINDS if isinstance(default, k[0])), None)
        if kind is None:
            continue  # the scenario takes anything here
        ok = isinstance(value, kind[0]) and isinstance(value, bool) == isinstance(default, bool)
        if kind[0] is float and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        if not ok:
            raise ConfigError(f"{config}: {key}: expected {kind[1]} (like the default "
                              f"{default!r}), got {value!r}")


@dataclass
class ScenarioFile:
    """A scenario file loaded for one run, with its settings checked."""

    config: Path
    module: ModuleType
    name: str
    settings: dict[str, Any]

    @classmethod
    def load(cls, config: Path, overrides: dict[str, Any] | None = None) -> ScenarioFile:
        """Import the file named by run file ``config``; check the settings (one-line
        :class:`ConfigError`). ``overrides`` that the scenario does not know are ignored."""
        data = read_yaml(config)
        module = _import(config, data.pop("scenario"))
        name = str(data.pop("name", Path(module.__file__ or "scenario").stem))
        defaults: dict[str, Any] | None = getattr(module, "DEFAULTS", None)
        for key, value in (overrides or {}).items():
            if value is not None and (defaults is None or key in defaults):
                data[key] = value
        if defaults is not None:
            _check_like_defaults(config, data, defaults)
        return cls(config, module, name, data)

    @property
    def path(self) -> Path:
        return Path(self.module.__file__ or "scenario.py")

    def resolved(self) -> dict[str, Any]:
        """Every setting, defaults included (what ``config.yaml`` records)."""
        defaults = getattr(self.module, "DEFAULTS", None) or {}
        return json.loads(json.dumps({**defaults, **self.settings}, default=str))

    def run(self, monitor: RunMonitor) -> Any:
        """The scenario's coroutine; ``monitor`` is handed over if ``run`` takes one."""
        run = self.module.run
        if "monitor" in inspect.signature(run).parameters:
            return run(self.settings, monitor=monitor)
        return run(self.settings)

    def report(self, result: Any) -> None:
        report = getattr(self.module, "report", None)
        if callable(report):
            report(result)

    def failure(self, error: BaseException, run_dir: RunDirectory) -> str:
        """Keep the traceback in ``RUN_DIR/error.txt``; the one line that says what broke."""
        saved = run_dir.path / "error.txt"
        saved.write_text("".join(traceback.format_exception(error)))
        return (f"{self.config}: scenario {where(error, self.path)}{type(error).__name__}: "
                f"{error} (traceback in {saved})")


class Outcome:
    """Writes a scenario file's ``summary.json`` and tells its monitor how it ended."""

    def __init__(self, scenario: ScenarioFile, run_dir: RunDirectory,
                 monitor: RunMonitor) -> None:
        self.run_dir = run_dir
        self.monitor = monitor
        self.started = time.perf_counter()
        self.summary: dict[str, Any] = {"name": scenario.name, "status": "running"}
        run_dir.write_config(scenario.resolved())

    def finish(self, status: str, **more: Any) -> dict[str, Any]:
        """Record the end (``stopped`` instead of ``completed`` after a stop request)."""
        if status == "completed" and self.monitor.stop_requested:
            status = "stopped"
        self.summary.update(status=status, wall_s=round(time.perf_counter() - self.started, 4),
                            **more)
        self.run_dir.write_summary(json.loads(json.dumps(self.summary, default=str)))
        self.monitor.run_finished(status, more.get("error"))
        return self.summary
