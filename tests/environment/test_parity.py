"""serve() on every backend: the same script observes the same values, or is told what to do.

Each test runs once on the local backend and once on a two-node Ray cluster. Code that reads,
writes, listens and mirrors the time through the service must observe identical values on
both; code that uses the ``Env`` object after ``serve()`` works locally (the service owns
that very object) and raises :class:`EnvServedError` on Ray, never reads stale values.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from populace.core import Agent, PerWorker, Profile, Simulation
from populace.environment import (
    Env,
    EnvClient,
    EnvEvent,
    EnvServedError,
    EnvService,
    Op,
    RemoteEnvService,
    Timeline,
    serve,
)

N = 40
WAIT = 60  # seconds: a hang on the cluster fails instead of stalling


@pytest.fixture(params=["local", "ray"])
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "ray":
        request.getfixturevalue("ray_cluster")  # skips when Ray is not installed
    return str(request.param)


class Shopper(Agent):
    __slots__ = ("env",)

    def __init__(self, id: int, profile: Profile | None = None, *, env: Any) -> None:
        super().__init__(id, profile)
        self.env = env

    async def shop(self) -> tuple[Any, ...]:
        day, price, mood = await self.env.apply([
            Op.query("day"), Op.query("price"), Op.query("mood", env="global/west")])
        sold = await self.env.incr("sold")
        return day, price, mood, sold > 0

    async def price(self) -> Any:
        return await self.env.query("price")


def shown(event: EnvEvent) -> None:
    """Marks a key as monitored: statistics carry its value."""


def world() -> Env:
    root = Env("global")
    root.register("price", 10)
    root.register("sold", 0)
    root.child("west").register("mood", 0.5)
    return root


async def within(awaitable: Any) -> Any:
    async def wait() -> Any:
        return await awaitable

    return await asyncio.wait_for(wait(), WAIT)


async def test_the_same_script_observes_the_same_values(backend: str) -> None:
    timeline = Timeline(0.0, 1.0)
    days: list[list[tuple[Any, ...]]] = []
    async with Simulation(workers=2, backend=backend) as sim:
        service = await within(serve(world(), sim))
        assert isinstance(service, RemoteEnvService if backend == "ray" else EnvService)
        async with service:
            await within(service.monitor(shown, key="price"))
            await within(service.monitor(shown, key="mood", env="global/west"))
            timeline.mirror(service, "day")
            await within(timeline.synced())
            people = await sim.create(Shopper, N, init={"env": PerWorker(EnvClient, service)})
            for _ in range(3):
                timeline.advance()
                await within(timeline.synced())
                await within(service.update("price", fn=lambda p: p + 5))
                await within(service.update("mood", timeline.step / 4, env="global/west"))
                seen = await within(people.map(Shopper.shop))
                days.append(sorted(set(seen)))
            stats = await within(service.fetch_statistics())
            state = await within(service.fetch_state())
    assert days == [[(1.0, 15, 0.25, True)], [(2.0, 20, 0.5, True)], [(3.0, 25, 0.75, True)]]
    assert stats.env.all_monitored() == {"price": 25, "west/mood": 0.75}
    assert state["data"] == {"price": 25, "sold": 3 * N, "day": 3.0}
    assert state["owners"] == {"day": "timeline"}


async def test_a_direct_write_after_serve_is_seen_or_refused_never_lost(backend: str) -> None:
    env = world()
    async with Simulation(workers=2, backend=backend) as sim:
        async with await within(serve(env, sim)) as service:
            people = await sim.create(Shopper, N, init={"env": PerWorker(EnvClient, service)})
            try:
                env.update("price", 99)
            except EnvServedError as error:
                assert backend == "ray"
                assert "environment 'global' is served by a remote service (ray, pid " \
                    in str(error)
                assert "`await service.update('price', value)`" in str(error)
                with pytest.raises(EnvServedError, match=r"await service\.query\('price'\)"):
                    env.query("price")
                with pytest.raises(EnvServedError, match=r"service\.monitor\(listener, "
                                   r"key='mood', env='global/west'\)"):
                    env.child("west").monitor(shown, key="mood")
                await within(service.update("price", 99))  # what the message says to do
            else:
                assert backend == "local"  # in-process: the service owns this very object
            assert await within(people.map(Shopper.price)) == [99] * N


async def test_listeners_added_before_serve_run_or_are_refused_at_serve(backend: str) -> None:
    env = world()
    heard: list[Any] = []
    env.child("west").monitor(lambda e: heard.append(e.new), key="mood")
    async with Simulation(workers=2, backend=backend) as sim:
        if backend == "ray":
            with pytest.raises(EnvServedError) as info:
                await within(serve(env, sim))
            message = str(info.value)
            assert "environment 'global/west' has a listener on key 'mood'" in message
            assert "added with Env.monitor() before serve()" in message
            assert "`await service.monitor(listener, key='mood', env='global/west')`" \
                in message
            assert env.query("price") == 10  # refused before copying: the Env is still live
            return
        async with await within(serve(env, sim)) as service:
            await within(service.update("mood", 0.75, env="global/west"))
    assert heard == [0.75]


async def test_a_timeline_mirroring_an_env_follows_it_or_refuses(backend: str) -> None:
    env = world()
    timeline = Timeline(0.0, 1.0)
    timeline.mirror(env, "day")
    async with Simulation(workers=2, backend=backend) as sim:
        async with await within(serve(env, sim)) as service:
            people = await sim.create(Shopper, 4, init={"env": PerWorker(EnvClient, service)})
            if backend == "ray":
                with pytest.raises(EnvServedError, match=r"timeline\.mirror\(service, 'day'\)"):
                    timeline.advance()
                assert timeline.step == 0  # refused before moving
                timeline = Timeline(0.0, 1.0)
                timeline.mirror(service, "day")  # the key exists already: it is set
            timeline.advance()
            await within(timeline.synced())
            seen = await within(people.map(Shopper.shop))
    assert [s[0] for s in seen] == [1.0] * 4
