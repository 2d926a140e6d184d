"""EnvService: per-key ordering, no lost updates, concurrency limit, batches, agents."""

from __future__ import annotations

import asyncio
import operator
import pickle
from functools import partial
from typing import Any

import pytest

from populace.core import Agent, Msg, PerWorker, Profile, Simulation
from populace.environment import (
    Env,
    EnvClient,
    EnvService,
    Op,
    Reply,
    ServiceClosed,
    UnknownKeyError,
)


async def test_many_tasks_incrementing_one_counter_lose_nothing() -> None:
    svc = EnvService(max_concurrency=8)
    await svc.register("n", 0)
    n_tasks, k = 200, 50

    async def writer(i: int) -> None:
        for j in range(k):
            if j % 2:
                await svc.incr("n")
            else:
                await svc.update("n", fn=lambda v: v + 1)
            await asyncio.sleep(0)

    async with asyncio.TaskGroup() as tg:
        for i in range(n_tasks):
            tg.create_task(writer(i))
    assert await svc.query("n") == n_tasks * k


async def test_async_read_modify_writes_on_one_key_are_serialised() -> None:
    svc = EnvService(max_concurrency=64)
    await svc.register("n", 0)

    async def slow_plus_one(old: int) -> int:
        await asyncio.sleep(0)  # another writer would slip in here without the key queue
        await asyncio.sleep(0)
        return old + 1

    async with asyncio.TaskGroup() as tg:
        for _ in range(300):
            tg.create_task(svc.update("n", fn=slow_plus_one))
    assert await svc.query("n") == 300
    assert svc.statistics().peak_queued >= 299


async def test_same_key_ops_apply_in_arrival_order_while_the_key_is_held() -> None:
    svc = EnvService(max_concurrency=4)
    await svc.register("log", [])
    gate = asyncio.Event()

    async def held(old: list[str]) -> list[str]:
        await gate.wait()
        return [*old, "slow"]

    first = asyncio.create_task(svc.update("log", fn=held))
    await asyncio.sleep(0)
    later = [asyncio.create_task(svc.append("log", f"op{i}")) for i in range(5)]
    read = asyncio.create_task(svc.query("log"))
    await asyncio.sleep(0.01)
    assert not read.done()  # queued behind the held key
    gate.set()
    await asyncio.gather(first, *later)
    assert await read == ["slow", "op0", "op1", "op2", "op3", "op4"]


async def test_different_keys_proceed_concurrently_up_to_the_limit() -> None:
    for limit in (1, 3, 8):
        svc = EnvService(max_concurrency=limit)
        running = 0
        peak = 0

        async def hold(old: int) -> int:
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.001)
            running -= 1
            return old + 1

        await svc.apply([Op.register(f"k{i}", 0) for i in range(8)])
        results = await svc.apply([Op.update(f"k{i % 8}", hold) for i in range(24)])
        assert results == [1] * 8 + [2] * 8 + [3] * 8
        assert peak == min(limit, 8), limit


async def test_a_sync_op_waits_for_a_slot_when_all_are_held() -> None:
    svc = EnvService(max_concurrency=1)
    await svc.apply([Op.register("a", 0), Op.register("b", 0)])
    gate = asyncio.Event()

    async def held(old: int) -> int:
        await gate.wait()
        return old + 1

    slow = asyncio.create_task(svc.update("a", fn=held))
    await asyncio.sleep(0)
    other = asyncio.create_task(svc.incr("b"))
    await asyncio.sleep(0.005)
    assert not other.done() and svc.statistics().queued == 1
    gate.set()
    assert (await slow, await other) == (1, 1)


async def test_apply_returns_results_in_order_and_errors_in_place() -> None:
    svc = EnvService()
    results = await svc.apply([Op.register("x", 1), Op.incr("x", 2), Op.query("x"),
                               Op.append("x", 3), Op.set("l", 0), Op.delete("x")],
                              return_exceptions=True)
    assert results[:3] == [None, 3, 3]
    assert isinstance(results[3], TypeError)  # int has no append
    assert isinstance(results[4], UnknownKeyError)
    assert results[5] == 3
    with pytest.raises(UnknownKeyError):
        await svc.apply([Op.register("y", 0), Op.query("missing"), Op.incr("y")])
    assert await svc.query("y") == 1  # the batch is not a transaction: later ops still ran


