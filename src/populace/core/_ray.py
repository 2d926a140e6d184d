"""The Ray backend: each worker is one Ray actor process running its own event loop.

Requests cross the wire as one actor call per worker per tick; outcomes come back through
one long-poll per worker, batched. A placeholder still pending when it is sent to another
worker travels as a :class:`RemoteRef`; the receiving worker fetches the value straight from
the owning worker, not through the central process. Services (:meth:`RayBackend.place`) are
actors too, preferably on the central process's node, reached through a
:class:`RayServiceHandle`.

Ray is optional (``pip install populace[ray]``) and imported only when this backend starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._agent import Agent
from ._backend import BackendKind, Deliver, Request
from ._columnar import pack
from ._driver import track_tasks
from ._errors import ConfigError, ServiceLost, WorkerLost
from ._gc import tune_gc
from ._placeholder import Placeholder
from ._shipping import ship_by_value
from ._tasks import TaskOwner
from ._walk import replace
from ._worker import (
    CallDone,
    GroupChunk,
    RemoteRef,
    Update,
    Worker,
    WorkerGone,
    WorkerStats,
)

logger = logging.getLogger("populace.core")


class WorkerActor:
    """Hosts one :class:`Worker` inside a Ray actor (async actor: one event loop)."""

    #: Finished single-call results kept for other workers to fetch.
    RETAIN = 200_000
    #: Longest a poll waits before returning statistics alone (seconds).
    STATS_INTERVAL = 0.5

    def __init__(self, index: int, group: str) -> None:
        self.index = index
        self.group = group
        self.worker: Worker | None = None
        self.updates: list[Update] = []
        self.wakeup: asyncio.Event | None = None
        self.results: OrderedDict[int, tuple[Any, BaseException | None]] = OrderedDict()
        self.waiting: dict[int, list[asyncio.Future[Any]]] = {}
        self.peers: dict[int, Any] = {}
        self.fetches = TaskOwner(f"worker {index}'s dependency fetches")

    async def ready(self) -> dict[str, Any]:
        import ray

        loop = asyncio.get_running_loop()
        tune_gc()
        track_tasks(loop)
        self.wakeup = asyncio.Event()
        self.worker = Worker(self.index, loop, self._emit)
        return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id()}

    def _emit(self, _index: int, updates: list[Update]) -> None:
        for u in updates:
            if type(u) is CallDone:
                self.results[u.call_id] = (u.value, u.error)
                if len(self.results) > self.RETAIN:
                    self.results.popitem(last=False)
                for fut in self.waiting.pop(u.call_id, ()):
                    if not fut.done():
                        fut.set_result((u.value, u.error))
        self.updates.extend(updates)
        assert self.wakeup is not None
        self.wakeup.set()

    async def create(self, cls: type[Agent], ids: Sequence[int],
                     columns: dict[str, list[Any]] | None, init: dict[str, Any]) -> int:
        assert self.worker is not None
        return self.worker.create(cls, ids, columns, init)

    async def submit(self, requests: list[Request]) -> None:
        assert self.worker is not None
        for req in requests:
            if req.refs:
                req.args = replace(req.args, (RemoteRef,), self._fetch)
        self.worker.submit(requests)

    def _fetch(self, ref: RemoteRef) -> Placeholder[Any]:
        """A placeholder the worker can wait on, filled from the owner of ``ref``."""
        import ray

        loop = asyncio.get_running_loop()
        fetch: Placeholder[Any] = Placeholder(loop, f"result of call {ref.call_id}")

        async def get() -> None:
            try:
                if ref.owner == self.index:
                    value, error = await self.result(ref.call_id)
                else:
                    peer = self.peers.get(ref.owner)
                    if peer is None:
                        peer = self.peers[ref.owner] = ray.get_actor(
                            f"{self.group}-{ref.owner}", namespace="populace")
                    value, error = await peer.result.remote(ref.call_id)
            except Exception as e:  # the owner died or the result was evicted
                value, error = None, WorkerLost(f"cannot fetch a dependency from worker "
                                                f"{ref.owner}: {e}")
            if error is not None:
                fetch.set_exception(error)
            else:
                fetch.set_result(value)

        self.fetches.start(get(), name=f"fetch call {ref.call_id} from worker {ref.owner}")
        return fetch

    async def result(self, call_id: int) -> tuple[Any, BaseException | None]:
        """The outcome of single call ``call_id`` of this worker, waiting if needed."""
        hit = self.results.get(call_id)
        if hit is not None:
            return hit
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiting.setdefault(call_id, []).append(fut)
        return await fut

    async def poll(self) -> tuple[list[Update], WorkerStats]:
        """Wait for outcomes, then return all of them at once, with fresh statistics."""
        assert self.wakeup is not None and self.worker is not None
        if not self.updates:
            # Answer within STATS_INTERVAL even with nothing to report, so the central
            # process (progress, studio) sees fresh statistics while agents wait on LLMs.
            self.wakeup.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wakeup.wait(), self.STATS_INTERVAL)
        updates, self.updates = self.updates, []
        for u in updates:
            if type(u) is GroupChunk:
                packed = pack(u.values)
                if packed is not None:
                    u.values = packed  # type: ignore[assignment]
                    u.slots = np.asarray(u.slots, dtype=np.int64)  # type: ignore[assignment]
        return updates, self.worker.statistics()

    async def stats(self) -> WorkerStats:
        assert self.worker is not None
        return self.worker.statistics()

    async def close(self) -> None:
        await self.fetches.aclose()
        if self.worker is not None:
            await self.worker.aclose()


def _where() -> dict[str, Any]:
    """Where this actor runs (the shape of ``worker_info()``)."""
    import ray

    return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id()}


def _hosted(cls: type[Any]) -> type[Any]:
    """``cls`` with one method more, telling where it runs; under ``cls``'s own name, which
    Ray gives the actor's process (``ray::ServiceActor``), so it can be found and killed."""

    class Hosted(cls):
        def __populace_where__(self) -> dict[str, Any]:
            return _where()

    Hosted.__name__ = cls.__name__
    Hosted.__qualname__ = cls.__qualname__
    Hosted.__module__ = cls.__module__
    return Hosted


