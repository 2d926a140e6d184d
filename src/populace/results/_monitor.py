"""The live view of a run: what the studio shows while a simulation is going.

A run writes into a :class:`RunMonitor` as it goes (``play(config, run_dir, monitor=m)``);
the studio reads :meth:`RunMonitor.snapshot`, a small JSON-able dict of aggregates whose size
does not grow with the number of agents: a million agents give the same few kilobytes as ten.

What goes in: the run's status, the current round's progress (from its ``PlaceholderSet``),
a histogram of the numbers that have arrived (fixed bins, updated with one ``np.histogram``
per poll over the values that came since the last one), answer latencies, errors by kind,
per-round summary rows, and the simulation's own ``statistics()`` — workers and the
``statistics()`` of their per-worker resources (model clients: requests, tokens, endpoints).

The run and the studio may live in different threads. The writer only ever *replaces* what
a reader may be holding (new arrays, new tuples, new dicts), so a snapshot needs no lock.
"""

from __future__ import annotations

import collections
import os
import re
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from populace._procmem import rss_bytes
from populace.core import PlaceholderSet, Simulation, SimulationStats
from populace.llm import ModelStats

#: Turns a batch of arrived replies into (numbers, NaN where invalid; latencies in seconds).
Measure = Callable[[Sequence[Any]], tuple[np.ndarray, np.ndarray]]

FINISHED = frozenset({"done", "stopped", "failed"})
MAX_WORKER_ROWS = 64
MAX_ROUND_ROWS = 100
MAX_KINDS = 20
MAX_ENDPOINTS = 32
MAX_ENV_KEYS = 40
ROUND_FIELDS = ("round", "n", "n_valid", "mean", "median", "std", "target", "winner_number",
                "n_winners", "wall_s")

# Latency histogram: 50 bins per decade from 1 ms to 10,000 s (about 5 % resolution).
_LAT_EDGES = np.geomspace(1e-3, 1e4, 7 * 50 + 1)
_ERROR_CAUSES = ("timed out", "cannot connect", "server disconnected", "malformed JSON",
                 "truncated response", "empty content", "connection error", "without choices")
_HTTP = re.compile(r"HTTP (\d{3})")


def error_kind(error: BaseException) -> str:
    """A short, countable name for an error: its type, and the HTTP status or cause if any."""
    name = type(error).__name__
    text = str(error)
    m = _HTTP.search(text)
    if m:
        return f"{name}: HTTP {m.group(1)}"
    for cause in _ERROR_CAUSES:
        if cause in text:
            return f"{name}: {cause}"
    return name


def bin_edges(low: float, high: float, bins: int | None = None) -> np.ndarray:
    """Histogram edges over ``[low, high]``: one bin per integer when the range is a small
    whole number (answers are usually integers), else ``bins`` (default 50) equal bins."""
    span = high - low
    if bins is None and span == int(span) and 0 < span <= 200:
        return np.linspace(low - 0.5, high + 0.5, int(span) + 2)
    return np.linspace(low, high, (bins or 50) + 1)


def _percentile(counts: np.ndarray, q: float) -> float | None:
    total = int(counts.sum())
    if total == 0:
        return None
    i = int(np.searchsorted(np.cumsum(counts), q * total))
    i = min(i, len(counts) - 1)
    return float(np.sqrt(_LAT_EDGES[i] * _LAT_EDGES[i + 1]))


def _finite(x: float | None) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), 4)


