"""The central runtime: creates agents in bulk, routes calls in batches, resolves placeholders."""

from __future__ import annotations

import asyncio
import bisect
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from ._agent import Agent
from ._backend import Backend, Request, make_backend
from ._columnar import PackedReplies, consecutive
from ._driver import track_tasks
from ._errors import CallTimeout, SimulationClosed
from ._gc import tune_gc
from ._handle import AgentGroup, AgentHandle
from ._placeholder import FailureLedger, Placeholder, PlaceholderSet, UnobservedFailureWarning
from ._walk import find, replace
from ._worker import (
    CallDone,
    CallRequest,
    GroupChunk,
    GroupRequest,
    RemoteRef,
    Update,
    WorkerGone,
    WorkerStats,
)

R = TypeVar("R")
#: Agents a worker is asked to create per request (progress is reported between them).
CREATE_CHUNK = 100_000
_PLACEHOLDERS = (Placeholder, PlaceholderSet)
Positions = range | np.ndarray


@dataclass(frozen=True, slots=True)
class SimulationStats:
    """A snapshot of the whole simulation, for progress displays and the studio."""

    backend: str
    state: str
    agents: int
    workers: tuple[WorkerStats, ...]
    pending_calls: int
    pending_groups: int
    unobserved_failures: int


def _columns(profiles: Any, n: int) -> dict[str, Sequence[Any]] | None:
    """Normalise ``profiles`` (mapping of columns or an Arrow table) to columns of length n."""
    if profiles is None:
        return None
    if hasattr(profiles, "to_pydict") and hasattr(profiles, "num_rows"):
        cols: Mapping[str, Sequence[Any]] = {
            name: profiles.column(name).to_pylist() for name in profiles.column_names
        }
    elif isinstance(profiles, Mapping):
        cols = profiles
    else:
        raise TypeError(f"profiles must be a mapping of columns or an Arrow table, "
                        f"got {type(profiles).__name__}")
    out: dict[str, Sequence[Any]] = {}
    for key, col in cols.items():
        if len(col) != n:
            raise ValueError(f"profile column {key!r} has {len(col)} values, expected {n}")
        out[str(key)] = col
    return out


def _take(columns: dict[str, Sequence[Any]] | None, rows: np.ndarray
          ) -> dict[str, list[Any]] | None:
    if columns is None:
        return None
    return {k: (c[rows].tolist() if isinstance(c, np.ndarray) else [c[int(i)] for i in rows])
            for k, c in columns.items()}


def _slice(columns: dict[str, Sequence[Any]] | None, a: int, b: int) -> dict[str, list[Any]] | None:
    if columns is None:
        return None
    return {k: (c[a:b].tolist() if isinstance(c, np.ndarray) else list(c[a:b]))
            for k, c in columns.items()}


