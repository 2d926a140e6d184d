"""Running the game: a moderator in the central process, participants in workers.

:class:`GuessNumber` is the game as a :class:`~populace.launch.Scenario` (``scenario:
guess_number``), so the launcher gives it what every scenario gets; :func:`play` runs a
game's :class:`~populace.launch.RunFile` through the same launcher, for programs and
benchmarks.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from populace.core import ModelError, Msg, derive_seed, outcomes_table
from populace.launch import (
    Observer,
    Rows,
    Run,
    RunFile,
    RunOptions,
    Scenario,
    StudioView,
    launch,
)
from populace.population import diversity_report
from populace.results import RunDirectory, RunMonitor, atomic_write

from ._agents import Participant, Rules
from ._config import GameSettings, GameSetup, check_game
from ._prompts import FAMOUS_NOTE, GROUP_NOTE, INSTRUCTIONS, composition, describe_target
from ._rules import RoundOutcome, group_outcome, score_groups, score_round
from ._world import build_world, monitor_world, publish

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from populace.results import RunData

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


#: The keys of the game's ``config.yaml`` in the order it has always written them.
_WRITTEN = ("scenario", "name", "seed", "agents", "rounds", "workers", "backend", "address",
            "models", "model", "assign", "game", "checkpoint_minutes", "keep_checkpoints",
            "population")


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


def _composition(config: GameSetup, profiles: pa.Table) -> str:
    pop = config.options.population
    if pop is None or pop.groups is None or pop.groups.by is None:
        return ""
    tally = pc.value_counts(profiles.column(pop.groups.by).combine_chunks()).to_pylist()
    counts = {str(row["values"]): int(row["counts"]) for row in tally}
    ordered = {v: counts[v] for v in pop.values(pop.groups.by) if v in counts}
    return composition(pop.groups.by, ordered)


def _round_prompt(config: GameSetup, round_no: int, last: RoundOutcome | None,
                  composition_note: str = "") -> str:
    game = config.game
    history = ""
    if last is not None and last.winner_number is not None and game.feedback:
        history = (f"In the previous round the average was {last.mean:.2f}, the target was "
                   f"{last.target:.2f} and the winning number was {last.winner_number:g}. ")
    return game.prompt.format_map(_KeepMissing(
        composition=composition_note, n_players=config.options.agents,
        low=f"{game.low:g}", high=f"{game.high:g}",
        ratio=f"{game.ratio}", offset=f"{game.offset:g}",
        target_rule=describe_target(game.ratio, game.offset),
        famous_note=FAMOUS_NOTE if game.famous_note else "",
        group_note=GROUP_NOTE.format(groups=config.group_count()) if game.group_play else "",
        instruction=INSTRUCTIONS[game.level],
        round=round_no, rounds=config.options.steps, history=history,
    ))


def _table(round_no: int, ids: np.ndarray, groups: np.ndarray, models: pa.Array,
           replies: pa.Table) -> pa.Table:
    """One row per agent for this round, from the table of the members' replies (their
    :class:`Guess` fields, and ``error`` where the call failed): column by column, with no
    Python object made per agent."""
    n = replies.num_rows
    number = _field(replies, "number", pa.float64())
    valid = pc.fill_null(pc.invert(pc.is_nan(number)), False)
    latency = _field(replies, "latency_s", pa.float64())
    none = pa.scalar(None, pa.float64())
    return pa.table({
        "round": pa.array(np.full(n, round_no, dtype=np.int32)),
        "agent_id": pa.array(ids),
        "group": pa.array(groups),
        "model": models,
        "number": pc.if_else(valid, number, none),
        "valid": valid,
        "raw": _field(replies, "raw", pa.string()),
        "extract_raw": _field(replies, "extract_raw", pa.string()),
        "error": replies.column("error"),
        "latency_s": pc.if_else(pc.fill_null(pc.is_nan(latency), False), none, latency),
        "calls": pc.fill_null(_field(replies, "calls", pa.int8()), 0),
        "retries": pc.fill_null(_field(replies, "retries", pa.int16()), 0),
        "prompt_tokens": pc.fill_null(_field(replies, "prompt_tokens", pa.int32()), 0),
        "completion_tokens": pc.fill_null(_field(replies, "completion_tokens", pa.int32()), 0),
    }, schema=RESPONSE_SCHEMA)


def _live(values: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Numbers (NaN when invalid) and latencies of replies as they arrive, for the monitor
    (read from their columns when they came packed)."""
    replies = outcomes_table(values)

    def floats(name: str) -> np.ndarray:  # nulls are NaN
        return _field(replies, name, pa.float64()).to_numpy(zero_copy_only=False)

    return floats("number"), floats("latency_s")


