"""The environment service: many agents' operations on one environment, queued per key.

Operations on the same key are applied strictly in arrival order; operations on different
keys proceed concurrently, at most ``max_concurrency`` at a time. Most operations are
synchronous (a query, a ``set``, an ``incr``) and complete the moment they are admitted; the
queues matter for read-modify-writes whose function is ``async`` (it asks a model, waits for
another agent): such an operation holds its key, and a slot, until it finishes, and later
operations on that key wait behind it instead of overwriting its result.

Nothing here needs ``asyncio.current_task()``: callers wait on populace placeholders and
signals, which the worker's coroutine driver resumes directly, so agents use the service as
cheaply as ordinary tasks do.

An :class:`EnvClient` (one per worker: ``PerWorker(EnvClient, service)``) collects the
operations its agents issue in one loop tick and sends them as one batch, which is what
crosses the wire when the service lives elsewhere. Ops and replies are plain picklable
records, so a Ray actor can wrap a service by exposing :meth:`EnvService.apply`.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from populace.core import Placeholder, Signal, TaskOwner

from ._env import Env, EnvEvent, EnvStats, EventKind
from ._errors import ServiceClosed, UnknownKeyError
from ._listeners import Subscription
from ._many import KeyList, as_keys, per_key
from ._ops import KEYLESS, MANY, EnvVerbs, Op, Reply, SubmitVerbs, apply_now


@dataclass(frozen=True, slots=True)
class ServiceStats:
    """A snapshot of an :class:`EnvService`."""

    max_concurrency: int
    ops: int
    batches: int
    active: int
    queued: int
    peak_queued: int
    waiting_keys: int
    env: EnvStats


@dataclass(frozen=True, slots=True)
class ClientStats:
    """A snapshot of an :class:`EnvClient`: how well its agents' operations are batched."""

    batches: int
    ops: int
    largest_batch: int
    pending: int
    #: Reads answered by an identical read of the same batch instead of crossing the wire.
    coalesced: int = 0
    #: One-key ops that travelled inside a many-key op (a run of like ops merged).
    merged: int = 0


class _Sink:
    """Collects the outcomes of one submitted batch; resolves its placeholder at the end."""

    __slots__ = ("left", "placeholder", "reply")

    def __init__(self, reply: Reply, placeholder: Placeholder[Reply], left: int) -> None:
        self.reply = reply
        self.placeholder = placeholder
        self.left = left

    def done(self, i: int, value: Any) -> None:
        self.reply.values[i] = value
        self.left -= 1
        if not self.left:
            self.placeholder.set_result(self.reply)

    def failed(self, i: int, error: BaseException) -> None:
        self.reply.errors[i] = error
        self.left -= 1
        if not self.left:
            self.placeholder.set_result(self.reply)


class _Part:
    """Collects the per-key outcomes of one many-key op split by key (some of its keys
    were held); settles the op in its batch once every key is done."""

    __slots__ = ("errors", "index", "kind", "left", "sink", "values")

    def __init__(self, kind: str, n: int, sink: _Sink, index: int) -> None:
        self.kind = kind
        self.values: list[Any] = [None] * n
        self.errors: dict[int, BaseException] = {}
        self.sink = sink
        self.index = index
        self.left = n + 1  # +1: not done before every key is admitted

    def done(self, j: int, value: Any) -> None:
        self.values[j] = value
        self.admitted()

    def failed(self, j: int, error: BaseException) -> None:
        self.errors[j] = error
        self.admitted()

    def admitted(self) -> None:
        self.left -= 1
        if self.left:
            return
        if self.kind == "each":  # one-key ops travelling together: each stands alone
            self.sink.done(self.index, (self.values, self.errors))
        elif self.errors:
            self.sink.failed(self.index, self.errors[min(self.errors)])
        elif self.kind == "incr_many":
            self.sink.done(self.index, np.asarray(self.values))
        else:
            self.sink.done(self.index, self.values if self.kind == "query_many" else None)


