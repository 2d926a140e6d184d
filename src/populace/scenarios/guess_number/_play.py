"""Running the game: a moderator in the central process, participants in workers."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from populace.core import (
    ConfigError,
    ModelError,
    Msg,
    PerWorker,
    PlaceholderSet,
    Simulation,
    SimulationClosed,
    WorkerLost,
    derive_seed,
    wait,
)
from populace.environment import EnvClient, ServiceClosed, serve
from populace.llm import ModelSet, preflight
from populace.population import diversity_report, generate_backgrounds, sample_population
from populace.results import (
    RunDirectory,
    RunMonitor,
    atomic_write,
    latest_checkpoint,
    read_partial,
    read_summary,
    write_checkpoint,
)

from ._agents import Guess, Participant, Rules
from ._config import RunConfig
from ._prompts import FAMOUS_NOTE, GROUP_NOTE, INSTRUCTIONS, composition, describe_target
from ._rules import RoundOutcome, group_outcome, score_groups, score_round
from ._world import build_world, monitor_world, monitored_values, publish

RESPONSE_SCHEMA = pa.schema([
    ("round", pa.int32()),
    ("agent_id", pa.int64()),
    ("group", pa.int32()),
    ("model", pa.string()),
    ("number", pa.float64()),
    ("valid", pa.bool_()),
    ("raw", pa.string()),
    ("extract_raw", pa.string()),
    ("error", pa.string()),
    ("latency_s", pa.float64()),
    ("calls", pa.int8()),
    ("retries", pa.int16()),
    ("prompt_tokens", pa.int32()),
    ("completion_tokens", pa.int32()),
])


class Reporter(Protocol):
    """Receives progress; the CLI shows it, benchmarks time it, tests record it."""

    def round_started(self, round_no: int, total: int) -> None: ...
    def round_progress(self, round_no: int, done: int, total: int) -> None: ...
    def round_finished(self, outcome: RoundOutcome, wall_s: float) -> None: ...


class SilentReporter:
    def round_started(self, round_no: int, total: int) -> None:
        pass

    def round_progress(self, round_no: int, done: int, total: int) -> None:
        pass

    def round_finished(self, outcome: RoundOutcome, wall_s: float) -> None:
        pass


@dataclass
class Timings:
    """Where a run spent its time (seconds); CPU is this process's CPU time."""

    create_s: float = 0.0
    round_wall_s: list[float] = field(default_factory=list)
    round_cpu_s: list[float] = field(default_factory=list)
    wall_s: float = 0.0


class _KeepMissing(dict[str, Any]):
    """Leaves per-agent fields (``{background}``, attributes) for the agents to fill."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def _composition(config: RunConfig, profiles: pa.Table) -> str:
    pop = config.population
    if pop is None or pop.groups is None or pop.groups.by is None:
        return ""
    tally = pc.value_counts(profiles.column(pop.groups.by).combine_chunks()).to_pylist()
    counts = {str(row["values"]): int(row["counts"]) for row in tally}
    ordered = {v: counts[v] for v in pop.values(pop.groups.by) if v in counts}
    return composition(pop.groups.by, ordered)


def _round_prompt(config: RunConfig, round_no: int, last: RoundOutcome | None,
                  composition_note: str = "") -> str:
    game = config.game
    history = ""
    if last is not None and last.winner_number is not None and game.feedback:
        history = (f"In the previous round the average was {last.mean:.2f}, the target was "
                   f"{last.target:.2f} and the winning number was {last.winner_number:g}. ")
    return game.prompt.format_map(_KeepMissing(
        composition=composition_note, n_players=config.agents,
        low=f"{game.low:g}", high=f"{game.high:g}",
        ratio=f"{game.ratio}", offset=f"{game.offset:g}",
        target_rule=describe_target(game.ratio, game.offset),
        famous_note=FAMOUS_NOTE if game.famous_note else "",
        group_note=GROUP_NOTE.format(groups=config.group_count()) if game.group_play else "",
        instruction=INSTRUCTIONS[game.level],
        round=round_no, rounds=config.rounds, history=history,
    ))


def _table(round_no: int, ids: np.ndarray, groups: np.ndarray, models: pa.Array,
           results: list[Any]) -> pa.Table:
    """One row per agent for this round, from the members' replies (or errors)."""
    n = len(results)
    number = np.full(n, np.nan)
    raw: list[str | None] = [None] * n
    extract_raw: list[str | None] = [None] * n
    error: list[str | None] = [None] * n
    latency = np.full(n, np.nan)
    calls = np.zeros(n, dtype=np.int8)
    retries = np.zeros(n, dtype=np.int16)
    ptok = np.zeros(n, dtype=np.int32)
    ctok = np.zeros(n, dtype=np.int32)
    for i, r in enumerate(results):
        if isinstance(r, BaseException):
            error[i] = f"{type(r).__name__}: {r}"
            continue
        g: Guess = r.content
        if g.number is not None:
            number[i] = g.number
        raw[i] = g.raw
        extract_raw[i] = g.extract_raw
        latency[i] = g.latency_s
        calls[i] = g.calls
        retries[i] = g.retries
        ptok[i] = g.prompt_tokens
        ctok[i] = g.completion_tokens
    valid = ~np.isnan(number)
    return pa.table({
        "round": pa.array(np.full(n, round_no, dtype=np.int32)),
        "agent_id": pa.array(ids),
        "group": pa.array(groups),
        "model": models,
        "number": pa.array(number, mask=~valid),
        "valid": pa.array(valid),
        "raw": pa.array(raw, type=pa.string()),
        "extract_raw": pa.array(extract_raw, type=pa.string()),
        "error": pa.array(error, type=pa.string()),
        "latency_s": pa.array(latency, mask=np.isnan(latency)),
        "calls": pa.array(calls),
        "retries": pa.array(retries),
        "prompt_tokens": pa.array(ptok),
        "completion_tokens": pa.array(ctok),
    }, schema=RESPONSE_SCHEMA)


