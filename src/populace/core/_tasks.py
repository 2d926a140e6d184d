"""Owned background tasks: none is orphaned, none fails unseen (Trio's nursery, smaller).

A long-lived object that starts tasks of its own (a service's async updates, a backend's
pollers) holds them in a :class:`TaskOwner`, not in a bare set: an error a bare set's task
dies of is only ever printed, if at all, when the task is garbage-collected, and whatever
waited on that task's work waits forever.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

logger = logging.getLogger("populace.core")


class TaskOwner:
    """Holds an object's background tasks, sees how each one ends, cancels the rest on close.

    ``start(coro, then=fn)`` runs ``coro`` as a task and calls ``fn(task)`` once it ends,
    however it ends: done, failed, or cancelled (even before it ever ran), so ``fn`` is the
    one place that hands the outcome on. A task started without ``then`` is expected to
    handle its own errors. A *failure* is an error that reaches the owner: a task without
    ``then`` ending in an error other than its cancellation, or ``then`` raising. It is
    logged at once with its traceback, passed to ``on_error`` (where the object fails its
    pending work), and kept in :attr:`failure`; :meth:`raise_failure` raises it, so the
    object's next call fails loudly instead of going on as if nothing happened.

    >>> async def demo():
    ...     tasks = TaskOwner("poller", on_error=lambda e: print("failed:", e))
    ...     tasks.start(poll())             # poll() raising RuntimeError("x") prints
    ...     await tasks.aclose()            # "failed: x"; aclose cancels what is left
    """

    __slots__ = ("_failure", "_name", "_on_error", "_tasks")

    def __init__(self, name: str, *,
                 on_error: Callable[[BaseException], object] | None = None) -> None:
        self._name = name
        self._on_error = on_error
        self._tasks: set[asyncio.Task[Any]] = set()
        self._failure: BaseException | None = None

    def __len__(self) -> int:
        """How many tasks are running now."""
        return len(self._tasks)

    def __repr__(self) -> str:
        failed = f" failed: {self._failure!r}" if self._failure is not None else ""
        return f"<TaskOwner {self._name} {len(self._tasks)} running{failed}>"

    @property
    def failure(self) -> BaseException | None:
        """The first failure seen, or ``None``."""
        return self._failure

    def raise_failure(self) -> None:
        """Raise the first failure seen, if any (a note names this owner)."""
        if self._failure is not None:
            raise self._failure

    def start(self, coro: Coroutine[Any, Any, T], *, name: str | None = None,
              then: Callable[[asyncio.Task[T]], object] | None = None) -> asyncio.Task[T]:
        """Run ``coro`` as a task held here; ``then(task)`` once it ends, however it ends."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._ended(t, then))
        return task

    def _ended(self, task: asyncio.Task[Any], then: Callable[[Any], object] | None) -> None:
        self._tasks.discard(task)
        error: BaseException | None = None
        if then is not None:
            try:
                then(task)
            except Exception as e:
                error = e
        elif not task.cancelled():
            error = task.exception()
        if error is not None:
            self._failed(task, error)

    def _failed(self, task: asyncio.Task[Any], error: BaseException) -> None:
        logger.error("%s: background task %s failed", self._name, task.get_name(),
                     exc_info=error)
        if self._failure is None:
            error.add_note(f"(a background task of {self._name})")
            self._failure = error
        if self._on_error is not None:
            self._on_error(error)

    def cancel(self) -> None:
        """Cancel every task still running (their ``then`` still runs when they end)."""
        for task in self._tasks:
            task.cancel()

    async def aclose(self) -> None:
        """Cancel every task still running and wait until they have ended. Idempotent."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            # Each task's own done callback (_ended, added first) has run before this wakes.
            await asyncio.wait(tasks)
