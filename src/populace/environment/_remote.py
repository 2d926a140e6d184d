"""The environment service in its own process, used through the same API.

:func:`serve` is the one entry point. On a remote backend (Ray) it asks the backend to place
an :class:`EnvService` in a process of its own (``Backend.place``: a Ray actor on the central
process's node) and returns a :class:`RemoteEnvService`, a small picklable proxy that agents
on any worker (and the central process) use exactly like a local service --
``PerWorker(EnvClient, service)`` batches each worker's operations of one tick into one call.
On the local backend it returns a plain :class:`EnvService` running as tasks of the
simulation's own event loop, which owns the caller's ``Env`` object itself.

After a remote ``serve`` the caller's ``Env`` tree is a stale copy: it refuses reads, writes
and new listeners with :class:`EnvServedError`, naming the service call to use instead, so
nothing diverges silently. Code written against the service (``await service.update(...)``,
``await service.monitor(...)``, ``Timeline.mirror(service)``) runs unchanged on every backend.

Listeners run where the environment lives. :meth:`RemoteEnvService.monitor` ships the
listener to the service's process; the values of monitored keys come back with
:meth:`RemoteEnvService.fetch_statistics`, which is what run statistics and the studio show.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast, overload

from populace.core import LocalBackend, Placeholder, ServiceHandle, ServiceLost

from ._env import Env, EnvEvent, EventKind
from ._errors import EnvServedError, ServiceClosed
from ._map import Map2D
from ._ops import Op, Reply, SubmitVerbs
from ._served_map import MapService, serve_map
from ._service import EnvService, ServiceStats

if TYPE_CHECKING:
    from populace.core import Simulation


class ServiceActor:
    """The object a backend places for :func:`serve`: one :class:`EnvService` on its own
    event loop (in a Ray actor, ``ray::ServiceActor``)."""

    def __init__(self, env: Env | dict[str, Any], max_concurrency: int) -> None:
        if isinstance(env, Env):
            tree = env
        else:  # a tree's get_state(), shipped to another process
            tree = Env(env["name"])
            tree.set_state(env)
        # Locally the caller's own tree (LocalBackend.place shares it); elsewhere a copy.
        self.service = EnvService(tree, max_concurrency=max_concurrency)

    async def apply_batch(self, ops: list[Op]) -> Reply:
        reply: Reply = await self.service.submit(ops)
        return reply

    async def monitor(self, listener: Callable[[EnvEvent], Any], key: str | None,
                      prefix: str | None, event: Any, descendants: bool,
                      env: str | None) -> None:
        target = self.service.env if env is None else self.service.env.find(env)
        target.monitor(listener, key, prefix, event, descendants=descendants)

    async def statistics(self) -> ServiceStats:
        return self.service.statistics()

    async def get_state(self) -> dict[str, Any]:
        return self.service.env.get_state()

    async def set_state(self, state: dict[str, Any]) -> None:
        self.service.env.set_state(state)

    async def close(self) -> None:
        await self.service.aclose()


class RemoteEnvService(SubmitVerbs):
    """A proxy to an :class:`EnvService` placed in another process; pickles to any worker.

    It has the service's verbs (``query``, ``update``, ``incr``, … and ``apply``) and its
    batched :meth:`submit`, so :class:`EnvClient` wraps it as it wraps a local service.
    If the service's process dies, every pending and later operation fails with
    :class:`ServiceClosed` naming the cause.
    """

    def __init__(self, handle: ServiceHandle, max_concurrency: int) -> None:
        self._handle = handle
        self._max = max_concurrency

    def __reduce__(self) -> tuple[Any, ...]:
        return (RemoteEnvService, (self._handle, self._max))

    def __repr__(self) -> str:
        return (f"<RemoteEnvService pid={self.info.get('pid')} "
                f"max_concurrency={self._max}>")

    @property
    def info(self) -> dict[str, Any]:
        """Where the service runs: ``{"pid", "node"}``."""
        return self._handle.info

    @property
    def max_concurrency(self) -> int:
        return self._max

    def submit(self, ops: Sequence[Op]) -> Placeholder[Reply]:
        """Send ``ops`` as one call; a placeholder of their :class:`Reply`."""
        loop = asyncio.get_running_loop()
        n = len(ops)
        placeholder: Placeholder[Reply] = Placeholder(loop, "environment batch")
        future = self._handle.call("apply_batch", list(ops))

        def done(f: asyncio.Future[Reply]) -> None:
            # A cancelled call (the service closing under it) fails its ops, never hangs them.
            error: BaseException | None = (ServiceClosed("the environment service call was "
                                                         "cancelled") if f.cancelled()
                                           else f.exception())
            if error is None:
                placeholder.set_result(f.result())
                return
            # Only a lost service means the service is gone. Any other failure of the call
            # (an op's function that cannot be unpickled in the service's process, say)
            # failed this batch alone while the service lives on: each op gets that error.
            placeholder.set_result(Reply([None] * n, {i: _copy(_as_closed(error))
                                                      for i in range(n)}))

        future.add_done_callback(done)
        return placeholder

    async def monitor(self, listener: Callable[[EnvEvent], Any], key: str | None = None,
                      prefix: str | None = None,
                      event: EventKind | Iterable[EventKind] | None = None, *,
                      descendants: bool = False, env: str | None = None) -> None:
        """:meth:`Env.monitor` on the served environment (or the one at path ``env``).

        ``listener`` is pickled to the service's process and runs there.
        """
        await _ask(self._handle.call("monitor", listener, key, prefix, event, descendants,
                                     env))

    async def fetch_statistics(self) -> ServiceStats:
        stats: ServiceStats = await _ask(self._handle.call("statistics"))
        return stats

    async def fetch_state(self) -> dict[str, Any]:
        state: dict[str, Any] = await _ask(self._handle.call("get_state"))
        return state

    async def load_state(self, state: dict[str, Any]) -> None:
        await _ask(self._handle.call("set_state", state))

    async def aclose(self) -> None:
        """Stop the service (pending async updates fail with :class:`ServiceClosed`)."""
        try:
            await asyncio.wait_for(self._handle.call("close"), timeout=5)
        except Exception:  # already gone: nothing left to close
            pass
        self._handle.kill()

    async def __aenter__(self) -> RemoteEnvService:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _as_closed(error: BaseException) -> BaseException:
    """A lost service's error as :class:`ServiceClosed`; any other error as it is."""
    if isinstance(error, ServiceLost):
        return ServiceClosed(f"the environment service is gone: {_first_line(error)}")
    return error


