"""The one launcher: every run — any scenario, from the CLI, the studio or a sweep — goes
through :func:`launch`, which owns what surrounds the scenario's steps.

It reads nothing itself (the :class:`RunFile` is read once by the caller), starts the
simulation on the configured backend, calls ``setup`` and then ``step`` for each step, and
after every step writes the step's tables (``parts/``), ``summary.json`` and a checkpoint
(the scenario's state, every agent's ``get_state()``, every served environment). It resumes
from the newest checkpoint, recovers from a lost worker by resuming, records LLM calls (or
replays them), feeds the studio's monitor and the observers, and ends every run with one of
the statuses in :data:`STATUSES`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import sys
import threading
import time
import traceback
from collections.abc import Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from populace.agents import (
    Persona,
    SamplingCounts,
    fallen_back,
    falling_back,
    fit_surrogates,
    instruct,
    sampling_report,
)
from populace.core import (
    ConfigError,
    PopulaceError,
    Simulation,
    WorkerLost,
    backend_kind,
    derive_seed,
)
from populace.environment import ServiceClosed
from populace.llm import ModelSet, Served, limits, preflight, traffic
from populace.population import generate_backgrounds
from populace.results import (
    RunDirectory,
    RunMonitor,
    latest_checkpoint,
    read_partial,
    write_checkpoint,
)

from . import _interventions
from ._control import RunControl
from ._inputs import check_inputs, pin_inputs
from ._run import ObserverFailed, Run, StepAbandoned
from ._runfile import USER_MODULE_PREFIX, RunFile, where
from ._scenario import Scenario
from ._watchdog import watchdog

#: How a run ends (``summary.json``'s ``status``); ``running`` while it runs.
STATUSES = ("completed", "stopped", "interrupted", "failed")
MAX_RECOVERIES = 2  # worker losses a run recovers from by itself before giving up


class Observer(Protocol):
    """Told how a run goes: the CLI's progress bars, benchmarks and tests implement it.

    An observer may also define ``creating(name, done, total)``: called as the agents of
    group ``name`` are created, after each batch (the CLI's bar while a million agents are
    made).
    """

    def run_started(self, run_file: RunFile, summary: dict[str, Any]) -> None: ...
    def step_started(self, t: int, steps: int) -> None: ...
    def step_progress(self, t: int, done: int, total: int) -> None: ...
    def step_finished(self, t: int, entry: dict[str, Any]) -> None: ...
    def recovering(self, error: BaseException) -> None: ...
    def run_finished(self, summary: dict[str, Any]) -> None: ...


class ScenarioFailed(PopulaceError):
    """The scenario's own code raised; the message is one line naming its file and line,
    the traceback is kept in ``RUN_DIR/error.txt``, the original is the ``__cause__``."""


def _failed(run_file: RunFile, error: BaseException, run_dir: RunDirectory | None
            ) -> ScenarioFailed:
    source = Path(inspect.getfile(run_file.scenario))
    kept = ""
    if run_dir is not None:
        saved = run_dir.path / "error.txt"
        saved.write_text("".join(traceback.format_exception(error)))
        kept = f" (traceback in {saved})"
    notes = "".join(f" ({n})" for n in getattr(error, "__notes__", ()))  # which agent
    return ScenarioFailed(f"{run_file.path}: scenario {where(error, source)}"
                          f"{type(error).__name__}: {error}{notes}{kept}")


async def launch(run_file: RunFile, run_dir: RunDirectory | None = None, *,
                 monitor: RunMonitor | None = None, observers: Sequence[Observer] = (),
                 resume: bool = False, replay: str | Path | None = None,
                 max_recoveries: int = MAX_RECOVERIES,
                 cache: Path = Path(".populace-cache"),
                 control: RunControl | None = None) -> dict[str, Any]:
    """Run ``run_file``'s scenario to the end; returns the summary (also ``summary.json``).

    ``resume`` continues ``run_dir`` from its newest checkpoint. A lost worker (or node, or
    environment actor) is recovered up to ``max_recoveries`` times by resuming from the last
    checkpoint; then :class:`~populace.core.WorkerLost` is raised. ``replay`` (an earlier
    run directory) answers every LLM call from that run's recording. ``cache``: where
    written backgrounds are kept for the next run. ``control``: the studio's way in (agents
    read, interviewed, intervened on while the run goes on).
    """
    if resume and run_dir is None:
        raise ValueError("resume needs the run directory to continue")
    replay_dir = Path(replay) if replay is not None else None
    if replay_dir is not None:
        _check_replay(run_file, replay_dir)
    with run_dir.hold() if run_dir is not None else contextlib.nullcontext():
        for directory in (run_dir.path if run_dir is not None else None, replay_dir):
            if directory is not None:  # an edited one is refused before anything changes
                _interventions.check_interventions(directory)
        if resume and run_dir is not None:  # the data files it read, as it read them
            check_inputs(run_dir)
        if resume and run_dir is not None:
            done = _completed(run_file, run_dir)
            if done is not None:  # nothing to play: nothing is rewritten but what is damaged
                repaired = [name for name in done.get("tables") or ()
                            if not run_dir.consolidated(name)]
                for name in repaired:  # (its consolidation was cut short, or removed)
                    run_dir.consolidate(name)
                if repaired:
                    done["repaired"] = repaired
                for observer in observers:
                    observer.run_finished(done)
                return done
        return await _attempts(run_file, run_dir, monitor, observers, resume, replay_dir,
                               max_recoveries, cache, control)


async def _attempts(run_file: RunFile, run_dir: RunDirectory | None,
                    monitor: RunMonitor | None, observers: Sequence[Observer], resume: bool,
                    replay_dir: Path | None, max_recoveries: int, cache: Path,
                    control: RunControl | None) -> dict[str, Any]:
    """The run, then a resume from the last checkpoint after each lost worker."""
    for attempt in range(max_recoveries + 1):
        try:
            return await _attempt(run_file, run_dir, monitor, observers, resume, replay_dir,
                                  cache, control)
        except WorkerLost as e:
            if monitor is not None:  # the studio's workers panel: lost, then recovered
                monitor.workers_lost(e)
            if run_dir is None or attempt == max_recoveries:
                raise
            for observer in observers:
                observer.recovering(e)
            resume = True
    raise AssertionError("unreachable")


def _user_modules(run_file: RunFile) -> list[str]:
    """The scenario file's module and the modules it imported from its own folder."""
    module = run_file.scenario.__module__
    if not module.startswith(USER_MODULE_PREFIX):
        return []
    folder = Path(inspect.getfile(run_file.scenario)).resolve().parent
    found = [module]
    for name, other in list(sys.modules.items()):
        path = getattr(other, "__file__", None)
        if name != module and path and Path(path).resolve().parent == folder:
            found.append(name)
    return found


