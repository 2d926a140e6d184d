"""A Map2D served to a simulation: its queries and moves as coroutines, on every backend.

``await serve(town, sim)`` places the map where the backend places services: on the local
backend the caller's very ``Map2D`` (shared, not copied), on Ray a copy of its positions in
an actor of its own. Either way it returns a :class:`MapService` whose methods are the
map's, as coroutines, so the same code runs on both backends and the proxy pickles to
every worker.

Each call is one message to the map's process: ask it for many points at once
(``nearby_many``, ``k_nearest_many``) and move many ids at once (``move_many``). Watches
(``Map2D.watch``) stay with a local map: their listeners would run in the map's process.
"""

from __future__ import annotations

from typing import Any

from populace.core import LocalBackend, ServiceHandle

from ._map import IdArray, Map2D, MapStats, Rows


class _MapHost:
    """The object a backend places for a served map."""

    def __init__(self, plane: Map2D | dict[str, Any]) -> None:
        if isinstance(plane, Map2D):
            self.map = plane  # the local backend: the caller's own map
        else:  # a copy, from its shape and positions
            self.map = Map2D(plane["width"], plane["height"], plane["cell_size"])
            self.map.set_state(plane["state"])

    def call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if method == "fetch_state":
            return self.map.get_state()
        if method == "load_state":
            return self.map.set_state(*args)
        if method == "fetch_statistics":
            return self.map.statistics()
        if method not in _VERBS:
            raise AttributeError(f"a served map has no method {method!r}")
        return getattr(self.map, method)(*args, **kwargs)


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
        out: IdArray = await self._call("nearby", pos, radius, exclude=exclude)
        return out

    async def k_nearest(self, pos: tuple[float, float], k: int, *,
                        exclude: int | None = None) -> IdArray:
        out: IdArray = await self._call("k_nearest", pos, k, exclude=exclude)
        return out

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
    if backend is None:
        backend = LocalBackend()
    if backend.remote:
        what: Map2D | dict[str, Any] = {
            "width": plane.width, "height": plane.height, "cell_size": plane.cell_size,
            "state": plane.get_state()}
    else:
        what = plane
    handle = await backend.place(_MapHost, what)
    return MapService(handle, plane.width, plane.height, plane.cell_size)