class Simulation:
    """Owns the workers and every agent in them; the central script's entry point.

    >>> async def main():
    ...     async with Simulation(workers=2) as sim:
    ...         group = await sim.create(MyAgent, 10_000)
    ...         answers = await group.broadcast(Msg("moderator", "hi"))
    """

    def __init__(self, *, workers: int = 1, backend: str | Backend = "local",
                 **backend_options: Any) -> None:
        if "seed" in backend_options:  # it was stored and never read: nothing here is random
            raise TypeError("Simulation() takes no seed: it draws nothing at random; derive "
                            "each use's seed from the run's with derive_seed(seed, ...) (a "
                            "scenario has run.seed and run.rng(name))")
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self._n_workers = workers
        self._backend = make_backend(backend, **backend_options)
        self._state = "new"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ledger = FailureLedger()
        self._outbox: dict[int, list[Request]] = {}
        self._flush_scheduled = False
        self._next_call = 0
        self._calls: dict[int, Placeholder[Any]] = {}
        # batch id → (set, member positions of each segment, worker of each segment)
        self._batches: dict[int, tuple[PlaceholderSet[Any], list[Positions], list[int]]] = {}
        self._timers: dict[int, asyncio.TimerHandle] = {}
        # Agent placement: sorted blocks of consecutive ids living in one worker.
        self._next_id = 0
        # Placement of every agent id: its worker and its index there (two int arrays, not an
        # object per agent), plus the class of each create() call's span of ids.
        self._worker_of = np.empty(0, dtype=np.int32)
        self._local_of = np.empty(0, dtype=np.int64)
        self._span_start: list[int] = []
        self._span_cls: list[type] = []
        self._per_worker = [0] * workers
        self._restore_gc: Callable[[], None] | None = None
        self._restore_tasks: Callable[[], None] | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def backend(self) -> Backend:
        return self._backend

    @property
    def n_agents(self) -> int:
        return self._next_id

    async def start(self) -> Simulation:
        if self._state != "new":
            raise RuntimeError(f"cannot start a simulation that is {self._state}")
        self._loop = asyncio.get_running_loop()
        self._restore_gc = tune_gc()
        self._restore_tasks = track_tasks(self._loop)
        await self._backend.start(self._n_workers, self._deliver)
        self._state = "running"
        return self

    async def stop(self) -> None:
        """Stop every worker. Pending calls fail with ``SimulationClosed``; failures nobody
        consumed are reported as an :class:`UnobservedFailureWarning`. Idempotent."""
        if self._state in ("new", "stopped"):
            self._state = "stopped"
            return
        self._state = "stopped"
        unobserved = self._ledger.unobserved()
        closed = SimulationClosed("the simulation stopped before this call finished")
        calls, self._calls = self._calls, {}
        for p in calls.values():
            p._ledger = None
            p.set_exception(closed)
        batches, self._batches = self._batches, {}
        for pset, _, _ in batches.values():
            pset._ledger = None
            pset._fail_pending(closed)
        for t in self._timers.values():
            t.cancel()
        self._timers.clear()
        await self._backend.stop()
        if self._restore_gc is not None:
            self._restore_gc()
            self._restore_gc = None
        if self._restore_tasks is not None:
            self._restore_tasks()
            self._restore_tasks = None
        if unobserved:
            origin, err = unobserved[0]
            warnings.warn(
                UnobservedFailureWarning(
                    f"{len(unobserved)} agent call(s) failed and nobody consumed the error; "
                    f"first: {origin}: {type(err).__name__}: {err}"
                ),
                stacklevel=2,
            )

    async def __aenter__(self) -> Simulation:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def run(self, main: Callable[[Simulation], Awaitable[R]]) -> R:
        """Synchronous convenience: start, ``await main(self)``, stop, in a new event loop."""

        async def runner() -> R:
            async with self:
                return await main(self)

        return asyncio.run(runner())

    def statistics(self) -> SimulationStats:
        return SimulationStats(
            backend=self._backend.name,
            state=self._state,
            agents=self._next_id,
            workers=tuple(self._backend.statistics()),
            pending_calls=len(self._calls),
            pending_groups=len(self._batches),
            unobserved_failures=len(self._ledger.unobserved()),
        )

    def _require_running(self) -> asyncio.AbstractEventLoop:
        if self._state != "running" or self._loop is None:
            raise RuntimeError(f"the simulation is {self._state}; use `async with Simulation(...)`"
                               " or await sim.start() first")
        return self._loop

    # -- agents ------------------------------------------------------------------------------
    async def create(
        self,
        cls: type[Agent],
        n: int,
        *,
        profiles: Any = None,
        init: Mapping[str, Any] | None = None,
        name: str | None = None,
        colocate: Sequence[Any] | np.ndarray | None = None,
        progress: Callable[[int, int], object] | None = None,
    ) -> AgentGroup:
        """Create ``n`` agents of ``cls`` spread evenly over the workers.

        ``profiles`` gives per-agent attributes as columns (a mapping of equal-length
        sequences, or an Arrow table); each agent sees its row as ``agent.profile``.
        ``init`` holds keyword arguments for ``cls.__init__``; wrap per-worker resources in
        :class:`PerWorker`. ``colocate`` gives a label per agent: agents with the same label
        share a worker, so a group's traffic stays inside one process (groups are spread to
        balance the load). Workers build their shares at once, :data:`CREATE_CHUNK` agents
        per request; ``progress(done, n)`` is called after each.
        """
        self._require_running()
        if not (isinstance(cls, type) and issubclass(cls, Agent)):
            raise TypeError(f"create() needs an Agent subclass, got {cls!r}")
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        columns = _columns(profiles, n)
        init = dict(init or {})
        first_id = self._next_id
        member_worker = self._place(n, colocate)
        local_of = np.empty(n, dtype=np.int64)
        done = [0]

        async def build(w: int, members: np.ndarray) -> None:
            for a in range(0, members.size, CREATE_CHUNK):
                part = members[a:a + CREATE_CHUNK]
                lo, hi = int(part[0]), int(part[-1])
                if hi - lo + 1 == part.size:  # contiguous: ranges travel and slice cheaply
                    ids: Sequence[int] = range(first_id + lo, first_id + hi + 1)
                    cols = _slice(columns, lo, hi + 1)
                else:
                    ids = (part + first_id).tolist()
                    cols = _take(columns, part)
                local = await self._backend.create(w, cls, ids, cols, init)
                local_of[part] = np.arange(local, local + part.size)
                self._per_worker[w] += int(part.size)
                done[0] += int(part.size)
                if progress is not None:
                    progress(done[0], n)

        # Every worker builds its share at once (remote workers in parallel).
        await asyncio.gather(*(build(w, members) for w in range(self._n_workers)
                               if (members := np.flatnonzero(member_worker == w)).size))
        self._worker_of = np.concatenate([self._worker_of, member_worker.astype(np.int32)])
        self._local_of = np.concatenate([self._local_of, local_of])
        self._span_start.append(first_id)
        self._span_cls.append(cls)
        self._next_id += n
        ids_arr = np.arange(first_id, first_id + n, dtype=np.int64)
        return AgentGroup(self, cls, ids_arr, name or cls.__name__)

    def _place(self, n: int, colocate: Sequence[Any] | np.ndarray | None) -> np.ndarray:
        """The worker of each of ``n`` new agents."""
        order = sorted(range(self._n_workers), key=lambda w: (self._per_worker[w], w))
        if colocate is None:
            # Contiguous blocks; the extras of an uneven split go to the least-loaded workers.
            base, extra = divmod(n, self._n_workers)
            sizes = [0] * self._n_workers
            for rank, w in enumerate(order):
                sizes[w] = base + (1 if rank < extra else 0)
            return np.repeat(np.arange(self._n_workers), sizes)
        labels = np.asarray(colocate)
        if labels.shape != (n,):
            got = labels.shape[0] if labels.ndim else 0
            raise ValueError(f"colocate needs one label per agent: got {got} for {n} agents")
        _, group_of, counts = np.unique(labels, return_inverse=True, return_counts=True)
        load = np.array(self._per_worker, dtype=np.int64)
        group_worker = np.empty(len(counts), dtype=np.int64)
        for g in np.argsort(-counts, kind="stable"):  # largest group to the lightest worker
            w = int(np.argmin(load))
            group_worker[g] = w
            load[w] += counts[g]
        return group_worker[group_of]

    def handle(self, agent_id: int) -> AgentHandle:
        """A handle to the agent with global id ``agent_id``."""
        if not 0 <= agent_id < self._next_id:
            raise IndexError(f"no agent with id {agent_id} (ids are 0..{self._next_id - 1})")
        span = bisect.bisect_right(self._span_start, agent_id) - 1
        return AgentHandle(self, agent_id, int(self._worker_of[agent_id]),
                           int(self._local_of[agent_id]), self._span_cls[span])

    def _partition(self, ids: np.ndarray) -> list[tuple[int, list[int] | range, Positions]]:
        """Split member ids into ``(worker, local indices, member positions)`` parts."""
        if len(ids) == 0:
            return []
        workers = self._worker_of[ids]
        locals_ = self._local_of[ids]
        parts: list[tuple[int, list[int] | range, Positions]] = []
        for w in np.unique(workers):
            pos = np.flatnonzero(workers == w)
            loc = locals_[pos]
            if consecutive(pos) and consecutive(loc):
                parts.append((int(w), range(int(loc[0]), int(loc[-1]) + 1),
                              range(int(pos[0]), int(pos[-1]) + 1)))
            else:
                parts.append((int(w), loc.tolist(), pos))
        return parts

    # -- calls -------------------------------------------------------------------------------
    def _enqueue(self, worker: int, req: Request) -> None:
        box = self._outbox.get(worker)
        if box is None:
            self._outbox[worker] = [req]
        else:
            box.append(req)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._require_running().call_soon(self._flush)

    def _flush(self) -> None:
        """Send every request of this tick, one batch per worker."""
        self._flush_scheduled = False
        outbox, self._outbox = self._outbox, {}
        if self._state != "running":
            return
        remote = self._backend.remote
        for worker, requests in outbox.items():
            if remote:
                requests = [r for r in requests if self._externalize(worker, r)]
            if requests:
                self._send(worker, requests)

    def _send(self, worker: int, requests: list[Request]) -> None:
        """Hand ``requests`` to ``worker``'s backend; a request that cannot go (an argument
        that does not pickle for a remote worker) fails its calls instead of leaving them
        waiting for ever, and the others go."""
        try:
            self._backend.submit(worker, requests)
        except Exception as e:
            if len(requests) == 1:
                self._fail_request(worker, requests[0], e)
                return
            for req in requests:  # one at a time: only those that cannot go fail
                try:
                    self._backend.submit(worker, [req])
                except Exception as e:
                    self._fail_request(worker, req, e)

    def _externalize(self, worker: int, req: Request) -> bool:
        """Make ``req`` fit to cross a process boundary; False if it must wait here first.

        Resolved placeholders travel as their values; pending agent-call placeholders as
        RemoteRefs that the receiving worker fetches from the owning worker directly; other
        pending ones (group results) are awaited here, then the request is sent.
        """
        deps = find(req.args, _PLACEHOLDERS, [])
        if not deps:
            return True
        local = [d for d in deps if not d.done() and not (type(d) is Placeholder and d._source)]
        if local:
            left = [len(local)]

            def resolved() -> None:
                left[0] -= 1
                if left[0] == 0:
                    self._enqueue(worker, req)

            for d in local:
                d._park(resolved)
            return False
        failed = next((d for d in deps if d.done() and d._outcome()[1] is not None), None)
        if failed is not None:
            self._fail_request(worker, req, failed._outcome()[1])
            return False

        def external(d: Any) -> Any:
            return d._outcome()[0] if d.done() else RemoteRef(*d._source)

        req.args = replace(req.args, _PLACEHOLDERS, external)
        req.refs = True
        return True

    def _fail_request(self, worker: int, req: Request, error: BaseException) -> None:
        if isinstance(req, CallRequest):
            self._deliver(worker, [CallDone(req.call_id, None, error)])
        else:
            n = len(req.locals)
            self._deliver(worker, [GroupChunk(req.batch_id, req.segment, [], [],
                                              list(range(n)), [error] * n)])

    def _submit_call(self, handle: AgentHandle, target: Any, args: tuple[Any, ...],
                     timeout: float | None) -> Placeholder[Any]:
        loop = self._require_running()
        call_id = self._next_call
        self._next_call += 1
        name = target if isinstance(target, str) else getattr(target, "__name__", "call")
        p: Placeholder[Any] = Placeholder(loop, f"agent {handle.id} {name}()", self._ledger)
        p._source = (handle.worker, call_id)
        self._calls[call_id] = p
        self._enqueue(handle.worker, CallRequest(call_id, handle._local, target, args))
        if timeout is not None:
            self._timers[call_id] = loop.call_later(timeout, self._expire, call_id, timeout)
        return p

    def _expire(self, call_id: int, timeout: float) -> None:
        self._timers.pop(call_id, None)
        p = self._calls.pop(call_id, None)
        if p is not None:
            p.set_exception(CallTimeout(f"{p._origin} did not finish within {timeout} s"))

    def _submit_group(self, group: AgentGroup, target: Any, args: tuple[Any, ...],
                      each: Sequence[Any] | None = None) -> PlaceholderSet[Any]:
        loop = self._require_running()
        name = target if isinstance(target, str) else getattr(target, "__name__", "call")
        pset: PlaceholderSet[Any] = PlaceholderSet(loop, len(group), f"{group.name}.{name}()",
                                                   self._ledger)
        parts = group._partition()
        if not parts:
            pset._fire()
            return pset
        batch_id = self._next_call
        self._next_call += 1
        self._batches[batch_id] = (pset, [positions for _, _, positions in parts],
                                   [worker for worker, _, _ in parts])
        for segment, (worker, locals_, positions) in enumerate(parts):
            mine = None
            if each is not None:
                mine = (list(each[positions.start:positions.stop]) if type(positions) is range
                        else [each[int(i)] for i in positions])
            self._enqueue(worker, GroupRequest(batch_id, segment, locals_, target, args,
                                               each=mine))
        return pset

    def _held_by(self, worker: int) -> str:
        """The agent ids on ``worker`` as ranges: ``0-499, 1000-1499``."""
        ids = np.flatnonzero(self._worker_of == worker)
        if ids.size == 0:
            return "none"
        breaks = np.flatnonzero(np.diff(ids) != 1)
        starts = np.concatenate([[ids[0]], ids[breaks + 1]])
        ends = np.concatenate([ids[breaks], [ids[-1]]])
        runs = [f"{a}-{b}" if a != b else f"{a}" for a, b in zip(starts, ends, strict=True)]
        more = f" (+{len(runs) - 5} more ranges)" if len(runs) > 5 else ""
        return ", ".join(runs[:5]) + more

    def _worker_gone(self, worker: int, error: BaseException) -> None:
        """Fail every call pending on a dead worker, naming the agents it held."""
        from ._errors import WorkerLost

        lost = WorkerLost(f"{error}; it held agents {self._held_by(worker)}")
        for call_id, p in list(self._calls.items()):
            if p._source is not None and p._source[0] == worker:
                del self._calls[call_id]
                p.set_exception(lost)
        for batch_id, (pset, positions, workers) in list(self._batches.items()):
            for seg, w in enumerate(workers):
                if w == worker:
                    pset._fail_pending(lost, positions[seg])
                    workers[seg] = -1  # given up: a chunk of it arriving late is dropped
            if pset.done():
                del self._batches[batch_id]

    def _deliver(self, worker: int, updates: list[Update]) -> None:
        """Apply a batch of outcomes from ``worker`` (called by the backend)."""
        for u in updates:
            if type(u) is WorkerGone:
                self._worker_gone(worker, u.error)
                continue
            if type(u) is GroupChunk:
                entry = self._batches.get(u.batch_id)
                if entry is None:
                    continue  # stopped meanwhile
                pset, positions, workers = entry
                if workers[u.segment] < 0:
                    continue  # its worker was lost meanwhile: those members failed already
                seg = positions[u.segment]
                if type(u.values) is PackedReplies:  # kept as columns (see PlaceholderSet)
                    at = np.asarray(u.slots, dtype=np.int64)
                    pset._fill(at + seg.start if type(seg) is range else seg[at], u.values)
                elif u.slots:
                    if type(seg) is range:
                        start = seg.start
                        pset._fill([start + s for s in u.slots], u.values)
                    else:
                        pset._fill(seg[u.slots].tolist(), u.values)
                if u.failed_slots:
                    pset._fail([int(seg[s]) for s in u.failed_slots], u.errors)
                if pset.done():
                    del self._batches[u.batch_id]
            elif type(u) is CallDone:
                p = self._calls.pop(u.call_id, None)
                if p is None:
                    continue  # timed out or stopped meanwhile
                timer = self._timers.pop(u.call_id, None)
                if timer is not None:
                    timer.cancel()
                if u.error is not None:
                    p.set_exception(u.error)
                else:
                    p.set_result(u.value)