class RunMonitor:
    """Live state of one run, written by the run and read by the studio.

    >>> monitor = RunMonitor()
    >>> summary = await play(config, run_dir, monitor=monitor)  # doctest: +SKIP
    >>> monitor.snapshot()["status"]                              # doctest: +SKIP
    'done'

    ``request_stop()`` asks the run to stop: it abandons the round in progress (finished
    rounds and their checkpoint stay on disk, so ``populace run --resume`` can continue) and
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
        self._rounds: tuple[dict[str, Any], ...] = ()
        self._env: dict[str, Any] = {}
        self._kinds: dict[str, int] = {}
        self._lat = np.zeros(len(_LAT_EDGES) - 1, dtype=np.int64)
        self._edges = bin_edges(0, 100, bins)
        self._answered_before = 0  # answers of finished rounds
        self._answers: PlaceholderSet[Any] | None = None
        self._measure: Measure | None = None
        self._pending: list[Sequence[Any]] = []
        self._pending_errors: list[Sequence[BaseException]] = []
        self._reset_round(0, 0)
        self._workers: tuple[dict[str, Any], ...] = ()
        self._llm: dict[str, Any] = {}
        self._waiting = 0  # calls waiting on placeholders (at the last refresh)
        self._places: dict[int, tuple[int | None, str | None]] = {}
        self._samples: collections.deque[tuple[float, int, int]] = collections.deque(maxlen=64)
        self._rates = {"requests_per_s": 0.0, "answers_per_s": 0.0}
        self._last_refresh = 0.0

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
    def run_started(self, *, name: str, agents: int, rounds: int, low: float = 0.0,
                    high: float = 100.0, workers: int = 1, backend: str = "local",
                    models: Sequence[str] = (), run_dir: str | Path | None = None,
                    history: Sequence[Mapping[str, Any]] = (), bins: int | None = None
                    ) -> None:
        """The run is preparing (population, backgrounds, workers). ``history``: summary rows
        of rounds an earlier, interrupted attempt already finished. ``bins``: histogram bins
        over ``[low, high]`` (default: the monitor's, else one per integer when that fits)."""
        self._info = {"name": name, "agents": agents, "rounds_planned": rounds,
                      "low": low, "high": high, "workers": workers, "backend": backend,
                      "models": list(models), "run_dir": str(run_dir) if run_dir else None}
        self._edges = bin_edges(low, high, bins or self._bins)
        self._rounds = tuple(self._row(r) for r in history)
        self._answered_before = 0
        self._reset_round(0, 0)
        # Also after a failed attempt: the CLI restarts a run that lost a worker.
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
        if not self._stop:
            self.status = "running"
        self.refresh(sim.statistics(), force=True)

    def round_started(self, round_no: int, answers: PlaceholderSet[Any],
                      measure: Measure | None = None) -> None:
        """Round ``round_no`` began; its replies arrive in ``answers``."""
        self._reset_round(round_no, len(answers))
        self._measure = measure
        answers.add_listener(self._arrived)
        self._answers = answers
        self._seq += 1

    def round_progress(self, stats: SimulationStats | None = None) -> bool:
        """Fold in what arrived since the last call; refresh statistics now and then.

        Returns True when a stop was requested: the run should abandon the round. The
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

    def round_finished(self, row: Mapping[str, Any], stats: SimulationStats | None = None
                       ) -> None:
        """The round is scored; ``row`` is its summary entry."""
        self._drain()
        self._answered_before += self._done
        self._answers = None
        self._rounds = (*self._rounds, self._row(row))
        if stats is not None:
            self.refresh(stats, force=True)
        self._seq += 1

    def run_finished(self, status: str, error: str | None = None) -> None:
        """The run ended: ``completed``/``done``, ``stopped``, ``failed`` or ``interrupted``.
        The first call wins; later ones are ignored."""
        if self.finished:
            return
        self._drain()
        self.error = error
        self._ended_at = time.time()
        self._answers = None
        self._rates = {"requests_per_s": 0.0, "answers_per_s": 0.0}
        # The workers are gone: nothing is in flight any more.
        self._workers = tuple({**w, "in_flight": 0, "waiting": 0, "llm_in_flight": 0}
                              for w in self._workers)
        if self._llm:
            self._llm = {**self._llm, "in_flight": 0,
                         "models": [{**m, "in_flight": 0} for m in self._llm["models"]],
                         "endpoints": [{**e, "in_flight": 0} for e in self._llm["endpoints"]]}
        self.status = {"completed": "done", "interrupted": "stopped"}.get(status, status)
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
        rows: list[dict[str, Any]] = []
        models: dict[str, list[int]] = {}
        endpoints: dict[str, list[Any]] = {}
        waiting = 0
        rss_seen: dict[int, int | None] = {}
        for w in stats.workers:
            pid, node = self._places.get(w.index, (None, None))
            if pid is not None and pid not in rss_seen:
                rss_seen[pid] = rss_bytes(pid)
            llm_in_flight = 0
            for m in _model_stats(w.resources):
                acc = models.setdefault(m.model, [0, 0, 0, 0, 0, 0])
                for k, v in enumerate((m.requests, m.failures, m.in_flight, m.prompt_tokens,
                                       m.completion_tokens, m.retries)):
                    acc[k] += v
                llm_in_flight += m.in_flight
                for e in m.endpoints:
                    ep = endpoints.setdefault(e.url, [e.url, "up", 0, 0, 0, 0.0])
                    if e.state != "up":
                        ep[1] = e.state
                    ep[2] += e.requests
                    ep[3] += e.failures
                    ep[4] += e.in_flight
                    ep[5] += e.latency_sum
            waiting += w.waiting_on_dependencies
            rss = rss_seen.get(pid) if pid is not None else None
            rows.append({"index": w.index, "pid": pid, "node": node, "agents": w.agents,
                         "in_flight": w.in_flight, "waiting": w.waiting_on_dependencies,
                         "calls_done": w.calls_done, "calls_failed": w.calls_failed,
                         "llm_in_flight": llm_in_flight,
                         "rss_mb": round(rss / 2**20, 1) if rss is not None else None})
        total = [sum(v[k] for v in models.values()) for k in range(6)]
        self._sample(now, total[0])
        shared = len(rss_seen) == 1 and len(rows) > 1
        self._workers = tuple(rows[:MAX_WORKER_ROWS])
        self._llm = {
            "requests": total[0], "failures": total[1], "in_flight": total[2],
            "prompt_tokens": total[3], "completion_tokens": total[4], "retries": total[5],
            "models": [{"model": k, "requests": v[0], "failures": v[1], "in_flight": v[2],
                        "prompt_tokens": v[3], "completion_tokens": v[4], "retries": v[5]}
                       for k, v in sorted(models.items())[:MAX_ENDPOINTS]],
            "endpoints": [{"url": e[0], "state": e[1], "requests": e[2], "failures": e[3],
                           "in_flight": e[4],
                           "mean_latency_s": (round(e[5] / (e[2] - e[4]), 4)
                                              if e[2] > e[4] else None)}
                          for e in list(endpoints.values())[:MAX_ENDPOINTS]],
            "workers_share_memory": shared,
        }
        self._waiting = waiting
        self._seq += 1

    # -- read by the studio ------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """Everything the live page shows, as plain JSON types; a few kilobytes at any scale."""
        info = self._info
        counts = self._hist
        valid, total_sum, total_sq = self._valid, self._sum, self._sumsq
        mean = total_sum / valid if valid else None
        std = float(np.sqrt(max(total_sq / valid - mean * mean, 0.0))) if valid and mean \
            is not None else None
        lat = self._lat
        done, failed, size = self._done, self._failed, self._total
        end = self._ended_at or time.time()
        rounds = self._rounds[-MAX_ROUND_ROWS:]
        return {
            "run_id": self.run_id,
            "seq": self._seq,
            "status": self.status,
            "error": self.error,
            "stop_requested": self._stop,
            "finished": self.finished,
            "live": True,
            **{k: info.get(k) for k in ("name", "agents", "rounds_planned", "backend",
                                        "models", "run_dir")},
            "n_workers": info.get("workers"),
            "started_at": round(self._started_at, 3),
            "elapsed_s": round(end - self._started_at, 2),
            "round": self._round,
            "rounds_done": len(self._rounds),
            "progress": {"round": self._round, "done": done, "failed": failed, "total": size,
                         "fraction": round(done / size, 4) if size else 0.0},
            "states": self._agent_states(self._waiting),
            "histogram": {
                "round": self._round,
                "edges": [round(float(x), 4) for x in self._edges[[0, -1]]],
                "counts": counts.tolist(),
                "valid": valid, "invalid": self._invalid,
                "mean": _finite(mean), "std": _finite(std),
            },
            "llm": {**self._llm, **self._rates,
                    "latency_s": {"p50": _finite(_percentile(lat, 0.5)),
                                  "p90": _finite(_percentile(lat, 0.9)),
                                  "p99": _finite(_percentile(lat, 0.99)),
                                  "n": int(lat.sum())},
                    "errors": sorted(self._kinds.items(), key=lambda kv: -kv[1])[:MAX_KINDS]},
            "workers": list(self._workers),
            "workers_omitted": max(0, int(info.get("workers") or 0) - len(self._workers)),
            "rounds": list(rounds),
            "environment": dict(self._env),
        }

    # -- internals ---------------------------------------------------------------------------
    def _reset_round(self, round_no: int, total: int) -> None:
        self._round = round_no
        self._total = total
        self._done = 0
        self._failed = 0
        self._hist = np.zeros(len(self._edges) - 1, dtype=np.int64)
        self._valid = self._invalid = 0
        self._sum = self._sumsq = 0.0
        self._pending = []
        self._pending_errors = []
        self._answers = None
        self._measure = None

    def _arrived(self, values: Sequence[Any], errors: Sequence[BaseException]) -> None:
        # On the delivery path: only keep references; _drain does the work.
        if self._answers is None:
            return  # a round no longer watched (abandoned)
        if values:
            self._pending.append(values)
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
        values = pending[0] if len(pending) == 1 else [v for b in pending for v in b]
        numbers, latency = self._measure(values)
        ok = numbers[~np.isnan(numbers)]
        counts, _ = np.histogram(ok, bins=self._edges)
        self._hist = self._hist + counts  # a new array: readers may hold the old one
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

    def _agent_states(self, waiting: int) -> dict[str, int]:
        """Agents by state. Members of the round in progress that have not answered are in
        their call unless waiting on a placeholder; everyone else is idle. (Counting from
        the round, not from workers' in-flight counters, keeps this right on Ray, whose
        statistics arrive with results and are stale while every agent waits.)"""
        agents = int(self._info.get("agents") or 0)
        size = self._total
        if self._round == 0:
            return {"idle": agents, "waiting": 0, "in_call": 0, "done": 0, "failed": 0}
        remaining = max(0, size - self._done)
        waiting = min(remaining, waiting) if self._answers is not None else 0
        in_call = remaining - waiting if self._answers is not None else 0
        return {"idle": max(0, agents - size) + remaining - waiting - in_call,
                "waiting": waiting, "in_call": in_call,
                "done": self._done - self._failed, "failed": self._failed}

    def _sample(self, now: float, requests: int) -> None:
        answered = self._answered_before + self._done
        samples = self._samples
        samples.append((now, requests, answered))
        while len(samples) > 2 and now - samples[0][0] > 3.0:
            samples.popleft()
        t0, r0, a0 = samples[0]
        if now - t0 >= 0.2:
            self._rates = {"requests_per_s": round((requests - r0) / (now - t0), 1),
                           "answers_per_s": round((answered - a0) / (now - t0), 1)}

    @staticmethod
    def _row(row: Mapping[str, Any]) -> dict[str, Any]:
        out = {k: row.get(k) for k in ROUND_FIELDS if k in row}
        for k, v in out.items():
            if isinstance(v, float):
                out[k] = _finite(v)
        return out


def _model_stats(resources: Sequence[Any]) -> list[ModelStats]:
    """The ModelStats among a worker's resource statistics (a ModelSet gives a mapping)."""
    found: list[ModelStats] = []
    for r in resources:
        for item in (r.values() if isinstance(r, Mapping) else (r,)):
            if isinstance(item, ModelStats):
                found.append(item)
    return found


def run_snapshot(run_dir: str | Path) -> dict[str, Any]:
    """The same view as :meth:`RunMonitor.snapshot`, for a run that is not live: from its
    ``summary.json``, ``config.yaml`` and the last round's numbers."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    import yaml

    from ._rundir import read_summary

    d = Path(run_dir)
    try:
        summary = read_summary(d)
    except (OSError, ValueError):
        summary = {"status": "unknown", "rounds": []}
    try:
        config = yaml.safe_load((d / "config.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        config = {}
    game = config.get("game")
    if not isinstance(game, dict):
        game = {}
    low, high = float(game.get("low", 0)), float(game.get("high", 100))
    edges = bin_edges(low, high)
    rows = [RunMonitor._row(r) for r in summary.get("rounds", []) if isinstance(r, dict)]
    counts = np.zeros(len(edges) - 1, dtype=np.int64)
    valid = invalid = 0
    shown = rows[-1]["round"] if rows else 0
    part = d / "parts" / f"responses-r{shown:05d}.parquet"
    if shown and part.exists():
        try:
            numbers = pq.read_table(part, columns=["number"]).column("number")
            ok = pc.drop_null(numbers).to_numpy()
            counts, _ = np.histogram(ok, bins=edges)
            valid, invalid = int(ok.size), int(numbers.null_count)
        except (OSError, KeyError, ValueError):
            pass
    last = rows[-1] if rows else {}
    status = str(summary.get("status", "unknown"))
    agents = summary.get("agents") or config.get("agents")
    return {
        "run_id": d.name, "seq": 0,
        "status": {"completed": "done", "interrupted": "stopped"}.get(status, status),
        "error": summary.get("error"), "stop_requested": False, "finished": True,
        "live": False,
        "name": summary.get("name") or config.get("name") or d.name, "agents": agents,
        "rounds_planned": summary.get("rounds_planned") or config.get("rounds"),
        "n_workers": config.get("workers"), "backend": config.get("backend"),
        "models": summary.get("models") or [], "run_dir": str(d),
        "started_at": None, "elapsed_s": summary.get("wall_s"),
        "round": shown, "rounds_done": len(rows),
        "progress": {"round": shown, "done": last.get("n") or 0, "failed": 0,
                     "total": last.get("n") or 0, "fraction": 1.0 if rows else 0.0},
        "states": {"idle": 0, "waiting": 0, "in_call": 0, "done": last.get("n") or 0,
                   "failed": 0},
        "histogram": {"round": shown, "edges": [float(edges[0]), float(edges[-1])],
                      "counts": counts.tolist(), "valid": valid, "invalid": invalid,
                      "mean": last.get("mean"), "std": last.get("std")},
        "llm": {}, "workers": [], "workers_omitted": 0,
        "rounds": rows[-MAX_ROUND_ROWS:], "environment": {},
    }