def _field(replies: pa.Table, name: str, kind: pa.DataType) -> pa.ChunkedArray | pa.Array:
    """Field ``name`` of the replies' table as ``kind``; all null when no reply had it
    (every call failed)."""
    if name not in replies.column_names:
        return pa.nulls(replies.num_rows, kind)
    return replies.column(name).cast(kind)


def _usage(table: pa.Table, config: GameSetup) -> dict[str, dict[str, Any]]:
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
        prices = getattr(config.options.models[row["model"]], "price_per_million", None)
        if prices is not None:
            entry["cost"] = round((entry["prompt_tokens"] * prices[0]
                                   + entry["completion_tokens"] * prices[1]) / 1e6, 6)
    return out


def _entry_outcome(entry: dict[str, Any]) -> RoundOutcome:
    return RoundOutcome(**{f: entry[f] for f in RoundOutcome.__dataclass_fields__})


class GuessNumber(Scenario):
    """The guess-ratio-of-the-average game (the paper's experiment, all its variants)."""

    name = "guess-number"
    defaults = {"agents": 1000, "steps": 1}
    shown = ("n_valid", "mean", "median", "std", "target", "winner_number")

    Settings = GameSettings

    @classmethod
    def check(cls, options: RunOptions, settings: GameSettings, source: str) -> GameSetup:
        """The game's checks across the run file (models and shares, the prompt's fields
        against the population, groups against agents); its reading of the run file."""
        return check_game(options, settings, source)

    @classmethod
    def resolved(cls, run_file: RunFile) -> dict[str, Any]:
        """The flat form the game has always written (``rounds:``, ``model:``, ``assign:``
        and ``game:`` beside the run options), so that ``--set game.ratio=…`` forks and
        sweeps a run's ``config.yaml`` as before."""
        data = {**run_file.options.model_dump(mode="json", exclude={"settings"}),
                **run_file.settings.model_dump(mode="json"), "scenario": run_file.scenario_ref}
        data["rounds"] = data.pop("steps")
        first = [k for k in _WRITTEN if k in data]
        return {k: data[k] for k in [*first, *(k for k in data if k not in _WRITTEN)]}

    @classmethod
    def live_range(cls, run_file: RunFile) -> tuple[float, float]:
        game = run_file.config.game
        return game.low, game.high

    @classmethod
    def studio(cls, config: Mapping[str, Any]) -> StudioView:
        return StudioView(answers="guesses", question="How did you choose your number?",
                          where='profession == "artist"',
                          message="Breaking news: the winning number was 90.",
                          changes="game.ratio=0.5 seed=3")

    @classmethod
    def describe_step(cls, t: int, steps: int, entry: dict[str, Any]) -> str:
        o = _entry_outcome(entry)
        return (f"round {o.round}/{steps}: n={o.n} valid={o.n_valid} mean={_fmt(o.mean)} "
                f"median={_fmt(o.median)} std={_fmt(o.std)} target={_fmt(o.target)} "
                f"winner={_fmt(o.winner_number, 'g')}")

    async def setup(self, run: Run) -> None:
        config: GameSetup = run.config
        self.config = config
        game = config.game
        n = config.options.agents
        self.ids = ids = np.arange(n, dtype=np.int64)
        people = run.population
        if people is not None and "group" in people.column_names:
            self.groups = people.column("group").to_numpy().astype(np.int32)
        else:
            self.groups = (ids % game.groups).astype(np.int32)
        assigned = config.assignment()
        self.models = pa.array(assigned, type=pa.string())
        self.in_use = in_use = list(dict.fromkeys(assigned.tolist()))
        attributes = config.agent_fields()
        protocols = {name: config.protocol_for(name, run.supports(name, "choice"))
                     for name in in_use}
        rules = Rules(config.options.seed, game.low, game.high, game.temperature, game.max_tokens,
                      protocols, game.memory_rounds, attributes, game.layout, game.extract)
        profiles = pa.table({"agent_id": ids, "group": self.groups, "model": self.models})
        if people is not None:
            for name in people.column_names:
                if name not in ("agent_id", "group"):
                    profiles = profiles.append_column(name, people.column(name))
        self.composition_note = _composition(config, profiles)
        run.write_profiles(profiles)
        if run.run_dir is not None:
            if config.options.population is not None:
                written = (profiles.select(["agent_id", "background"])
                           if "background" in profiles.column_names else None)
                report = diversity_report(profiles, config.options.population, written,
                                          seed=config.options.seed)
                atomic_write(run.run_dir.path / "diversity.json",
                             (json.dumps(report, indent=2, default=str) + "\n").encode())
        self.group_ids = np.unique(self.groups).tolist() if game.group_play else None
        self.world = await run.serve(build_world(self.group_ids))
        await monitor_world(self.world, self.group_ids)
        columns = [*(["model"] if len(in_use) > 1 else []),
                   *(["group"] if game.group_play else []), *attributes]
        self.players = await run.create(
            Participant, n, name="participants",
            colocate=self.groups if game.colocate_groups else None,
            profiles=profiles.select(columns) if columns else None,
            init={"models": run.models(in_use), "rules": rules,
                  "env": run.env_client(self.world)})
        # Who hears the rounds' results: one participant per model says whether it listens
        # (a model that ignores prompts needs none), and only those are told: a million
        # agents on the dummy model cost no call between rounds.
        listening = [name for name in in_use
                     if await self.players[int(np.flatnonzero(assigned == name)[0])].call(
                         Participant.listens)]
        self.listeners = (self.players if len(listening) == len(in_use)
                          else None if not listening
                          else self.players.select(np.flatnonzero(np.isin(assigned, listening))))
        self.last: RoundOutcome | None = None

    def _rows(self, t: int) -> Rows:
        def rows(at: np.ndarray, outcomes: list[Any]) -> pa.Table:
            return _table(t, self.ids[at], self.groups[at], self.models.take(pa.array(at)),
                          outcomes_table(outcomes))
        return rows

    async def step(self, run: Run, t: int) -> None:
        config, game = self.config, self.config.game
        # One seed per round; each participant mixes in its id (seed_for).
        ask = Msg("moderator", _round_prompt(config, t, self.last, self.composition_note),
                  metadata={"round": t, "seed": derive_seed(config.options.seed, t)})
        answers = self.players.broadcast(ask)
        replies = await run.collect(answers, measure=_live, on_error="return", as_table=True,
                                    partial=("responses", self._rows(t)))
        if game.on_model_error == "stop" and answers.n_failed:
            failed = [e for _, e in sorted(answers.exceptions().items())
                      if isinstance(e, ModelError)]
            if failed:
                raise ModelError(
                    f"round {t}: {len(failed)} participant(s) got no answer "
                    f"(first: {failed[0]}); stopped as game.on_model_error is 'stop'")
        table = _table(t, self.ids, self.groups, self.models, replies)
        numbers = table.column("number").to_numpy(zero_copy_only=False)
        last = score_round(t, numbers, game.ratio, game.offset)
        scores = score_groups(numbers, self.groups, game.ratio, game.offset) \
            if game.group_play else None
        if scores is not None:  # group-level play: the groups' means are scored
            last = group_outcome(last, scores)
        self.last = last
        run.record("responses", table)
        # The outcome goes to the game's environment; participants read it there.
        await self.world.apply(publish(last, scores))
        if game.feedback and last.winner_number is not None and self.listeners is not None:
            await self.listeners.map(Participant.hear, t)
        for key, value in last.as_dict().items():
            run.metric(key, value)
        run.metric("usage", _usage(table, config))
        if last.n_valid == 0 and table.num_rows:
            run.warn(_no_valid_answer(table))
        if scores is not None:
            run.metric("winner_group", scores.winner_group)
            run.metric("group_mean", scores.mean)
            run.metric("groups", scores.as_list())

    def get_state(self) -> dict[str, Any] | None:
        return None if self.last is None else self.last.as_dict()

    def set_state(self, state: dict[str, Any] | None) -> None:
        self.last = None if state is None else RoundOutcome(**state)

    def figures(self, run: RunData) -> dict[str, Figure]:
        from ._figures import figures

        return figures(run)