def _check_replay(run_file: RunFile, replay: Path) -> None:
    """A recording answers only the run that made it: refuse another seed, more agents,
    another scenario or other models (names, providers, model strings) up front (each call
    would miss, or be answered by another model's recording, one by one)."""
    made = RunDirectory(replay).read_config()
    if not made:
        raise ConfigError(f"--replay {replay}: no config.yaml there (not a run directory?)")
    o = run_file.options
    theirs = {"scenario": made.get("scenario", "guess_number"), "seed": made.get("seed", 0),
              "agents": made.get("agents")}
    ours = {"scenario": run_file.scenario_ref, "seed": o.seed, "agents": o.agents}
    for key in ("scenario", "seed"):
        if theirs[key] != ours[key]:
            raise ConfigError(f"--replay {replay}: that run was made with {key} "
                              f"{theirs[key]}, this one has {key} {ours[key]}; a recording "
                              "answers only the run that made it")
    if isinstance(theirs["agents"], int) and o.agents > theirs["agents"]:
        raise ConfigError(f"--replay {replay}: that run had {theirs['agents']} agents, this "
                          f"one has {o.agents}; a recording answers only the agents it saw")
    made_models = made.get("models")
    if isinstance(made_models, dict):  # each model's calls are recorded under its name
        def described(models: dict[str, Any]) -> dict[str, str]:
            out = {}
            for name, m in models.items():
                m = m.model_dump(mode="json") if hasattr(m, "model_dump") else m
                m = m if isinstance(m, dict) else {}
                what = str(m.get("provider", "?"))
                out[str(name)] = what + (f" {m['model']}" if m.get("model") else "")
            return out

        was, now = described(made_models), described(dict(o.models))
        if was != now:
            def show(d: dict[str, str]) -> str:
                return ", ".join(f"{k} ({v})" for k, v in sorted(d.items())) or "none"
            raise ConfigError(f"--replay {replay}: that run was made with models {show(was)}, "
                              f"this one has {show(now)}; a recording answers only the "
                              "models that made it")


