"""serve(env, sim, shards=N): the same outcomes and state as one service, on both backends;
listeners, statistics and checkpoints joined across shards."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import numpy as np
import pytest

from populace.core import Agent, PerWorker, Profile, Simulation
from populace.environment import (
    Env,
    EnvClient,
    EnvEvent,
    EnvServedError,
    Op,
    RemoteEnvService,
    Timeline,
    serve,
)
from populace.environment._shards import ShardedEnvService, shard_of

WAIT = 60


@pytest.fixture(params=["local", "ray"])
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "ray":
        request.getfixturevalue("ray_cluster")  # skips when Ray is not installed
    return str(request.param)


KEYS = [f"k{i}" for i in range(12)]


def world() -> Env:
    root = Env("world")
    for key in KEYS:
        root.register(key, 0)
    root.register("log", [])
    root.register("column", np.zeros(8, dtype=np.int64))
    town = root.child("town")
    town.register("k0", 100)  # shadows the root's k0: same name, same shard
    town.register("k5", 500)
    return root


def random_ops(rng: random.Random, n: int) -> list[Op]:
    out: list[Op] = []
    for _ in range(n):
        key = rng.choice([*KEYS, "nope"])
        env = rng.choice([None, "world/town"])
        pick = rng.choice(["incr", "query", "set", "append", "prefix", "many", "qmany",
                           "at", "register", "delete"])
        if pick == "incr":
            out.append(Op.incr(key, rng.choice([1, 2]), env=env))
        elif pick == "query":
            out.append(Op.query(key, env=env))
        elif pick == "set":
            out.append(Op.set(key, rng.randint(0, 9), env=env))
        elif pick == "append":
            out.append(Op.append("log", key))
        elif pick == "prefix":
            out.append(Op.query_prefix("k1", env=env))
        elif pick == "many":
            # No unknown key: with shards the keys of other shards would still change.
            out.append(Op.incr_many([*rng.sample(KEYS, 4), rng.choice(KEYS)], 1, env=env))
        elif pick == "qmany":
            out.append(Op.query_many(rng.sample(KEYS, 5), env=env))
        elif pick == "at":
            out.append(Op.incr_many("column", 1, at=[rng.randrange(8) for _ in range(3)]))
        elif pick == "register":
            out.append(Op.register(f"new/{rng.randrange(6)}", 1, env=env))
        else:
            out.append(Op.delete(f"new/{rng.randrange(6)}", env=env))
    return out


def plain(v: Any) -> Any:
    if isinstance(v, BaseException):
        return type(v).__name__
    if isinstance(v, np.ndarray):
        return v.tolist()
    return v


class Member(Agent):
    __slots__ = ("env",)

    def __init__(self, id: int, profile: Profile | None = None, *, env: Any) -> None:
        super().__init__(id, profile)
        self.env = env

    async def run(self, ops: list[Op]) -> list[Any]:
        return [plain(v) for v in await self.env.apply(ops, return_exceptions=True)]


def shown(event: EnvEvent) -> None:
    """Makes a key monitored."""


async def play(backend: str, shards: int) -> tuple[list[Any], dict[str, Any], Any]:
    rng = random.Random(9)
    batches = [random_ops(rng, 40) for _ in range(6)]
    async with Simulation(workers=2, backend=backend) as sim:
        root = world()
        service = await serve(root, sim, shards=shards)
        try:
            await asyncio.wait_for(service.monitor(shown, key="k3"), WAIT)
            direct = []
            for batch in batches[:3]:  # in order, from the central process
                direct.append([plain(v) for v in await asyncio.wait_for(
                    service.apply(batch, return_exceptions=True), WAIT)])
            one = await sim.create(Member, 1, init={"env": PerWorker(EnvClient, service)})
            for batch in batches[3:]:  # through an agent's client (merged runs)
                direct.append((await asyncio.wait_for(one.map(Member.run, batch), WAIT))[0])
            state = await service.fetch_state()
            stats = await service.fetch_statistics()
            await service.load_state(state)
            assert comparable(await service.fetch_state()) == comparable(state)
        finally:
            await service.aclose()
    return direct, state, stats


def comparable(state: dict[str, Any]) -> Any:
    return {"data": {k: plain(v) for k, v in state["data"].items()},
            "owners": state["owners"],
            "children": {n: comparable(c) for n, c in state["children"].items()}}


async def test_shards_answer_as_one_service(backend: str) -> None:
    one, state_1, stats_1 = await play(backend, 1)
    three, state_3, stats_3 = await play(backend, 3)
    assert three == one
    assert comparable(state_3) == comparable(state_1)
    # Counters differ (a query_prefix asks every shard); what the studio shows does not.
    assert stats_3.env.monitored == stats_1.env.monitored == {"k3": state_1["data"]["k3"]}
    assert stats_3.env.all_monitored() == stats_1.env.all_monitored()
    assert stats_3.env.keys == stats_1.env.keys and stats_3.batches > stats_1.batches
    flat = [v for batch in one for v in batch]
    assert "UnknownKeyError" in flat and "DuplicateKeyError" in flat  # the ops do fail too


async def test_keys_spread_over_the_shards_and_the_tree_refuses_direct_use() -> None:
    assert len({shard_of(k, 3) for k in KEYS}) == 3
    root = world()
    service = await serve(root, shards=3)
    assert isinstance(service, ShardedEnvService) and service.shards == 3
    assert isinstance(service, RemoteEnvService)  # what Run.services and type hints expect
    try:
        assert await service.incr_many(KEYS, 1) is not None
        assert await service.query_many(KEYS) == [1] * len(KEYS)
        assert await service.query_prefix("k1") == {"k1": 1, "k10": 1, "k11": 1}
        assert await service.query("k0", env="world/town") == 100
        assert await service.apply([]) == []
        clock = Timeline(0.0, 1.0)
        clock.mirror(service, "hour")  # a write per step, through the shards
        clock.advance(2)
        await clock.synced()
        assert await service.query("hour") == 2.0
        with pytest.raises(EnvServedError, match="sharded"):
            root.query("k0")
        # An unknown key changes nothing on its shard; keys on the others are applied.
        nope = next(f"nope{i}" for i in range(99) if shard_of(f"nope{i}", 3) == 0)
        mine = [k for k in KEYS if shard_of(k, 3) == 0]
        with pytest.raises(KeyError):
            await service.incr_many([*KEYS, nope], 1)
        after = dict(zip(KEYS, await service.query_many(KEYS), strict=True))
        assert {k: v for k, v in after.items() if k in mine} == dict.fromkeys(mine, 1)
        assert all(v == 2 for k, v in after.items() if k not in mine)
    finally:
        await service.aclose()