class RayServiceHandle:
    """A service living in a Ray actor (:meth:`RayBackend.place`); pickles to any worker.

    ``call`` is one actor call; a dead actor's calls fail with :class:`ServiceLost`.
    """

    def __init__(self, actor: Any, name: str, info: dict[str, Any]) -> None:
        self.actor = actor  # the Ray actor handle (tests kill it to play a crash)
        self._name = name
        self._info = info

    @property
    def info(self) -> dict[str, Any]:
        return dict(self._info)

    @property
    def here(self) -> None:
        """Never here: the service is an actor of its own."""
        return None

    def __repr__(self) -> str:
        return f"<RayServiceHandle {self._name} pid={self._info.get('pid')}>"

    def call(self, method: str, *args: Any) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        out: asyncio.Future[Any] = loop.create_future()
        sent = asyncio.wrap_future(getattr(self.actor, method).remote(*args).future(),
                                   loop=loop)

        def done(f: asyncio.Future[Any]) -> None:
            if out.done():  # the caller stopped waiting
                return
            if f.cancelled():
                out.cancel()
                return
            error = f.exception()
            if error is None:
                out.set_result(f.result())
                return
            from ray.exceptions import RayActorError

            if isinstance(error, RayActorError):
                error = ServiceLost(f"{self._name} (pid {self._info.get('pid')}) died: "
                                    f"{_cause(error)}")
            out.set_exception(error)

        sent.add_done_callback(done)
        return out

    def kill(self) -> None:
        import ray

        with contextlib.suppress(Exception):  # already gone
            ray.kill(self.actor)