def _summary(run_file: RunFile) -> dict[str, Any]:
    o = run_file.options
    return {"name": o.name, "scenario": run_file.scenario_ref, "status": "running",
            "agents": o.agents, "steps_planned": o.steps, "seed": o.seed,
            "backend": o.backend, "workers": o.workers, "models": sorted(o.models),
            "steps": [], "tables": [], "wall_s": 0.0}


def _completed(run_file: RunFile, run_dir: RunDirectory) -> dict[str, Any] | None:
    """The summary of a run that completed and is intact (its config, step files and last
    checkpoint check out: nothing to play again), with ``already_complete``, which is not
    saved; else None (the resume says what is wrong, or repairs it)."""
    try:
        summary = run_dir.read_summary()
    except (OSError, ValueError):
        return None
    if summary.get("status") != "completed":
        return None
    start, _ = _resume_point(run_dir, _summary(run_file))
    if start <= len(summary.get("steps") or ()):
        return None  # a damaged checkpoint: the steps after the one before play again
    return {**summary, "already_complete": True}


def _resume_point(run_dir: RunDirectory, summary: dict[str, Any]) -> tuple[int, Any]:
    """Where an interrupted run continues: (first step to play, checkpointed state or None).
    Steps after the newest valid checkpoint are dropped and played again, so no row is
    duplicated or missing."""
    try:
        before = run_dir.read_summary()
    except FileNotFoundError:
        before = {}  # killed before the first step ended: start again from step 1
    except (OSError, ValueError) as e:
        raise ConfigError(f"{run_dir.path}: nothing to resume (summary.json: {e})") from None
    for key in ("agents", "seed", "scenario"):  # a checkpoint fits only the run it was made by
        if key in before and before[key] != summary[key]:
            raise ConfigError(f"{run_dir.path}: cannot resume with {key} {summary[key]}: the "
                              f"run was made with {key} {before[key]}")
    done_before = len(before.get("steps", []))
    if done_before > summary["steps_planned"]:  # the run file asks for fewer than were played
        config = run_dir.read_config()
        key = "rounds" if "rounds" in config else "steps"
        raise ConfigError(f"{run_dir.config_path}: cannot resume with {key} "
                          f"{summary['steps_planned']}: the run has already played "
                          f"{done_before}; restore {key} to at least {done_before}")
    point = latest_checkpoint(run_dir.path, up_to=done_before)
    done = point[0] if point is not None else 0
    digests = point[1].get("parts", {}) if point is not None else {}
    damaged = run_dir.damaged_parts(digests)
    if damaged:  # refuse before touching anything: the run directory stays as it is
        raise ConfigError(f"{run_dir.path}: cannot resume: {', '.join(damaged[:3])}"
                          f"{f' and {len(damaged) - 3} more' if len(damaged) > 3 else ''} "
                          f"changed since step {done} was checkpointed; restore the file(s), "
                          "or start the run again")
    partials = {}
    for table in run_dir.partial_tables():
        try:
            partial = read_partial(run_dir.path, table)
        except ValueError as e:  # still before touching anything
            raise ConfigError(f"{run_dir.path}: cannot resume: {e}; restore it, or delete it "
                              f"to play step {done + 1} again from its start") from None
        if partial is not None and partial[0] == done + 1:
            # Answers saved inside the interrupted step: the recording answers those calls
            # again, so the step is played whole and its rows equal the saved ones.
            partials[table] = partial[1].num_rows
    run_dir.drop_steps_after(done)
    summary["steps"] = before.get("steps", [])[:done]
    summary["wall_s"] = float(before.get("wall_s", 0.0))  # a resumed run adds its own time
    summary["tables"] = before.get("tables", [])
    summary["resumed_from_step"] = done
    if "forked_from" in before:  # a fork stays one, however often it is resumed
        summary["forked_from"] = before["forked_from"]
    if partials:
        summary["resumed_answers"] = partials
    return done + 1, point[1] if point is not None else None


