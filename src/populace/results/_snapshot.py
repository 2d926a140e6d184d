"""What the studio is shown of a run, live or from disk: :class:`RunSnapshot` and its parts,
the limits that keep it a few kilobytes for any number of agents, and the helpers that make
its pieces from a run's summary entries (series, distributions, model usage). Filled live by
:class:`~populace.results.RunMonitor` (``_monitor.py``), from disk by
:func:`~populace.results.run_snapshot` (``_stored.py``)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from populace.core import ModelError
from populace.llm import ModelStats

#: How a run ends (the launcher's vocabulary); before that: starting, running, stopping.
FINISHED = frozenset({"completed", "stopped", "interrupted", "failed"})
MAX_WORKER_ROWS = 16     # worker rows shown (lost ones first); the rest are counted
MAX_NODE_ROWS = 16       # nodes with totals
CPU_WINDOW_S = 0.4       # shortest span a process's CPU % is measured over
MAX_STEP_ROWS = 100      # steps kept in the metric series (the latest)
MAX_METRICS = 20         # metrics shown (the first reported); the rest are counted
MAX_DISTRIBUTIONS = 8
MAX_BINS = 120           # more bins are merged (a distribution of 1,000 bins: 9 → 1)
MAX_TEXT = 40            # characters of a text metric
MAX_KINDS = 20
MAX_ENDPOINTS = 32
MAX_ENV_KEYS = 40
AUTO_BINS = 50           # bins of the live histogram when the scenario gives no range
HISTORY_POINTS = 240     # samples of each process's CPU and memory kept for the whole run
MAX_CHOICE_QUESTIONS = 40  # live answer shares: questions × options counted, at most
MAX_CHOICE_OPTIONS = 24
HISTORY_PROCESSES = 16

# Latency histogram: 50 bins per decade from 1 ms to 10,000 s (about 5 % resolution).
_LAT_EDGES = np.geomspace(1e-3, 1e4, 7 * 50 + 1)
_STEP_KEYS = ("step", "round")  # an entry's step number ("round": the game's, older runs)


# -- what a snapshot is made of -------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Histogram:
    """Counts over bins: ``edges`` has one entry more than ``counts``. ``n`` values were
    numbers (those outside the edges are not in any bin), ``missing`` were not."""

    edges: tuple[float, ...] = ()
    counts: tuple[int, ...] = ()
    n: int = 0
    missing: int = 0
    mean: float | None = None
    std: float | None = None
    step: int = 0


@dataclass(frozen=True, slots=True)
class Progress:
    """The answers of the step in progress: ``done`` of ``total`` (``failed`` among them)."""

    step: int = 0
    done: int = 0
    failed: int = 0
    total: int = 0

    @property
    def fraction(self) -> float:
        return round(self.done / self.total, 4) if self.total else 0.0


@dataclass(frozen=True, slots=True)
class AgentStates:
    """Agents by state (see :meth:`RunMonitor._agent_states`)."""

    idle: int = 0
    waiting: int = 0
    in_call: int = 0
    done: int = 0
    failed: int = 0


@dataclass(frozen=True, slots=True)
class Series:
    """Metric series over the latest :data:`MAX_STEP_ROWS` steps: ``metrics[name][k]`` is
    the value at step ``steps[k]`` (None where that step did not report it)."""

    steps: tuple[int, ...] = ()
    metrics: Mapping[str, tuple[Any, ...]] = dataclasses.field(default_factory=dict)
    omitted: int = 0  # metrics beyond MAX_METRICS, not shown


@dataclass(frozen=True, slots=True)
class WorkerRow:
    """One worker. ``cpu_pct`` (100: one core busy) and ``rss_mb`` are those of its
    process, as the process measured them; workers sharing a process show the same.
    ``status``: ``alive``, ``lost`` (its attempt lost it; the run may be resuming) or
    ``recovered`` (a worker of an attempt that resumed after a loss)."""

    index: int
    pid: int | None
    node: str | None
    status: str
    agents: int
    in_flight: int
    waiting: int
    calls_done: int
    calls_failed: int
    llm_in_flight: int
    cpu_pct: float | None
    rss_mb: float | None


@dataclass(frozen=True, slots=True)
class NodeRow:
    """Totals of one node over all its workers (not only the rows shown); CPU and memory
    count each process once."""

    node: str | None
    workers: int
    processes: int
    agents: int
    in_flight: int
    cpu_pct: float | None
    rss_mb: float | None


@dataclass(frozen=True, slots=True)
class EndpointRow:
    url: str
    state: str
    requests: int
    failures: int
    in_flight: int
    mean_latency_s: float | None
    limit: int = 0  # requests it may have in flight, over all workers (adaptive limits move)


@dataclass(frozen=True, slots=True)
class Latency:
    """Seconds per answer (all of its calls, retries and queueing)."""

    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    n: int = 0
    #: ``answer``: what the scenario's measure gave per answer; ``arrival``: for answers it
    #: gave none of, the time from the start of their collect to their arrival
    basis: str = "answer"


@dataclass(frozen=True, slots=True)
class LLMView:
    """The run's model traffic, summed over workers."""

    requests: int = 0
    failures: int = 0
    in_flight: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0
    cached_tokens: int = 0  # prompt tokens servers took from their prefix cache
    prefix_tokens: int = 0  # prompt tokens repeating a prefix sent to the same endpoint
    requests_per_s: float = 0.0
    answers_per_s: float = 0.0
    latency_s: Latency = Latency()
    errors: tuple[tuple[str, int], ...] = ()  # failed answers by kind, most frequent first
    models: tuple[ModelStats, ...] = ()  # one per model, summed over workers
    endpoints: tuple[EndpointRow, ...] = ()
    workers_share_memory: bool = False


