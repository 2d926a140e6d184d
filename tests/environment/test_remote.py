"""serve(): the environment service in a Ray actor, used by agents on a two-node cluster."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from populace.core import Agent, PerWorker, Profile, Simulation  # noqa: E402
from populace.environment import (  # noqa: E402
    Env,
    EnvClient,
    EnvEvent,
    EnvServedError,
    EnvService,
    Op,
    RemoteEnvService,
    ServiceClosed,
    serve,
)

N, K = 2000, 5
WAIT = 30  # seconds: every await on the cluster is bounded, a hang fails instead of stalling


class Member(Agent):
    __slots__ = ("env",)

    def __init__(self, id: int, profile: Profile | None = None, *, env: Any) -> None:
        super().__init__(id, profile)
        self.env = env


def plus_one(old: int) -> int:
    return old + 1


async def slow_plus_one(old: int) -> int:
    await asyncio.sleep(0)  # in the actor: another writer would slip in here without the queue
    await asyncio.sleep(0)
    return old + 1


async def count_up(agent: Member, key: str, k: int) -> int:
    last = 0
    for i in range(k):
        if i % 3 == 0:
            last = await agent.env.incr(key)
        elif i % 3 == 1:
            last = await agent.env.update(key, fn=plus_one if agent.id % 2 else
                                          (lambda v: v + 1))
        else:
            last = await agent.env.update(key, fn=slow_plus_one)
    return last


async def append_in_turn(agent: Member, k: int) -> list[int]:
    key = f"log/{agent.id}"
    out: list[int] = []
    for i in range(k):
        out = await agent.env.append(key, i)
    return out


async def append_in_one_batch(agent: Member, k: int) -> list[Any]:
    """An async update holds the key first; the appends behind it must wait their turn."""

    async def slow_first(old: list[int]) -> list[int]:
        await asyncio.sleep(0.001)
        return [*old, 0]

    key = f"batch/{agent.id}"
    ops = [Op.update(key, slow_first), *(Op.append(key, i) for i in range(1, k))]
    return await agent.env.apply(ops)


def group_of(agent: Member) -> str:
    return f"global/g{agent.id % 2}"


async def read_report(agent: Member) -> tuple[str, str, int, int]:
    here = group_of(agent)
    return (await agent.env.query("report", env=here),
            await agent.env.query("rules", env=here),
            await agent.env.incr("votes", env=here),     # the group's own key
            await agent.env.incr("turnout", env=here))   # falls through to global


async def bump(agent: Member, key: str) -> int:
    return int(await agent.env.incr(key))


async def hold_forever(agent: Member, key: str) -> Any:
    async def wait_long(old: int) -> int:
        await asyncio.sleep(600)
        return old  # pragma: no cover - the actor is killed first

    return await agent.env.update(key, fn=wait_long)


async def within(awaitable: Any, timeout: float = WAIT) -> Any:
    async def wait() -> Any:
        return await awaitable

    return await asyncio.wait_for(wait(), timeout)


async def test_agents_lose_no_update_through_the_actor(ray_cluster: Any) -> None:
    world = Env("global")
    world.register("count", 0)
    world.register("rmw", 0)
    async with Simulation(workers=2, backend="ray") as sim:
        svc = await serve_remote(world, sim, max_concurrency=8)
        try:
            group = await sim.create(Member, N, init={"env": PerWorker(EnvClient, svc)})
            inc = await within(group.map(bump, "count"))
            assert sorted(inc) == list(range(1, N + 1))
            for _ in range(K - 1):
                await within(group.map(bump, "count"))
            assert await within(svc.query("count")) == N * K
            last = await within(group.map(count_up, "rmw", K))
            assert await within(svc.query("rmw")) == N * K
            assert max(last) == N * K
            stats = await within(svc.fetch_statistics())
            assert stats.ops == 2 * N * K + 2  # the agents' ops and the two queries above
            assert stats.batches < stats.ops / 20  # one batch per worker per tick, not per op
            assert stats.queued == 0 and stats.active == 0
            assert stats.peak_queued > 0  # the async updates did hold their key
        finally:
            await svc.aclose()
    # The actor has its own copy: the caller's Env is stale, and says so instead of answering.
    with pytest.raises(EnvServedError, match=r"await service\.query\('count'\)"):
        world.query("count")


async def test_each_key_sees_its_ops_in_order(ray_cluster: Any) -> None:
    world = Env("global")
    for i in range(N):
        world.register(f"log/{i}", [])
        world.register(f"batch/{i}", [])
    async with Simulation(workers=2, backend="ray") as sim:
        svc = await serve_remote(world, sim, max_concurrency=64)
        try:
            group = await sim.create(Member, N, init={"env": PerWorker(EnvClient, svc)})
            seen = await within(group.map(append_in_turn, K))
            assert seen == [list(range(K))] * N
            logs = await within(svc.query_prefix("log/"))
            assert logs == {f"log/{i}": list(range(K)) for i in range(N)}
            replies = await within(group.map(append_in_one_batch, K))
            assert [r[-1] for r in replies] == [list(range(K))] * N
            batches = await within(svc.query_prefix("batch/"))
            assert batches == {f"batch/{i}": list(range(K)) for i in range(N)}
        finally:
            await svc.aclose()


async def test_groups_are_isolated_and_fall_through_over_the_wire(ray_cluster: Any) -> None:
    world = Env("global")
    world.register("rules", "vote once")
    world.register("turnout", 0)
    world.register("votes", -1)  # shadowed by each group's own "votes"
    for g in ("g0", "g1"):
        child = world.child(g)
        child.register("report", f"report of {g}")
        child.register("votes", 0)
    n = 200
    async with Simulation(workers=2, backend="ray") as sim:
        svc = await serve_remote(world, sim)
        try:
            group = await sim.create(Member, n, init={"env": PerWorker(EnvClient, svc)})
            answers = await within(group.map(read_report))
            assert [a[:2] for a in answers] == [(f"report of g{i % 2}", "vote once")
                                                for i in range(n)]
            assert sorted(a[2] for a in answers[0::2]) == list(range(1, n // 2 + 1))
            assert sorted(a[3] for a in answers) == list(range(1, n + 1))
            got = await within(svc.apply([
                Op.query("votes", env="global/g0"), Op.query("votes", env="global/g1"),
                Op.query("votes"), Op.query("turnout"), Op.query_prefix("rep", env="global/g1"),
                Op.query("report")], return_exceptions=True))
            assert got[:5] == [n // 2, n // 2, -1, n, {"report": "report of g1"}]
            assert isinstance(got[5], KeyError)  # a group's key is not visible from above
        finally:
            await svc.aclose()


async def test_monitored_keys_and_listener_errors_come_back(ray_cluster: Any) -> None:
    world = Env("global")
    world.register("count", 0)
    world.child("g0").register("mood", 0.5)
    n = 300
    async with Simulation(workers=2, backend="ray") as sim:
        svc = await serve_remote(world, sim)
        try:
            seen: list[int] = []  # lives in the actor once pickled: never filled here

            def broken(event: EnvEvent) -> None:
                raise ValueError(f"listener fails on {event.key}")

            await within(svc.monitor(lambda e: seen.append(e.new), key="count"))
            await within(svc.monitor(broken, key="count"))
            await within(svc.monitor(lambda e: None, key="mood", env="global/g0"))
            stats = await within(svc.fetch_statistics())
            assert dict(stats.env.monitored) == {"count": 0}
            assert dict(stats.env.children[0].monitored) == {"mood": 0.5}
            assert stats.env.listeners == 2

            group = await sim.create(Member, n, init={"env": PerWorker(EnvClient, svc)})
            assert sorted(await within(group.map(bump, "count"))) == list(range(1, n + 1))
            await within(svc.update("mood", 0.75, env="global/g0"))
            stats = await within(svc.fetch_statistics())
            assert dict(stats.env.monitored) == {"count": n}
            assert dict(stats.env.children[0].monitored) == {"mood": 0.75}
            assert stats.env.listener_errors == n  # once per write, the writers unharmed
            assert stats.env.listener_calls == 2 * n
            assert seen == []
        finally:
            await svc.aclose()


async def test_state_round_trips_through_the_actor(ray_cluster: Any) -> None:
    world = Env("global")
    world.register("count", 0, owner=7)
    world.child("g0").register("report", "first")
    async with Simulation(workers=2, backend="ray") as sim:
        svc = await serve_remote(world, sim)
        try:
            await within(svc.apply([Op.incr("count", 5), Op.set("report", "second",
                                                                env="global/g0")]))
            state = await within(svc.fetch_state())
            assert state == {"name": "global", "data": {"count": 5}, "owners": {"count": 7},
                             "children": {"g0": {"name": "g0", "data": {"report": "second"},
                                                 "owners": {}, "children": {}}}}
            await within(svc.apply([Op.incr("count"), Op.register("extra", 1),
                                    Op.set("report", "third", env="global/g0")]))
            await within(svc.load_state(state))
            assert await within(svc.fetch_state()) == state
            got = await within(svc.apply([Op.query("count"), Op.query("extra"),
                                          Op.query("report", env="global/g0")],
                                         return_exceptions=True))
            assert got[0] == 5 and isinstance(got[1], KeyError) and got[2] == "second"

            # ...and into a fresh service: a checkpoint restored elsewhere.
            other = await serve_remote(Env("global"), sim)
            try:
                await within(other.load_state(state))
                assert await within(other.query("report", env="global/g0")) == "second"
                assert await within(other.incr("count")) == 6
            finally:
                await other.aclose()
        finally:
            await svc.aclose()


async def test_a_killed_actor_fails_pending_and_later_ops_with_service_closed(
        ray_cluster: Any) -> None:
    world = Env("global")
    world.register("count", 0)
    world.register("held", 0)
    async with Simulation(workers=2, backend="ray") as sim:
        svc = await serve_remote(world, sim)
        try:
            group = await sim.create(Member, 10, init={"env": PerWorker(EnvClient, svc)})
            assert sorted(await within(group.map(bump, "count"))) == list(range(1, 11))
            # A batch the live actor cannot even unpickle fails with its own error...
            with pytest.raises(Exception, match="this function cannot be rebuilt here") as info:
                await within(svc.update("count", fn=Unpicklable()))
            assert not isinstance(info.value, ServiceClosed)
            assert await within(svc.incr("count")) == 11  # ...and the service lives on.

            pending = group.select([0]).map(hold_forever, "held")
            for _ in range(100):  # until the actor holds the key
                if (await within(svc.fetch_statistics())).active == 1:
                    break
                await asyncio.sleep(0.02)
            else:
                pytest.fail("the held update never reached the actor")

            ray.kill(svc._handle.actor)  # a crash, not our own aclose()
            with pytest.raises(ServiceClosed, match="the environment service is gone"):
                await within(pending)
            with pytest.raises(ServiceClosed, match="the environment service is gone"):
                await within(svc.incr("count"))
            with pytest.raises(ServiceClosed, match="the environment service is gone"):
                await within(svc.apply([Op.query("count")]))
            later = await within(group.map(bump_or_error, "count"))
            assert all(isinstance(e, ServiceClosed) and "is gone" in str(e) for e in later)
            for call in (svc.fetch_statistics(), svc.fetch_state(), svc.load_state({}),
                         svc.monitor(print, key="count")):
                with pytest.raises(ServiceClosed, match="the environment service is gone"):
                    await within(call)
        finally:
            await within(svc.aclose(), 10)  # no hang on a dead actor


def refuse() -> Any:
    raise RuntimeError("this function cannot be rebuilt here")


class Unpicklable:
    """Pickles fine; unpickling (in the actor) fails."""

    def __call__(self, old: int) -> int:  # pragma: no cover - never rebuilt
        return old + 1

    def __reduce__(self) -> tuple[Any, ...]:
        return (refuse, ())


async def bump_or_error(agent: Member, key: str) -> Any:
    try:
        return await agent.env.incr(key)
    except Exception as error:
        return error


async def test_serve_on_the_local_backend_is_a_plain_service() -> None:
    world = Env("global")
    world.register("count", 0)
    async with Simulation(workers=2) as sim:
        svc = await serve_local(world, sim, max_concurrency=3)
        assert type(svc) is EnvService and svc.env is world and svc.max_concurrency == 3
        group = await sim.create(Member, 100, init={"env": PerWorker(EnvClient, svc)})
        await group.map(count_up, "count", K)
        assert world.query("count") == 100 * K  # in-process: the caller's env itself
        await svc.aclose()
    assert type(await serve_local(world, None)) is EnvService


async def serve_remote(env: Env, sim: Simulation, **kw: Any) -> RemoteEnvService:
    svc = await within(serve(env, sim, **kw))
    assert isinstance(svc, RemoteEnvService)
    return svc


async def serve_local(env: Env, sim: Simulation | None, **kw: Any) -> EnvService:
    svc = await serve(env, sim, **kw)
    assert isinstance(svc, EnvService)
    return svc