async def _population(run_file: RunFile, run_dir: RunDirectory | None,
                      replay: Path | None, summary: dict[str, Any], cache: Path
                      ) -> pa.Table | None:
    """The run's population table (``agent_id`` first), backgrounds written if configured."""
    o = run_file.options
    table = run_file.sample_population()
    if table is None or o.population is None:
        return None
    name = o.population.backgrounds.model
    if name is None:
        return table
    if name not in o.models:
        raise ConfigError(f"{run_file.path}: population.backgrounds.model: {name!r} is not "
                          f"under models: (have: {', '.join(o.models)})")
    if replay is not None:  # the backgrounds the replayed run used
        try:
            recorded = RunDirectory(replay).read_profiles()
            if recorded is None:
                raise OSError("no profiles.parquet")
            written = recorded.column("background")
        except (OSError, KeyError, pa.ArrowInvalid) as e:
            raise ConfigError(f"{replay}: cannot replay backgrounds from profiles.parquet: "
                              f"{e}") from None
        return table.append_column("background", written)
    client = ModelSet.build({name: o.models[name]})[name]
    out = (run_dir.path if run_dir is not None else cache) / "backgrounds.parquet"
    try:
        result = await generate_backgrounds(table, client, o.population, cache / "backgrounds",
                                            out, seed=o.seed)
        stats = client.statistics()
    finally:
        await client.aclose()
    # what writing them cost (the steps' own calls are in each step's "llm")
    summary["backgrounds"] = {
        "model": name, "agents": result.total, "cached": result.cached,
        "generated": result.generated, "failed": result.failed, "sent": result.requests,
        "prompt_tokens": stats.prompt_tokens, "completion_tokens": stats.completion_tokens,
        "wall_s": round(result.elapsed_s, 4)}
    by_id = dict(zip(result.table.column("agent_id").to_pylist(),
                     result.table.column("background").to_pylist(), strict=True))
    return table.append_column("background", pa.array(
        [by_id.get(i) or "" for i in table.column("agent_id").to_pylist()], type=pa.string()))


async def _checkpoint(run: Run, scenario: Scenario, t: int) -> None:
    assert run.run_dir is not None
    agents = {}
    for label, (cls, group) in run.groups.items():
        agents[label] = await group.map(cls.get_state)
    envs = [await service.fetch_state() for service in run.services]
    keep = run.options.keep_checkpoints
    write_checkpoint(run.run_dir.path, t, {"scenario": scenario.get_state(), "agents": agents,
                                           "envs": envs, "parts": dict(run.digests)},
                     keep=None if keep == "all" else keep,
                     ids={label: group.ids for label, (_, group) in run.groups.items()})


async def _restore(run: Run, scenario: Scenario, state: dict[str, Any]) -> None:
    scenario.set_state(state["scenario"])
    for label, states in state["agents"].items():
        if label not in run.groups:
            raise ConfigError(f"checkpoint holds agents {label!r} that setup() did not create")
        cls, group = run.groups[label]
        await group.scatter(cls.set_state, states)
    for service, env_state in zip(run.services, state["envs"], strict=True):
        await service.load_state(env_state)


async def _show_environment(run: Run, monitor: RunMonitor) -> None:
    for service in run.services:
        stats = await service.fetch_statistics()
        for key, value in stats.env.all_monitored().items():
            monitor.set_environment(key, value)


async def _own(call: Coroutine[Any, Any, None], run_file: RunFile,
               run_dir: RunDirectory | None) -> None:
    """Await the scenario's own ``call``; a bug in it (an exception that is not one of
    Populace's or the system's) becomes :class:`ScenarioFailed`, its traceback kept."""
    try:
        await call
    except (PopulaceError, OSError, StepAbandoned):
        raise
    except ObserverFailed as e:
        raise e.error from None
    except (Exception, SystemExit) as e:  # sys.exit() in a scenario is a failure, not an end
        raise _failed(run_file, e, run_dir) from e


