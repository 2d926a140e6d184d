"""The live view of a run: what the studio shows while a simulation is going.

A run writes into a :class:`RunMonitor` as it goes (the launcher does it for every
scenario); the studio reads :meth:`RunMonitor.snapshot`, a :class:`RunSnapshot` of
aggregates whose size does not grow with the number of agents: a million agents give the
same few kilobytes as ten.

What goes in, for any scenario: the run's status, the step in progress (from the
``PlaceholderSet`` it collects), a histogram of the answers that have arrived (fixed bins,
updated with one ``np.histogram`` per poll over the values that came since the last one),
answer latencies, errors by kind, every scalar metric of every finished step (series), the
distributions the last finished step declared, monitored environment values, and the
simulation's own ``statistics()`` — workers and the ``statistics()`` of their per-worker
resources (model clients: requests, tokens, endpoints). Each worker's process measures its
own CPU time and resident memory (``WorkerStats``; on Ray inside the actor, so on any node);
the monitor turns successive samples into CPU % and sums them per node, counting a process
once however many workers it hosts (the local backend: one).

The run and the studio may live in different threads. The writer only ever *replaces* what
a reader may be holding (new arrays, new tuples, new dicts), so a snapshot needs no lock.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import re
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from populace.core import PlaceholderSet, Simulation, SimulationStats
from populace.llm import ModelStats, model_stats

from ._snapshot import (
    _LAT_EDGES,
    CPU_WINDOW_S,
    FINISHED,
    HISTORY_POINTS,
    HISTORY_PROCESSES,
    MAX_CHOICE_OPTIONS,
    MAX_CHOICE_QUESTIONS,
    MAX_ENDPOINTS,
    MAX_ENV_KEYS,
    MAX_KINDS,
    MAX_NODE_ROWS,
    MAX_STEP_ROWS,
    MAX_WORKER_ROWS,
    AgentStates,
    EndpointRow,
    Histogram,
    Latency,
    LLMView,
    NodeRow,
    Progress,
    RunSnapshot,
    Series,
    WorkerRow,
    _distributions,
    _finite,
    _fit,
    _percentile,
    _row,
    _series,
    bin_edges,
    error_kind,
)

#: Turns a batch of arrived replies into (numbers, NaN where invalid; latencies in seconds).
#: A measure may also have a ``categories(replies)`` method giving the choices in them, as
#: two integer arrays (question index, option index, both from 0): the live answer shares.
Measure = Callable[[Sequence[Any]], tuple[np.ndarray, np.ndarray]]
class RunMonitor:
    """Live state of one run, written by the run and read by the studio.

    >>> monitor = RunMonitor()
    >>> summary = await launch(run_file, run_dir, monitor=monitor)  # doctest: +SKIP
    >>> monitor.snapshot().series.metrics["share_yes"]              # doctest: +SKIP
    (0.41, 0.47, 0.52)

    ``request_stop()`` asks the run to stop: it abandons the step in progress (finished
    steps and their checkpoint stay on disk, so ``populace run --resume`` can continue) and
    ends with status ``stopped``.
    """

    def __init__(self, *, run_id: str | None = None, bins: int | None = None,
                 interval: float = 0.2) -> None:
        self.run_id = run_id
        self._bins = bins
        self._interval = interval  # seconds between refreshes of worker and model statistics
        self._stop = False
        self._seq = 0
        self.status = "starting"
        self.error: str | None = None
        self._info: dict[str, Any] = {}
        self._started_at = time.time()
        self._ended_at: float | None = None
        self._rows: tuple[dict[str, Any], ...] = ()
        self._steps_done = 0
        self._series = Series()
        self._dists: dict[str, Histogram] = {}
        self._env: dict[str, Any] = {}
        self._kinds: dict[str, int] = {}
        self._lat = np.zeros(len(_LAT_EDGES) - 1, dtype=np.int64)
        self._auto = True  # the live histogram's range follows the answers
        self._fixed: np.ndarray | None = None  # its edges when the run gives a range
        self._answered_before = 0  # answers of finished steps
        self._answers: PlaceholderSet[Any] | None = None
        self._measure: Measure | None = None
        self._pending: list[tuple[Sequence[Any], float]] = []  # (replies, when they came)
        self._lat_basis = "answer"
        self._pending_errors: list[Sequence[BaseException]] = []
        self._reset_step(0, 0)
        self._workers: tuple[WorkerRow, ...] = ()  # the rows shown
        self._all_workers: tuple[WorkerRow, ...] = ()
        self._nodes: tuple[NodeRow, ...] = ()
        self._lost: frozenset[int] = frozenset()  # workers lost, until the next attempt's start
        self._had_loss = False
        self._recovered = False  # the workers are those of an attempt after a loss
        # (node, pid) -> (CPU seconds, when, CPU %) of the sample the last CPU % began at
        self._cpu: dict[tuple[str | None, int], tuple[float, float, float | None]] = {}
        self._llm = LLMView()
        self._waiting = 0  # calls waiting on placeholders (at the last refresh)
        self._places: dict[int, tuple[int | None, str | None]] = {}
        self._samples: collections.deque[tuple[float, int, int]] = collections.deque(maxlen=64)
        self._rates = (0.0, 0.0)  # requests and answers per second
        self._last_refresh = 0.0
        self._history = _History()
        #: a fork's source (see :func:`_fork_origin`), set by whoever starts the fork
        self.forked_from: Mapping[str, Any] | None = None

    # -- control -----------------------------------------------------------------------------
    def request_stop(self) -> None:
        """Ask the run to stop soon (thread-safe; idempotent)."""
        self._stop = True
        if self.status in ("starting", "running"):
            self.status = "stopping"
            self._seq += 1

    @property
    def stop_requested(self) -> bool:
        return self._stop

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    # -- written by the run ------------------------------------------------------------------
    def run_started(self, *, name: str, agents: int, steps: int | None = None,
                    answer_range: tuple[float, float] | None = None, workers: int = 1,
                    backend: str = "local", models: Sequence[str] = (),
                    run_dir: str | Path | None = None,
                    history: Sequence[Mapping[str, Any]] = (), bins: int | None = None
                    ) -> None:
        """The run is preparing (population, workers); ``steps`` planned. ``history``:
        summary entries of steps an earlier, interrupted attempt already finished. The
        live histogram of answers has ``bins`` (default: one per integer when that fits,
        else 50) over ``answer_range``, ``(low, high)``; without it its range follows the
        answers."""
        self._info = {"name": name, "agents": agents, "steps_planned": steps,
                      "workers": workers, "backend": backend, "models": tuple(models),
                      "run_dir": str(run_dir) if run_dir else None}
        self._auto = answer_range is None
        self._fixed = None if answer_range is None else bin_edges(
            float(answer_range[0]), float(answer_range[1]), bins or self._bins)
        rows = tuple(_row(e) for e in history)
        self._steps_done = len(rows)
        self._rows = rows[-MAX_STEP_ROWS:]
        self._series = _series(self._rows)
        last = next((e for e in reversed(history) if e.get("distributions")), None)
        self._dists = _distributions(last) if last is not None else {}
        self._answered_before = 0
        self._reset_step(0, 0)
        # Also after a failed attempt: the launcher restarts a run that lost a worker.
        self.status = "stopping" if self._stop else "starting"
        self.error = None
        self._ended_at = None
        self._seq += 1

    def simulation_started(self, sim: Simulation) -> None:
        """The workers are up: note where each one runs."""
        info = getattr(sim.backend, "worker_info", None)
        places: dict[int, tuple[int | None, str | None]] = {}
        if callable(info):
            for i, w in enumerate(info()):
                places[i] = (w.get("pid"), str(w.get("node"))[:16] if w.get("node") else None)
        else:
            here = (os.getpid(), socket.gethostname())
            places = {i: here for i in range(sim.backend.n_workers)}
        self._places = places
        self._lost = frozenset()
        self._recovered = self._had_loss
        if not self._stop:
            self.status = "running"
        self.refresh(sim.statistics(), force=True)

    def step_started(self, step: int, answers: PlaceholderSet[Any],
                     measure: Measure | None = None) -> None:
        """Step ``step`` collects ``answers``; ``measure`` turns arrived ones into numbers
        for the live histogram (without it, only progress is shown)."""
        self._reset_step(step, len(answers))
        self._measure = measure
        answers.add_listener(self._arrived)
        self._answers = answers
        self._seq += 1

    def step_progress(self, stats: SimulationStats | None = None) -> bool:
        """Fold in what arrived since the last call; refresh statistics now and then.

        Returns True when a stop was requested: the run should abandon the step. The
        monitor then stops listening to it, so the failures of its teardown are not counted.
        """
        self._drain()
        if stats is not None:
            self.refresh(stats)
        if self._stop:
            self._answers = None
            self._measure = None
            return True
        return False

    def step_finished(self, entry: Mapping[str, Any], stats: SimulationStats | None = None
                      ) -> None:
        """A step ended; ``entry`` is its summary entry (``step``, metrics, distributions)."""
        self._drain()
        self._answered_before += self._done
        self._answers = None
        row = _row(entry)
        if row["step"] != self._step:  # a step that collected nothing
            self._reset_step(row["step"], 0)
        self._rows = (*self._rows, row)[-MAX_STEP_ROWS:]
        self._steps_done += 1
        self._series = _series(self._rows)
        dists = _distributions(entry)
        if dists:
            self._dists = dists
        if stats is not None:
            self.refresh(stats, force=True)
        self._seq += 1

    def run_finished(self, status: str, error: str | None = None) -> None:
        """The run ended: ``completed``, ``stopped``, ``interrupted`` or ``failed``. The
        first call wins; later ones are ignored."""
        if self.finished:
            return
        self._drain()
        self.error = error
        self._ended_at = time.time()
        self._answers = None
        self._rates = (0.0, 0.0)
        # The workers are gone: nothing is in flight any more (CPU and memory stay as last
        # measured).
        self._show(tuple(dataclasses.replace(w, in_flight=0, waiting=0, llm_in_flight=0)
                         for w in self._all_workers))
        llm = self._llm
        self._llm = dataclasses.replace(
            llm, in_flight=0, models=tuple(dataclasses.replace(m, in_flight=0)
                                           for m in llm.models),
            endpoints=tuple(dataclasses.replace(e, in_flight=0) for e in llm.endpoints))
        self.status = status if status in FINISHED else \
            {"done": "completed"}.get(status, "failed")
        self._seq += 1

    def workers_lost(self, error: BaseException | str | None = None) -> None:
        """Workers were lost (the launcher calls this for a :class:`~populace.core.WorkerLost`,
        whether or not it resumes the run). The worker the error names (``worker 3 …``),
        else every worker, shows as ``lost`` until the next attempt's workers are up; those
        show as ``recovered``."""
        found = re.search(r"\bworker (\d+)\b", str(error or ""))
        lost = {int(found.group(1))} if found else {w.index for w in self._all_workers}
        self._lost = self._lost | lost
        self._had_loss = True
        self._show(tuple(
            dataclasses.replace(w, status="lost", in_flight=0, waiting=0, llm_in_flight=0,
                                cpu_pct=None, rss_mb=None) if w.index in lost else w
            for w in self._all_workers))
        self._seq += 1

    def set_environment(self, key: str, value: Any) -> None:
        """Show ``value`` (a number, a short string or a small dict) under ``key``."""
        if key not in self._env and len(self._env) >= MAX_ENV_KEYS:
            return
        if isinstance(value, str):
            value = value[:200]
        self._env = {**self._env, str(key)[:80]: value}
        self._seq += 1

    def refresh(self, stats: SimulationStats, *, force: bool = False) -> None:
        """Take in the simulation's statistics (at most every ``interval`` seconds)."""
        now = time.monotonic()
        if not force and now - self._last_refresh < self._interval:
            return
        self._last_refresh = now
        rows: list[WorkerRow] = []
        models: dict[str, list[int]] = {}
        endpoints: dict[str, list[Any]] = {}
        waiting = 0
        # (node, pid) -> (CPU %, MB): one sample per process, from the first of its workers
        procs: dict[tuple[str | None, int], tuple[float | None, float | None]] = {}
        for w in stats.workers:
            known_pid, node = self._places.get(w.index, (None, None))
            pid = w.pid if w.pid is not None else known_pid
            where = (node, pid) if pid is not None else None
            if where is not None and where not in procs:
                procs[where] = (self._cpu_pct(where, w.cpu_s, w.measured_at),
                                round(w.rss_bytes / 2**20, 1) if w.rss_bytes else None)
            llm_in_flight = 0
            for m in model_stats(w.resources):
                acc = models.setdefault(m.model, [0] * 8)
                for k, v in enumerate((m.requests, m.failures, m.in_flight, m.prompt_tokens,
                                       m.completion_tokens, m.retries, m.cached_tokens,
                                       m.prefix_tokens)):
                    acc[k] += v
                llm_in_flight += m.in_flight
                for e in m.endpoints:
                    ep = endpoints.setdefault(e.url, [e.url, "up", 0, 0, 0, 0.0, 0])
                    if e.state != "up":
                        ep[1] = e.state
                    ep[2] += e.requests
                    ep[3] += e.failures
                    ep[4] += e.in_flight
                    ep[5] += e.latency_sum
                    ep[6] += e.limit
            waiting += w.waiting_on_dependencies
            cpu, mb = procs[where] if where is not None else (None, None)
            status = "lost" if w.index in self._lost else \
                "recovered" if self._recovered else "alive"
            rows.append(WorkerRow(w.index, pid, node, status, w.agents, w.in_flight,
                                  w.waiting_on_dependencies, w.calls_done, w.calls_failed,
                                  llm_in_flight, cpu, mb))
        self._cpu = {k: v for k, v in self._cpu.items() if k in procs}
        members: dict[tuple[str | None, int], set[int]] = {}
        for row in rows:
            if row.pid is not None:
                members.setdefault((row.node, row.pid), set()).add(row.index)
        self._history.add(time.time() - self._started_at, procs, members)
        total = [sum(v[k] for v in models.values()) for k in range(8)]
        self._sample(now, total[0])
        self._show(tuple(rows))
        self._llm = dataclasses.replace(
            self._llm, requests=total[0], failures=total[1], in_flight=total[2],
            prompt_tokens=total[3], completion_tokens=total[4], retries=total[5],
            cached_tokens=total[6], prefix_tokens=total[7],
            models=tuple(ModelStats(k, v[0], v[1], v[2], v[3], v[4], v[5],
                                    cached_tokens=v[6], prefix_tokens=v[7])
                         for k, v in sorted(models.items())[:MAX_ENDPOINTS]),
            endpoints=tuple(
                EndpointRow(e[0], e[1], e[2], e[3], e[4],
                            round(e[5] / (e[2] - e[4]), 4) if e[2] > e[4] else None, e[6])
                for e in list(endpoints.values())[:MAX_ENDPOINTS]),
            workers_share_memory=0 < len(procs) < len(rows))
        self._waiting = waiting
        self._seq += 1

    # -- read by the studio ------------------------------------------------------------------
    def worker_history(self) -> dict[str, Any]:
        """Each process's CPU % and resident MB over the run (``t``: seconds since it
        started; at most 240 samples, 16 processes; ``workers``: the worker indexes it
        hosts): the studio's sparklines, read apart from the snapshot to keep that small."""
        return self._history.to_json()

    def snapshot(self) -> RunSnapshot:
        """Everything the live page shows (``.to_json()`` for the wire); a few kilobytes at
        any scale, cheap to take."""
        info = self._info
        edges, counts = self._binned
        valid, total_sum, total_sq = self._valid, self._sum, self._sumsq
        mean = total_sum / valid if valid else None
        std = float(np.sqrt(max(total_sq / valid - mean * mean, 0.0))) \
            if valid and mean is not None else None
        lat = self._lat
        end = self._ended_at or time.time()
        requests_per_s, answers_per_s = self._rates
        return RunSnapshot(
            run_id=self.run_id, seq=self._seq, status=self.status, error=self.error,
            stop_requested=self._stop, finished=self.finished, live=True,
            name=info.get("name"), agents=info.get("agents"),
            steps_planned=info.get("steps_planned"), backend=info.get("backend"),
            n_workers=info.get("workers"), models=info.get("models", ()),
            run_dir=info.get("run_dir"), started_at=round(self._started_at, 3),
            elapsed_s=round(end - self._started_at, 2),
            step=self._step, steps_done=self._steps_done,
            progress=Progress(self._step, self._done, self._failed, self._total),
            states=self._agent_states(self._waiting),
            answers=Histogram(
                edges=tuple(round(float(x), 6) for x in edges) if edges is not None else (),
                counts=tuple(counts.tolist()) if edges is not None else (),
                n=valid, missing=self._invalid, mean=_finite(mean), std=_finite(std),
                step=self._step),
            distributions=self._dists, series=self._series,
            llm=dataclasses.replace(
                self._llm, requests_per_s=requests_per_s, answers_per_s=answers_per_s,
                latency_s=Latency(_finite(_percentile(lat, 0.5)),
                                  _finite(_percentile(lat, 0.9)),
                                  _finite(_percentile(lat, 0.99)), int(lat.sum()),
                                  self._lat_basis),
                errors=tuple(sorted(self._kinds.items(), key=lambda kv: -kv[1])[:MAX_KINDS])),
            workers=self._workers,
            workers_omitted=max(0, len(self._all_workers), int(info.get("workers") or 0))
            - len(self._workers),
            environment=dict(self._env), nodes=self._nodes, forked_from=self.forked_from,
            choices={q: tuple(row) for q, row in enumerate(self._choices.tolist()) if any(row)})

    # -- internals ---------------------------------------------------------------------------
    def _cpu_pct(self, where: tuple[str | None, int], cpu_s: float | None,
                 at: float | None) -> float | None:
        """CPU % of a process (100: one core) from its own samples: over at least
        :data:`CPU_WINDOW_S` (on Ray a sample may come back unchanged, or a few ms after
        the last), else the last value."""
        if cpu_s is None or at is None:
            return None
        last = self._cpu.get(where)
        if last is None or at < last[1] or cpu_s < last[0]:  # first sample, or a new process
            self._cpu[where] = (cpu_s, at, None)
            return None
        cpu0, at0, pct = last
        if at - at0 >= CPU_WINDOW_S:
            pct = round(100 * (cpu_s - cpu0) / (at - at0), 1)
            self._cpu[where] = (cpu_s, at, pct)
        return pct

    def _show(self, rows: tuple[WorkerRow, ...]) -> None:
        """Keep every worker's row; show the first :data:`MAX_WORKER_ROWS` (lost ones first)
        and the totals per node."""
        self._all_workers = rows
        shown = sorted(rows, key=lambda w: w.status != "lost") if self._lost else rows
        self._workers = tuple(shown[:MAX_WORKER_ROWS])
        self._nodes = _node_totals(rows)

    def _reset_step(self, step: int, total: int) -> None:
        self._step = step
        self._total = total
        self._done = 0
        self._failed = 0
        fixed = self._fixed
        # Edges and counts travel together: a reader never sees one without the other.
        self._binned: tuple[np.ndarray | None, np.ndarray] = (
            (fixed, np.zeros(len(fixed) - 1, dtype=np.int64)) if fixed is not None
            else (None, np.zeros(0, dtype=np.int64)))
        self._valid = self._invalid = 0
        self._sum = self._sumsq = 0.0
        self._pending = []
        self._pending_errors = []
        self._answers = None
        self._measure = None
        self._collect_started = time.monotonic()
        if step != getattr(self, "_choices_step", None):  # a step's batches add up
            self._choices = np.zeros((0, 0), dtype=np.int64)
            self._choices_step = step

    def _arrived(self, values: Sequence[Any], errors: Sequence[BaseException]) -> None:
        # On the delivery path: only keep references; _drain does the work.
        if self._answers is None:
            return  # a step no longer watched (abandoned)
        if values:
            self._pending.append((values, time.monotonic()))
        if errors:
            self._pending_errors.append(errors)

    def _drain(self) -> None:
        answers = self._answers
        if answers is not None:
            self._done, self._failed = answers.n_done, answers.n_failed
        pending, self._pending = self._pending, []
        failures, self._pending_errors = self._pending_errors, []
        if failures:
            kinds = dict(self._kinds)
            for batch in failures:
                for e in batch:
                    k = error_kind(e)
                    kinds[k] = kinds.get(k, 0) + 1
            self._kinds = kinds
        if not pending or self._measure is None:
            return
        # Batch by batch: a batch may be replies kept as columns, which a measure reads
        # without making an object per reply.
        measured = [self._measure(b) for b, _ in pending]
        numbers = np.concatenate([np.asarray(m[0], dtype=np.float64) for m in measured])
        latency = np.concatenate([self._latency(np.asarray(m[1], dtype=np.float64), at)
                                  for m, (_, at) in zip(measured, pending, strict=True)])
        categories = getattr(self._measure, "categories", None)
        if callable(categories):
            self._count_choices([categories(b) for b, _ in pending])
        ok = numbers[np.isfinite(numbers)]
        edges, counts = self._binned
        if ok.size:
            if self._auto:
                edges, counts = _fit(edges, counts, ok)
            assert edges is not None
            # A new array: readers may hold the old one.
            self._binned = (edges, counts + np.histogram(ok, bins=edges)[0])
        self._valid += int(ok.size)
        self._invalid += int(numbers.size - ok.size)
        self._sum += float(ok.sum())
        self._sumsq += float(np.dot(ok, ok))
        lat = latency[np.isfinite(latency)]
        if lat.size:
            idx = np.clip(np.searchsorted(_LAT_EDGES, lat, side="right") - 1, 0,
                          len(self._lat) - 1)
            self._lat = self._lat + np.bincount(idx, minlength=len(self._lat))
        self._seq += 1

    def _count_choices(self, found: Sequence[tuple[Any, Any]]) -> None:
        """Add choices (question and option indexes) to the step's counts: a new array,
        grown to the largest indexes seen (at most 40 questions of 24 options)."""
        qs = np.concatenate([np.asarray(q, dtype=np.int64) for q, _ in found])
        os_ = np.concatenate([np.asarray(o, dtype=np.int64) for _, o in found])
        keep = (qs >= 0) & (qs < MAX_CHOICE_QUESTIONS) & (os_ >= 0) & (os_ < MAX_CHOICE_OPTIONS)
        qs, os_ = qs[keep], os_[keep]
        if not qs.size:
            return
        old = self._choices
        shape = (max(old.shape[0], int(qs.max()) + 1), max(old.shape[1], int(os_.max()) + 1))
        counts = np.zeros(shape, dtype=np.int64)
        counts[:old.shape[0], :old.shape[1]] = old
        np.add.at(counts, (qs, os_), 1)
        self._choices = counts

    def _latency(self, given: np.ndarray, arrived: float) -> np.ndarray:
        """Seconds per answer of one batch: the measure's, else (all NaN: a measure that
        knows none, such as the survey's) the time since the step's collect began."""
        if given.size and not np.isfinite(given).any():
            self._lat_basis = "arrival"
            return np.full(given.size, max(arrived - self._collect_started, 0.0))
        return given

    def _agent_states(self, waiting: int) -> AgentStates:
        """Agents by state. Members of the step in progress that have not answered are in
        their call unless waiting on a placeholder; everyone else is idle. (Counting from
        the step, not from workers' in-flight counters, keeps this right on Ray, whose
        statistics arrive with results and are stale while every agent waits.)"""
        agents = int(self._info.get("agents") or 0)
        size = self._total
        if self._step == 0 or size == 0:
            return AgentStates(idle=agents)
        remaining = max(0, size - self._done)
        waiting = min(remaining, waiting) if self._answers is not None else 0
        in_call = remaining - waiting if self._answers is not None else 0
        return AgentStates(idle=max(0, agents - size) + remaining - waiting - in_call,
                           waiting=waiting, in_call=in_call,
                           done=self._done - self._failed, failed=self._failed)

    def _sample(self, now: float, requests: int) -> None:
        answered = self._answered_before + self._done
        samples = self._samples
        samples.append((now, requests, answered))
        while len(samples) > 2 and now - samples[0][0] > 3.0:
            samples.popleft()
        t0, r0, a0 = samples[0]
        if now - t0 >= 0.2:
            self._rates = (round((requests - r0) / (now - t0), 1),
                           round((answered - a0) / (now - t0), 1))


