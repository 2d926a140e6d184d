"""The environment service in its own process: a Ray actor, used through the same API.

:func:`serve` is the one entry point: given a running :class:`~populace.core.Simulation` on
the Ray backend it starts an :class:`EnvService` inside a Ray actor and returns a
:class:`RemoteEnvService`, a small picklable proxy that agents on any worker (and the central
process) use exactly like a local service -- ``PerWorker(EnvClient, service)`` batches each
worker's operations of one tick into one actor call. On the local backend it returns a plain
:class:`EnvService` running as tasks of the simulation's own event loop.

Listeners run where the environment lives. On a remote service, :meth:`RemoteEnvService.monitor`
ships the listener to the actor; the values of monitored keys come back with
:meth:`RemoteEnvService.fetch_statistics`, which is what run statistics and the studio show.
"""

from __future__ import annotations

import asyncio
import copy
import os
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from populace.core import Placeholder

from ._env import Env, EnvEvent, EventKind
from ._errors import ServiceClosed
from ._ops import Op, Reply, SubmitVerbs
from ._service import EnvService, ServiceStats

if TYPE_CHECKING:
    from populace.core import Simulation


class ServiceActor:
    """Hosts one :class:`EnvService` inside a Ray actor (an async actor: one event loop)."""

    def __init__(self, state: dict[str, Any], max_concurrency: int) -> None:
        env = Env(state["name"])
        env.set_state(state)
        self.service = EnvService(env, max_concurrency=max_concurrency)

    async def ready(self) -> dict[str, Any]:
        import ray

        return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id()}

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
    """A proxy to an :class:`EnvService` living in a Ray actor; pickles to any worker.

    It has the service's verbs (``query``, ``update``, ``incr``, … and ``apply``) and its
    batched :meth:`submit`, so :class:`EnvClient` wraps it as it wraps a local service.
    If the actor dies, every pending and later operation fails with :class:`ServiceClosed`
    naming the cause.
    """

    def __init__(self, actor: Any, info: dict[str, Any], max_concurrency: int) -> None:
        self._actor = actor
        self.info = info
        self._max = max_concurrency

    def __reduce__(self) -> tuple[Any, ...]:
        return (RemoteEnvService, (self._actor, self.info, self._max))

    def __repr__(self) -> str:
        return (f"<RemoteEnvService pid={self.info.get('pid')} "
                f"max_concurrency={self._max}>")

    @property
    def max_concurrency(self) -> int:
        return self._max

    def submit(self, ops: Sequence[Op]) -> Placeholder[Reply]:
        """Send ``ops`` as one actor call; a placeholder of their :class:`Reply`."""
        loop = asyncio.get_running_loop()
        n = len(ops)
        placeholder: Placeholder[Reply] = Placeholder(loop, "environment batch")
        future = asyncio.wrap_future(self._actor.apply_batch.remote(list(ops)).future(),
                                     loop=loop)

        def done(f: asyncio.Future[Reply]) -> None:
            error = f.exception()
            if error is None:
                placeholder.set_result(f.result())
                return
            # Only a dead actor means the service is gone. Any other failure of the call
            # (an op's function that cannot be unpickled in the actor's process, say) failed
            # this batch alone while the service lives on: each op gets that error itself.
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
        await _ask(self._actor.monitor.remote(listener, key, prefix, event, descendants, env))

    async def fetch_statistics(self) -> ServiceStats:
        stats: ServiceStats = await _ask(self._actor.statistics.remote())
        return stats

    async def fetch_state(self) -> dict[str, Any]:
        state: dict[str, Any] = await _ask(self._actor.get_state.remote())
        return state

    async def load_state(self, state: dict[str, Any]) -> None:
        await _ask(self._actor.set_state.remote(state))

    async def aclose(self) -> None:
        """Stop the actor (pending async updates fail with :class:`ServiceClosed`)."""
        import ray

        try:
            await asyncio.wait_for(self._actor.close.remote(), timeout=5)
        except Exception:  # already gone: nothing left to close
            pass
        try:
            ray.kill(self._actor)
        except Exception:
            pass


    async def __aenter__(self) -> RemoteEnvService:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _as_closed(error: BaseException) -> BaseException:
    """A dead actor's error as :class:`ServiceClosed`; any other error as it is."""
    from ray.exceptions import RayActorError

    if isinstance(error, RayActorError):
        return ServiceClosed(f"the environment service is gone: {_first_line(error)}")
    return error


def _copy(error: BaseException) -> BaseException:
    # One instance per op: the runtime adds a note per failing agent to the error.
    try:
        return copy.copy(error)
    except Exception:  # some of Ray's wrapped errors do not copy; share the one then
        return error


async def _ask(ref: Any) -> Any:
    """Await an actor call; a dead actor raises :class:`ServiceClosed`, as the verbs do."""
    try:
        return await ref
    except Exception as error:
        closed = _as_closed(error)
        if closed is error:
            raise
        raise closed from error


async def serve(env: Env, sim: Simulation | None = None, *,
                max_concurrency: int = 64) -> EnvService | RemoteEnvService:
    """Serve ``env`` to the agents of ``sim``: remote on the Ray backend, local otherwise.

    On Ray the environment's keys and children (not its listeners: subscribe those through
    :meth:`RemoteEnvService.monitor`) are copied into a new actor on the central process's
    node; afterwards read and write only through the returned service. Close it with
    ``await service.aclose()`` before the simulation stops.

    >>> service = await serve(Env("global"), sim)                       # doctest: +SKIP
    >>> people = await sim.create(Person, 10_000,
    ...                           init={"env": PerWorker(EnvClient, service)})  # doctest: +SKIP
    """
    if sim is None or not getattr(sim.backend, "remote", False):
        return EnvService(env, max_concurrency=max_concurrency)
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
    here = ray.get_runtime_context().get_node_id()
    actor: Any = ray.remote(ServiceActor).options(
        num_cpus=0, max_concurrency=1000,
        scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=True),
    ).remote(env.get_state(), max_concurrency)
    info: dict[str, Any] = await actor.ready.remote()
    return RemoteEnvService(actor, info, max_concurrency)