@contextlib.contextmanager
def _writing() -> Iterator[bool]:
    """Around the run's own summary writes: False once the watchdog has taken over (its
    summary, status ``stopped``, is the last one)."""
    dog = watchdog()
    if dog is None:
        yield True
        return
    with dog.writing() as allowed:
        yield allowed


def _traffic(run: Run, since: dict[str, dict[str, int]] | None = None
             ) -> dict[str, dict[str, int]]:
    """The models' call counters now (:func:`~populace.llm.traffic`), or what was added to
    them ``since`` an earlier reading (models with no calls left out)."""
    now = traffic(w.resources for w in run.sim.statistics().workers)
    if since is None:
        return now
    out = {}
    for model, counts in now.items():
        before = since.get(model, {})
        added = {k: v - before.get(k, 0) for k, v in counts.items()}
        if any(added.values()):
            out[model] = added
    return out


def _sampling(run: Run) -> SamplingCounts:
    """The models' archetype sampling counters so far (see
    :func:`~populace.agents.sampling_report`)."""
    return SamplingCounts.of(w.resources for w in run.sim.statistics().workers)


async def _instruct(run: Run, fallen: dict[str, frozenset[str]],
                    surrogates: dict[str, Any], allocations: dict[str, Any]) -> None:
    """Tell every worker's personas which decisions fell back to individual calls, the
    surrogates fitted so far and the archetypes' samples (one call on one agent per worker
    and group)."""
    for cls, group in run.groups.values():
        if issubclass(cls, Persona) and len(group):
            _, first = np.unique(group.workers, return_index=True)
            for placeholder in [group[int(i)].call(instruct, fallen, surrogates, allocations)
                                for i in first]:
                await placeholder


async def _step(run: Run, scenario: Scenario, t: int, summary: dict[str, Any],
                started: float, observers: Sequence[Observer], monitor: RunMonitor | None,
                control: RunControl | None) -> bool:
    """Play step ``t`` and write it: its tables, a checkpoint, then the summary (which
    names the step finished only once all of it is on disk). False when a stop request
    abandoned it (nothing of it is written)."""
    t0 = time.perf_counter()
    run._begin(t)
    for observer in observers:
        observer.step_started(t, run.steps)
    here = run.run_dir.path if run.run_dir is not None else None
    scheduled = control.starting(t, here) if control is not None \
        else _interventions.read_interventions(here) if here is not None else []
    done = await _interventions.carry_out(run, scheduled, t) if scheduled else []
    fallen = fallen_back(summary["steps"])
    surrogates = fit_surrogates(summary["steps"])
    allocations = run.allocations
    if fallen or surrogates or allocations:  # every step: a rebuilt worker has forgotten
        await _instruct(run, fallen, surrogates, allocations)
    sent = _traffic(run)
    sampled = _sampling(run)
    try:
        await _own(scenario.step(run, t), run.run_file, run.run_dir)
    except StepAbandoned:
        return False
    except Exception:
        # The failed step is not written, but what it cost is: calls made and failed.
        unfinished: dict[str, Any] = {"step": t}
        if run._failed is not None:
            unfinished["failed"] = run._failed
        try:
            unfinished["llm"] = _traffic(run, since=sent)
        except Exception:  # the workers are gone: their counters with them
            pass
        summary["failed_step"] = unfinished
        raise
    tables, body = run._finish()
    entry: dict[str, Any] = {"step": t, **body}
    if done:  # what was changed before the step: the timeline and the report show it
        entry["interventions"] = done
    llm = _traffic(run, since=sent)
    if llm:  # every call the step made, per model, failed ones and retries included
        entry["llm"] = llm
        adapted = limits(w.resources for w in run.sim.statistics().workers)
        if adapted:  # where the adaptive limits stood at the step's end
            entry["limits"] = adapted
    report = sampling_report(sampled, _sampling(run), seed=derive_seed(run.seed, t))
    if report:  # archetype sampling: decisions shared, and the audit's divergence
        falling_back(report, {name: config.sampling.fallback
                              for name, config in run.options.models.items()
                              if config.sampling is not None}, fallen)
        entry["sampling"] = report
    entry["wall_s"] = round(time.perf_counter() - t0, 4)
    if run.run_dir is not None:
        for name, table in tables.items():
            path = run.run_dir.write_step(name, t, table)
            run.digests[path.name] = run.run_dir.part_digest(name, t)
            run.run_dir.clear_partial(name)
    summary["tables"] = sorted({*summary["tables"], *tables})
    summary["steps"].append(entry)
    summary["wall_s"] = round(time.perf_counter() - started, 4)
    if run.run_dir is not None:
        await _own(_checkpoint(run, scenario, t), run.run_file, run.run_dir)
        with _writing() as allowed:
            if allowed:
                run.run_dir.write_summary(summary)
    for observer in observers:
        observer.step_finished(t, entry)
    if monitor is not None:
        await _show_environment(run, monitor)
        monitor.step_finished(entry, run.sim.statistics())
    return True