def _live(values: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Numbers (NaN when invalid) and latencies of replies as they arrive, for the monitor."""
    guesses = [v.content for v in values]
    numbers = np.fromiter((np.nan if g.number is None else g.number for g in guesses),
                          np.float64, len(guesses))
    return numbers, np.fromiter((g.latency_s for g in guesses), np.float64, len(guesses))


def _usage(table: pa.Table, config: RunConfig) -> dict[str, dict[str, Any]]:
    """LLM calls, retries, tokens and (where prices are set) cost of one round, per model."""
    grouped = table.group_by("model").aggregate([
        ("calls", "sum"), ("retries", "sum"), ("prompt_tokens", "sum"),
        ("completion_tokens", "sum"), ("agent_id", "count"),
    ])
    out: dict[str, dict[str, Any]] = {}
    for row in grouped.to_pylist():
        entry: dict[str, Any] = {
            "agents": int(row["agent_id_count"]), "calls": int(row["calls_sum"] or 0),
            "retries": int(row["retries_sum"] or 0),
            "prompt_tokens": int(row["prompt_tokens_sum"] or 0),
            "completion_tokens": int(row["completion_tokens_sum"] or 0),
        }
        out[row["model"]] = entry
        prices = getattr(config.models[row["model"]], "price_per_million", None)
        if prices is not None:
            entry["cost"] = round((entry["prompt_tokens"] * prices[0]
                                   + entry["completion_tokens"] * prices[1]) / 1e6, 6)
    return out


def _clean(value: Any) -> Any:
    """JSON-safe: NaN/inf become None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


async def _backgrounds(config: RunConfig, profiles: pa.Table, run_dir: RunDirectory | None
                       ) -> pa.Array:
    """Have the population's background model write every participant's background.

    Answers are cached under ``.populace-cache/backgrounds`` (by attributes, template, model
    and seed), so a rerun or a resumed run does not ask again.
    """
    assert config.population is not None
    name = config.population.backgrounds.model
    assert name is not None
    client = ModelSet.build({name: config.models[name]})[name]
    out = (run_dir.path if run_dir is not None else Path(".populace-cache")) / "backgrounds.parquet"
    try:
        result = await generate_backgrounds(
            profiles.drop_columns(["model"]), client, config.population,
            Path(".populace-cache") / "backgrounds", out, seed=config.seed)
    finally:
        await client.aclose()
    by_id = dict(zip(result.table.column("agent_id").to_pylist(),
                     result.table.column("background").to_pylist(), strict=True))
    return pa.array([by_id.get(i) or "" for i in profiles.column("agent_id").to_pylist()],
                    type=pa.string())


def _recorded_backgrounds(run: Path, profiles: pa.Table) -> pa.Array:
    """The backgrounds a replayed run used, from its profiles.parquet."""
    import pyarrow.parquet as pq

    try:
        recorded = pq.read_table(run / "profiles.parquet", columns=["agent_id", "background"])
    except (OSError, KeyError, pa.ArrowInvalid) as e:
        raise ConfigError(f"{run}: cannot replay backgrounds from profiles.parquet: {e}") \
            from None
    by_id = dict(zip(recorded.column("agent_id").to_pylist(),
                     recorded.column("background").to_pylist(), strict=True))
    return pa.array([by_id.get(i, "") for i in profiles.column("agent_id").to_pylist()],
                    type=pa.string())


def _save_partial(run_dir: RunDirectory, round_no: int, answers: PlaceholderSet[Any],
                  ids: np.ndarray, groups: np.ndarray, models: pa.Array) -> int:
    """Write the answers of round ``round_no`` received so far; returns how many.

    Agents whose call ended with the run (stopped, or on a lost worker) are left out: they
    have no answer, only its absence.
    """
    done, outcomes = answers.finished()
    keep = [k for k, o in enumerate(outcomes)
            if not isinstance(o, WorkerLost | SimulationClosed)]
    at = np.asarray(done, dtype=np.int64)[keep]
    run_dir.write_partial("responses", round_no, _table(
        round_no, ids[at], groups[at], models.take(pa.array(at)), [outcomes[k] for k in keep]))
    return len(keep)


def _resume_point(run_dir: RunDirectory, summary: dict[str, Any]
                  ) -> tuple[int, RoundOutcome | None, dict[str, Any] | None]:
    """Where an interrupted run continues: (first round to play, last outcome, checkpoint).

    Rounds after the newest valid checkpoint are dropped (their rows are played again), so
    no row is duplicated or missing.
    """
    try:
        before = read_summary(run_dir.path)
    except FileNotFoundError:
        before = {}  # killed before the first round ended: start again from round 1
    except (OSError, ValueError) as e:
        raise ConfigError(f"{run_dir.path}: nothing to resume (summary.json: {e})") from None
    for key in ("agents", "seed"):  # the checkpoint only fits the run it was made by
        if key in before and before[key] != summary[key]:
            raise ConfigError(f"{run_dir.path}: cannot resume with {key} {summary[key]}: the "
                              f"run was made with {key} {before[key]}")
    point = latest_checkpoint(run_dir.path, up_to=len(before.get("rounds", [])))
    done = point[0] if point is not None else 0
    for part in (run_dir.path / "parts").glob("responses-r*.parquet"):
        if int(part.stem.rsplit("r", 1)[1]) > done:
            part.unlink()
    (run_dir.path / "responses.parquet").unlink(missing_ok=True)
    summary["rounds"] = before.get("rounds", [])[:done]
    summary["resumed_from_round"] = done
    partial = read_partial(run_dir.path)
    if partial is not None and partial[0] == done + 1:
        # Answers saved inside the interrupted round: the recording answers those calls again,
        # so the round is played whole and its rows equal the saved ones.
        summary["resumed_answers"] = partial[1].num_rows
    if point is None:
        return 1, None, None
    state = point[1]
    return done + 1, RoundOutcome(**state["last"]), state


async def play(
    config: RunConfig,
    run_dir: RunDirectory | None = None,
    reporter: Reporter | None = None,
    timings: Timings | None = None,
    *,
    replay: str | Path | None = None,
    resume: bool = False,
    monitor: RunMonitor | None = None,
) -> dict[str, Any]:
    """Play ``config.rounds`` rounds; write results to ``run_dir`` as each round ends.

    Every LLM call is recorded under ``run_dir/llm_calls/``; with ``replay`` (an earlier run
    directory) models answer from that run's recording instead, making no request at all.
    After every round the agents' state is checkpointed; ``resume`` continues ``run_dir``
    from its last checkpoint, answering calls the interrupted round already made from the
    recording, so the results equal those of an uninterrupted run.
    ``monitor`` receives live progress for the studio; its ``request_stop()`` abandons the
    round in progress and ends the run with status ``stopped`` (finished rounds are kept).
    Returns the summary (also written to ``summary.json``).
    """
    if resume and run_dir is None:
        raise ValueError("resume needs the run directory to continue")
    reporter = reporter or SilentReporter()
    timings = timings if timings is not None else Timings()
    started = time.perf_counter()
    game = config.game
    n = config.agents
    ids = np.arange(n, dtype=np.int64)
    people = (sample_population(config.population, seed=config.seed, size=n)
              if config.population is not None else None)
    if people is not None and "group" in people.column_names:
        groups = people.column("group").to_numpy().astype(np.int32)
    else:
        groups = (ids % game.groups).astype(np.int32)
    assigned = config.assignment()
    models = pa.array(assigned, type=pa.string())
    in_use = {name: config.models[name] for name in dict.fromkeys(assigned.tolist())}
    summary: dict[str, Any] = {
        "name": config.name, "scenario": config.scenario, "status": "running",
        "agents": n, "rounds_planned": config.rounds, "seed": config.seed,
        "model": config.model_name, "models": sorted(in_use), "rounds": [], "wall_s": 0.0,
    }
    if replay is None:  # one clear line now beats a thousand failed calls later
        needed = set(in_use)
        if config.population is not None and config.population.backgrounds.model:
            needed.add(config.population.backgrounds.model)
        await preflight({name: config.models[name] for name in sorted(needed)})
    start_round, last, restored = 1, None, None
    if resume:
        assert run_dir is not None
        start_round, last, restored = _resume_point(run_dir, summary)
    if monitor is not None:
        monitor.run_started(name=config.name, agents=n, rounds=config.rounds, low=game.low,
                            high=game.high, workers=config.workers, backend=config.backend,
                            models=sorted(in_use), history=summary["rounds"],
                            run_dir=run_dir.path if run_dir is not None else None)
    stopped = False
    in_progress: tuple[int, PlaceholderSet[Any]] | None = None  # the round being played
    attributes = config.agent_fields()
    rules = Rules(config.seed, game.low, game.high, game.temperature, game.max_tokens,
                  {name: config.protocol_for(name) for name in in_use}, game.memory_rounds,
                  attributes)
    profiles = pa.table({"agent_id": ids, "group": groups, "model": models})
    group_ids = np.unique(groups).tolist() if game.group_play else None
    if people is not None:
        for name in people.column_names:
            if name not in ("agent_id", "group"):
                profiles = profiles.append_column(name, people.column(name))
        if "background" in attributes:
            written = (_recorded_backgrounds(Path(replay), profiles) if replay is not None
                       else await _backgrounds(config, profiles, run_dir))
            profiles = profiles.append_column("background", written)
    composition_note = _composition(config, profiles)
    if run_dir is not None:
        run_dir.write_config(config.resolved())
        run_dir.write_profiles(profiles)
        if config.population is not None:
            written_bg = (profiles.select(["agent_id", "background"])
                          if "background" in profiles.column_names else None)
            report = diversity_report(profiles, config.population, written_bg,
                                      seed=config.seed)
            atomic_write(run_dir.path / "diversity.json",
                         (json.dumps(report, indent=2, default=str) + "\n").encode())
    try:
        async with Simulation(workers=config.workers, backend=config.backend,
                              seed=config.seed, **config.backend_options()) as sim, \
                await serve(build_world(group_ids), sim) as world:
            await monitor_world(world, group_ids)
            t0 = time.perf_counter()
            columns = [*(["model"] if len(in_use) > 1 else []),
                       *(["group"] if game.group_play else []), *attributes]
            players = await sim.create(
                Participant, n, name="participants",
                colocate=groups if game.colocate_groups else None,
                profiles=profiles.select(columns) if columns else None,
                init={"models": PerWorker(
                    ModelSet.build, in_use,
                    record_to=run_dir.path / "llm_calls" if run_dir is not None else None,
                    replay_from=(Path(replay) / "llm_calls" if replay is not None
                                 else run_dir.path / "llm_calls" if resume and run_dir
                                 else None),
                    resume=resume and replay is None),  # --replay never asks a model
                      "rules": rules, "env": PerWorker(EnvClient, world)},
            )
            if restored is not None:
                await players.scatter(Participant.set_state, restored["agents"])
                if "env" in restored:
                    await world.load_state(restored["env"])
            timings.create_s = time.perf_counter() - t0
            if monitor is not None:
                monitor.simulation_started(sim)
            for round_no in range(start_round, config.rounds + 1):
                if monitor is not None and monitor.stop_requested:
                    stopped = True
                    break
                t_round, cpu_round = time.perf_counter(), time.process_time()
                reporter.round_started(round_no, n)
                # One seed per round; each participant mixes in its id (seed_for).
                ask = Msg("moderator", _round_prompt(config, round_no, last, composition_note),
                          metadata={"round": round_no,
                                    "seed": derive_seed(config.seed, round_no)})
                answers = players.broadcast(ask)
                in_progress = (round_no, answers)
                if monitor is not None:
                    monitor.round_started(round_no, answers, _live)
                saved_at = time.monotonic()
                while not answers.done():
                    await wait([answers], timeout=0.1)
                    reporter.round_progress(round_no, answers.n_done, n)
                    if run_dir is not None and \
                            time.monotonic() - saved_at >= 60 * config.checkpoint_minutes:
                        _save_partial(run_dir, round_no, answers, ids, groups, models)
                        saved_at = time.monotonic()
                    if monitor is not None and monitor.round_progress(sim.statistics()):
                        stopped = True  # the round is abandoned, never written with holes
                        break
                if stopped:
                    break
                results = answers.results(return_exceptions=True)
                lost = next((r for r in results if isinstance(r, WorkerLost)), None)
                if lost is not None:  # never write a round with holes: resume replays it
                    raise lost
                if game.on_model_error == "stop":
                    failed = [r for r in results if isinstance(r, ModelError)]
                    if failed:
                        raise ModelError(
                            f"round {round_no}: {len(failed)} participant(s) got no answer "
                            f"(first: {failed[0]}); stopped as game.on_model_error is 'stop'")
                table = _table(round_no, ids, groups, models, results)
                numbers = table.column("number").to_numpy(zero_copy_only=False)
                last = score_round(round_no, numbers, game.ratio, game.offset)
                scores = score_groups(numbers, groups, game.ratio, game.offset) \
                    if game.group_play else None
                if scores is not None:  # group-level play: the groups' means are scored
                    last = group_outcome(last, scores)
                if run_dir is not None:
                    run_dir.write_round("responses", round_no, table)
                # The outcome goes to the game's environment; participants read it there.
                await world.apply(publish(last, scores))
                if game.feedback and last.winner_number is not None:
                    await players.map(Participant.hear, round_no)
                wall = time.perf_counter() - t_round
                timings.round_wall_s.append(wall)
                timings.round_cpu_s.append(time.process_time() - cpu_round)
                entry = {k: _clean(v) for k, v in last.as_dict().items()}
                entry["wall_s"] = round(wall, 4)
                entry["usage"] = _usage(table, config)
                if scores is not None:
                    entry["winner_group"] = scores.winner_group
                    entry["group_mean"] = _clean(scores.mean)
                    entry["groups"] = scores.as_list()
                summary["rounds"].append(entry)
                summary["wall_s"] = round(time.perf_counter() - started, 4)
                if run_dir is not None:
                    states = await players.map(Participant.get_state)
                    write_checkpoint(run_dir.path, round_no,
                                     {"agents": states, "last": last.as_dict(),
                                      "env": await world.fetch_state()})
                    run_dir.write_summary(summary)
                    run_dir.clear_partial("responses")
                in_progress = None
                reporter.round_finished(last, wall)
                if monitor is not None:
                    for key, value in (await monitored_values(world)).items():
                        monitor.set_environment(key, value)
                    monitor.round_finished(entry, sim.statistics())
        summary["status"] = "stopped" if stopped else "completed"
    except BaseException as e:
        # asyncio.run turns Ctrl-C into a cancellation of the main task.
        interrupted = isinstance(e, KeyboardInterrupt | asyncio.CancelledError)
        summary["status"] = "interrupted" if interrupted else "failed"
        summary["error"] = f"{type(e).__name__}: {e}"
        if isinstance(e, ServiceClosed):
            # The environment's actor died: like a lost worker, recovered from the last
            # checkpoint (which holds the environment too).
            raise WorkerLost(str(e)) from e
        raise
    finally:
        if run_dir is not None and in_progress is not None:
            # A round left unfinished (stop, signal, failure): what it received goes to disk.
            summary["partial_round"] = in_progress[0]
            summary["partial_answers"] = _save_partial(run_dir, *in_progress, ids, groups,
                                                       models)
        summary["wall_s"] = round(time.perf_counter() - started, 4)
        timings.wall_s = summary["wall_s"]
        if run_dir is not None:
            run_dir.write_summary(summary)
            run_dir.consolidate("responses")
        if monitor is not None:
            monitor.run_finished(summary["status"], summary.get("error"))
    return summary