async def test_ops_target_group_environments_by_path() -> None:
    world = Env("global")
    g1, g2 = world.child("g1"), world.child("g2")
    svc = EnvService(world)
    await svc.apply([Op.register("mean", 0.0, env=g1.path), Op.register("mean", 1.0,
                                                                          env=g2.path)])
    await svc.update("mean", 5.0, env="global/g1")
    assert (g1.query("mean"), g2.query("mean")) == (5.0, 1.0)
    assert await svc.query_prefix("me", env="global/g2") == {"mean": 1.0}
    assert await svc.query_where(lambda k, v: v > 2, env="global/g1") == {"mean": 5.0}
    with pytest.raises(LookupError):
        await svc.apply([Op.query("mean", env="global/g9")])


def test_named_ops_and_replies_pickle() -> None:
    ops = [Op.incr("n", 2, env="global/g1"), Op.append("log", {"a": 1}), Op.set("x", 1.5),
           Op.register("k", [1], owner=7), Op.delete("k"), Op.query_prefix("a/"),
           Op.update("n", partial(operator.add, 1))]
    back = pickle.loads(pickle.dumps(ops))
    assert back[:-1] == ops[:-1]
    assert back[-1].kind == "update" and back[-1].arg(1) == 2
    reply = Reply([1, None], {1: UnknownKeyError("k", "global")})
    again = pickle.loads(pickle.dumps(reply))
    assert again.values == [1, None] and str(again.errors[1]) == str(reply.errors[1])


async def test_listeners_on_the_served_env_fire_and_errors_stay_there() -> None:
    svc = EnvService()
    seen: list[int] = []
    svc.env.monitor(lambda e: seen.append(e.new), key="n")

    def broken(e: object) -> None:
        raise ValueError("bad listener")

    svc.env.monitor(broken, key="n")
    await svc.register("n", 0)
    assert await svc.incr("n") == 1
    assert seen == [0, 1]
    assert svc.statistics().env.listener_errors == 2


async def test_close_fails_waiting_ops_and_refuses_new_ones() -> None:
    svc = EnvService(max_concurrency=2)
    await svc.register("n", 0)
    forever = asyncio.Event()

    async def stuck(old: int) -> int:
        await forever.wait()
        return old  # pragma: no cover

    held = asyncio.create_task(svc.update("n", fn=stuck))
    await asyncio.sleep(0)
    waiting = asyncio.create_task(svc.incr("n"))
    await asyncio.sleep(0)
    await svc.aclose()
    for t in (held, waiting):
        with pytest.raises(ServiceClosed):
            await t
    with pytest.raises(ServiceClosed):
        await svc.incr("n")


async def test_closing_at_once_fails_an_async_update_that_never_started() -> None:
    # Cancelled before its task ever ran, the update used to leave its op pending forever.
    svc = EnvService()
    await svc.register("n", 0)

    async def plus_one(old: int) -> int:
        await asyncio.sleep(0)
        return old + 1  # pragma: no cover

    reply = svc.submit([Op.update("n", plus_one), Op.incr("n")])
    await svc.aclose()
    assert reply.done()
    assert [type(e) for e in reply.result().errors.values()] == [ServiceClosed] * 2
    assert "during this update" in str(reply.result().errors[0])


class Abort(BaseException):
    """Not an Exception: slips past ``except Exception``."""


async def test_an_async_update_raising_a_base_exception_fails_its_op_alone() -> None:
    svc = EnvService()
    await svc.register("n", 0)

    async def aborts(old: int) -> int:
        await asyncio.sleep(0)
        raise Abort("gave up")

    with pytest.raises(Abort, match="gave up"):
        await asyncio.wait_for(svc.update("n", fn=aborts), 5)
    assert await svc.incr("n") == 1  # the key was let go; the service goes on
    assert svc.statistics().active == 0
    await svc.aclose()