def _no_valid_answer(table: pa.Table) -> str:
    """The warning for a round in which no answer was a usable number: how many, and the
    first answer's text (or error) to see why."""
    raws = [r for r in table.column("raw").to_pylist() if r]
    errors = [e for e in table.column("error").to_pylist() if e]
    if raws:
        example = " ".join(raws[0].split())
        example = f"first answer: {example[:80]!r}" + ("…" if len(example) > 80 else "")
    elif errors:
        example = f"first error: {' '.join(errors[0].split())[:120]}"
    else:
        example = "no answer had any text"
    return (f"no valid answer: 0 of {table.num_rows:,} answers were a usable number "
            f"({example})")


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


class _Reporting:
    """Observer → :class:`Reporter` and :class:`Timings`, for :func:`play`'s callers."""

    def __init__(self, reporter: Reporter, timings: Timings, agents: int) -> None:
        self.reporter = reporter
        self.timings = timings
        self.agents = agents
        self._clock = (0.0, 0.0)
        self._summary: dict[str, Any] = {}

    def run_started(self, run_file: RunFile, summary: dict[str, Any]) -> None:
        self._summary = summary

    def step_started(self, t: int, steps: int) -> None:
        self._clock = (time.perf_counter(), time.process_time())
        self.reporter.round_started(t, self.agents)

    def step_progress(self, t: int, done: int, total: int) -> None:
        self.reporter.round_progress(t, done, total)

    def step_finished(self, t: int, entry: dict[str, Any]) -> None:
        self.timings.round_wall_s.append(entry["wall_s"])
        self.timings.round_cpu_s.append(time.process_time() - self._clock[1])
        self.timings.create_s = self._summary.get("create_s", 0.0)
        self.reporter.round_finished(_entry_outcome(entry), entry["wall_s"])

    def recovering(self, error: BaseException) -> None:
        pass

    def run_finished(self, summary: dict[str, Any]) -> None:
        self.timings.create_s = summary.get("create_s", 0.0)
        self.timings.wall_s = summary["wall_s"]


