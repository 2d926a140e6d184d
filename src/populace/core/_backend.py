"""The seam between the runtime and where workers live.

A backend starts workers, creates agents in them in bulk, forwards batches of requests and
delivers batches of updates back. It also places services (one object many workers call,
such as an environment service): :meth:`Backend.place` returns a :class:`ServiceHandle`.
:class:`LocalBackend` keeps every worker and service on the caller's event loop (no
processes, no setup); a Ray backend puts each worker, and each service, in its own actor.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ._agent import Agent
from ._errors import ServiceLost
from ._worker import CallRequest, GroupRequest, Update, Worker, WorkerStats

Deliver = Callable[[int, list[Update]], None]
Request = CallRequest | GroupRequest


class ServiceHandle(Protocol):
    """A service object placed by a backend (:meth:`Backend.place`): call its methods by name.

    A remote backend's handle pickles, so one service can be shared with every worker.

    >>> counter = await sim.backend.place(Counter, 0)        # doctest: +SKIP
    >>> await counter.call("add", 5)                          # doctest: +SKIP
    5
    """

    @property
    def info(self) -> dict[str, Any]:
        """Where the service runs: ``{"pid": int, "node": str}``, as in ``worker_info()``."""

    @property
    def here(self) -> Any | None:
        """The placed object itself when it lives in this process (the local backend places
        the caller's objects, shared, not copied), so that callers may use it directly;
        None when it is elsewhere (reached through :meth:`call` only)."""

    def call(self, method: str, *args: Any) -> asyncio.Future[Any]:
        """Start ``method(*args)`` on the service now; a future of its result.

        A coroutine method runs on the service's own event loop. Once the service is gone
        (died, killed), calls fail with :class:`ServiceLost`; any other error is the
        method's own.
        """

    def kill(self) -> None:
        """End the service at once (idempotent); its pending and later calls fail with
        :class:`ServiceLost`."""


@runtime_checkable
class Backend(Protocol):
    """What the runtime (and the layers above it) need from a backend."""

    name: str
    #: Requests cross a process boundary: pending placeholders travel as RemoteRefs, and
    #: services live in processes of their own (objects given to ``place`` are copies).
    remote: bool

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

    def worker_info(self) -> list[dict[str, Any]]:
        """Where each worker runs, in worker order: ``{"pid": int, "node": str}``."""

    async def place(self, cls: type[Any], *args: Any) -> ServiceHandle:
        """Start one service ``cls(*args)`` near the central process; a handle to it.

        Returns once the service is up. The backend kills the services it placed when it
        stops; close them yourself before that to let them finish cleanly.
        """

    async def stop(self) -> None:
        """Stop every worker and service, and release their resources."""


class LocalServiceHandle:
    """A service that is an object on the caller's event loop (:meth:`LocalBackend.place`).

    ``call`` runs the method at once; a coroutine method becomes a task owned by this
    handle, which :meth:`kill` cancels.
    """

    def __init__(self, obj: Any, name: str) -> None:
        self._obj = obj
        self._name = name
        self._info = {"pid": os.getpid(), "node": socket.gethostname()}
        self._calls: dict[asyncio.Future[Any], asyncio.Future[Any]] = {}  # task -> caller's
        self._killed = False

    @property
    def info(self) -> dict[str, Any]:
        return dict(self._info)

    @property
    def here(self) -> Any:
        return self._obj

    def __repr__(self) -> str:
        return f"<LocalServiceHandle {self._name}{' (killed)' if self._killed else ''}>"

    def call(self, method: str, *args: Any) -> asyncio.Future[Any]:
        out: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self._killed:
            out.set_exception(self._lost())
            return out
        try:
            value = getattr(self._obj, method)(*args)
        except Exception as error:
            out.set_exception(error)
            return out
        if not inspect.isawaitable(value):
            out.set_result(value)
            return out
        task = asyncio.ensure_future(value)
        self._calls[task] = out
        task.add_done_callback(self._finished)
        return out

    def _finished(self, task: asyncio.Future[Any]) -> None:
        out = self._calls.pop(task)
        if out.done():  # the caller gave up waiting, or kill() answered already
            return
        if task.cancelled():
            out.set_exception(self._lost())
            return
        error = task.exception()
        if error is not None:
            out.set_exception(error)
        else:
            out.set_result(task.result())

    def _lost(self) -> ServiceLost:
        return ServiceLost(f"{self._name} (in-process) was killed")

    def kill(self) -> None:
        if self._killed:
            return
        self._killed = True
        for task, out in list(self._calls.items()):
            if not out.done():
                out.set_exception(self._lost())
            task.cancel()


class LocalBackend:
    """Workers are objects on the caller's event loop: zero setup, the default."""

    name = "local"
    remote = False

    def __init__(self) -> None:
        self._workers: list[Worker] = []
        self._services: list[LocalServiceHandle] = []

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

    def worker_info(self) -> list[dict[str, Any]]:
        """Every worker runs in this process: ``{"pid", "node"}`` (the node is the host)."""
        here = {"pid": os.getpid(), "node": socket.gethostname()}
        return [dict(here) for _ in self._workers]

    async def place(self, cls: type[Any], *args: Any) -> LocalServiceHandle:
        """``cls(*args)`` in this process; the caller's objects are shared, not copied."""
        handle = LocalServiceHandle(cls(*args), cls.__name__)
        self._services.append(handle)
        return handle

    def worker(self, index: int) -> Worker:
        """The worker object itself (local only; for inspection and tests)."""
        return self._workers[index]

    async def stop(self) -> None:
        services, self._services = self._services, []
        for service in services:
            service.kill()
        workers, self._workers = self._workers, []
        for w in workers:
            await w.aclose()


def _no_options(**options: Any) -> LocalBackend:
    if options:
        raise TypeError(f"the local backend takes no options, got {sorted(options)}")
    return LocalBackend()


def _answers(address: str) -> str | None:
    return None


@dataclass(frozen=True)
class BackendKind:
    """A kind of backend as the layers above need it before one starts: what makes one,
    the cluster addresses it joins, whether one answers, how a user's code reaches its
    workers. A new backend is a module with its :class:`Backend` class and one of these,
    given to :func:`register_backend`; run files, the CLI and the launcher then take its
    name (``backend: NAME``) with no other change.
    """

    name: str
    #: ``make(**options)``: a new backend; ``address`` is the one option run files give
    make: Callable[..., Backend]
    #: the address forms it joins, as error messages name them; None: it joins none
    addresses: str | None = None
    #: whether ``address`` is of a form it joins
    address_ok: Callable[[str], bool] = lambda address: False
    #: why a cluster at ``address`` does not answer now (None: it does, or nothing to check)
    unreachable: Callable[[str], str | None] = _answers
    #: makes a module loaded from a path travel to the workers by value (its workers are
    #: other processes that cannot import it); None: the workers share this process
    ship: Callable[[str], None] | None = None

    def options(self, address: str | None) -> dict[str, Any]:
        """The options :attr:`make` takes for a run file's ``address``."""
        return {"address": address} if address is not None else {}


LOCAL = BackendKind("local", _no_options)
_KINDS: dict[str, BackendKind] = {}


def register_backend(kind: BackendKind) -> None:
    """Make backend ``kind.name`` known to run files, the CLI and :func:`make_backend`."""
    _KINDS[kind.name] = kind


def unregister_backend(name: str) -> None:
    """Forget backend ``name`` (a test's own, say); unknown names are ignored."""
    _KINDS.pop(name, None)


def backend_names() -> tuple[str, ...]:
    """The names of the known backends, ``("local", "ray")`` and those registered."""
    return tuple(_KINDS)


def expected_backends() -> str:
    """The known names as pydantic lists a choice's: ``'local' or 'ray'``."""
    names = [repr(n) for n in _KINDS]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def backend_kind(name: str) -> BackendKind:
    """The kind of backend ``name``; ValueError naming the known ones otherwise."""
    try:
        return _KINDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; expected {expected_backends()}") from None


def make_backend(spec: str | Backend, **options: Any) -> Backend:
    """A backend from its name (``"local"``, ``"ray"``, a registered one) or an instance."""
    if not isinstance(spec, str):
        return spec
    return backend_kind(spec).make(**options)
