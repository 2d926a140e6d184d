"""The environment reaches its services only through ``Backend.place`` (issue 30): a
backend decides where a served ``Env`` or ``Map2D`` lives, and a map ships as its shape
and positions."""

from __future__ import annotations

import asyncio
import pickle
from typing import Any

import numpy as np

from populace.core import LocalBackend, Simulation
from populace.environment import Env, EnvService, Map2D, serve


class CountingBackend(LocalBackend):
    """The local backend, counting what it is asked to place."""

    def __init__(self) -> None:
        super().__init__()
        self.placed: list[str] = []

    async def place(self, cls: type[Any], *args: Any) -> Any:
        self.placed.append(cls.__name__)
        return await super().place(cls, *args)


def test_a_served_env_and_map_are_placed_by_the_backend() -> None:
    async def go() -> tuple[list[str], bool, list[int]]:
        backend = CountingBackend()
        async with Simulation(workers=1, backend=backend) as sim:
            env = Env("town")
            service = await serve(env, sim)
            await service.register("count", 0)
            await service.incr("count", 3)
            shared = env.query("count") == 3  # locally the service owns the caller's tree
            plane = Map2D(10, 10, cell_size=1.0)
            plane.place_many(np.arange(3), np.array([1.0, 2.0, 9.0]), np.array([1.0, 2.0, 9.0]))
            served = await serve(plane, sim)
            near = sorted(int(i) for i in await served.nearby((1.0, 1.0), 2.0, exclude=0))
            assert isinstance(service, EnvService)
            await service.aclose()
            return backend.placed, shared, near

    placed, shared, near = asyncio.run(go())
    assert placed == ["ServiceActor", "_MapHost"]
    assert shared
    assert near == [1]


def test_a_map_pickles_as_its_shape_and_positions() -> None:
    plane = Map2D(100, 50, cell_size=5.0)
    ids = np.arange(1000)
    rng = np.random.default_rng(1)
    plane.place_many(ids, rng.uniform(0, 100, 1000), rng.uniform(0, 50, 1000))
    plane.watch(0, 3.0, on_enter=lambda *a: None)  # a closure: stays with its code
    copy = pickle.loads(pickle.dumps(plane))
    assert (copy.width, copy.height, copy.cell_size) == (100, 50, 5.0)
    for key, value in plane.get_state().items():
        assert np.array_equal(copy.get_state()[key], value), key
    assert copy.statistics().watches == 0
    assert list(copy.nearby((50.0, 25.0), 10.0)) == list(plane.nearby((50.0, 25.0), 10.0))
