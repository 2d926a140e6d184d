"""Placeholders: the results of agent calls, available at once and filled in later.

A :class:`Placeholder` is a small state machine (pending → value | error). It is awaitable
from any asyncio task, its result can be read synchronously once done, and it can be put in
a :class:`~populace.core.Msg` for another agent, which then runs only when the value is real.
A :class:`PlaceholderSet` is the result of a group operation: one object for N calls, so a
million results need not be a million objects in the central process.

Failures are never silently dropped: a failed placeholder whose error nobody looked at is
reported when the simulation stops (see :class:`UnobservedFailureWarning`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator, Iterable, Sequence
from contextvars import Context
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np

from ._columnar import PackedReplies, consecutive, objects_table, pack, replies_table

if TYPE_CHECKING:
    import pyarrow as pa

T = TypeVar("T")

_PENDING: Any = object()


class UnobservedFailureWarning(RuntimeWarning):
    """Agent calls failed and nobody consumed their errors before the simulation stopped."""


class FailureLedger:
    """Remembers failed placeholders until their error is consumed."""

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: dict[int, Placeholder[Any] | PlaceholderSet[Any]] = {}

    def add(self, p: Placeholder[Any] | PlaceholderSet[Any]) -> None:
        self._open[id(p)] = p

    def discard(self, p: Placeholder[Any] | PlaceholderSet[Any]) -> None:
        self._open.pop(id(p), None)

    def unobserved(self) -> list[tuple[str, BaseException]]:
        """``(origin, error)`` for every failure nobody consumed, oldest first."""
        out: list[tuple[str, BaseException]] = []
        for p in self._open.values():
            if isinstance(p, Placeholder):
                assert p._error is not None
                out.append((p._origin, p._error))
            else:
                for i, e in sorted(p._errors.items()):
                    out.append((f"{p._origin}[{i}]", e))
        return out


class Driving:
    """The worker driver step running now, if any (see ``_driver.Call.step``).

    Inside a step, awaiting a placeholder or signal yields the object itself and the driver
    parks on it; anywhere else (an asyncio Task, even one that hosts a worker, as in a Ray
    actor) it waits on a future of its own. A plain attribute, set and restored around each
    step: a step is the hottest path there is.
    """

    call: Any = None


def _task_wait(waitable: Any) -> Generator[Any, None, None]:
    """Suspend an asyncio Task until ``waitable`` is done, on a future of the task's own.

    Placeholders and signals are shared by many waiters and cannot be cancelled, so they are
    not futures themselves: cancelling one task (``asyncio.timeout``, ``wait_for``) cancels
    only that task's wait.
    """
    fut = waitable._loop.create_future()

    def wake() -> None:
        if not fut.done():
            fut.set_result(None)

    waitable._park(wake)
    try:
        yield from fut.__await__()
    finally:
        if not waitable.done():  # the task stopped waiting (cancelled, timed out)
            waitable._unpark(wake)


class _Awaitable:
    """Shared machinery of the two placeholder kinds: callbacks and asyncio interop."""

    __slots__ = ("_callbacks", "_ledger", "_loop", "_origin", "_parked")

    def __init__(self, loop: asyncio.AbstractEventLoop, origin: str, ledger: FailureLedger | None):
        self._loop = loop
        self._origin = origin
        self._ledger = ledger
        self._parked: list[Callable[[], Any]] | None = None
        self._callbacks: list[tuple[Callable[[Any], Any], Context | None]] | None = None

    def done(self) -> bool:  # pragma: no cover - overridden
        raise NotImplementedError

    # -- asyncio-style callbacks -------------------------------------------------------------
    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def cancelled(self) -> bool:
        return False

    def add_done_callback(self, fn: Callable[[Any], Any], *,
                          context: Context | None = None) -> None:
        """asyncio-style callback: scheduled on the loop with this object once done."""
        if self.done():
            self._loop.call_soon(fn, self, context=context)
        else:
            if self._callbacks is None:
                self._callbacks = []
            self._callbacks.append((fn, context))

    def remove_done_callback(self, fn: Callable[[Any], Any]) -> int:
        if not self._callbacks:
            return 0
        before = len(self._callbacks)
        self._callbacks = [(f, c) for f, c in self._callbacks if f != fn]
        return before - len(self._callbacks)

    def result(self) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    def __await__(self) -> Generator[Any, None, Any]:
        if not self.done():
            if Driving.call is not None:
                yield self  # stepped by a worker's driver, which parks on us directly
            else:
                yield from _task_wait(self)
        return self.result()

    # -- internal fast path ----------------------------------------------------------------
    def _park(self, fn: Callable[[], Any]) -> None:
        """Call ``fn()`` synchronously once done (used by workers; no loop round-trip)."""
        if self.done():
            fn()
        elif self._parked is None:
            self._parked = [fn]
        else:
            self._parked.append(fn)

    def _unpark(self, fn: Callable[[], Any]) -> None:
        """Take back a wake-up ``fn`` parked while pending, for a waiter that stopped waiting
        (a timeout, a cancellation): Trio's ``ParkingLot`` abort. Without it, a loop of
        timed-out waits would leave one closure here per try until this object is done."""
        if self._parked is not None:
            self._parked.remove(fn)

    def _n_waiters(self) -> int:
        """How many wake-ups and done callbacks are registered now (for leak checks)."""
        return len(self._parked or ()) + len(self._callbacks or ())

    def _fire(self) -> None:
        parked, self._parked = self._parked, None
        callbacks, self._callbacks = self._callbacks, None
        if parked:
            for fn in parked:
                fn()
        if callbacks:
            for cb, ctx in callbacks:
                self._loop.call_soon(cb, self, context=ctx)


class Placeholder(_Awaitable, Generic[T]):
    """The pending result of one agent call.

    >>> async def demo(handle, msg):
    ...     p = handle.reply(msg)      # returns at once
    ...     return await p             # the agent's reply, or its error re-raised
    """

    __slots__ = ("__weakref__", "_error", "_source", "_value")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        origin: str = "call",
        ledger: FailureLedger | None = None,
    ) -> None:
        super().__init__(loop, origin, ledger)
        self._value: Any = _PENDING
        self._error: BaseException | None = None
        # (worker, call_id) of the agent call that fills it, when it is one.
        self._source: tuple[int, int] | None = None

    def __repr__(self) -> str:
        state = "pending" if not self.done() else ("failed" if self._error else "done")
        return f"<Placeholder {self._origin} {state}>"

    def done(self) -> bool:
        return self._value is not _PENDING or self._error is not None

    def result(self) -> T:
        """The value; re-raises the call's error; ``InvalidStateError`` while pending."""
        if self._error is not None:
            self._observe()
            raise self._error
        if self._value is _PENDING:
            raise asyncio.InvalidStateError(f"{self._origin} is still pending")
        return self._value

    def exception(self) -> BaseException | None:
        """The call's error, or ``None`` if it succeeded; ``InvalidStateError`` while pending."""
        if not self.done():
            raise asyncio.InvalidStateError(f"{self._origin} is still pending")
        self._observe()
        return self._error

    def _observe(self) -> None:
        if self._ledger is not None:
            self._ledger.discard(self)

    def _outcome(self) -> tuple[Any, BaseException | None]:
        """(value, error) for a dependency that consumed this placeholder."""
        self._observe()
        return self._value, self._error

    # A placeholder is set once, as SimPy's Event is triggered once: a second outcome means a
    # call was delivered twice, or a race (a late reply after a timeout) was not settled
    # where it happens, and ignoring it would hide that. It raises InvalidStateError, as
    # asyncio.Future.set_result does: it is a programming error, not the failure of a call
    # (so not a PopulaceError, which the CLI prints as one quiet line). No caller relies on
    # the old silent ignore: the runtime takes a call out of its registry before settling
    # it (a timeout, a lost worker, stop()), and a late reply finds nothing there
    # (_runtime.Simulation._deliver).
    def set_result(self, value: T) -> None:
        """Resolve with ``value``; ``InvalidStateError`` if already done."""
        if self.done():
            raise self._already_set()
        self._value = value
        self._fire()

    def set_exception(self, error: BaseException) -> None:
        """Fail with ``error``; ``InvalidStateError`` if already done."""
        if self.done():
            raise self._already_set()
        self._error = error
        if self._ledger is not None:
            self._ledger.add(self)
        self._fire()

    def _already_set(self) -> asyncio.InvalidStateError:
        state = "failed" if self._error is not None else "done"
        return asyncio.InvalidStateError(
            f"{self._origin} is already {state}: a placeholder is set only once")

    def __await__(self) -> Generator[Any, None, T]:
        return super().__await__()  # typed: awaiting gives T

    def __reduce__(self) -> Any:
        raise TypeError(
            "a Placeholder cannot be pickled; pass it inside a Msg to another agent and the "
            "runtime resolves it, or await it first"
        )