async def test_a_failure_of_the_services_own_bookkeeping_surfaces(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    # A bug that ends an update's task unexpectedly used to die with the task, leaving the
    # ops queued behind it waiting forever.
    svc = EnvService(max_concurrency=1)
    await svc.register("n", 0)
    gate = asyncio.Event()

    async def held(old: int) -> int:
        await gate.wait()
        return old + 1

    def broken_pump() -> None:
        raise RuntimeError("queue bookkeeping bug")

    first = asyncio.create_task(svc.update("n", fn=held))
    await asyncio.sleep(0)
    queued = asyncio.create_task(svc.incr("n"))
    await asyncio.sleep(0)
    monkeypatch.setattr(svc, "_pump", broken_pump)
    gate.set()
    assert await asyncio.wait_for(first, 5) == 1  # settled before the bug struck
    with pytest.raises(ServiceClosed, match="RuntimeError: queue bookkeeping bug"):
        await asyncio.wait_for(queued, 5)
    with pytest.raises(ServiceClosed, match="failed and takes no more operations") as info:
        await svc.incr("n")
    assert isinstance(info.value.__cause__, RuntimeError)
    assert "background task update 'n' failed" in caplog.text
    await svc.aclose()


async def test_client_sends_one_batch_per_tick() -> None:
    svc = EnvService()
    await svc.register("n", 0)
    client = EnvClient(svc)
    results = await asyncio.gather(*(client.incr("n") for _ in range(100)),
                                   client.apply([Op.query("n"), Op.query("zz")],
                                                return_exceptions=True))
    assert sorted(results[:100]) == list(range(1, 101))
    assert results[100][0] == 100 and isinstance(results[100][1], UnknownKeyError)
    stats = client.statistics()
    assert (stats.batches, stats.ops, stats.largest_batch) == (1, 102, 102)
    with pytest.raises(UnknownKeyError):
        await client.query("missing")


# -- from populace agents ------------------------------------------------------------------------

class Counter(Agent):
    """Increments a shared counter ``k`` times through whatever environment API it was given."""

    __slots__ = ("env",)

    def __init__(self, id: int, profile: Profile | None = None, *, env: Any) -> None:
        super().__init__(id, profile)
        self.env = env

    async def reply(self, msg: Msg) -> int:
        key, k = msg.content
        last = 0
        for i in range(k):
            if i % 3 == 2:
                last = await self.env.update(key, fn=lambda v: v + 1)
            else:
                last = await self.env.incr(key)
        return last


@pytest.mark.parametrize("via", ["service", "client"])
async def test_two_thousand_agents_on_two_workers_lose_no_update(via: str) -> None:
    svc = EnvService(max_concurrency=8)
    await svc.register("count", 0)
    env: Any = svc if via == "service" else PerWorker(EnvClient, svc)
    n, k = 2000, 10
    async with Simulation(workers=2) as sim:
        group = await sim.create(Counter, n, init={"env": env})
        last = await group.broadcast(Msg("test", ("count", k)))
    assert await svc.query("count") == n * k
    assert max(last) == n * k


class Holder(Agent):
    """Does an async read-modify-write that keeps the key across loop iterations."""

    __slots__ = ("svc",)

    def __init__(self, id: int, profile: Profile | None = None, *, svc: EnvService) -> None:
        super().__init__(id, profile)
        self.svc = svc

    async def reply(self, msg: Msg) -> int:
        async def plus_one(old: int) -> int:
            await asyncio.sleep(0)
            return old + 1

        key = f"k{self.id % msg.content}"
        return await self.svc.update(key, fn=plus_one)


async def test_agents_doing_async_updates_queue_per_key() -> None:
    svc = EnvService(max_concurrency=4)
    keys = 5
    await svc.apply([Op.register(f"k{i}", 0) for i in range(keys)])
    async with Simulation(workers=2) as sim:
        group = await sim.create(Holder, 500, init={"svc": svc})
        await group.broadcast(Msg("test", keys))
    assert await svc.query_prefix("k") == {f"k{i}": 100 for i in range(keys)}


async def test_client_of_a_closed_service_fails_each_op_with_its_own_error() -> None:
    svc = EnvService()
    await svc.aclose()
    client = EnvClient(svc)
    results = await asyncio.gather(client.query("a"), client.query("b"),
                                   return_exceptions=True)
    assert all(isinstance(r, ServiceClosed) for r in results)
    assert results[0] is not results[1]


async def test_a_service_whose_batch_fails_fails_the_clients_ops_never_hangs_them() -> None:
    import asyncio as aio

    from populace.core import Placeholder

    class Broken:
        """A user's own service: its placeholder fails instead of carrying a Reply."""

        def submit(self, ops):  # type: ignore[no-untyped-def]
            p: Placeholder[Any] = Placeholder(aio.get_running_loop(), "broken batch")
            aio.get_running_loop().call_soon(p.set_exception, RuntimeError("service broke"))
            return p

    client = EnvClient(Broken())  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="service broke"):
        await aio.wait_for(client.query("anything"), 5)
