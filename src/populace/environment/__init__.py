"""Environments: shared state that agents read, change and react to.

- :class:`Env` -- a tree of key/value environments (global ▸ group ▸ …) with fall-through
  reads, atomic read-modify-write, and listeners (:meth:`Env.monitor`).
- :class:`EnvService` -- one environment served to many agents: operations queued per key,
  applied in arrival order, different keys in parallel up to ``max_concurrency``;
  :class:`EnvClient` batches a worker's operations of one tick into one message; :class:`Op`
  is an operation as picklable data.
- Many keys in one operation (``query_many``, ``incr_many``, ``update_many``; with ``at=``
  the elements of an array key), on ``Env``, the service and the client, which also merges
  a tick's like one-key operations into one.
- :func:`serve` -- the service for a simulation: placed by the backend in a process of its own
  (:class:`RemoteEnvService`, same API) on the Ray backend, in-process on the local one;
  ``shards=N`` splits the keys over N services. After a remote ``serve`` the ``Env`` objects
  refuse direct use (:class:`EnvServedError`): read, write and listen through the service,
  which works the same on every backend. ``serve(map2d, sim)`` serves a map the same way.
- :class:`Timeline` -- the simulated clock (mirrored into an ``Env`` or through a service);
  :class:`Map2D` -- positions and neighbours, for one point or many at once.

Errors derive from :class:`EnvError` (itself a :class:`populace.core.PopulaceError`).
"""

from ._env import Env, EnvEvent, EnvStats, EventKind
from ._errors import (
    DuplicateKeyError,
    EnvError,
    EnvServedError,
    ServiceClosed,
    UnknownKeyError,
)
from ._listeners import ListenerError, Subscription
from ._map import Map2D, MapStats, Watch
from ._ops import EnvVerbs, Op, OpKind, Reply
from ._remote import RemoteEnvService, serve
from ._service import ClientStats, EnvClient, EnvService, ServiceStats
from ._timeline import Timeline, TimeStep

__all__ = [
    "ClientStats",
    "DuplicateKeyError",
    "Env",
    "EnvClient",
    "EnvError",
    "EnvEvent",
    "EnvServedError",
    "EnvService",
    "EnvStats",
    "EnvVerbs",
    "EventKind",
    "ListenerError",
    "Map2D",
    "MapStats",
    "Op",
    "OpKind",
    "RemoteEnvService",
    "Reply",
    "ServiceClosed",
    "ServiceStats",
    "Subscription",
    "TimeStep",
    "Timeline",
    "UnknownKeyError",
    "Watch",
    "serve",
]
