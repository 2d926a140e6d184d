"""The coroutine driver: what agent coroutines may await, Signal and SharedTimers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from populace.core import Agent, Msg, SharedTimers, Signal, Simulation


class Runs(Agent):
    """Replies by awaiting ``msg.content(self)``, a coroutine function the test supplies."""

    async def reply(self, msg: Msg) -> Any:
        body: Callable[[Runs], Awaitable[Any]] = msg.content
        return await body(self)


async def run_in_agent(body: Callable[[Runs], Awaitable[Any]], *, workers: int = 1) -> Any:
    async with Simulation(workers=workers) as sim:
        group = await sim.create(Runs, 1)
        return await group[0].reply(Msg("test", body))


async def test_agent_awaits_asyncio_sleep() -> None:
    loop = asyncio.get_running_loop()

    async def body(agent: Runs) -> float:
        t0 = loop.time()
        await asyncio.sleep(0.01)
        return loop.time() - t0

    assert await run_in_agent(body) >= 0.009


async def test_agent_awaits_bare_sleep_zero_repeatedly() -> None:
    ticks: list[int] = []

    async def body(agent: Runs) -> str:
        for i in range(5):
            ticks.append(i)
            await asyncio.sleep(0)
        return "done"

    assert await run_in_agent(body) == "done"
    assert ticks == [0, 1, 2, 3, 4]


async def test_agent_awaits_an_asyncio_future() -> None:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[str] = loop.create_future()

    async def body(agent: Runs) -> str:
        return "got " + await fut

    async with Simulation() as sim:
        group = await sim.create(Runs, 1)
        p = group[0].reply(Msg("test", body))
        await asyncio.sleep(0.002)
        assert not p.done()
        fut.set_result("value")
        assert await p == "got value"


async def test_agent_sees_a_failed_future_as_its_original_error() -> None:
    fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def body(agent: Runs) -> str:
        try:
            return await fut
        except LookupError as e:
            return f"caught {type(e).__name__}"

    async with Simulation() as sim:
        group = await sim.create(Runs, 1)
        p = group[0].reply(Msg("test", body))
        await asyncio.sleep(0)
        fut.set_exception(KeyError("k"))
        assert await p == "caught KeyError"


async def test_agent_awaits_a_task_it_created() -> None:
    async def inner() -> str:
        # asyncio.timeout needs asyncio.current_task(), which only a real Task provides.
        async with asyncio.timeout(1.0):
            await asyncio.sleep(0.001)
        assert asyncio.current_task() is not None
        return "from task"

    async def body(agent: Runs) -> str:
        return await asyncio.create_task(inner())

    assert await run_in_agent(body) == "from task"


async def test_agent_awaits_another_agents_placeholder() -> None:
    async with Simulation(workers=2) as sim:
        group = await sim.create(Runs, 2)
        other = group[1]

        async def slow(agent: Runs) -> int:
            await asyncio.sleep(0.005)
            return agent.id + 100

        async def body(agent: Runs) -> int:
            return await other.reply(Msg("agent", slow)) + 1

        assert await group[0].reply(Msg("test", body)) == 102


async def test_agent_awaits_a_signal_and_a_task_awaits_the_same_signal() -> None:
    sig = Signal(asyncio.get_running_loop())

    async def body(agent: Runs) -> str:
        await sig
        return "agent woke"

    async def task_waiter() -> str:
        await sig
        return "task woke"

    async with Simulation() as sim:
        group = await sim.create(Runs, 1)
        p = group[0].reply(Msg("test", body))
        task = asyncio.create_task(task_waiter())
        await asyncio.sleep(0.002)
        assert not p.done() and not task.done()
        sig.fire()
        assert await p == "agent woke"
        assert await task == "task woke"


async def test_awaiting_an_unsupported_object_fails_the_call() -> None:
    class Odd:
        def __await__(self) -> Any:
            yield "not a future"

    async def body(agent: Runs) -> None:
        await Odd()

    with pytest.raises(RuntimeError, match="unsupported object: 'not a future'"):
        await run_in_agent(body)


async def test_cancellation_inside_an_agent_fails_only_that_call() -> None:
    async def body(agent: Runs) -> None:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await run_in_agent(body)


# -- Signal ----------------------------------------------------------------------------------


async def test_signal_awaited_from_a_plain_task() -> None:
    loop = asyncio.get_running_loop()
    sig = Signal(loop)
    order: list[str] = []

    async def waiter() -> None:
        await sig
        order.append("woke")

    task = asyncio.create_task(waiter())
    await asyncio.sleep(0.001)
    assert not task.done() and not sig.done()
    order.append("fire")
    sig.fire()
    await task
    assert order == ["fire", "woke"]
    assert sig.done()
    await sig  # already fired: returns at once


async def test_signal_fire_is_idempotent_and_runs_callbacks_once() -> None:
    sig = Signal(asyncio.get_running_loop())
    calls: list[object] = []
    sig.add_done_callback(calls.append)
    sig.fire()
    sig.fire()
    await asyncio.sleep(0)
    assert calls == [sig]
    sig.add_done_callback(calls.append)  # after firing: scheduled at once
    await asyncio.sleep(0)
    assert calls == [sig, sig]
    assert sig.result() is None
    assert not sig.cancelled()


async def test_cancelling_a_task_waiting_on_a_signal_leaves_it_unfired() -> None:
    sig = Signal(asyncio.get_running_loop())

    async def waiter() -> str:
        await sig
        return "woke"

    doomed = asyncio.create_task(waiter())
    survivor = asyncio.create_task(waiter())
    await asyncio.sleep(0)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(doomed, 0.005)
    assert not sig.done()
    assert not survivor.done()
    sig.fire()
    assert await survivor == "woke"


# -- SharedTimers ----------------------------------------------------------------------------


class FrozenLoop:
    """Just what SharedTimers uses of a loop, with a clock that does not move."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.armed: list[tuple[float, Callable[..., Any], tuple[Any, ...]]] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, fn: Callable[..., Any], *args: Any) -> None:
        self.armed.append((when, fn, args))