class PlaceholderSet(_Awaitable, Generic[T]):
    """The pending results of one group operation, in member order.

    ``await pset`` gives the list of results (raising the first error in member order);
    ``pset.results(return_exceptions=True)`` gives errors in place; ``pset.n_done`` and
    ``pset.progress`` serve progress bars; ``pset[i]`` is a :class:`Placeholder` for one member.
    ``pset.table()`` reads the replies as one Arrow table.

    Replies from remote workers arrive as columns (:class:`~populace.core._columnar.
    PackedReplies`); they are kept so until the list of results is asked for, so a step
    that reads them as a table makes no object per member.
    """

    __slots__ = ("_columnar", "_element_waiters", "_errors", "_listeners", "_n_done",
                 "_packed", "_values")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        size: int,
        origin: str = "group",
        ledger: FailureLedger | None = None,
    ) -> None:
        super().__init__(loop, origin, ledger)
        self._values: list[Any] = [_PENDING] * size
        # Replies kept as columns, with their members' positions (not yet in _values).
        self._packed: list[tuple[np.ndarray, PackedReplies]] = []
        self._columnar = False  # pack replies that arrive as objects (see prefer_columns)
        self._errors: dict[int, BaseException] = {}
        self._n_done = 0
        self._element_waiters: dict[int, list[Placeholder[T]]] | None = None
        self._listeners: list[Callable[[Sequence[Any], Sequence[BaseException]], object]] = []

    def __len__(self) -> int:
        return len(self._values)

    def add_listener(self, fn: Callable[[Sequence[Any], Sequence[BaseException]], object]
                     ) -> None:
        """Call ``fn(values, errors)`` with each batch of outcomes as it arrives.

        For live displays (the studio's histogram). Batches come in arrival order, not member
        order; ``fn`` runs where results are delivered, so it should only keep what it is
        given and look at it later.
        """
        self._listeners.append(fn)

    def __repr__(self) -> str:
        return f"<PlaceholderSet {self._origin} {self._n_done}/{len(self)} done>"

    @property
    def n_done(self) -> int:
        """How many members have finished (successfully or not)."""
        return self._n_done

    @property
    def n_failed(self) -> int:
        return len(self._errors)

    @property
    def progress(self) -> float:
        return self._n_done / len(self._values) if self._values else 1.0

    def done(self) -> bool:
        return self._n_done == len(self._values)

    def _check_done(self) -> None:
        if not self.done():
            raise asyncio.InvalidStateError(
                f"{self._origin}: {self._n_done}/{len(self)} results so far"
            )

    def result(self) -> list[T]:
        """All values in member order; re-raises the first error in member order."""
        self._check_done()
        self._observe()
        if self._errors:
            raise self._errors[min(self._errors)]
        self._unpack()
        return list(self._values)  # a copy: done() depends on the length of _values

    def results(self, *, return_exceptions: bool = True) -> list[T | BaseException]:
        """All values in member order, with each failed member's error in its place."""
        if not return_exceptions:
            return self.result()  # type: ignore[return-value]
        self._check_done()
        self._observe()
        self._unpack()
        out: list[Any] = list(self._values)
        for i, e in self._errors.items():  # failed members still hold the pending marker
            out[i] = e
        return out

    def finished(self) -> tuple[list[int], list[T | BaseException]]:
        """The members done so far, in member order, with each one's value or error.

        For saving a part of a long operation before it ends (a checkpoint inside a step,
        a clean stop); does not mark errors as seen.
        """
        self._unpack()
        values, errors = self._values, self._errors
        positions = [i for i, v in enumerate(values) if v is not _PENDING or i in errors]
        return positions, [errors[i] if i in errors else values[i] for i in positions]

    def prefer_columns(self) -> None:
        """Keep the replies still to come as columns, for a :meth:`table` read at the end:
        those that arrive as objects (a local worker's) are packed as they arrive, while
        the loop waits for the rest anyway, and their objects freed."""
        self._columnar = True

    def table(self) -> pa.Table:
        """The replies as one Arrow table in member order: ``sender``, the content's
        columns (a dataclass's fields, or ``content`` for plain values) and ``error``
        (``"Type: message"`` of a failed member, whose other columns are null).

        Needs every reply to be a :class:`~populace.core.Msg` whose content is of one
        dataclass type, or plain values (numbers, strings, bools, None), with one role;
        TypeError otherwise. Replies from remote workers are read from their columns,
        with no object made per member. Marks the errors as seen.
        """
        self._check_done()
        self._observe()
        n, errors = len(self._values), self._errors
        chunks = list(self._packed)
        if sum(len(c) for _, c in chunks) < n - len(errors):
            # Some replies are objects already (a local worker's): pack them all together.
            self._unpack()
            return objects_table(self._values, errors, f"{self._origin}.table()")
        return replies_table(n, chunks, errors)

    def exceptions(self) -> dict[int, BaseException]:
        """``{member index: error}`` for every failed member (marks the errors as seen)."""
        self._check_done()
        self._observe()
        return dict(self._errors)

    def exception(self) -> BaseException | None:
        """The first error in member order, or ``None``."""
        self._check_done()
        self._observe()
        return self._errors[min(self._errors)] if self._errors else None

    def _observe(self) -> None:
        if self._ledger is not None and self._errors:
            self._ledger.discard(self)

    def _outcome(self) -> tuple[Any, BaseException | None]:
        self._observe()
        if self._errors:
            return None, self._errors[min(self._errors)]
        self._unpack()
        return list(self._values), None

    def __getitem__(self, i: int) -> Placeholder[T]:
        """A placeholder for member ``i`` alone."""
        n = len(self._values)
        if not -n <= i < n:
            raise IndexError(f"member {i} out of range for a set of {n}")
        i %= n
        self._unpack()
        p: Placeholder[T] = Placeholder(self._loop, f"{self._origin}[{i}]", None)
        if i in self._errors:
            p.set_exception(self._errors[i])
        elif self._values[i] is not _PENDING:
            p.set_result(self._values[i])
        else:
            if self._element_waiters is None:
                self._element_waiters = {}
            self._element_waiters.setdefault(i, []).append(p)
        return p

    # -- filled by the runtime ---------------------------------------------------------------
    def _fill(self, positions: Sequence[int] | np.ndarray, values: Sequence[Any]) -> None:
        self._check_room(len(positions))
        if self._columnar and not self._element_waiters and type(values) is not PackedReplies:
            values = pack(values) or values
        if type(values) is PackedReplies and not self._element_waiters:
            self._packed.append((np.asarray(positions, dtype=np.int64), values))
            self._n_done += len(positions)
            for fn in self._listeners:
                fn(values, ())
            if self.done():
                self._fire()
            return
        if type(values) is PackedReplies:
            values = values.unpack()
        if type(positions) is np.ndarray:
            positions = positions.tolist()
        vals = self._values
        for pos, v in zip(positions, values, strict=True):
            vals[pos] = v
        self._n_done += len(positions)
        if self._element_waiters:
            for pos, v in zip(positions, values, strict=True):
                for p in self._element_waiters.pop(pos, ()):
                    p.set_result(v)
        for fn in self._listeners:
            fn(values, ())
        if self.done():
            self._fire()

    def _fail(self, positions: Sequence[int], errors: Sequence[BaseException]) -> None:
        self._check_room(len(positions))
        if self._ledger is not None and not self._errors:
            self._ledger.add(self)
        for pos, e in zip(positions, errors, strict=True):
            self._errors[pos] = e
            if self._element_waiters:
                for p in self._element_waiters.pop(pos, ()):
                    p.set_exception(e)
        self._n_done += len(positions)
        for fn in self._listeners:
            fn((), errors)
        if self.done():
            self._fire()

    def _check_room(self, n: int) -> None:
        # Members are set once too; a full check per member would slow the hot path, but
        # more outcomes than members always means one was delivered twice (and a set that
        # counted itself done early would hand out the pending marker as a value).
        if self._n_done + n > len(self._values):
            raise asyncio.InvalidStateError(
                f"{self._origin}: {n} more outcomes for {len(self._values) - self._n_done} "
                "members still pending: a member is set only once")

    def _unpack(self) -> None:
        """Put the replies kept as columns into the list of values, as ``Msg`` objects."""
        packed, self._packed = self._packed, []
        values = self._values
        for positions, replies in packed:
            if consecutive(positions):  # one run of members: one slice assignment
                first = int(positions[0])
                values[first:first + len(positions)] = replies.unpack()
                continue
            for pos, v in zip(positions.tolist(), replies.unpack(), strict=True):
                values[pos] = v

    def _fail_pending(self, error: BaseException, positions: Iterable[int] | None = None) -> None:
        """Fail every member (of ``positions``, default all) that has no outcome yet."""
        self._unpack()
        values, errors = self._values, self._errors
        candidates = range(len(values)) if positions is None else positions
        missing = [int(i) for i in candidates if values[i] is _PENDING and i not in errors]
        self._fail(missing, [error] * len(missing))

    def __await__(self) -> Generator[Any, None, list[T]]:
        return super().__await__()  # typed: awaiting gives the list of results

    def __reduce__(self) -> Any:
        raise TypeError("a PlaceholderSet cannot be pickled; await it first")