class _History:
    """Each process's CPU % and memory over the whole run, in at most
    :data:`HISTORY_POINTS` samples: one every ``every`` seconds, and when they are all
    used, every other one is dropped and the spacing doubles (the start stays, finer
    detail goes)."""

    def __init__(self) -> None:
        self.every = 1.0
        self.times: list[float] = []
        self.series: dict[tuple[str | None, int], tuple[list[Any], list[Any], set[int]]] = {}

    def add(self, t: float, procs: Mapping[tuple[str | None, int], tuple[Any, Any]],
            workers: Mapping[tuple[str | None, int], set[int]]) -> None:
        if self.times and t - self.times[-1] < self.every:
            return
        n = len(self.times)
        self.times.append(round(t, 2))
        for key, (cpu, mb) in procs.items():
            if key not in self.series:
                if len(self.series) >= HISTORY_PROCESSES:
                    continue
                self.series[key] = ([None] * n, [None] * n, set())
            self.series[key][0].append(cpu)
            self.series[key][1].append(mb)
            self.series[key][2].update(workers.get(key, ()))
        for cpus, mbs, _ in self.series.values():
            if len(cpus) <= n:
                cpus.append(None)
                mbs.append(None)
        if len(self.times) >= HISTORY_POINTS:
            self.times = self.times[::2]
            self.series = {k: (c[::2], m[::2], w) for k, (c, m, w) in self.series.items()}
            self.every *= 2

    def to_json(self) -> dict[str, Any]:
        return {"t": list(self.times), "processes": [
            {"node": node, "pid": pid, "workers": sorted(w), "cpu_pct": list(c),
             "rss_mb": list(m)} for (node, pid), (c, m, w) in self.series.items()]}


def _node_totals(rows: Sequence[WorkerRow]) -> tuple[NodeRow, ...]:
    acc: dict[str | None, list[Any]] = {}  # workers, processes, agents, in flight, CPU, MB
    seen: set[tuple[str | None, int]] = set()
    for w in rows:
        a = acc.setdefault(w.node, [0, 0, 0, 0, None, None])
        a[0] += 1
        a[2] += w.agents
        a[3] += w.in_flight
        if w.pid is None or (w.node, w.pid) in seen:
            continue
        seen.add((w.node, w.pid))
        a[1] += 1
        if w.cpu_pct is not None:
            a[4] = (a[4] or 0.0) + w.cpu_pct
        if w.rss_mb is not None:
            a[5] = (a[5] or 0.0) + w.rss_mb
    return tuple(NodeRow(node, a[0], a[1], a[2], a[3],
                         round(a[4], 1) if a[4] is not None else None,
                         round(a[5], 1) if a[5] is not None else None)
                 for node, a in list(acc.items())[:MAX_NODE_ROWS])
