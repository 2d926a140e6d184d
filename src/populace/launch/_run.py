"""The run context a scenario is handed: settings, seeds, the simulation, and the verbs to
record rows, report metrics and distributions, and collect answers."""

from __future__ import annotations

import math
import time
import zlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np
import pyarrow as pa

from populace.agents import Persona, archetype_sizes
from populace.core import (
    Agent,
    AgentGroup,
    ConfigError,
    PerWorker,
    PlaceholderSet,
    PopulaceError,
    Simulation,
    SimulationClosed,
    WorkerLost,
    derive_seed,
    wait,
)
from populace.environment import Env, EnvClient, EnvService, RemoteEnvService, serve
from populace.llm import (
    ModelSet,
    OpenAIConfig,
    Served,
    model_stats,
    server_kind,
    server_kind_names,
)
from populace.results import error_kind

if TYPE_CHECKING:
    from populace.results import RunDirectory, RunMonitor

    from ._launcher import Observer
    from ._runfile import RunFile

#: ``measure(values) -> (numbers, latencies)``: what the studio's live histogram shows of
#: the answers of a step as they arrive (NaN where an answer is not a number).
Measure = Callable[[Sequence[Any]], tuple[np.ndarray, np.ndarray]]
#: ``rows(indices, outcomes) -> table``: the rows of the answers received so far in a step,
#: saved inside long steps and when a run stops mid-step.
Rows = Callable[[np.ndarray, list[Any]], pa.Table]


class ObserverFailed(Exception):
    """An observer raised while the scenario was collecting: not the scenario's failure
    (the launcher re-raises ``error`` itself)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class AllAnswersFailed(PopulaceError):
    """Every answer a step collected failed (an unreachable model, a broken agent): the
    step is not written and the run fails, resumable once the cause is fixed."""


class StepAbandoned(PopulaceError):
    """A stop was requested while a step collected answers: the step is not written."""


def as_numbers(values: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """The default :data:`Measure`: answers that are numbers (a yes/no as 1/0), NaN for the
    others."""
    numbers = np.fromiter((float(v) if isinstance(v, int | float) else np.nan
                           for v in values), np.float64, len(values))
    return numbers, np.full(len(values), np.nan)


def _plain(value: Any) -> Any:
    """A JSON-safe metric value: numpy scalars as Python ones, NaN/inf as None; lists and
    string-keyed dicts of those (kept in the summary; only scalars make series)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _plain(v) for k, v in value.items()}
    raise TypeError(f"a metric is a number, a bool, a string, or a list or dict of those; got "
                    f"{type(value).__name__}")


def _as_table(name: str, rows: Any) -> pa.Table | None:
    """What :meth:`Run.record` was given, as a table; None for an empty list of rows."""
    if isinstance(rows, pa.Table):
        return rows
    try:
        if isinstance(rows, Mapping):
            return pa.table(dict(rows))
        if isinstance(rows, Sequence) and not isinstance(rows, str | bytes):
            if not rows:
                return None
            first = rows[0]
            for i, row in enumerate(rows):
                if not isinstance(row, Mapping):
                    raise TypeError(f"record({name!r}, rows): row {i} is a "
                                    f"{type(row).__name__}, not a mapping of column to value")
                if row.keys() != first.keys():
                    raise ValueError(
                        f"record({name!r}, rows): row {i} has the keys {_listed(list(row))}, "
                        f"row 0 {_listed(list(first))}")
            return pa.Table.from_pylist(list(rows))
    except pa.ArrowException as e:  # values of mixed types in a column, say
        raise ValueError(f"record({name!r}): {' '.join(str(e).split())}") from None
    raise TypeError(f"record({name!r}, rows): rows are a pyarrow Table, columns "
                    f"({{name: values}}) or a list of row mappings, not {type(rows).__name__}")


def _listed(names: Sequence[str], most: int = 8) -> str:
    shown = ", ".join(map(str, names[:most]))
    return shown + (f" … ({len(names)} in all)" if len(names) > most else "")