def _copy(error: BaseException) -> BaseException:
    # One instance per op: the runtime adds a note per failing agent to the error.
    try:
        return copy.copy(error)
    except Exception:  # some of Ray's wrapped errors do not copy; share the one then
        return error


async def _ask(call: asyncio.Future[Any]) -> Any:
    """Await a call; a lost service raises :class:`ServiceClosed`, as the verbs do."""
    try:
        return await call
    except Exception as error:
        closed = _as_closed(error)
        if closed is error:
            raise
        raise closed from error


@overload
async def serve(env: Env, sim: Simulation | None = None, *, max_concurrency: int = 64,
                shards: int = 1) -> EnvService | RemoteEnvService: ...


@overload
async def serve(env: Map2D, sim: Simulation | None = None, *, max_concurrency: int = 64,
                shards: int = 1) -> MapService: ...


async def serve(env: Env | Map2D, sim: Simulation | None = None, *, max_concurrency: int = 64,
                shards: int = 1) -> EnvService | RemoteEnvService | MapService:
    """Serve ``env`` to the agents of ``sim``: remote on the Ray backend, local otherwise.

    ``shards=N`` (N > 1) splits the tree's keys over N services, each placed by the backend
    (actors on Ray, tasks of this loop locally), by a hash of the key's name; the result is
    a ``RemoteEnvService`` made of several (see ``_shards``), and the ``Env`` objects
    refuse direct use as after a remote ``serve``.

    ``env`` may also be a :class:`Map2D`: the result is then a :class:`MapService`, the
    map's methods as coroutines, the caller's own map on the local backend and a copy in
    an actor of its own on Ray (``max_concurrency`` does not apply).

    Locally the returned :class:`EnvService` owns ``env`` itself, so the ``Env`` object stays
    usable (though writes to it bypass the service's per-key queues). On a remote backend the
    tree's keys and children are copied into a service of its own, near the central
    process; the ``Env`` objects then refuse every use with :class:`EnvServedError` (they
    would be stale), and listeners must be added afterwards, through
    ``await service.monitor(...)`` (``serve`` refuses a tree that has some). Code that
    reads, writes and listens through the service runs the same on every backend. Close it
    with ``await service.aclose()`` (or ``async with``) before the simulation stops.

    >>> service = await serve(Env("global"), sim)                       # doctest: +SKIP
    >>> people = await sim.create(Person, 10_000,
    ...                           init={"env": PerWorker(EnvClient, service)})  # doctest: +SKIP
    """
    if isinstance(env, Map2D):
        return await serve_map(env, sim.backend if sim is not None else None)
    if env._served is not None:
        raise env._refuse("serve")
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
    backend = sim.backend if sim is not None else LocalBackend()
    if shards > 1:
        from ._shards import serve_sharded

        _refuse_listeners(env, backend.name)
        sharded = await serve_sharded(env, backend, shards, max_concurrency)
        env._serve_elsewhere(f"{shards} sharded services ({backend.name})")
        return sharded
    if backend.remote:  # the tree travels as its state; its listeners cannot
        _refuse_listeners(env, backend.name)
    handle = await backend.place(ServiceActor, env.get_state() if backend.remote else env,
                                 max_concurrency)
    if handle.here is not None:  # in this process: the service itself, owning env
        return cast(EnvService, handle.here.service)
    env._serve_elsewhere(f"a remote service ({backend.name}, pid {handle.info.get('pid')})")
    return RemoteEnvService(handle, max_concurrency)


def _refuse_listeners(env: Env, backend: str) -> None:
    """Listeners stay behind when a tree is copied into another process: name the first."""
    found = env._oldest_listener()
    if found is None:
        return
    holder, entry = found
    args = ["listener"]
    if entry.key is not None:
        args.append(f"key={entry.key!r}")
        what = f"on key {entry.key!r}"
    elif entry.prefix is not None:
        args.append(f"prefix={entry.prefix!r}")
        what = f"on keys starting with {entry.prefix!r}"
    else:
        what = "on every key"
    if entry.descendants:
        args.append("descendants=True")
    if holder.parent is not None:
        args.append(f"env={holder.path!r}")
    raise EnvServedError(
        f"environment {holder.path!r} has a listener {what} ({_name(entry.fn)}), added with "
        f"Env.monitor() before serve(); on the {backend} backend the environment moves to "
        "a process of its own, where that listener would never run. Add it after serve(): "
        f"`await service.monitor({', '.join(args)})`, which runs it where the environment "
        "lives on every backend")


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)