class RayBackend:
    """Workers as Ray actors, on this machine or on the cluster at ``address``."""

    name = "ray"
    #: Requests cross a process boundary: placeholders must become RemoteRefs first.
    remote = True
    #: Tries to start each worker (a try fails when its node died meanwhile).
    PLACE_ATTEMPTS = 3

    def __init__(self, address: str | None = None, **init_options: Any) -> None:
        self.address = address
        self.init_options = init_options
        self._actors: list[Any] = []
        self._info: list[dict[str, Any]] = []
        self._stats: list[WorkerStats] = []
        self._pollers = TaskOwner("the Ray backend's pollers")
        self._started_ray = False
        self._group = f"populace-{uuid.uuid4().hex[:8]}"
        self._deliver: Deliver | None = None
        self._services: list[RayServiceHandle] = []

    @property
    def n_workers(self) -> int:
        return len(self._actors)

    def worker_info(self) -> list[dict[str, Any]]:
        """``{"pid", "node"}`` of each worker."""
        return list(self._info)

    async def start(self, n_workers: int, deliver: Deliver) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError("the Ray backend needs Ray: pip install 'populace[ray]'") from None
        if not ray.is_initialized():
            options = {"include_dashboard": False, "log_to_driver": True,
                       "configure_logging": False, **self.init_options}
            # Ray's own default joins the last cluster started on this machine (even another
            # program's); ours is a fresh local one unless RAY_ADDRESS says otherwise.
            address = self.address or os.environ.get("RAY_ADDRESS") or "local"
            main = threading.current_thread() is threading.main_thread()
            on_term = signal.getsignal(signal.SIGTERM) if main else None
            try:
                ray.init(address=address, **options)
            except ConnectionError as e:
                raise ConfigError(f"cannot join the Ray cluster at {address}: {e}") from None
            finally:
                if on_term is not None:  # Ray's handler would kill us with no cleanup
                    signal.signal(signal.SIGTERM, on_term)
            self._started_ray = True
        self._deliver = deliver
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        actor_cls = ray.remote(WorkerActor)

        def place(i: int, nodes: list[str]) -> Any:
            strategy: Any = "DEFAULT"
            if nodes:
                strategy = NodeAffinitySchedulingStrategy(nodes[i % len(nodes)], soft=False)
            return actor_cls.options(
                name=f"{self._group}-{i}", namespace="populace", num_cpus=0,
                scheduling_strategy=strategy, max_concurrency=1000,
            ).remote(i, self._group)

        def alive() -> list[str]:
            # Round-robin over the nodes that have CPUs, so workers (and their agents) are
            # spread evenly; Ray's own SPREAD ignores actors that reserve no CPU.
            return sorted(n["NodeID"] for n in ray.nodes()
                          if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0)

        nodes = alive()
        self._actors = [place(i, nodes) for i in range(n_workers)]
        info: list[Any] = [None] * n_workers
        pending = list(range(n_workers))
        # A node lost a moment ago (its raylet killed, the machine gone) is still listed as
        # alive until Ray's health check gives up on it (~15 s by default), so a worker
        # restarted after its loss can be pinned to it; Ray then fails that actor unborn. It
        # is placed again, on the nodes then alive; a worker that cannot start at all is a
        # WorkerLost (the caller's recovery policy), never a raw Ray error.
        for attempt in range(self.PLACE_ATTEMPTS):
            results = await asyncio.gather(*(self._actors[i].ready.remote() for i in pending),
                                           return_exceptions=True)
            failed: list[tuple[int, BaseException]] = []
            for i, r in zip(pending, results, strict=True):
                if isinstance(r, ray.exceptions.RayActorError):
                    failed.append((i, r))
                elif isinstance(r, BaseException):
                    raise r
                else:
                    info[i] = r
            if not failed:
                break
            if attempt == self.PLACE_ATTEMPTS - 1:
                i, error = failed[0]
                self._release()
                raise WorkerLost(f"worker {i} could not start: {_cause(error)}")
            pending, nodes = [i for i, _ in failed], alive()
            for i in pending:
                with contextlib.suppress(Exception):  # frees its name if it still lives
                    ray.kill(self._actors[i])
                self._actors[i] = place(i, nodes)
        self._info = info
        self._stats = [WorkerStats(i, 0, 0, 0, 0, 0) for i in range(n_workers)]
        for i in range(n_workers):
            self._pollers.start(self._poll(i), name=f"poll worker {i}")

    async def _poll(self, index: int) -> None:
        """Hand worker ``index``'s outcomes to the runtime until it is gone.

        Once this loop ends, nothing more is heard from the worker, so its pending calls
        could only wait forever: every end but cancellation (its actor died, or anything
        else -- a reply that cannot be unpickled here, a bug) is reported as the loss of
        the worker, naming the cause.
        """
        import ray

        actor = self._actors[index]
        assert self._deliver is not None
        try:
            while True:
                updates, stats = await actor.poll.remote()
                self._stats[index] = stats
                self._deliver(index, updates)
        except ray.exceptions.RayActorError as e:
            lost = WorkerLost(f"worker {index} (pid {self._info[index]['pid']}) died: "
                              f"{_cause(e)}")
        except Exception as e:
            logger.error("worker %d: polling its outcomes failed", index, exc_info=e)
            what, detail = type(e).__name__, _cause(e)
            lost = WorkerLost(f"worker {index} (pid {self._info[index]['pid']}) stopped "
                              f"reporting: {what}" + (f": {detail}" if detail != what else ""))
            lost.__cause__ = e
        self._deliver(index, [WorkerGone(lost)])

    async def create(self, worker: int, cls: type[Agent], ids: Sequence[int],
                     columns: dict[str, list[Any]] | None, init: dict[str, Any]) -> int:
        self._pollers.raise_failure()  # a poller that could not even report a lost worker
        local: int = await self._actors[worker].create.remote(cls, ids, columns, init)
        return local

    def submit(self, worker: int, requests: list[Request]) -> None:
        self._actors[worker].submit.remote(requests)

    def statistics(self) -> list[WorkerStats]:
        return list(self._stats)

    async def place(self, cls: type[Any], *args: Any) -> RayServiceHandle:
        """``cls(*args)`` in a new Ray actor reserving no CPU, preferably on the central
        process's node (soft affinity); ``args`` are copied into it."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if not ray.is_initialized():
            raise RuntimeError("place() needs a started backend (inside `async with sim`)")
        here = ray.get_runtime_context().get_node_id()
        actor = ray.remote(_hosted(cls)).options(
            num_cpus=0, max_concurrency=1000,
            scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=True),
        ).remote(*args)
        try:
            info: dict[str, Any] = await actor.__populace_where__.remote()
        except ray.exceptions.RayActorError as e:
            with contextlib.suppress(Exception):
                ray.kill(actor)
            raise ServiceLost(f"{cls.__name__} could not start: {_cause(e)}") from None
        handle = RayServiceHandle(actor, cls.__name__, info)
        self._services.append(handle)
        return handle

    async def stop(self) -> None:
        services, self._services = self._services, []
        for service in services:
            service.kill()
        await self._pollers.aclose()
        for a in self._actors:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(a.close.remote(), timeout=5)
        self._release()

    def _release(self) -> None:
        """Kill the actors, and the Ray instance if this backend started it."""
        import ray

        for a in self._actors:
            with contextlib.suppress(Exception):
                ray.kill(a)
        self._actors = []
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False


def _cause(error: BaseException) -> str:
    """The first line of a Ray error (the rest is Ray's detail: ids, hints)."""
    from ray.exceptions import ActorUnavailableError

    if isinstance(error, ActorUnavailableError):
        # Ray's words ("temporarily unavailable … RpcError") suggest waiting; a worker that
        # cannot be reached mid-step has lost its calls either way.
        return "unreachable (its process or its node is gone)"
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def ray_host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a Ray address ``HOST:PORT`` or ``ray://HOST:PORT`` (an IPv6 host
    in brackets); None for any other form."""
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        return None
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536 or \
            any(c.isspace() or c in "/[]@?#" for c in host):
        return None
    return host, int(port)


def _unreachable(address: str) -> str | None:
    """Why the Ray cluster at ``address`` cannot be joined now: a host and port must answer
    a TCP connect within 5 s (ray.init would otherwise wait, or fail with a traceback)."""
    import importlib.util
    import socket

    found = ray_host_port(address)
    if found is None:  # auto, local
        return None
    if address.startswith("ray://") and importlib.util.find_spec("grpc") is None:
        return "ray:// needs the Ray Client: pip install 'ray[client]'"
    try:
        socket.create_connection(found, timeout=5).close()
    except OSError as e:
        why = "timed out" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        return f"cannot connect to a Ray cluster there ({why})"
    return None


#: The Ray backend: workers and services in actors, on this machine or a cluster it joins.
RAY = BackendKind(
    "ray", RayBackend, addresses="auto, local, HOST:PORT or ray://HOST:PORT",
    address_ok=lambda a: a in ("auto", "local") or ray_host_port(a) is not None,
    unreachable=_unreachable, ship=ship_by_value)