def _served(run_dir: Path) -> dict[str, Served]:
    """What the preflight of the run in ``run_dir`` learnt of its servers."""
    try:
        recorded = RunDirectory(run_dir).read_summary().get("servers") or {}
        return {name: Served(str(s["server"]), s.get("slots"))
                for name, s in recorded.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, ConfigError):
        return {}


async def _attempt(run_file: RunFile, run_dir: RunDirectory | None,
                   monitor: RunMonitor | None, observers: Sequence[Observer], resume: bool,
                   replay: Path | None, cache: Path, control: RunControl | None
                   ) -> dict[str, Any]:
    started = time.perf_counter()
    o = run_file.options
    summary = _summary(run_file)
    if replay is None:  # one clear line now beats a thousand failed calls later
        served = await preflight(dict(o.models))
    else:  # the servers the replayed run had: its requests were shaped for them
        served = _served(replay)
    if served:  # what the servers are: their spelling of structured output, their slots
        summary["servers"] = {}
        for name, s in served.items():  # as in effect: what the run file says comes first
            config = o.models[name]
            given = getattr(config, "server", "auto")
            summary["servers"][name] = {
                "server": s.server if given == "auto" else given,
                "slots": getattr(config, "slots", None) or s.slots}
    start, restored = 1, None
    if resume:
        assert run_dir is not None
        start, restored = _resume_point(run_dir, summary)
        started -= summary["wall_s"]  # wall time counts every attempt of the run
    for observer in observers:
        observer.run_started(run_file, summary)
    if monitor is not None:
        monitor.run_started(name=o.name, agents=o.agents, steps=o.steps,
                            answer_range=run_file.scenario.live_range(run_file),
                            workers=o.workers, backend=o.backend, models=sorted(o.models),
                            history=summary["steps"],
                            run_dir=run_dir.path if run_dir is not None else None)
    run: Run | None = None
    stopped = False
    failure: BaseException | None = None

    def forced(why: str) -> str | None:
        """The watchdog ends the process (on its own thread: the event loop may be stuck).
        The step is abandoned, what it received is saved, the status is ``stopped``; where
        the main thread was goes to ``error.txt``."""
        if run_dir is None:
            return None
        try:
            last = run_dir.read_summary()  # as the run last wrote it, whole
        except FileNotFoundError:  # before the first step ended
            last = json.loads(json.dumps(summary, default=str))
        last.update(status="stopped", stopped=why,
                    wall_s=round(time.perf_counter() - started, 4))
        if run is not None and run._collecting is not None:
            saved = run.save_partial()
            if saved is not None:
                last.update(partial_step=run.step, partial_answers=saved)
        frame = sys._current_frames().get(threading.main_thread().ident or 0)
        stack = "".join(traceback.format_stack(frame)) if frame is not None else ""
        kept = run_dir.path / "error.txt"
        kept.write_text(f"{why}; the main thread was here:\n{stack}")
        run_dir.write_summary(last)
        for name in last.get("tables") or ():
            run_dir.consolidate(name)
        return f"where it was: {kept}"

    dog = watchdog()
    if dog is not None:
        dog.add_stopper(forced)
    try:
        population = await _population(run_file, run_dir, replay, summary, cache)
        if run_dir is not None:
            resolved = run_file.resolved()
            run_dir.write_config(resolved)
            if not resume:  # the data files it reads, for whoever reads the run again
                pin_inputs(run_dir, resolved)
            if population is not None:
                run_dir.write_profiles(population)
            if replay is not None and not resume:  # the replayed run's, carried out again
                _interventions.write_all(run_dir.path, _interventions.read_interventions(replay))
        ship = backend_kind(o.backend).ship
        if ship is not None:  # a scenario file and its neighbours are not importable there
            for module in _user_modules(run_file):
                ship(module)
        async with Simulation(workers=o.workers, backend=o.backend,
                              **o.backend_options()) as sim:
            run = Run(run_file, sim, run_dir, population=population, monitor=monitor,
                      observers=observers, replay=replay, resume=resume, served=served)
            if restored is not None:  # the step files written before, by their SHA-256
                run.digests.update(restored.get("parts", {}))
            scenario = run_file.scenario()
            try:
                t_setup = time.perf_counter()
                await _own(scenario.setup(run), run_file, run_dir)
                run._write_created_profiles()
                summary["setup_s"] = round(time.perf_counter() - t_setup, 4)
                summary["create_s"] = round(run.create_s, 4)
                if restored is not None:
                    await _own(_restore(run, scenario, restored), run_file, run_dir)
                if monitor is not None:
                    monitor.simulation_started(sim)
                if control is not None:
                    control.attach(run, run_dir.path if run_dir is not None else None,
                                   start - 1)
                    await control.serve(run, start - 1)
                for t in range(start, o.steps + 1):
                    if run.stop_requested or not await _step(
                            run, scenario, t, summary, started, observers, monitor,
                            control):
                        stopped = True  # a step abandoned is never written with holes
                        break
                    if control is not None:
                        await control.serve(run, t)
                    if run._ended:
                        break
            finally:
                if control is not None:
                    control.detach()
                for service in run.services:
                    await service.aclose()
        summary["status"] = "stopped" if stopped else "completed"
    except BaseException as e:
        failure = e
        interrupted = isinstance(e, KeyboardInterrupt | asyncio.CancelledError)
        summary["status"] = "interrupted" if interrupted else "failed"
        if not interrupted:  # a clean stop is no error
            cause = e.__cause__ if isinstance(e, ScenarioFailed) else e
            summary["error"] = f"{type(cause).__name__}: {cause}"
        if isinstance(e, ServiceClosed):
            # An environment's actor died: like a lost worker, recovered from the last
            # checkpoint (which holds the environment too).
            raise WorkerLost(str(e)) from e
        raise
    finally:
        if run is not None and run_dir is not None and run._collecting is not None:
            # A step left unfinished (stop, signal, failure): what it received goes to disk.
            saved = run.save_partial()
            if saved is not None:
                summary["partial_step"] = run.step
                summary["partial_answers"] = saved
        summary["wall_s"] = round(time.perf_counter() - started, 4)
        if run_dir is not None:
            unwritten: OSError | None = None
            try:
                if summary["status"] == "completed":  # only once its tables are whole
                    try:
                        for name in summary["tables"]:
                            run_dir.consolidate(name)
                    except OSError as e:
                        unwritten = e
                        summary["status"] = "failed"
                        summary["error"] = (f"{type(e).__name__}: the consolidated table could "
                                            f"not be written: {e}")
                with _writing() as allowed:
                    if allowed:
                        run_dir.write_summary(json.loads(json.dumps(summary, default=str)))
                if dog is not None:  # written: the watchdog has nothing more to save
                    dog.remove_stopper(forced)
                    dog = None
                if unwritten is not None:
                    raise unwritten
                if summary["status"] != "completed":  # what it has, for readers
                    for name in summary["tables"]:
                        run_dir.consolidate(name)
            except OSError:
                if failure is None:
                    raise  # the run itself went well: this is its failure
                # else the run's own error (perhaps the same full disk) is the one to tell
            finally:
                if dog is not None:
                    dog.remove_stopper(forced)
        elif dog is not None:
            dog.remove_stopper(forced)
        if monitor is not None:
            monitor.run_finished(summary["status"], summary.get("error"))
        for observer in observers:
            observer.run_finished(summary)
    return summary

