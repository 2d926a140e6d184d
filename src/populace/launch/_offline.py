"""A finished (or stopped) run brought back to one of its steps: for interviews after the
fact, and forks — a new run that continues from a step's checkpoint with other settings.

Both start from what the run directory holds: ``config.yaml`` (the run as it was
configured), ``profiles.parquet`` (backgrounds included, never written again) and
``checkpoints/step-NNNNN.ckpt`` (``round-NNNNN.ckpt`` in older runs). Only the newest
checkpoints are kept unless the run file says ``keep_checkpoints: all`` (the default); a
step whose checkpoint is gone is named in the error with the steps that can be used.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from populace.core import ConfigError, Simulation
from populace.results import CheckpointError, RunDirectory, checkpoint_files, read_checkpoint

from . import _interventions
from ._inputs import INPUTS, check_inputs
from ._launcher import _population, _restore, _served
from ._run import Run
from ._runfile import RunFile, parse_run_file

#: Run options a fork cannot change: its checkpoint holds these agents of this scenario.
FIXED = ("agents", "scenario", "population")


def _config(run_dir: Path) -> dict[str, Any]:
    config = RunDirectory(run_dir).read_config()
    if not config:
        raise ConfigError(f"{run_dir}: no config.yaml there (not a run directory?)")
    return dict(config)


def checkpointed_steps(run_dir: Path) -> list[int]:
    """The steps of ``run_dir`` that have a checkpoint, in order."""
    return list(checkpoint_files(run_dir))


def checkpoint_at(run_dir: Path, step: int | None) -> tuple[int, Any]:
    """``(step, state)`` of ``run_dir``'s checkpoint after ``step`` (None: the newest);
    ConfigError naming the steps that have one when it is missing or damaged."""
    files = checkpoint_files(run_dir)
    steps = list(files)
    if not steps:
        raise ConfigError(f"{run_dir}: no checkpoint (the run finished no step)")
    want = steps[-1] if step is None else step
    have = ", ".join(map(str, steps))
    if want not in steps:
        raise ConfigError(f"{run_dir}: step {want} has no checkpoint (steps with one: {have})")
    try:
        return read_checkpoint(files[want])
    except CheckpointError as e:
        raise ConfigError(f"{e}; steps with a checkpoint: {have}") from None


@contextlib.asynccontextmanager
async def reopen(run_dir: Path, step: int | None = None) -> AsyncIterator[Run]:
    """The run of ``run_dir`` as it stood after ``step`` (default: its newest checkpoint):
    the scenario set up again and its agents and environments restored, no step played
    and nothing written to the run directory. Yields the :class:`Run`."""
    run_dir = Path(run_dir)
    check_inputs(run_dir)  # the data files it read, as it read them
    at, state = checkpoint_at(run_dir, step)
    config = _config(run_dir)
    run_file = parse_run_file(config, run_dir / "config.yaml")
    o = run_file.options
    summary: dict[str, Any] = {}
    population = await _population(run_file, None, run_dir, summary, run_dir)
    async with Simulation(workers=o.workers, backend=o.backend,
                          **o.backend_options()) as sim:
        run = Run(run_file, sim, None, population=population, monitor=None, observers=(),
                  replay=None, resume=False, served=_served(run_dir))
        scenario = run_file.scenario()
        try:
            await scenario.setup(run)
            await _restore(run, scenario, state)
            run.step = at
            yield run
        finally:
            for service in run.services:
                await service.aclose()


def _value(text: str) -> Any:
    """A ``--set`` value as YAML reads it (``0.5`` a number, ``true`` a boolean)."""
    try:
        return yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        return text


def parse_sets(pairs: list[str]) -> dict[str, Any]:
    """``["settings.ratio=0.5", …]`` as ``{"settings.ratio": 0.5}``; ConfigError if bad."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"set {pair!r}: expected KEY=VALUE (e.g. settings.ratio=0.5)")
        out[key.strip()] = _value(value)
    return out