AnyPlaceholder = Placeholder[Any] | PlaceholderSet[Any]


def _as_list(items: Iterable[AnyPlaceholder] | tuple[AnyPlaceholder, ...]) -> list[AnyPlaceholder]:
    out = list(items)
    for p in out:
        if not isinstance(p, Placeholder | PlaceholderSet):
            raise TypeError(
                f"expected Placeholder or PlaceholderSet, got {type(p).__name__}; "
                "wrap plain awaitables with asyncio.gather instead"
            )
    return out


async def _until(items: list[AnyPlaceholder], count: int, timeout: float | None) -> None:
    """Wait until ``count`` of ``items`` are done, or ``timeout`` seconds pass."""
    remaining = count - sum(1 for p in items if p.done())
    if remaining <= 0:
        return
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()
    left = [remaining]

    def one_done() -> None:
        left[0] -= 1
        if left[0] == 0 and not fut.done():
            fut.set_result(None)

    for p in items:
        if not p.done():
            p._park(one_done)
    handle = None
    if timeout is not None:
        def expire() -> None:
            if not fut.done():
                fut.set_result(None)

        handle = loop.call_later(timeout, expire)
    try:
        await fut
    finally:
        if handle is not None:
            handle.cancel()
        for p in items:  # still pending: timed out, enough others done, or cancelled
            if not p.done():
                p._unpark(one_done)


