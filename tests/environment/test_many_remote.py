"""Many-key operations through the service in a Ray actor: the same API, no lost
increment with agents on two workers writing the same keys at once."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from populace.core import Agent, PerWorker, Profile, Simulation  # noqa: E402
from populace.environment import (  # noqa: E402
    Env,
    EnvClient,
    EnvServedError,
    RemoteEnvService,
    UnknownKeyError,
    serve,
)

N, K, KEYS = 600, 4, 40
WAIT = 30  # seconds: every await on the cluster is bounded


class Writer(Agent):
    __slots__ = ("env",)

    def __init__(self, id: int, profile: Profile | None = None, *, env: Any) -> None:
        super().__init__(id, profile)
        self.env = env


def picks(agent_id: int, round_: int) -> list[int]:
    """The counters an agent adds to in a round: overlapping other agents', one twice."""
    first = (agent_id * 7 + round_) % KEYS
    return [first, (first + 1) % KEYS, (first + 13) % KEYS, first]


async def plus_one_later(old: int) -> int:
    await asyncio.sleep(0)
    return old + 1


async def write(agent: Writer, round_: int) -> int:
    mine = picks(agent.id, round_)
    keys = [f"n/{k}" for k in mine]
    if agent.id % 3 == 0:  # many-key op on named keys
        new = await agent.env.incr_many(keys, 1)
    elif agent.id % 3 == 1:  # one-key ops: the client merges them into a many-key op
        new = await asyncio.gather(*(agent.env.incr(key) for key in keys))
    else:  # one key held by an async update, then the others as one op behind it
        await agent.env.update(keys[0], fn=plus_one_later)
        new = await agent.env.incr_many(keys[1:], np.ones(3, dtype=np.int64))
    await agent.env.incr_many("arr", 1, at=mine)
    return len(new)


def expected() -> tuple[dict[str, int], list[int]]:
    counts = dict.fromkeys((f"n/{k}" for k in range(KEYS)), 0)
    arr = np.zeros(KEYS, dtype=np.int64)
    for r in range(K):
        for i in range(N):
            for k in picks(i, r):
                counts[f"n/{k}"] += 1
            np.add.at(arr, picks(i, r), 1)
    return counts, arr.tolist()


async def within(awaitable: Any, timeout: float = WAIT) -> Any:
    async def wait() -> Any:
        return await awaitable

    return await asyncio.wait_for(wait(), timeout)


async def test_no_increment_is_lost_through_the_actor(ray_cluster: Any) -> None:
    world = Env("global")
    for k in range(KEYS):
        world.register(f"n/{k}", 0)
    world.register("arr", np.zeros(KEYS, dtype=np.int64))
    async with Simulation(workers=2, backend="ray") as sim:
        svc = await serve(world, sim, max_concurrency=8)
        assert isinstance(svc, RemoteEnvService)
        try:
            group = await sim.create(Writer, N, init={"env": PerWorker(EnvClient, svc)})
            for r in range(K):
                assert set(await within(group.map(write, r))) == {3, 4}
            counts, arr = expected()
            keys = sorted(counts)
            assert dict(zip(keys, await within(svc.query_many(keys)), strict=True)) == counts
            assert (await within(svc.query("arr"))).tolist() == arr
            assert (await within(svc.query_many("arr", at=[0, 1]))).tolist() == arr[:2]
            with pytest.raises(UnknownKeyError):
                await within(svc.incr_many(["n/0", "nope"], 1))
            assert await within(svc.query("n/0")) == counts["n/0"]  # nothing changed
            stats = await within(svc.fetch_statistics())
            assert stats.queued == 0 and stats.active == 0 and stats.peak_queued > 0
            assert stats.ops >= N * K * 4  # key operations, many-key ops counted per key
        finally:
            await svc.aclose()
    with pytest.raises(EnvServedError, match=r"await service\.incr_many\(keys, deltas\)"):
        world.incr_many(["n/0"], 1)