class Run:
    """What a scenario's ``setup`` and ``step`` work with (one per run attempt).

    >>> async def step(self, run, t):                                   # doctest: +SKIP
    ...     answers = await run.collect(self.people.map(Person.decide))
    ...     run.record("decisions", pa.table({"agent_id": self.people.ids, ...}))
    ...     run.metric("share_yes", float(np.mean(answers)))
    ...     run.distribution("opinion", opinions, range=(0, 1))
    """

    def __init__(self, run_file: RunFile, sim: Simulation, run_dir: RunDirectory | None, *,
                 population: pa.Table | None, monitor: RunMonitor | None,
                 observers: Sequence[Observer], replay: Path | None, resume: bool,
                 served: Mapping[str, Served] | None = None) -> None:
        self.run_file = run_file
        self.options = run_file.options
        self.settings: Any = run_file.settings
        self.sim = sim
        self.run_dir = run_dir
        self.population = population
        self.step = 0  # 0 during setup
        self._monitor = monitor
        self._observers = observers
        self._replay = replay
        self._resume = resume
        self._served = dict(served or {})  # what the preflight learnt of the servers
        self._rngs: dict[tuple[str, int], np.random.Generator] = {}
        self.groups: dict[str, tuple[type[Agent], AgentGroup]] = {}
        self.services: list[EnvService | RemoteEnvService] = []
        self._ended = False
        self.create_s = 0.0  # seconds spent creating agents
        self._created: list[pa.Table] = []  # profiles handed to create() (agent_id first)
        #: per model of ``sampling.allocate: proportional``: personas created per archetype
        self._archetypes: dict[str, Counter[tuple[Any, ...]]] = {}
        #: ``parts/`` file → SHA-256 of every step file written, kept in each checkpoint.
        self.digests: dict[str, str] = {}
        self._profiles_written = False
        self._tables: dict[str, list[pa.Table]] = {}
        #: table → (the first step that recorded it, its schema): what later steps must match.
        self._schemas: dict[str, tuple[int, pa.Schema]] = {}
        self._metrics: dict[str, Any] = {}
        self._distributions: dict[str, dict[str, Any]] = {}
        self._collecting: tuple[PlaceholderSet[Any], tuple[str, Rows] | None] | None = None
        self._failed: dict[str, Any] | None = None
        self._warnings: list[str] = []
        self._begin(0)

    # -- what the run is --------------------------------------------------------------------
    @property
    def seed(self) -> int:
        return self.options.seed

    @property
    def agents(self) -> int:
        return self.options.agents

    @property
    def steps(self) -> int:
        return self.options.steps

    @property
    def name(self) -> str:
        return self.options.name

    @property
    def config(self) -> Any:
        """What the scenario's ``check`` made of the whole run file (None by default)."""
        return self.run_file.config

    def rng(self, name: str = "default") -> np.random.Generator:
        """A generator for stream ``name`` in the current step (0 in setup), derived from the
        run seed: the same in a resumed run as in an undisturbed one, whatever ran before."""
        key = (name, self.step)
        gen = self._rngs.get(key)
        if gen is None:
            seed = derive_seed(self.seed, zlib.crc32(name.encode()), self.step)
            gen = self._rngs[key] = np.random.default_rng(seed)
        return gen

    @property
    def stop_requested(self) -> bool:
        """The studio (or a signal) asked the run to stop; :meth:`collect` then abandons the
        step by itself."""
        return self._monitor is not None and self._monitor.stop_requested

    def end(self) -> None:
        """End the run once this step is written (the scenario reached its end early)."""
        self._ended = True

    # -- building the world -----------------------------------------------------------------
    def models(self, names: Sequence[str] | None = None) -> PerWorker:
        """The run's models (or those in ``names``) for agents' ``init``: one
        :class:`~populace.llm.ModelSet` per worker. Every call is recorded under
        ``RUN_DIR/llm_calls``, answered from a recording with ``--replay``, and on resume
        from the interrupted attempt's recording first."""
        configs = self.options.models
        unknown = [n for n in names or () if n not in configs]
        if unknown:
            raise ValueError(f"models({unknown[0]!r}): not under models: (have: "
                             f"{', '.join(configs)})")
        calls = self.run_dir.path / "llm_calls" if self.run_dir is not None else None
        replay_from = (self._replay / "llm_calls" if self._replay is not None
                       else calls if self._resume else None)
        return PerWorker(ModelSet.build, {n: self._learnt(n, configs[n])
                                          for n in (names or configs)},
                         record_to=calls, replay_from=replay_from,
                         resume=self._resume and self._replay is None,
                         workers=self.options.workers)

    def _learnt(self, name: str, config: Any) -> Any:
        """``config`` with what the preflight learnt of its servers where it left them to be
        found out (``server: auto``, no ``slots``)."""
        served = self._served.get(name)
        if served is None or not isinstance(config, OpenAIConfig):
            return config
        update: dict[str, Any] = {}
        if config.server == "auto":
            update["server"] = served.server
        if config.slots is None and served.slots is not None:
            update["slots"] = served.slots
        return config.model_copy(update=update) if update else config

    def server(self, model: str) -> str:
        """The kind of server behind ``model`` (``openai``, ``vllm``, ``sglang``,
        ``llamacpp``, ``populace``), as configured or learnt by the preflight; ``auto``
        when unknown (not served over HTTP, or a replay)."""
        config = self._learnt(model, self.options.models[model])
        return getattr(config, "server", "auto")

    def supports(self, model: str, feature: str) -> bool:
        """Whether the server behind ``model`` takes ``feature`` (``choice``, ``regex``,
        ``busy``, ``batch``: see :meth:`populace.llm.ServerKind.supports`); False when its
        kind is not known (``auto``, or a replay's kind no longer registered)."""
        name = self.server(model)
        if name not in server_kind_names():
            return server_kind("auto").supports(feature)  # still rejects unknown features
        return server_kind(name).supports(feature)

    async def create(self, cls: type[Agent], n: int | None = None, *, name: str | None = None,
                     profiles: Any = None, init: dict[str, Any] | None = None,
                     colocate: Any = None) -> AgentGroup:
        """Create ``n`` (default: the run's ``agents``) agents of ``cls``; their
        ``get_state()`` is checkpointed after every step under ``name`` (default the class
        name) and restored on resume. ``profiles`` defaults to the run's population."""
        label = name or cls.__name__
        if label in self.groups:
            raise ValueError(f"agents named {label!r} exist already; pass another name=")
        if profiles is None and self.population is not None:
            profiles = self.population.drop_columns(["agent_id"])
        if issubclass(cls, Persona):
            self._check_sampling(profiles)
            self._count_archetypes(profiles)
        t0 = time.perf_counter()
        hooks = [h for o in self._observers if (h := getattr(o, "creating", None))]

        def progress(done: int, total: int) -> None:
            try:
                for hook in hooks:
                    hook(label, done, total)
            except Exception as e:
                raise ObserverFailed(e) from e

        group = await self.sim.create(cls, self.agents if n is None else n, name=label,
                                      profiles=profiles, init=init, colocate=colocate,
                                      progress=progress if hooks else None)
        self.create_s += time.perf_counter() - t0
        if profiles is not None and self.population is None:
            given = profiles if isinstance(profiles, pa.Table) else pa.table(dict(profiles))
            self._created.append(given.add_column(0, "agent_id", pa.array(group.ids)))
        self.groups[label] = (cls, group)
        return group

    def _check_sampling(self, profiles: Any) -> None:
        """Refuse, in one line naming the run file and the key, archetypes made of a
        column that the personas' profiles lack (before any of them is asked)."""
        have = list(getattr(profiles, "column_names", None) or profiles or ())
        for name, config in self.options.models.items():
            by = config.sampling.by if config.sampling is not None else []
            for i, column in enumerate(by):
                if column not in have:
                    listed = ", ".join(c for c in have if c != "agent_id") or "none"
                    raise ConfigError(f"{self.run_file.path}: models.{name}.sampling.by.{i}: "
                                      f"no profile column {column!r} (have: {listed})")

    def _count_archetypes(self, profiles: Any) -> None:
        """Add the personas of ``profiles`` to the archetypes' sizes of every model whose
        samples are allocated by them (from the whole population, before any step: the
        same allocation on every worker)."""
        for name, config in self.options.models.items():
            sampling = config.sampling
            if sampling is not None and sampling.allocate == "proportional" \
                    and profiles is not None:
                self._archetypes.setdefault(name, Counter()).update(
                    archetype_sizes(profiles, sampling.by))

    @property
    def allocations(self) -> dict[str, dict[Any, int]]:
        """Per model of ``sampling.allocate: proportional``, the answers each archetype
        gets per decision (:meth:`~populace.llm.SamplingConfig.allocation`)."""
        out = {}
        for name, sizes in self._archetypes.items():
            sampling = self.options.models[name].sampling
            assert sampling is not None  # counted only for a model that samples
            out[name] = sampling.allocation(sizes)
        return out

    async def serve(self, env: Env, *, max_concurrency: int = 64, shards: int = 1
                    ) -> EnvService | RemoteEnvService:
        """Serve ``env`` on the run's backend; its state is checkpointed after every step
        and its monitored keys are shown in the studio. Read and write it through the
        returned service (or agents' :meth:`env_client`) from now on. ``shards=N``: its
        keys split over N services (see :func:`~populace.environment.serve`)."""
        service = await serve(env, self.sim, max_concurrency=max_concurrency, shards=shards)
        self.services.append(service)
        return service

    def write_profiles(self, table: pa.Table) -> None:
        """Write the run's ``profiles.parquet`` (``agent_id`` and profile columns: what
        reports break results down by). By default it holds the population, else the
        profiles given to :meth:`create`."""
        self._profiles_written = True
        if self.run_dir is not None:
            self.run_dir.write_profiles(table)

    def _write_created_profiles(self) -> None:
        if self._created and not self._profiles_written and self.population is None:
            self.write_profiles(pa.concat_tables(self._created, promote_options="default"))

    def env_client(self, service: EnvService | RemoteEnvService | None = None) -> PerWorker:
        """An :class:`~populace.environment.EnvClient` per worker for agents' ``init``."""
        if service is None:
            if not self.services:
                raise ValueError("env_client(): serve an environment first (await run.serve(env))")
            service = self.services[0]
        return PerWorker(EnvClient, service)

    # -- results ----------------------------------------------------------------------------
    def record(self, table: str,
               rows: pa.Table | Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> None:
        """Add ``rows`` to per-step table ``table`` (``parts/TABLE-rNNNNN.parquet``, joined
        into ``TABLE.parquet`` at the end): an Arrow table, columns (a mapping of column
        name to values), or a list of rows (mappings with the same keys; an empty list adds
        nothing). Rows get a ``step`` column unless they carry ``step`` or ``round``.

        A table keeps the columns of the first step that recorded it, with their types: a
        column added, missing or of another type later raises ``ValueError`` naming the
        table, the step and the column (the run stops there, one line naming the scenario's
        line). Columns in another order are put back in the table's order, and a column
        with only missing values (type ``null``) takes the table's type.

        >>> run.record("votes", {"agent_id": ids, "vote": votes})          # doctest: +SKIP
        >>> run.record("votes", [{"agent_id": 1, "vote": "yes"}, ...])     # doctest: +SKIP
        """
        t = _as_table(table, rows)
        if t is None:
            return
        if "step" not in t.column_names and "round" not in t.column_names:
            t = t.add_column(0, "step", pa.array(np.full(t.num_rows, self.step, np.int32)))
        self._tables.setdefault(table, []).append(self._conform(table, t))

    def _conform(self, table: str, t: pa.Table) -> pa.Table:
        """``t`` in the schema of ``table``'s earlier steps (this attempt's, else its step
        files on disk: a resumed run checks against the steps written before)."""
        known = self._schemas.get(table)
        if known is None and self.run_dir is not None:
            stored = self.run_dir.part_schema(table)
            if stored is not None:
                known = self._schemas[table] = stored
        if known is None:
            self._schemas[table] = (self.step, t.schema)
            return t
        since, schema = known
        names, types = schema.names, schema.types
        if t.schema.names == names and t.schema.types == types:
            return t
        where = f"table {table!r}, step {self.step}"
        columns = f"its columns since step {since}: {_listed(names)}"
        given = t.schema.names
        twice = next((n for n in given if given.count(n) > 1), None)
        if twice is not None:
            raise ValueError(f"{where}: column {twice!r} given twice")
        added = [n for n in given if n not in names]
        if added:
            raise ValueError(f"{where}: column {added[0]!r} ({t.schema.field(added[0]).type}) "
                             f"is new; {columns} (a table keeps its first step's columns)")
        missing = [n for n in names if n not in given]
        if missing:
            raise ValueError(f"{where}: column {missing[0]!r} ({schema.field(missing[0]).type})"
                             f" is missing; {columns} (give it, with nulls if need be)")
        t = t.select(names)
        for i, field in enumerate(schema):
            now = t.schema.field(i).type
            if now == field.type:
                continue
            if pa.types.is_null(now):  # only missing values: nothing to convert
                t = t.set_column(i, field.name, pa.nulls(t.num_rows, field.type))
                continue
            raise ValueError(f"{where}: column {field.name!r} is {now}, but {field.type} since "
                             f"step {since} (convert it, or give the type: pa.array(values, "
                             "type=...))")
        return t

    def metric(self, name: str, value: Any) -> None:
        """Report one value of series ``name`` for this step (summary, studio, report)."""
        self._metrics[name] = _plain(value)

    def warn(self, message: str) -> None:
        """Say that something went wrong in this step without failing the run (answers
        that could not be used, say): kept in the step's summary entry under ``warnings``,
        shown as ``warning: step N: …``, and counted in the run's last line."""
        text = " ".join(str(message).split())[:500]
        if text and text not in self._warnings:
            self._warnings.append(text)

    def distribution(self, name: str, values: Any, *, range: tuple[float, float] | None = None,
                     bins: int = 20) -> None:
        """Report the distribution of per-agent ``values`` this step, as a histogram over
        ``range`` (default: the values' span). NaN values are left out and counted
        (``missing``), and so are values below or above ``range`` (``under``, ``over``, with
        a warning for the step): ``sum(counts) + under + over == n``."""
        data = np.asarray(values, dtype=np.float64)
        finite = data[np.isfinite(data)]
        lo, hi = range if range is not None else (
            (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0))
        if hi <= lo:
            hi = lo + 1.0
        counts, edges = np.histogram(finite, bins=bins, range=(lo, hi))
        under, over = int(np.count_nonzero(finite < lo)), int(np.count_nonzero(finite > hi))
        self._distributions[name] = {
            "edges": [round(float(e), 10) for e in edges], "counts": counts.tolist(),
            "n": int(finite.size), "missing": int(data.size - finite.size),
            "under": under, "over": over,
            "mean": float(finite.mean()) if finite.size else None,
        }
        if under or over:
            self.warn(f"distribution {name!r}: {under + over:,} of {finite.size:,} values "
                      f"outside its range [{lo:g}, {hi:g}] ({under:,} under, {over:,} over), "
                      "not in its histogram")

    @overload
    async def collect(self, answers: PlaceholderSet[Any], *, measure: Measure | None = None,
                      partial: tuple[str, Rows] | None = None,
                      on_error: Literal["raise", "return"] = "raise",
                      progress: tuple[int, int] | None = None,
                      as_table: Literal[False] = False) -> list[Any]: ...

    @overload
    async def collect(self, answers: PlaceholderSet[Any], *, measure: Measure | None = None,
                      partial: tuple[str, Rows] | None = None,
                      on_error: Literal["raise", "return"] = "raise",
                      progress: tuple[int, int] | None = None,
                      as_table: Literal[True]) -> pa.Table: ...

    async def collect(self, answers: PlaceholderSet[Any], *, measure: Measure | None = None,
                      partial: tuple[str, Rows] | None = None,
                      on_error: Literal["raise", "return"] = "raise",
                      progress: tuple[int, int] | None = None,
                      as_table: bool = False) -> list[Any] | pa.Table:
        """Wait for ``answers``, with progress bars and the studio's live view; returns the
        results in member order: a list, or with ``as_table=True`` one Arrow table
        (:meth:`PlaceholderSet.table <populace.core.PlaceholderSet.table>`: a column per
        field of the replies' content, and ``error``), which a step over a million agents
        reads with no Python object made per agent.

        A failed answer (an agent that raised, a model that gave up) raises its error with
        ``on_error="raise"`` (the default: the run fails, naming it). With
        ``on_error="return"`` the error takes the answer's place in the list (in the table:
        its text in ``error``): the scenario records it, and the step's entry counts it
        (``failed``, and a warning line); a step in which every answer failed raises
        :class:`AllAnswersFailed` all the same.
        A lost worker raises :class:`~populace.core.WorkerLost` (the launcher recovers); a
        stop request abandons the step. ``partial=(table, rows)`` saves the answers received
        so far every ``checkpoint_minutes`` and when the run stops inside the step.
        A step that collects in batches passes ``progress=(done_before, step_total)`` so
        the progress bar counts the whole step.
        """
        base, total = progress if progress is not None else (0, len(answers))
        if as_table:
            answers.prefer_columns()
        if self._monitor is not None:
            self._monitor.step_started(self.step, answers, measure or as_numbers)
        self._collecting = (answers, partial)
        saved_at = time.monotonic()
        every = 60 * self.options.checkpoint_minutes
        stall = self._stall_after()
        seen, quiet_since, told = answers.n_done, time.monotonic(), 0
        calls = self._calls_answered() if stall is not None else 0
        while not answers.done():
            await wait([answers], timeout=0.1)
            try:
                for observer in self._observers:
                    observer.step_progress(self.step, base + answers.n_done, total)
                now = time.monotonic()
                if answers.n_done != seen:
                    seen, quiet_since, told = answers.n_done, now, 0
                elif stall is not None and now - quiet_since >= stall * 2**told:
                    answered = self._calls_answered()
                    if answered != calls:  # the models answer (an agent's several calls)
                        calls, quiet_since, told = answered, now, 0
                    else:
                        told += 1  # said again each time the wait doubles
                        self._stalled(now - quiet_since, answers.n_done, len(answers))
            except Exception as e:
                raise ObserverFailed(e) from e
            if partial is not None and time.monotonic() - saved_at >= every:
                self.save_partial()
                saved_at = time.monotonic()
            if self._monitor is not None and self._monitor.step_progress(self.sim.statistics()):
                raise StepAbandoned()
        self._collecting = None
        if answers.n_failed:  # only the failures are looked at, never a million answers
            failed = [e for _, e in sorted(answers.exceptions().items())]
            lost = next((e for e in failed if isinstance(e, WorkerLost)), None)
            if lost is not None:  # never write a step with holes: the resumed run plays it
                raise lost
            self._count_failures(failed, len(answers), raise_first=on_error == "raise")
        return answers.table() if as_table else answers.results(return_exceptions=True)

    def _stall_after(self) -> float | None:
        """Seconds without an answer after which the step says so: the shortest ``timeout``
        of the run's models that have one (a server's), None when none has (simulated
        models: a long latency is what was asked for)."""
        timeouts = [t for m in self.options.models.values()
                    if isinstance(t := getattr(m, "timeout", None), int | float)]
        return float(min(timeouts)) if timeouts else None

    def _calls_answered(self) -> int:
        """Model calls answered so far, over every worker (neither waiting nor given up)."""
        return sum(m.requests - m.in_flight - m.failures for m in model_stats(
            r for w in self.sim.statistics().workers for r in w.resources))

    def _stalled(self, quiet: float, done: int, total: int) -> None:
        """No answer for ``quiet`` seconds: one line, to every observer that shows lines,
        saying which models' calls wait, where, and how many were retried."""
        waiting = []
        for m in model_stats(r for w in self.sim.statistics().workers for r in w.resources):
            if m.in_flight <= 0:
                continue
            where = ", ".join(f"{e.url}: {e.in_flight:,} sent, {e.failures:,} attempts failed "
                              "or timed out" for e in m.endpoints if e.in_flight or e.failures)
            config = self.options.models.get(m.model)
            limit = getattr(config, "timeout", None)
            retries = getattr(config, "max_retries", None)
            bound = (f"; an attempt times out after {limit:g} s and is retried up to "
                     f"{retries} time{'' if retries == 1 else 's'}"
                     if limit is not None and retries is not None else "")
            waiting.append(f"model {m.model!r}: {m.in_flight:,} calls waiting"
                           f"{f' ({where})' if where else ''}{bound}")
        line = (f"step {self.step}: no answer for {quiet:.0f} s ({done:,} of {total:,} "
                f"answered); {'; '.join(waiting) or 'no model call in flight'}")
        for observer in self._observers:
            say = getattr(observer, "stalled", None)
            if callable(say):
                say(self.step, line)

    def _count_failures(self, failed: list[BaseException], of: int, *,
                        raise_first: bool) -> None:
        """Failed answers (in member order) are counted in the step's entry (``failed``)
        and shown; a step in which every answer failed ends the run as failed."""
        if not failed:
            return
        if raise_first:
            raise failed[0]
        kinds = Counter(error_kind(e) for e in failed)
        kind = kinds.most_common(1)[0][0]
        example = next(e for e in failed if error_kind(e) == kind)
        self.count_failures(len(failed), of, kinds, str(example))

    def count_failures(self, failed: int, of: int, kinds: Mapping[str, int],
                       example: str) -> None:
        """Count failures a scenario caught itself inside its answers (a respondent whose
        questions failed one by one): ``failed`` of ``of`` units, by kind, with one example
        message. They join the step's ``failed`` entry and its warning line, as failed
        answers do; when everything the step counted failed, the run ends as failed
        (:class:`AllAnswersFailed`, resumable)."""
        if not failed:
            return
        seen = self._failed or {"answers": 0, "of": 0, "kinds": {}}
        seen["answers"] += failed
        seen["of"] += of
        for k, n in kinds.items():
            seen["kinds"][k] = seen["kinds"].get(k, 0) + n
        seen["example"] = " ".join(example.split())[:200]
        self._failed = seen
        if seen["answers"] >= seen["of"]:
            kind, count = max(seen["kinds"].items(), key=lambda kv: kv[1])
            raise AllAnswersFailed(
                f"step {self.step}: all {seen['of']} answers failed (most common: {kind} "
                f"×{count}: {seen['example']})")

    # -- for the launcher -------------------------------------------------------------------
    def save_partial(self) -> int | None:
        """Write what the step being collected received so far; how many rows (or None)."""
        if self._collecting is None or self._collecting[1] is None or self.run_dir is None:
            return None
        answers, (table, rows) = self._collecting[0], self._collecting[1]
        done, outcomes = answers.finished()
        keep = [k for k, o in enumerate(outcomes)
                if not isinstance(o, WorkerLost | SimulationClosed)]
        at = np.asarray(done, dtype=np.int64)[keep]
        self.run_dir.write_partial(table, self.step, rows(at, [outcomes[k] for k in keep]))
        return len(keep)

    def _begin(self, t: int) -> None:
        self.step = t
        self._tables = {}
        self._metrics = {}
        self._distributions = {}
        self._collecting = None
        self._failed = None
        self._warnings = []
        self._rngs = {k: v for k, v in self._rngs.items() if k[1] == t}

    def _finish(self) -> tuple[dict[str, pa.Table], dict[str, Any]]:
        """The step's tables, and its summary entry less ``step`` and ``wall_s``."""
        tables = {name: pa.concat_tables(parts) if len(parts) > 1 else parts[0]
                  for name, parts in self._tables.items()}
        entry = dict(self._metrics)
        if self._distributions:
            entry["distributions"] = dict(self._distributions)
        if self._failed is not None:
            entry["failed"] = self._failed
        if self._warnings:
            entry["warnings"] = list(self._warnings)
        return tables, entry