async def gather(*items: AnyPlaceholder, return_exceptions: bool = False) -> list[Any]:
    """Wait for all ``items``; their results in input order.

    The first error in input order is raised, unless ``return_exceptions`` puts errors in
    place of values.
    """
    ps = _as_list(items)
    await _until(ps, len(ps), None)
    out: list[Any] = []
    for p in ps:
        if return_exceptions:
            err = p.exception()
            out.append(err if err is not None else p.result())
        else:
            out.append(p.result())
    return out


async def wait(
    items: Iterable[AnyPlaceholder],
    *,
    num_returns: int | None = None,
    timeout: float | None = None,
) -> tuple[list[AnyPlaceholder], list[AnyPlaceholder]]:
    """Wait until ``num_returns`` items (default: all) are done or ``timeout`` passes.

    Returns ``(ready, not_ready)``, both in input order; ``ready`` holds at most
    ``num_returns`` items (the first finished ones in input order).
    """
    ps = _as_list(items)
    n = len(ps) if num_returns is None else num_returns
    if not 0 <= n <= len(ps):
        raise ValueError(f"num_returns must be between 0 and {len(ps)}, got {n}")
    await _until(ps, n, timeout)
    ready: list[AnyPlaceholder] = []
    not_ready: list[AnyPlaceholder] = []
    for p in ps:
        (ready if p.done() and len(ready) < n else not_ready).append(p)
    return ready, not_ready
