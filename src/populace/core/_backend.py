"""The seam between the runtime and where workers live.

A backend starts workers, creates agents in them in bulk, forwards batches of requests and
delivers batches of updates back. :class:`LocalBackend` keeps every worker on the caller's
event loop (no processes, no setup); a Ray backend puts each worker in its own actor.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from ._agent import Agent
from ._worker import CallRequest, GroupRequest, Update, Worker, WorkerStats

Deliver = Callable[[int, list[Update]], None]
Request = CallRequest | GroupRequest


@runtime_checkable
class Backend(Protocol):
    """What the runtime needs from a backend."""

    name: str

    @property
    def n_workers(self) -> int: ...

    async def start(self, n_workers: int, deliver: Deliver) -> None:
        """Start ``n_workers`` workers; outcomes go to ``deliver(worker, updates)``."""

    async def create(
        self,
        worker: int,
        cls: type[Agent],
        ids: Sequence[int],
        columns: dict[str, list[Any]] | None,
        init: dict[str, Any],
    ) -> int:
        """Create agents in ``worker``; returns the local index of the first."""

    def submit(self, worker: int, requests: list[Request]) -> None:
        """Hand a batch of requests to ``worker`` without waiting."""

    def statistics(self) -> list[WorkerStats]:
        """The latest known statistics of every worker."""

    async def stop(self) -> None:
        """Stop every worker and release its resources."""


class LocalBackend:
    """Workers are objects on the caller's event loop: zero setup, the default."""

    name = "local"

    def __init__(self) -> None:
        self._workers: list[Worker] = []

    @property
    def n_workers(self) -> int:
        return len(self._workers)

    async def start(self, n_workers: int, deliver: Deliver) -> None:
        loop = asyncio.get_running_loop()
        self._workers = [Worker(i, loop, deliver) for i in range(n_workers)]

    async def create(
        self,
        worker: int,
        cls: type[Agent],
        ids: Sequence[int],
        columns: dict[str, list[Any]] | None,
        init: dict[str, Any],
    ) -> int:
        return self._workers[worker].create(cls, ids, columns, init)

    def submit(self, worker: int, requests: list[Request]) -> None:
        self._workers[worker].submit(requests)

    def statistics(self) -> list[WorkerStats]:
        return [w.statistics() for w in self._workers]

    def worker(self, index: int) -> Worker:
        """The worker object itself (local only; for inspection and tests)."""
        return self._workers[index]

    async def stop(self) -> None:
        workers, self._workers = self._workers, []
        for w in workers:
            await w.aclose()


def make_backend(spec: str | Backend, **options: Any) -> Backend:
    """A backend from its name (``"local"``, ``"ray"``) or an instance."""
    if not isinstance(spec, str):
        return spec
    if spec == "local":
        if options:
            raise TypeError(f"the local backend takes no options, got {sorted(options)}")
        return LocalBackend()
    if spec == "ray":
        from ._ray import RayBackend

        return RayBackend(**options)
    raise ValueError(f"unknown backend {spec!r}; expected 'local' or 'ray'")
