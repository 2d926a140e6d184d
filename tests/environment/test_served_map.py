"""serve(Map2D): the map's methods as coroutines, the same on the local backend (the
caller's own map) and on Ray (a copy in an actor), asked by the central process and by
agents on the workers."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import numpy as np
import pytest

from populace.core import Agent, Profile, Simulation
from populace.environment import Map2D, serve

WAIT = 60  # seconds: a hang on the cluster fails instead of stalling


@pytest.fixture(params=["local", "ray"])
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "ray":
        request.getfixturevalue("ray_cluster")  # skips when Ray is not installed
    return str(request.param)


class Walker(Agent):
    __slots__ = ("town",)

    def __init__(self, id: int, profile: Profile | None = None, *, town: Any) -> None:
        super().__init__(id, profile)
        self.town = town

    async def look(self) -> list[int]:
        here = await self.town.position(self.id)
        return (await self.town.nearby(here, 10.0, exclude=self.id)).tolist()


def rows(found: tuple[np.ndarray, np.ndarray]) -> list[list[int]]:
    indptr, indices = found
    return [indices[a:b].tolist() for a, b in itertools.pairwise(indptr)]


async def within(awaitable: Any) -> Any:
    async def wait() -> Any:
        return await awaitable

    return await asyncio.wait_for(wait(), WAIT)


async def test_a_served_map_answers_as_the_map_does(backend: str) -> None:
    rng = np.random.default_rng(3)
    n = 200
    xs, ys = rng.uniform(0, 100, n), rng.uniform(0, 100, n)
    plane = Map2D(100.0, 100.0, cell_size=10.0)
    plane.place_many(np.arange(n), xs, ys)
    copy = Map2D(100.0, 100.0, cell_size=10.0)  # what the served map must answer
    copy.place_many(np.arange(n), xs, ys)
    async with Simulation(workers=2, backend=backend) as sim:
        town = await serve(plane, sim)
        try:
            ids = np.arange(n)
            assert rows(await within(town.nearby_many(ids, 10.0, exclude=ids))) == \
                rows(copy.nearby_many(ids, 10.0, exclude=ids))
            walkers = await sim.create(Walker, n, init={"town": town})
            seen = await within(walkers.map(Walker.look))
            assert seen == [sorted(r, key=lambda j: (
                (xs[j] - xs[i]) ** 2 + (ys[j] - ys[i]) ** 2, j))
                for i, r in enumerate(rows(copy.nearby_many(ids, 10.0, exclude=ids)))]
            moved = rng.uniform(0, 100, (50, 2))
            await within(town.move_many(ids[:50], moved[:, 0], moved[:, 1]))
            copy.move_many(ids[:50], moved[:, 0], moved[:, 1])
            await within(town.remove(7))
            copy.remove(7)
            assert rows(await within(town.k_nearest_many(moved, 4))) == \
                rows(copy.k_nearest_many(moved, 4))
            assert (await within(town.ids())).tolist() == copy.ids().tolist()
            stats = await within(town.fetch_statistics())
            assert stats.positions == n - 1 and stats.queries > n
            state = await within(town.fetch_state())
            await within(town.load_state(copy.get_state()))
            assert np.array_equal(state["x"], copy.get_state()["x"])
            # The local backend serves the caller's own map; Ray a copy of it.
            assert (7 in plane) is (backend == "ray")
            with pytest.raises(KeyError):
                await within(town.position(7))
        finally:
            await town.aclose()


def counted(town: Any) -> list[str]:
    """The methods ``town``'s handle is asked to run from now on, in order."""
    calls: list[str] = []
    call = town._handle.call

    def counting(*args: Any) -> Any:
        calls.append(args[1])
        return call(*args)

    town._handle.call = counting
    return calls


async def test_nearby_calls_of_one_tick_travel_together() -> None:
    rng = np.random.default_rng(5)
    plane = Map2D(50.0, 50.0, cell_size=5.0)
    plane.place_many(np.arange(300), rng.uniform(0, 50, 300), rng.uniform(0, 50, 300))
    town = await serve(plane)
    calls = counted(town)
    asks = [((float(x), float(y)), r, e) for (x, y), r, e in zip(
        rng.uniform(0, 50, (40, 2)), [3.0, 6.0] * 20, [None, 7] * 20, strict=True)]
    got = await asyncio.gather(*(town.nearby(p, r, exclude=e) for p, r, e in asks))
    assert [g.tolist() for g in got] == [plane.nearby(p, r, exclude=e).tolist()
                                         for p, r, e in asks]
    assert calls == ["nearby_ranked", "nearby_ranked"]  # one per radius, not one per call
    with pytest.raises(ValueError, match="finite"):  # a bad point fails alone, at once
        await town.nearby((float("nan"), 1.0), 3.0)
    await town.aclose()


async def test_k_nearest_calls_of_one_tick_travel_together_ties_as_k_nearest() -> None:
    plane = Map2D(20.0, 20.0, cell_size=2.0)
    grid = np.arange(0, 20, 2.0)  # a lattice: equal distances everywhere, ties to break
    xs, ys = np.meshgrid(grid, grid)
    plane.place_many(np.arange(xs.size), xs.ravel(), ys.ravel())
    town = await serve(plane)
    calls = counted(town)
    asks = [((float(x), float(y)), k, e) for (x, y), k, e in zip(
        np.random.default_rng(2).uniform(0, 20, (30, 2)).round(), [1, 5, 4] * 10,
        [None, 3, 45] * 10, strict=True)]
    got = await asyncio.gather(*(town.k_nearest(p, k, exclude=e) for p, k, e in asks),
                               town.nearby((4.0, 4.0), 2.0))
    assert [g.tolist() for g in got[:-1]] == [plane.k_nearest(p, k, exclude=e).tolist()
                                              for p, k, e in asks]
    assert got[-1].tolist() == plane.nearby((4.0, 4.0), 2.0).tolist()
    assert sorted(calls) == ["k_nearest_each"] * 3 + ["nearby_ranked"]  # one per k, radius
    with pytest.raises(ValueError, match="k must be"):
        await town.k_nearest((1.0, 1.0), -1)
    await town.aclose()