@dataclass(frozen=True, slots=True)
class RunSnapshot:
    """Everything the live page shows of one run; :meth:`to_json` is what it receives."""

    run_id: str | None
    seq: int
    status: str
    error: str | None
    stop_requested: bool
    finished: bool
    live: bool
    name: str | None
    agents: int | None
    steps_planned: int | None
    backend: str | None
    n_workers: int | None
    models: tuple[str, ...]
    run_dir: str | None
    started_at: float | None
    elapsed_s: float | None
    step: int                       # the step in progress, else the last one played
    steps_done: int
    progress: Progress
    states: AgentStates
    answers: Histogram              # the answers of the step in progress, so far
    distributions: Mapping[str, Histogram]  # those the last finished step declared
    series: Series
    llm: LLMView
    workers: tuple[WorkerRow, ...]
    workers_omitted: int
    environment: Mapping[str, Any]
    tables: tuple[str, ...] = ()    # per-step tables on disk (for a run read from disk)
    nodes: tuple[NodeRow, ...] = ()  # per node totals of the workers
    #: a fork's source: ``run`` (its directory's name), ``step``, ``set`` (the changes)
    forked_from: Mapping[str, Any] | None = None
    #: the step in progress's choices so far (a measure with ``categories``): per question
    #: index asked, the count of each option
    choices: Mapping[int, tuple[int, ...]] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON types only (no NaN, no numpy scalars)."""
        out: dict[str, Any] = _plain(self)
        out["progress"]["fraction"] = self.progress.fraction
        return out


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, np.generic):
        return _plain(value.item())
    return value


# -- small helpers --------------------------------------------------------------------------
def error_kind(error: BaseException) -> str:
    """A short, countable name for an error: ``ModelError: <cause>`` for a failed LLM call
    of a known kind (``ModelError.cause``: ``HTTP 503``, ``timed out``…), else its type."""
    if isinstance(error, ModelError) and error.cause:
        return f"ModelError: {error.cause}"
    return type(error).__name__


def bin_edges(low: float, high: float, bins: int | None = None) -> np.ndarray:
    """Histogram edges over ``[low, high]``: one bin per integer when the range spans 10 to
    200 whole numbers (answers there are often integers: the game's 0…100), else ``bins``
    (default 50) equal bins (``[0, 1]`` is more often a share than a yes/no)."""
    span = high - low
    if bins is None and span == int(span) and 10 <= span <= 200:
        return np.linspace(low - 0.5, high + 0.5, int(span) + 2)
    return np.linspace(low, high, (bins or 50) + 1)


def _fit(edges: np.ndarray | None, counts: np.ndarray, values: np.ndarray
         ) -> tuple[np.ndarray, np.ndarray]:
    """Equal bins that cover ``values`` as well as what ``counts`` holds: the first batch
    sets the range, later values outside it double the bin width (pairs of bins merge, so
    every count stays exact) until they fit."""
    mn, mx = float(values.min()), float(values.max())
    b = AUTO_BINS
    if edges is None:
        counts = np.zeros(b, dtype=np.int64)
        if mx - mn < b and bool(np.all(values == np.round(values))):
            lo, w = mn - 0.5, 1.0  # integers: one bin each
        else:
            w = (mx - mn) / (b - 1) if mx > mn else max(abs(mn), 1.0) / b
            lo = mn - w / 2
    else:
        lo, w = float(edges[0]), float(edges[1] - edges[0])
    while mn < lo or mx > lo + b * w:
        pairs = counts.reshape(b // 2, 2).sum(axis=1)
        zeros = np.zeros(b // 2, dtype=np.int64)
        if mn < lo:
            lo -= b * w
            counts = np.concatenate([zeros, pairs])
        else:
            counts = np.concatenate([pairs, zeros])
        w *= 2
    return lo + w * np.arange(b + 1), counts


def _percentile(counts: np.ndarray, q: float) -> float | None:
    total = int(counts.sum())
    if total == 0:
        return None
    i = int(np.searchsorted(np.cumsum(counts), q * total))
    i = min(i, len(counts) - 1)
    return float(np.sqrt(_LAT_EDGES[i] * _LAT_EDGES[i + 1]))


def _finite(x: float | None) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), 4)


def _short(x: float) -> float | None:
    """Six significant digits: enough to read, short on the wire."""
    return float(f"{x:.6g}") if math.isfinite(x) else None


def _scalar(value: Any) -> tuple[bool, Any]:
    """(is it a metric, its shown value): numbers, bools, short text and None are."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, bool | int):
        return True, value
    if isinstance(value, float):
        return True, _short(value)
    if isinstance(value, str):
        return True, value[:MAX_TEXT]
    return False, None


def _fork_origin(summary: Mapping[str, Any]) -> dict[str, Any] | None:
    """A summary's ``forked_from`` as a snapshot shows it: the source run's directory name
    (not its path on the server), the step and the changed settings; None for no fork."""
    found = summary.get("forked_from")
    if not isinstance(found, Mapping) or not isinstance(found.get("run"), str):
        return None
    step = found.get("step")
    changes = found.get("set")
    return {"run": Path(found["run"]).name,
            "step": step if isinstance(step, int) and not isinstance(step, bool) else None,
            "set": {str(k)[:80]: _scalar(v)[1] if _scalar(v)[0] else str(v)[:MAX_TEXT]
                    for k, v in list(changes.items())[:20]}
            if isinstance(changes, Mapping) else {}}


def step_of(entry: Mapping[str, Any]) -> int:
    """The step number of a summary entry (``step``; ``round`` in the game's older runs)."""
    for key in _STEP_KEYS:
        value = entry.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return 0


def _row(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A summary entry's scalar metrics, with its step under ``step``."""
    step = step_of(entry)
    row: dict[str, Any] = {"step": step}
    for key, value in entry.items():
        if key == "step" or (key == "round" and value == step):
            continue
        ok, shown = _scalar(value)
        if ok:
            row[str(key)[:80]] = shown
    return row


def _series(rows: Sequence[Mapping[str, Any]]) -> Series:
    names = list(dict.fromkeys(k for r in rows for k in r if k != "step"))
    shown = names[:MAX_METRICS]
    if "wall_s" in names and "wall_s" not in shown:  # the time per step is always shown
        shown[-1] = "wall_s"
    return Series(steps=tuple(int(r["step"]) for r in rows),
                  metrics={k: tuple(r.get(k) for r in rows) for k in shown},
                  omitted=len(names) - len(shown))


def _histogram(data: Any, step: int) -> Histogram | None:
    """A declared distribution (``{"edges", "counts", "n", "missing", "mean"}``), with more
    than :data:`MAX_BINS` bins merged; None if it is not one."""
    if not isinstance(data, Mapping):
        return None
    try:
        edges = [float(e) for e in data["edges"]]
        counts = [int(c) for c in data["counts"]]
    except (KeyError, TypeError, ValueError):
        return None
    if len(edges) != len(counts) + 1:
        return None
    if len(counts) > MAX_BINS:
        k = -(-len(counts) // MAX_BINS)
        counts = [sum(counts[i:i + k]) for i in range(0, len(counts), k)]
        edges = [*edges[:-1:k], edges[-1]]
    mean = data.get("mean")
    std = data.get("std")
    return Histogram(
        edges=tuple(_short(e) or 0.0 for e in edges), counts=tuple(counts),
        n=int(data.get("n") or sum(counts)), missing=int(data.get("missing") or 0),
        mean=_short(float(mean)) if isinstance(mean, int | float) else None,
        std=_short(float(std)) if isinstance(std, int | float) else None, step=step)


def _distributions(entry: Mapping[str, Any]) -> dict[str, Histogram]:
    found = entry.get("distributions")
    if not isinstance(found, Mapping):
        return {}
    out = {}
    for name, data in list(found.items())[:MAX_DISTRIBUTIONS]:
        h = _histogram(data, step_of(entry))
        if h is not None:
            out[str(name)[:80]] = h
    return out


_USAGE = ("requests", "failures", "prompt_tokens", "completion_tokens", "retries",
          "cached_tokens", "prefix_tokens")


def _usage(entries: Sequence[Mapping[str, Any]]) -> LLMView:
    """The model traffic the written steps report (each entry's ``llm``: per model, its
    counters' increase in that step), summed; no rates, latencies or calls in flight."""
    models: dict[str, list[int]] = {}
    for e in entries:
        found = e.get("llm")
        for model, counts in (found.items() if isinstance(found, Mapping) else ()):
            if not isinstance(counts, Mapping):
                continue
            acc = models.setdefault(str(model)[:80], [0] * len(_USAGE))
            for k, key in enumerate(_USAGE):
                value = counts.get(key)
                if isinstance(value, int) and not isinstance(value, bool):
                    acc[k] += value
    total = [sum(v[k] for v in models.values()) for k in range(len(_USAGE))]
    return LLMView(
        requests=total[0], failures=total[1], prompt_tokens=total[2],
        completion_tokens=total[3], retries=total[4], cached_tokens=total[5],
        prefix_tokens=total[6],
        models=tuple(ModelStats(k, v[0], v[1], 0, v[2], v[3], v[4], cached_tokens=v[5],
                                prefix_tokens=v[6])
                     for k, v in sorted(models.items())[:MAX_ENDPOINTS]))
