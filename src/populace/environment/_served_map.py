"""A Map2D served to a simulation: its queries and moves as coroutines, on every backend.

``await serve(town, sim)`` places the map where the backend places services: on the local
backend the caller's very ``Map2D`` (shared, not copied), on Ray a copy of its positions in
an actor of its own. Either way it returns a :class:`MapService` whose methods are the
map's, as coroutines, so the same code runs on both backends and the proxy pickles to
every worker.

Each call is one message to the map's process, with one exception: the ``nearby`` and
``k_nearest`` calls that a worker's agents make in one loop tick travel together, as one
message per radius or ``k`` (each answer exactly as ``Map2D.nearby`` or ``k_nearest``
gives it), so agents asking one by one cost about what one query for all of them does.
Ask for many points at once yourself where you can (``nearby_many``, ``k_nearest_many``),
and move many ids at once (``move_many``). Watches (``Map2D.watch``) stay with a local
map: their listeners would run in the map's process.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import math
from typing import Any

import numpy as np

from populace.core import LocalBackend, ServiceHandle, Signal

from ._errors import ServiceClosed
from ._map import IdArray, Map2D, MapStats, Rows


class _MapHost:
    """The object a backend places for a served map."""

    def __init__(self, plane: Map2D) -> None:
        self.map = plane  # the caller's own map locally; a copy elsewhere (Map2D.__reduce__)

    def call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if method == "fetch_state":
            return self.map.get_state()
        if method == "load_state":
            return self.map.set_state(*args)
        if method == "fetch_statistics":
            return self.map.statistics()
        if method == "nearby_ranked":
            return self.nearby_ranked(*args)
        if method == "k_nearest_each":
            return self.k_nearest_each(*args)
        if method not in _VERBS:
            raise AttributeError(f"a served map has no method {method!r}")
        return getattr(self.map, method)(*args, **kwargs)

    def nearby_ranked(self, points: Any, radius: float, exclude: Any) -> Any:
        """``nearby_many`` with each row as ``nearby`` orders it: nearest first, then id."""
        indptr, ids = self.map.nearby_many(points, radius, exclude=exclude)
        if ids.size:
            pts = np.asarray(points, dtype=np.float64)
            rows = np.repeat(np.arange(len(pts)), np.diff(indptr))
            xs, ys = self.map.positions(ids)
            d2 = (xs - pts[rows, 0]) ** 2 + (ys - pts[rows, 1]) ** 2
            ids = ids[np.lexsort((ids, d2, rows))]
        return indptr, ids

    def k_nearest_each(self, points: Any, k: int, exclude: Any) -> Any:
        """``k_nearest`` of each point, as CSR arrays: one message for a tick's calls. Point
        by point in this process (``k_nearest_many`` may order ties at the k-th distance
        otherwise, and ``k_nearest`` promises the smaller id)."""
        rows = [self.map.k_nearest((float(x), float(y)), k, exclude=None if e < 0 else int(e))
                for (x, y), e in zip(np.asarray(points).tolist(), np.asarray(exclude).tolist(),
                                     strict=True)]
        indptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum([len(r) for r in rows], out=indptr[1:])
        ids = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
        return indptr, ids.astype(np.int64, copy=False)


class _Asks:
    """The ``nearby`` and ``k_nearest`` calls of one tick, answered together: one message
    per kind of call and radius or ``k``."""

    __slots__ = ("error", "exclude", "kinds", "left", "points", "rows", "signal")

    def __init__(self, signal: Signal) -> None:
        self.points: list[tuple[float, float]] = []
        self.kinds: list[tuple[str, float | int]] = []  # (the host's method, radius or k)
        self.exclude: list[int] = []
        self.rows: list[Any] = []
        self.error: BaseException | None = None
        self.signal = signal
        self.left = 0


#: Map2D's methods that a served map runs for its callers.
_VERBS = frozenset(("place", "place_many", "move", "move_many", "remove", "position",
                    "positions", "ids", "nearby", "k_nearest", "nearby_many",
                    "k_nearest_many"))


class MapService:
    """A :class:`Map2D` served by :func:`serve`: the map's methods, as coroutines.

    >>> town = await serve(Map2D(100.0, 100.0, 5.0), sim)               # doctest: +SKIP
    >>> await town.place_many(ids, xs, ys)                              # doctest: +SKIP
    >>> indptr, indices = await town.nearby_many(ids, 5.0, exclude=ids)  # doctest: +SKIP
    """

    def __init__(self, handle: ServiceHandle, width: float, height: float,
                 cell_size: float) -> None:
        self._handle = handle
        self.width = width
        self.height = height
        self.cell_size = cell_size
        self._asks: _Asks | None = None  # this tick's nearby calls (never pickled)

    def __reduce__(self) -> tuple[Any, ...]:
        return (MapService, (self._handle, self.width, self.height, self.cell_size))

    def __repr__(self) -> str:
        return (f"<MapService {self.width:g}x{self.height:g} cell {self.cell_size:g}, "
                f"pid {self.info.get('pid')}>")

    @property
    def info(self) -> dict[str, Any]:
        """Where the map lives: ``{"pid", "node"}``."""
        return self._handle.info

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        from ._remote import _ask

        return await _ask(self._handle.call("call", method, args, kwargs))

    async def place(self, id: int, x: float, y: float) -> None:
        await self._call("place", id, x, y)

    async def place_many(self, ids: Any, xs: Any, ys: Any) -> None:
        await self._call("place_many", ids, xs, ys)

    async def move(self, id: int, x: float, y: float) -> None:
        await self._call("move", id, x, y)

    async def move_many(self, ids: Any, xs: Any, ys: Any) -> None:
        await self._call("move_many", ids, xs, ys)

    async def remove(self, id: int) -> None:
        await self._call("remove", id)

    async def position(self, id: int) -> tuple[float, float]:
        out: tuple[float, float] = await self._call("position", id)
        return out

    async def positions(self, ids: Any) -> tuple[Any, Any]:
        out: tuple[Any, Any] = await self._call("positions", ids)
        return out

    async def ids(self) -> IdArray:
        out: IdArray = await self._call("ids")
        return out

    async def nearby(self, pos: tuple[float, float], radius: float, *,
                     exclude: int | None = None) -> IdArray:
        """:meth:`Map2D.nearby`; the calls of one tick travel together (see above)."""
        if not radius >= 0:
            raise ValueError(f"radius must be >= 0, got {radius}")
        return await self._in_tick("nearby_ranked", float(radius), pos, exclude)

    async def k_nearest(self, pos: tuple[float, float], k: int, *,
                        exclude: int | None = None) -> IdArray:
        """:meth:`Map2D.k_nearest`; the calls of one tick travel together (see above)."""
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        return await self._in_tick("k_nearest_each", int(k), pos, exclude)

    async def _in_tick(self, method: str, param: float | int, pos: tuple[float, float],
                       exclude: int | None) -> IdArray:
        x, y = float(pos[0]), float(pos[1])
        if not (math.isfinite(x) and math.isfinite(y)):
            raise ValueError(f"query position must be finite, got ({x}, {y})")
        asks = self._asks or self._open()
        i = len(asks.points)
        asks.points.append((x, y))
        asks.kinds.append((method, param))
        asks.exclude.append(-1 if exclude is None else int(exclude))  # -1: nobody's id
        await asks.signal
        if asks.error is not None:
            raise copy.copy(asks.error)
        out: IdArray = asks.rows[i]
        return out

    def _open(self) -> _Asks:
        loop = asyncio.get_running_loop()
        asks = self._asks = _Asks(Signal(loop))
        loop.call_soon(self._send, asks)
        return asks

    def _send(self, asks: _Asks) -> None:
        from ._remote import _as_closed

        if self._asks is asks:
            self._asks = None
        asks.rows = [None] * len(asks.points)
        groups: dict[tuple[str, float | int], list[int]] = {}
        for i, kind in enumerate(asks.kinds):
            groups.setdefault(kind, []).append(i)
        asks.left = len(groups)
        points = np.array(asks.points, dtype=np.float64)
        exclude = np.array(asks.exclude, dtype=np.int64)

        def done(which: list[int], future: asyncio.Future[Any]) -> None:
            error = (ServiceClosed("the map call was cancelled") if future.cancelled()
                     else future.exception())
            if error is not None:
                asks.error = asks.error or _as_closed(error)
            else:
                indptr, ids = future.result()
                for k, i in enumerate(which):
                    asks.rows[i] = ids[indptr[k]:indptr[k + 1]]
            asks.left -= 1
            if not asks.left:
                asks.signal.fire()

        for (method, param), which in groups.items():
            at = np.array(which)
            call = self._handle.call("call", method, (points[at], param, exclude[at]), {})
            call.add_done_callback(functools.partial(done, which))

    async def nearby_many(self, points: Any, radius: float, *, exclude: Any = None) -> Rows:
        out: Rows = await self._call("nearby_many", points, radius, exclude=exclude)
        return out

    async def k_nearest_many(self, points: Any, k: int, *, exclude: Any = None) -> Rows:
        out: Rows = await self._call("k_nearest_many", points, k, exclude=exclude)
        return out

    async def fetch_statistics(self) -> MapStats:
        out: MapStats = await self._call("fetch_statistics")
        return out

    async def fetch_state(self) -> dict[str, Any]:
        """The positions (:meth:`Map2D.get_state`), for a checkpoint."""
        out: dict[str, Any] = await self._call("fetch_state")
        return out

    async def load_state(self, state: dict[str, Any]) -> None:
        await self._call("load_state", state)

    async def aclose(self) -> None:
        """Stop serving (a remote map's process ends; a local map stays as it is)."""
        self._handle.kill()

    async def __aenter__(self) -> MapService:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def serve_map(plane: Map2D, backend: Any) -> MapService:
    """Place ``plane`` with ``backend`` (None: in this process); see :func:`serve`."""
    handle = await (backend or LocalBackend()).place(_MapHost, plane)
    return MapService(handle, plane.width, plane.height, plane.cell_size)