class _Plain:
    """``update_many``'s function for one key: a plain function, never holding its key."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def __call__(self, old: Any) -> Any:
        new = self.fn(old)
        if hasattr(new, "__await__"):
            if inspect.iscoroutine(new):
                new.close()
            raise TypeError("update_many() takes a plain function; this one returned an "
                            "awaitable: use update(key, fn=...), one key at a time")
        return new


#: The one-key op each many-key kind is made of.
_ONE = {"query_many": "query", "incr_many": "incr", "set_many": "set",
        "update_many": "update"}


def _width(op: Op) -> int:
    """How many key operations ``op`` stands for (a many-key op: one per key or position)."""
    if op.kind not in MANY:
        return 1
    keys, _, at = op.arg
    if at is None:
        return len(keys)
    return sum(map(len, at)) if op.kind == "each_at" else len(at)


class _Entry:
    """An op waiting behind its key or for a free slot."""

    __slots__ = ("env", "index", "op", "sink")

    def __init__(self, env: Env, op: Op, sink: _Sink | _Part, index: int) -> None:
        self.env = env
        self.op = op
        self.sink = sink
        self.index = index


QueueKey = tuple[Env, str | None]


class EnvService(SubmitVerbs):
    """Serves one environment tree to many agents, with per-key ordering.

    Keys are queued where they live: ops from two group environments on a key of their
    common parent share one queue. The service owns the very ``Env`` object it was given
    (this is what :func:`serve` returns on the local backend), so direct use of that object
    is seen by the agents; still, write through the service rather than to :attr:`env`
    directly: a direct write can land between the read and the write of an ``async`` update
    holding the key (reads and listeners on :attr:`env` are fine), and only code written
    against the service also runs on a remote backend.

    To serve from another process, wrap it in an actor exposing ``apply`` (ops and
    :class:`Reply` pickle; ``submit`` needs the caller's loop and stays local).

    >>> async def demo():
    ...     svc = EnvService(Env("global"), max_concurrency=8)
    ...     await svc.register("visits", 0)
    ...     await svc.incr("visits")
    ...     return await svc.apply([Op.incr("visits"), Op.query("visits")])
    ... # -> [2, 2]
    """

    def __init__(self, env: Env | None = None, *, max_concurrency: int = 64) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self._env = env if env is not None else Env("global")
        if self._env._served is not None:
            raise self._env._refuse("serve")
        self._max = max_concurrency
        self._loop: asyncio.AbstractEventLoop | None = None
        self._envs: dict[str | None, Env] = {None: self._env}
        # A key has a queue while an op holds it or ops wait for it; _ready lists the keys
        # whose queue waits only for a free slot, oldest first.
        self._queues: dict[QueueKey, deque[_Entry]] = {}
        self._ready: deque[QueueKey] = deque()
        self._active = 0
        self._queued = 0
        self._peak_queued = 0
        self._n_ops = 0
        self._n_batches = 0
        # Async updates in progress; a failure of the service's own bookkeeping in one of
        # them breaks the service (_broke) rather than being lost with the task.
        self._tasks = TaskOwner("the environment service", on_error=self._broke)
        self._closed = False

    @property
    def env(self) -> Env:
        """The environment served (listeners are set up on it directly: they run here)."""
        return self._env

    @property
    def max_concurrency(self) -> int:
        return self._max

    def __repr__(self) -> str:
        return (f"<EnvService {self._env.path!r} max_concurrency={self._max} "
                f"active={self._active} queued={self._queued}>")

    # -- entry points ------------------------------------------------------------------------
    def submit(self, ops: Sequence[Op]) -> Placeholder[Reply]:
        """Admit ``ops`` in order; a placeholder of their :class:`Reply` (maybe done already).

        This is the batched path that clients and transports use; ``await`` the result or
        ``add_done_callback`` on it.
        """
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        if self._closed:
            raise self._refusal()
        n = len(ops)
        reply = Reply([None] * n)
        placeholder: Placeholder[Reply] = Placeholder(loop, "environment batch")
        sink = _Sink(reply, placeholder, n + 1)  # +1: not done before every op is admitted
        self._n_ops += n  # a many-key op adds its other keys in _admit
        self._n_batches += 1
        for i, op in enumerate(ops):
            self._admit(op, sink, i)
        sink.left -= 1
        if not sink.left:
            placeholder.set_result(reply)
        return placeholder

    async def _one(self, op: Op) -> Any:
        if not self._queues and self._active < self._max and op.kind != "update":
            # Nothing waits anywhere: a synchronous op is admitted and done at once.
            if self._closed:
                raise self._refusal()
            env = self._envs.get(op.env) or self._find(op.env)
            self._n_ops += _width(op)
            return apply_now(env, op)
        reply = await self.submit([op])
        return reply.result(0)

    # -- scheduling --------------------------------------------------------------------------
    def _find(self, path: str | None) -> Env:
        env = self._envs.get(path)
        if env is None:
            assert path is not None
            env = self._envs[path] = self._env.find(path)
        return env

    def _admit(self, op: Op, sink: _Sink, i: int) -> None:
        many = op.kind in MANY
        if many:
            self._n_ops += _width(op) - 1
        try:
            env = self._envs.get(op.env) or self._find(op.env)
        except LookupError as error:
            sink.failed(i, error)
            return
        queues = self._queues
        if not queues and self._active < self._max and op.kind != "update":
            try:  # nothing waits anywhere: a synchronous op is done at once
                value = apply_now(env, op)
            except Exception as error:
                sink.failed(i, error)
            else:
                sink.done(i, value)
            return
        if many and op.arg[2] is None:
            self._admit_many(env, op, sink, i)
            return
        if op.kind in KEYLESS:
            qkey: QueueKey = (env, None)
        elif op.kind == "register":
            qkey = (env, op.key)
        else:
            qkey = (env._home(op.key) or env, op.key)
        if queues:
            queue = queues.get(qkey)
            if queue is not None:  # the key is held or waiting: line up behind
                queue.append(_Entry(env, op, sink, i))
                self._count_queued(1)
                return
        if self._active >= self._max:
            queues[qkey] = deque((_Entry(env, op, sink, i),))
            self._ready.append(qkey)
            self._count_queued(1)
            return
        self._execute(qkey, env, op, sink, i)

    def _admit_many(self, env: Env, op: Op, sink: _Sink, i: int) -> None:
        """A many-key op while some keys are held: each key goes at once unless ops wait
        on it, then it lines up behind them (per-key order, as for one-key ops)."""
        kind = op.kind
        keys, x, _ = op.arg
        keys = as_keys(keys)
        n = len(keys)
        try:
            homes = [env._home(k) for k in keys]
            if kind == "each":
                one, args, shared = op.key, x, None
            else:
                one = _ONE[kind]
                shared = _Plain(x) if kind == "update_many" else x
                args = per_key(x, n, "values") if kind in ("incr_many", "set_many") else None
        except (TypeError, ValueError) as error:
            sink.failed(i, error)
            return
        if kind != "each" and None in homes:  # checked first: an unknown key changes nothing
            sink.failed(i, UnknownKeyError(keys[homes.index(None)], env.path))
            return
        part = _Part(kind, n, sink, i)
        queues = self._queues
        for j, key in enumerate(keys):
            home = homes[j]
            if home is None:
                part.failed(j, UnknownKeyError(key, env.path))
                continue
            single = Op(one, key, shared if args is None else args[j])  # type: ignore[arg-type]
            queue = queues.get((home, key))
            if queue is not None:
                queue.append(_Entry(env, single, part, j))
                self._count_queued(1)
                continue
            try:
                value = apply_now(env, single)
            except Exception as error:
                part.failed(j, error)
            else:
                part.done(j, value)
        part.admitted()

    def _count_queued(self, n: int) -> None:
        self._queued += n
        if self._queued > self._peak_queued:
            self._peak_queued = self._queued

    def _execute(self, qkey: QueueKey, env: Env, op: Op, sink: _Sink | _Part, i: int
                 ) -> bool:
        """Run ``op``; False when an async update now holds ``qkey`` (and a slot)."""
        if op.kind != "update":
            try:
                value = apply_now(env, op)
            except Exception as error:
                sink.failed(i, error)
            else:
                sink.done(i, value)
            return True
        try:
            home = env._home(op.key)
            if home is None:
                raise UnknownKeyError(op.key, env.path)
            new = op.arg(home._data[op.key])
        except Exception as error:
            sink.failed(i, error)
            return True
        if not hasattr(new, "__await__"):
            try:
                value = env.update(op.key, new)
            except Exception as error:
                sink.failed(i, error)
            else:
                sink.done(i, value)
            return True
        self._active += 1
        if qkey not in self._queues:
            self._queues[qkey] = deque()
        coro = new if inspect.iscoroutine(new) else _finish(new)
        self._tasks.start(coro, name=f"update {op.key!r}",
                          then=lambda task: self._release(qkey, env, op.key, sink, i, task))
        return False

    def _release(self, qkey: QueueKey, env: Env, key: str, sink: _Sink | _Part, i: int,
                 task: asyncio.Task[Any]) -> None:
        """An async read-modify-write ended (done, failed, or cancelled, even before it
        ran): settle its op, then let the next op on its key go."""
        try:
            if task.cancelled():
                sink.failed(i, self._refusal() if self._tasks.failure is not None else
                            ServiceClosed("the environment service closed during this update"))
            elif (error := task.exception()) is not None:
                sink.failed(i, error)  # whatever the function raised is the op's error
            else:
                try:
                    value = env.update(key, task.result())
                except Exception as e:
                    sink.failed(i, e)
                else:
                    sink.done(i, value)
        finally:
            self._active -= 1
            queue = self._queues.get(qkey)
            if queue:
                self._ready.append(qkey)
            elif queue is not None:
                del self._queues[qkey]
            if not self._closed:
                self._pump()

    def _pump(self) -> None:
        """Start waiting keys while slots are free, oldest first."""
        ready, queues = self._ready, self._queues
        while ready and self._active < self._max:
            qkey = ready.popleft()
            queue = queues[qkey]
            held = False
            while queue:
                entry = queue.popleft()
                self._queued -= 1
                if not self._execute(qkey, entry.env, entry.op, entry.sink, entry.index):
                    held = True
                    break
            if not held:
                del queues[qkey]

    # -- lifecycle and observation -------------------------------------------------------------
    async def monitor(self, listener: Callable[[EnvEvent], Any], key: str | None = None,
                      prefix: str | None = None,
                      event: EventKind | Iterable[EventKind] | None = None, *,
                      descendants: bool = False, env: str | None = None) -> Subscription:
        """:meth:`Env.monitor` on the served environment (or the one at path ``env``).

        The same call works on a :class:`RemoteEnvService`, where the listener runs in the
        service's process.
        """
        target = self._env if env is None else self._find(env)
        return target.monitor(listener, key, prefix, event, descendants=descendants)

    async def fetch_statistics(self) -> ServiceStats:
        """:meth:`statistics`, awaitable like the remote service's."""
        return self.statistics()

    async def fetch_state(self) -> dict[str, Any]:
        """The served tree's state (:meth:`Env.get_state`), for a checkpoint."""
        return self._env.get_state()

    async def load_state(self, state: dict[str, Any]) -> None:
        """Restore the served tree from :meth:`fetch_state` (listeners are kept)."""
        self._env.set_state(state)

    def statistics(self) -> ServiceStats:
        return ServiceStats(
            max_concurrency=self._max,
            ops=self._n_ops,
            batches=self._n_batches,
            active=self._active,
            queued=self._queued,
            peak_queued=self._peak_queued,
            waiting_keys=len(self._ready),
            env=self._env.statistics(),
        )

    async def aclose(self) -> None:
        """Refuse new ops, cancel async updates in progress, fail the waiting ops."""
        self._closed = True
        await self._tasks.aclose()
        self._fail_queued(lambda: ServiceClosed(
            "the environment service closed before this operation ran"))

    def _fail_queued(self, error: Callable[[], BaseException]) -> None:
        queues, self._queues = self._queues, {}
        self._ready.clear()
        self._queued = 0
        for queue in queues.values():
            for entry in queue:
                entry.sink.failed(entry.index, error())

    def _broke(self, error: BaseException) -> None:
        """The service's own bookkeeping failed (a bug): its queues can no longer be
        trusted, so it fails the ops waiting in them, cancels the updates in progress and
        refuses new ops, each time naming ``error``."""
        self._closed = True
        self._tasks.cancel()
        self._fail_queued(self._refusal)

    def _refusal(self) -> ServiceClosed:
        failure = self._tasks.failure
        if failure is None:
            return ServiceClosed("the environment service is closed")
        refused = ServiceClosed(f"the environment service failed and takes no more "
                                f"operations: {type(failure).__name__}: {failure}")
        refused.__cause__ = failure
        return refused

    async def __aenter__(self) -> EnvService:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _Batch:
    __slots__ = ("ops", "reply", "sent", "signal")

    def __init__(self, signal: Signal) -> None:
        self.ops: list[Op] = []
        self.signal = signal
        self.reply: Reply | None = None
        self.sent = False


class EnvClient(EnvVerbs):
    """The service as seen from one worker: operations of one tick go as one batch.

    Build one per worker and give it to the agents:

    >>> service = EnvService(Env("global"))                            # doctest: +SKIP
    >>> await sim.create(Person, 100_000,
    ...                  init={"env": PerWorker(EnvClient, service)})  # doctest: +SKIP

    ``service`` is anything with the :meth:`EnvService.submit` signature (a local service,
    or a proxy to a remote one).
    """

    def __init__(self, service: EnvService, *, max_batch: int = 1 << 20,
                 merge: bool = True) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self._service = service
        self._max_batch = max_batch
        self._merge = merge
        self._n_merged = 0
        self._batch: _Batch | None = None
        self._n_batches = 0
        self._n_ops = 0
        self._largest = 0
        self._n_coalesced = 0

    @property
    def service(self) -> EnvService:
        return self._service

    async def _one(self, op: Op) -> Any:
        batch = self._batch or self._open()
        i = len(batch.ops)
        batch.ops.append(op)
        if i + 1 >= self._max_batch:
            self._send(batch)
        await batch.signal
        assert batch.reply is not None
        return batch.reply.result(i)

    async def apply(self, ops: Sequence[Op], *, return_exceptions: bool = False) -> list[Any]:
        batch = self._batch or self._open()
        first = len(batch.ops)
        batch.ops.extend(ops)
        if len(batch.ops) >= self._max_batch:
            self._send(batch)
        await batch.signal
        assert batch.reply is not None
        part = Reply(batch.reply.values[first:first + len(ops)],
                     {i - first: e for i, e in batch.reply.errors.items()
                      if first <= i < first + len(ops)})
        return part.results(return_exceptions)

    def _open(self) -> _Batch:
        loop = asyncio.get_running_loop()
        batch = self._batch = _Batch(Signal(loop))
        loop.call_soon(self._send, batch)
        return batch

    def _send(self, batch: _Batch) -> None:
        if self._batch is batch:
            self._batch = None
        if batch.sent:
            return
        batch.sent = True
        n = len(batch.ops)
        self._n_batches += 1
        self._n_ops += n
        self._largest = max(self._largest, n)
        wire, where = _coalesce(batch.ops)
        self._n_coalesced += n - len(wire)
        wire, sizes = _merge(wire) if self._merge else (wire, None)
        if sizes is not None:
            self._n_merged += sum(size for size in sizes if size > 1)
        try:
            placeholder = self._service.submit(wire)
        except Exception as error:
            # One instance per op: the runtime adds a note per failing agent to the error.
            self._deliver(batch, Reply([None] * n, {i: copy.copy(error) for i in range(n)}))
            return
        if placeholder.done():
            self._settled(batch, placeholder, where, sizes)
        else:
            placeholder.add_done_callback(lambda p: self._settled(batch, p, where, sizes))

    def _settled(self, batch: _Batch, placeholder: Placeholder[Reply],
                 where: list[int] | None, sizes: list[int] | None) -> None:
        """Deliver a service's reply; a service whose placeholder failed instead (one of a
        user's own) fails every op of the batch with that error, never hangs its agents."""
        try:
            reply = placeholder.result()
        except Exception as error:
            n = len(batch.ops)
            self._deliver(batch, Reply([None] * n, {i: copy.copy(error) for i in range(n)}))
            return
        if sizes is not None:
            reply = _unmerge(reply, sizes)
        self._deliver(batch, reply, where)

    def _deliver(self, batch: _Batch, reply: Reply, where: list[int] | None = None) -> None:
        if where is not None:  # fan the coalesced reads back out, one error copy per op
            values = reply.values
            errors = reply.errors
            reply = Reply([values[j] for j in where],
                          {i: copy.copy(errors[j]) for i, j in enumerate(where) if j in errors}
                          if errors else {})
        batch.reply = reply
        batch.signal.fire()

    def statistics(self) -> ClientStats:
        pending = len(self._batch.ops) if self._batch is not None else 0
        return ClientStats(self._n_batches, self._n_ops, self._largest, pending,
                           self._n_coalesced, self._n_merged)


async def _finish(pending: Awaitable[Any]) -> Any:
    return await pending


def _coalesce(ops: list[Op]) -> tuple[list[Op], list[int] | None]:
    """The ops to send, and where each op's result is among theirs (None: one each).

    Identical reads with no other operation between them travel once: a worker's agents
    reading the same announcement in one tick cost the service one read. Any other op ends
    the run, since it may change what a later read sees.
    """
    seen: dict[tuple[str, str | None], int] = {}
    wire: list[Op] = []
    where: list[int] = []
    repeated = False
    for op in ops:
        if op.kind == "query":
            name = (op.key, op.env)
            j = seen.get(name)
            if j is None:
                j = seen[name] = len(wire)
                wire.append(op)
            else:
                repeated = True
        else:
            if seen:
                seen = {}
            j = len(wire)
            wire.append(op)
        where.append(j)
    return (wire, where) if repeated else (ops, None)


#: One-key kinds that :func:`_merge` sends as one many-key op when several come in a row.
_MERGED = frozenset(("incr", "query", "set"))


def _merge(ops: list[Op]) -> tuple[list[Op], list[int] | None]:
    """Runs of like one-key ops (``incr``, ``query`` or ``set`` on one environment), and of
    ``incr_many(key, ..., at=)`` on one array key, as one op each, and how many ops each op
    sent stands for (None: nothing merged).

    The service applies such an op in one pass, each key in order after the ops before it
    on that key, and each key's outcome apart: exactly the one-key ops it replaces, at a
    fraction of their cost to pickle and to apply.
    """
    out: list[Op] = []
    sizes: list[int] = []
    n = len(ops)
    i = 0
    while i < n:
        op = ops[i]
        kind = op.kind
        j = i + 1
        if kind in _MERGED:
            env = op.env
            while j < n and ops[j].kind == kind and ops[j].env == env:
                j += 1
        elif kind == "incr_many" and op.arg[2] is not None:  # on an array key, at=
            env, key = op.env, op.key
            while (j < n and ops[j].kind == kind and ops[j].key == key
                   and ops[j].env == env and ops[j].arg[2] is not None):
                j += 1
            if j - i > 1:
                run = ops[i:j]
                out.append(Op("each_at", key, (key, [o.arg[1] for o in run],
                                               [o.arg[2] for o in run]), env))
                sizes.append(j - i)
                i = j
                continue
        if j - i > 1:
            run = ops[i:j]
            args = None if kind == "query" else [o.arg for o in run]
            out.append(Op("each", kind, (KeyList([o.key for o in run]), args, None), op.env))
            sizes.append(j - i)
        else:
            out.append(op)
            sizes.append(1)
        i = j
    return (out, sizes) if len(out) < n else (ops, None)


def _unmerge(reply: Reply, sizes: list[int]) -> Reply:
    """The reply of the ops :func:`_merge` merged, one outcome per op again."""
    values: list[Any] = []
    errors: dict[int, BaseException] = {}
    for j, size in enumerate(sizes):
        error = reply.errors.get(j)
        base = len(values)
        if size == 1:
            values.append(reply.values[j])
            if error is not None:
                errors[base] = error
        elif error is not None:  # the whole op failed (its environment, the service)
            values.extend([None] * size)
            errors.update({base + t: copy.copy(error) for t in range(size)})
        else:
            each, failed = reply.values[j]
            values.extend(each)
            errors.update({base + t: e for t, e in failed.items()})
    return Reply(values, errors)