def changed_config(config: Mapping[str, Any], sets: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` (a run's resolved config.yaml) with ``sets`` (dotted keys) applied. A key
    must name a setting the run has (its config lists every one, defaults included)."""
    data = json.loads(json.dumps(config))
    for key, value in sets.items():
        parts = key.split(".")
        if parts[0] in ("rounds", "steps"):  # one option, spelt as the run's file spells it
            parts[0] = "rounds" if "rounds" in data else "steps"
        if parts[0] in FIXED:
            raise ConfigError(f"set {key}: a fork keeps the run's {parts[0]} (its "
                              "checkpoint holds those agents); start a new run instead")
        node: Any = data
        for i, part in enumerate(parts):
            if not isinstance(node, dict) or part not in node:
                where = ".".join(parts[:i]) or "the run file"
                have = ", ".join(sorted(map(str, node))) if isinstance(node, dict) else "none"
                raise ConfigError(f"set {key}: unknown setting {part!r} under {where} "
                                  f"(have: {have})")
            if i == len(parts) - 1:
                node[part] = value
            else:
                node = node[part]
    return data


def fork(source: Path, at: int, sets: Mapping[str, Any], target: Path, *,
         without_interventions: bool = False) -> RunFile:
    """Make run directory ``target``: ``source`` up to step ``at`` (its step tables,
    profiles and the checkpoint of step ``at``) with ``sets`` applied to its config, ready
    for ``launch(..., resume=True)`` to play the steps after ``at``. Returns the fork's run
    file. ``without_interventions``: leave out the source's interventions after ``at``."""
    source = Path(source)
    whole, inside = source.resolve(), Path(target).resolve()
    if inside == whole or whole in inside.parents:  # it would write into the run it reads
        raise ConfigError(f"{target}: inside the run it forks ({source}); a fork is a run "
                          "directory of its own: give one outside it")
    check_inputs(source)  # the fork reads the same data files, as the source read them
    _interventions.check_interventions(source)  # carried out by the fork: checked now
    checkpoint_at(source, at)  # exists and reads back: before anything is created
    src = RunDirectory(source)
    try:
        before = src.read_summary()
    except (OSError, ValueError) as e:
        raise ConfigError(f"{source}: cannot fork: summary.json: {e}") from None
    if len(before.get("steps") or ()) < at:
        raise ConfigError(f"{source}: step {at} was not finished (the run has "
                          f"{len(before.get('steps') or ())})")
    config = changed_config(_config(source), sets)
    try:
        run_file = parse_run_file(config, src.config_path)
    except ConfigError as e:  # a bad value is the --set's (named by its key), not the source's
        raise ConfigError(str(e).replace(f"{src.config_path}: ", "set ", 1)) from None
    if run_file.options.steps < at:
        raise ConfigError(f"set steps={run_file.options.steps}: the fork starts after step "
                          f"{at}; give at least {at}")
    dst = RunDirectory.create(target)
    try:
        dst.write_config(run_file.resolved())
        for name in ("profiles.parquet", "backgrounds.parquet", INPUTS):
            if (source / name).is_file():
                shutil.copy2(source / name, target / name)
        (target / "checkpoints").mkdir(exist_ok=True)
        ckpt = checkpoint_files(source)[at]  # an older run's keeps its name: both are read
        shutil.copy2(ckpt, target / "checkpoints" / ckpt.name)
        parts = source / "parts"
        if parts.is_dir():
            (target / "parts").mkdir(exist_ok=True)
            for part in parts.glob("*-r[0-9][0-9][0-9][0-9][0-9].parquet"):
                if int(part.stem[-5:]) <= at:
                    shutil.copy2(part, target / "parts" / part.name)
        kept = [i for i in _interventions.read_interventions(source)
                if i.step <= at or not without_interventions]
        if kept:
            _interventions.write_all(target, kept)
        o = run_file.options
        summary = {**before, "name": o.name, "status": "interrupted", "seed": o.seed,
                   "steps_planned": o.steps, "steps": before["steps"][:at],
                   "forked_from": {"run": str(source.resolve()), "step": at,
                                   "set": dict(sets), "time": round(time.time(), 3)}}
        for key in ("error", "failed_step", "partial_step", "partial_answers",
                    "resumed_from_step", "resumed_answers", "already_complete"):
            summary.pop(key, None)
        dst.write_summary(summary)
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    return run_file