async def test_sleeps_in_one_tick_share_one_signal_and_one_timer() -> None:
    loop = FrozenLoop(100.0)
    timers = SharedTimers(loop, resolution=0.25)  # type: ignore[arg-type]
    a = timers.sleep(0.5)
    b = timers.sleep(0.5)
    c = timers.sleep(0.4)  # rounds up into the same bucket, 100.5
    d = timers.sleep(0.6)  # the next bucket, 100.75
    assert a is b is c
    assert d is not a
    assert [when for when, _, _ in loop.armed] == [100.5, 100.75]
    _, fn, args = loop.armed[0]
    fn(*args)
    assert a.done() and not d.done()
    # The bucket is gone once fired; a later sleep to the same deadline arms a new timer.
    e = timers.sleep(0.5)
    assert e is not a and not e.done()
    assert len(loop.armed) == 3


async def test_shared_timers_fire_after_the_delay_on_a_real_loop() -> None:
    loop = asyncio.get_running_loop()
    timers = SharedTimers(loop)
    t0 = loop.time()
    sig = timers.sleep(0.01)
    await sig
    assert loop.time() - t0 >= 0.009
    assert sig.done()


async def test_agents_share_timers() -> None:
    loop = asyncio.get_running_loop()
    timers = SharedTimers(loop, resolution=0.02)
    signals: list[Signal] = []

    async def body(agent: Runs) -> float:
        sig = timers.sleep(0.01)
        signals.append(sig)
        await sig
        return loop.time()

    async with Simulation(workers=2) as sim:
        group = await sim.create(Runs, 6)
        t0 = loop.time()
        woke = await group.broadcast(Msg("test", body))
    assert len(woke) == 6
    assert min(woke) >= t0 + 0.009
    # All six start within microseconds: one bucket, two if they straddle a boundary.
    assert len({id(s) for s in signals}) <= 2
    assert all(s.done() for s in signals)


async def test_stopping_cancels_calls_waiting_on_io_while_the_loop_runs() -> None:
    """A call waiting on an asyncio future (an HTTP request's Task) when the simulation stops
    is cancelled at the stop, its cleanup running on the live loop, and the Task it awaited
    cancelled with it; never left for the garbage collector after the loop closed."""
    loop = asyncio.get_running_loop()
    seen: list[str] = []
    tasks: list[asyncio.Task[None]] = []

    async def body(agent: Runs) -> None:
        task = asyncio.create_task(asyncio.sleep(3600))
        tasks.append(task)
        try:
            await task
        except asyncio.CancelledError:
            seen.append(f"cancelled on a running loop: {asyncio.get_running_loop() is loop}")
            task.cancel()
            raise

    sim = await Simulation().start()
    group = await sim.create(Runs, 3)
    pending = group.map(Runs.reply, Msg("test", body))
    await asyncio.sleep(0.01)
    assert not pending.done() and len(tasks) == 3
    await sim.stop()
    assert seen == ["cancelled on a running loop: True"] * 3
    await asyncio.sleep(0)
    assert all(t.cancelled() for t in tasks)