async def play(
    run_file: RunFile,
    run_dir: RunDirectory | None = None,
    reporter: Reporter | None = None,
    timings: Timings | None = None,
    *,
    replay: str | Path | None = None,
    resume: bool = False,
    monitor: RunMonitor | None = None,
    observers: Sequence[Observer] = (),
) -> dict[str, Any]:
    """Play the game's run file ``run_file`` through the launcher (its ``rounds``); write
    results to ``run_dir``.

    The same as ``populace run`` on the run file, without its recovery: a lost worker
    raises :class:`~populace.core.WorkerLost` (``resume=True`` then continues from the last
    checkpoint). ``replay`` answers every call from an earlier run's recording; ``monitor``
    receives live progress for the studio; ``observers`` are told how the run goes, as
    ``launch`` tells them (progress bars). Returns the summary.

    >>> run_file = parse_run_file({"scenario": "guess_number", "agents": 100},
    ...                           Path("run.yaml"))  # doctest: +SKIP
    >>> summary = asyncio.run(play(run_file))  # doctest: +SKIP
    """
    if not (isinstance(run_file, RunFile) and issubclass(run_file.scenario, GuessNumber)):
        raise TypeError(f"play() takes a RunFile of the game (load_run_file(path) or "
                        f"parse_run_file(data, path) with scenario: guess_number), not "
                        f"{type(run_file).__name__}")
    observer = _Reporting(reporter or SilentReporter(), timings if timings is not None
                          else Timings(), run_file.options.agents)
    return await launch(run_file, run_dir, monitor=monitor,
                        observers=[observer, *observers],
                        resume=resume, replay=replay, max_recoveries=0)
