"""A worker: one event loop hosting many agents, fed and drained in batches.

The worker knows nothing of transports. It receives lists of requests, runs them with the
coroutine driver, and reports outcomes through ``emit`` once per loop tick, as a few batched
updates rather than one message per agent. Backends decide how requests and updates cross
process boundaries.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ._agent import Agent, PerWorker, Profile
from ._driver import Call, end_calls
from ._placeholder import Placeholder, PlaceholderSet
from ._walk import find, replace

Target = str | Callable[..., Any]


@dataclass(slots=True)
class CallRequest:
    """Run ``target`` on one agent; the outcome is reported under ``call_id``."""

    call_id: int
    local: int
    target: Target
    args: tuple[Any, ...]
    refs: bool = False  # args hold RemoteRefs (set by remote backends)


@dataclass(slots=True)
class GroupRequest:
    """Run ``target`` on many agents of this worker; outcomes reported per slot."""

    batch_id: int
    segment: int
    locals: Sequence[int]
    target: Target
    args: tuple[Any, ...]
    refs: bool = False  # args hold RemoteRefs (set by remote backends)
    each: Sequence[Any] | None = None  # one extra trailing argument per slot (scatter)


@dataclass(frozen=True, slots=True)
class RemoteRef:
    """A pending single-call result owned by another worker: how a placeholder still pending
    crosses a process boundary inside a request (the receiving worker fetches the value
    from ``owner`` itself)."""

    owner: int
    call_id: int


@dataclass(slots=True)
class CallDone:
    call_id: int
    value: Any
    error: BaseException | None


@dataclass(slots=True)
class GroupChunk:
    """Outcomes of some slots of one segment, since the previous chunk."""

    batch_id: int
    segment: int
    slots: list[int]
    values: list[Any]
    failed_slots: list[int]
    errors: list[BaseException]


@dataclass(slots=True)
class WorkerGone:
    """The worker died; every call pending on it has failed with ``error``."""

    error: BaseException


Update = CallDone | GroupChunk | WorkerGone


@dataclass(frozen=True, slots=True)
class WorkerStats:
    """What a worker is doing now; cheap to compute, safe to show.

    ``pid``, ``cpu_s``, ``measured_at`` and ``rss_bytes`` are measured by the worker's own
    process when the statistics are taken (on Ray, inside the actor), so they are right on
    any node: CPU seconds used by the whole process so far (``time.process_time()``), the
    moment (the process's ``time.monotonic()``: compare only with later samples of the same
    process) and its resident bytes (None where ``/proc`` is missing). None: not measured.

    >>> a = worker.statistics()                                          # doctest: +SKIP
    >>> b = worker.statistics()  # a while later                         # doctest: +SKIP
    >>> 100 * (b.cpu_s - a.cpu_s) / (b.measured_at - a.measured_at)    # doctest: +SKIP
    37.5
    """

    index: int
    agents: int
    calls_started: int
    calls_done: int
    calls_failed: int
    waiting_on_dependencies: int
    #: ``statistics()`` of each per-worker resource that has one (a ModelSet's, say).
    resources: tuple[Any, ...] = ()
    pid: int | None = None
    cpu_s: float | None = None
    measured_at: float | None = None
    rss_bytes: int | None = None

    @property
    def in_flight(self) -> int:
        return self.calls_started - self.calls_done - self.calls_failed


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
RSS_MAX_AGE = 0.2  # seconds a reading of the resident size is reused
_rss: tuple[int, float, int | None] = (-1, 0.0, None)  # (pid, when, bytes): the last reading


def _read_rss() -> int | None:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def _process_sample() -> tuple[int, float, float, int | None]:
    """(pid, CPU seconds, monotonic time, resident bytes) of this process now. The resident
    size is read at most every :data:`RSS_MAX_AGE` seconds (every worker of a process, and
    every poll on Ray, asks); keyed by pid, so a forked child reads its own."""
    global _rss
    pid, now = os.getpid(), time.monotonic()
    last = _rss
    if last[0] != pid or now - last[1] >= RSS_MAX_AGE:
        last = _rss = (pid, now, _read_rss())
    return pid, time.process_time(), now, last[2]


#: Calls of a group request a worker starts in one loop tick.
SLICE = 4096


def _note_origin(error: BaseException, agent_id: int, target: Target) -> None:
    """Name the agent on its error, once: one exception object shared by many agents (or
    re-raised by a dependent agent) must not collect a note per agent."""
    if not any(n.startswith("raised by agent ") for n in getattr(error, "__notes__", ())):
        error.add_note(f"raised by agent {agent_id} in {_describe(target)}()")


def _describe(target: Target) -> str:
    return target if isinstance(target, str) else getattr(target, "__qualname__", repr(target))


class _Segment:
    """Collects the outcomes of one GroupRequest between flushes."""

    __slots__ = ("batch_id", "errors", "failed_slots", "locals", "segment", "slots", "target",
                 "values", "worker")

    def __init__(self, worker: Worker, req: GroupRequest) -> None:
        self.worker = worker
        self.batch_id = req.batch_id
        self.segment = req.segment
        self.locals = req.locals
        self.target = req.target
        self.slots: list[int] = []
        self.values: list[Any] = []
        self.failed_slots: list[int] = []
        self.errors: list[BaseException] = []

    def _complete(self, slot: int, value: Any) -> None:
        if not self.slots and not self.failed_slots:
            self.worker._dirty.append(self)
            self.worker._schedule_flush()
        self.slots.append(slot)
        self.values.append(value)
        self.worker._n_done += 1

    def _failed(self, slot: int, error: BaseException) -> None:
        if not self.slots and not self.failed_slots:
            self.worker._dirty.append(self)
            self.worker._schedule_flush()
        agent = self.worker._agents[self.locals[slot]]
        _note_origin(error, agent.id, self.target)
        self.failed_slots.append(slot)
        self.errors.append(error)
        self.worker._n_failed += 1

    def take(self) -> GroupChunk:
        chunk = GroupChunk(self.batch_id, self.segment, self.slots, self.values,
                           self.failed_slots, self.errors)
        self.slots, self.values, self.failed_slots, self.errors = [], [], [], []
        return chunk


class _Single:
    """Sink for one CallRequest."""

    __slots__ = ("agent_id", "call_id", "target", "worker")

    def __init__(self, worker: Worker, req: CallRequest, agent_id: int) -> None:
        self.worker = worker
        self.call_id = req.call_id
        self.target = req.target
        self.agent_id = agent_id

    def _complete(self, slot: int, value: Any) -> None:
        self.worker._n_done += 1
        self.worker._push(CallDone(self.call_id, value, None))

    def _failed(self, slot: int, error: BaseException) -> None:
        self.worker._n_failed += 1
        _note_origin(error, self.agent_id, self.target)
        self.worker._push(CallDone(self.call_id, None, error))


_DEPS = (Placeholder, PlaceholderSet)


def _value_of(dep: Any) -> Any:
    """The value of a resolved dependency; its error is raised (and so consumed)."""
    value, error = dep._outcome()
    if error is not None:
        raise error
    return value


class Worker:
    """Hosts agents on one event loop and runs batched requests against them."""

    def __init__(
        self,
        index: int,
        loop: asyncio.AbstractEventLoop,
        emit: Callable[[int, list[Update]], None],
    ) -> None:
        self.index = index
        self._loop = loop
        self._emit = emit
        self._agents: list[Agent] = []
        self._resources: dict[str, tuple[PerWorker, Any]] = {}
        self._updates: list[Update] = []
        self._dirty: list[_Segment] = []
        self._flush_scheduled = False
        self._n_started = 0
        self._n_done = 0
        self._n_failed = 0
        self._n_waiting = 0
        self._closed = False

    # -- agents ------------------------------------------------------------------------------
    def create(
        self,
        cls: type[Agent],
        ids: Sequence[int],
        columns: dict[str, list[Any]] | None,
        init: dict[str, Any],
    ) -> int:
        """Construct agents ``ids`` of ``cls``; returns the local index of the first one."""
        kwargs = {k: self._resource(v) if isinstance(v, PerWorker) else v for k, v in init.items()}
        first = len(self._agents)
        agents = self._agents
        if columns:
            for row, agent_id in enumerate(ids):
                agents.append(cls(agent_id, Profile(columns, row), **kwargs))
        else:
            for agent_id in ids:
                agents.append(cls(agent_id, None, **kwargs))
        return first

    def _resource(self, spec: PerWorker) -> Any:
        hit = self._resources.get(spec.key)
        if hit is None:
            hit = self._resources[spec.key] = (spec, spec.build())
        return hit[1]

    def agent(self, local: int) -> Agent:
        return self._agents[local]

    @property
    def n_agents(self) -> int:
        return len(self._agents)

    # -- requests ----------------------------------------------------------------------------
    def submit(self, requests: list[CallRequest | GroupRequest]) -> None:
        for req in requests:
            deps = find(req.args, _DEPS, [])
            pending = [d for d in deps if not d.done()]
            if pending:
                self._defer(req, pending)
            else:
                self._start(req, deps)

    def _defer(self, req: CallRequest | GroupRequest, pending: list[Any]) -> None:
        """Start ``req`` once every placeholder it carries is resolved."""
        n = len(req.locals) if isinstance(req, GroupRequest) else 1
        self._n_waiting += n
        left = [len(pending)]

        def one_resolved() -> None:
            left[0] -= 1
            if left[0] == 0:
                self._n_waiting -= n
                self._start(req, pending)

        for dep in pending:
            dep._park(one_resolved)

    def _start(self, req: CallRequest | GroupRequest, deps: list[Any]) -> None:
        args = req.args
        if deps:
            try:
                args = replace(args, _DEPS, _value_of)
            except BaseException as error:
                self._fail_request(req, error)
                return
        if isinstance(req, GroupRequest):
            self._run_group(req, args)
        else:
            agent = self._agents[req.local]
            sink = _Single(self, req, agent.id)
            self._n_started += 1
            self._run_one(agent, req.target, args, sink, 0)

    def _run_group(self, req: GroupRequest, args: tuple[Any, ...], first: int = 0,
                   seg: _Segment | None = None) -> None:
        """Start the calls of slots ``first …`` of ``req``, :data:`SLICE` of them now and the
        rest in later loop ticks: answers that came back meanwhile are handled (and freed)
        between slices, and the worker keeps reporting, so a worker starting five million
        calls neither holds five million suspended calls at once nor goes silent."""
        if self._closed:
            return
        if seg is None:
            seg = _Segment(self, req)
        agents = self._agents
        target = req.target
        last = min(first + SLICE, len(req.locals))
        self._n_started += last - first
        locals_ = req.locals[first:last]
        if req.each is not None:
            for slot, local, extra in zip(range(first, last), locals_, req.each[first:last],
                                          strict=True):
                self._run_one(agents[local], target, (*args, extra), seg, slot)
        else:
            for slot, local in zip(range(first, last), locals_, strict=True):
                self._run_one(agents[local], target, args, seg, slot)
        if last < len(req.locals):
            self._loop.call_soon(self._run_group, req, args, last, seg)

    def _run_one(self, agent: Agent, target: Target, args: tuple[Any, ...], sink: Any,
                 slot: int) -> None:
        try:
            if isinstance(target, str):
                out = getattr(agent, target)(*args)
            else:
                out = target(agent, *args)
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # SystemExit too: an agent's failure, not the run's end
            sink._failed(slot, error)
            return
        if type(out) is types.CoroutineType:
            Call(out, sink, slot, self._loop, agent.id).step()
        elif inspect.isawaitable(out):
            Call(_await(out), sink, slot, self._loop, agent.id).step()
        else:
            sink._complete(slot, out)

    def _fail_request(self, req: CallRequest | GroupRequest, error: BaseException) -> None:
        if isinstance(req, GroupRequest):
            n = len(req.locals)
            self._n_started += n  # counted as started so that in_flight stays >= 0
            self._n_failed += n
            self._push(GroupChunk(req.batch_id, req.segment, [], [], list(range(n)), [error] * n))
        else:
            self._n_started += 1
            self._n_failed += 1
            self._push(CallDone(req.call_id, None, error))

    # -- outcomes ----------------------------------------------------------------------------
    def _push(self, update: Update) -> None:
        self._updates.append(update)
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        updates, self._updates = self._updates, []
        dirty, self._dirty = self._dirty, []
        for seg in dirty:
            updates.append(seg.take())
        if updates:
            self._emit(self.index, updates)

    def statistics(self) -> WorkerStats:
        pid, cpu_s, now, rss = _process_sample()
        return WorkerStats(self.index, len(self._agents), self._n_started, self._n_done,
                           self._n_failed, self._n_waiting,
                           tuple(obj.statistics() for _, obj in self._resources.values()
                                 if callable(getattr(obj, "statistics", None))),
                           pid=pid, cpu_s=cpu_s, measured_at=now, rss_bytes=rss)

    async def aclose(self) -> None:
        """Release per-worker resources (those with an ``aclose`` or ``close`` method)."""
        self._closed = True  # slices of group requests not started yet never start
        # Calls waiting on I/O end first, while the clients they use are still open (closed
        # first, a call's retry would open a new one) and the loop still runs.
        end_calls(lambda call: getattr(call.sink, "worker", None) is self)
        resources, self._resources = self._resources, {}
        for _spec, obj in resources.values():
            closer = getattr(obj, "aclose", None)
            if closer is not None:
                await closer()
            elif callable(getattr(obj, "close", None)):
                obj.close()
        # Agents stay: calls still in flight may finish later and report (the runtime ignores
        # them); their sinks look the agents up.


async def _await(awaitable: Any) -> Any:
    return await awaitable
