"""Placeholder and PlaceholderSet state machines, gather() and wait()."""

from __future__ import annotations

import asyncio
import pickle

import pytest

from populace.core import (
    Agent,
    AgentGroup,
    Msg,
    Placeholder,
    PlaceholderSet,
    Simulation,
    UnobservedFailureWarning,
    gather,
    wait,
)


class Oops(Exception):
    pass


def resolve_later(p: Placeholder[object], delay: float, value: object) -> None:
    loop = asyncio.get_running_loop()
    if isinstance(value, BaseException):
        loop.call_later(delay, p.set_exception, value)
    else:
        loop.call_later(delay, p.set_result, value)


# -- Placeholder -----------------------------------------------------------------------------


async def test_pending_placeholder_has_no_outcome_yet() -> None:
    p: Placeholder[int] = Placeholder(asyncio.get_running_loop(), "probe")
    assert not p.done()
    with pytest.raises(asyncio.InvalidStateError, match="probe is still pending"):
        p.result()
    with pytest.raises(asyncio.InvalidStateError):
        p.exception()
    assert "pending" in repr(p)


async def test_set_result_moves_to_done_with_value() -> None:
    p: Placeholder[int] = Placeholder(asyncio.get_running_loop())
    p.set_result(41)
    assert p.done()
    assert p.result() == 41
    assert p.exception() is None
    assert await p == 41
    assert "done" in repr(p)


async def test_none_is_a_valid_result() -> None:
    p: Placeholder[None] = Placeholder(asyncio.get_running_loop())
    p.set_result(None)
    assert p.done()
    assert p.result() is None


async def test_set_exception_moves_to_failed_and_reraises_the_same_error() -> None:
    p: Placeholder[int] = Placeholder(asyncio.get_running_loop())
    err = Oops("bad")
    p.set_exception(err)
    assert p.done()
    assert p.exception() is err
    with pytest.raises(Oops) as info:
        p.result()
    assert info.value is err
    with pytest.raises(Oops):
        await p
    assert "failed" in repr(p)


async def test_a_placeholder_is_set_once() -> None:
    loop = asyncio.get_running_loop()
    ok: Placeholder[int] = Placeholder(loop, "ok call")
    ok.set_result(1)
    with pytest.raises(asyncio.InvalidStateError, match="ok call is already done"):
        ok.set_result(2)
    with pytest.raises(asyncio.InvalidStateError, match="set only once"):
        ok.set_exception(Oops())
    assert ok.result() == 1
    assert ok.exception() is None

    failed: Placeholder[int] = Placeholder(loop, "bad call")
    err = Oops("first")
    failed.set_exception(err)
    with pytest.raises(asyncio.InvalidStateError, match="bad call is already failed"):
        failed.set_result(3)
    with pytest.raises(asyncio.InvalidStateError):
        failed.set_exception(Oops("second"))
    assert failed.exception() is err


async def test_awaited_from_a_plain_asyncio_task() -> None:
    p: Placeholder[str] = Placeholder(asyncio.get_running_loop())

    async def consumer() -> str:
        return "got " + await p

    task = asyncio.create_task(consumer())
    await asyncio.sleep(0)
    assert not task.done()
    resolve_later(p, 0.005, "x")
    assert await task == "got x"


async def test_error_reaches_a_plain_asyncio_task_with_its_type() -> None:
    p: Placeholder[str] = Placeholder(asyncio.get_running_loop())

    async def consumer() -> str:
        return await p

    task = asyncio.create_task(consumer())
    resolve_later(p, 0.002, Oops("late"))
    with pytest.raises(Oops, match="late"):
        await task


async def test_many_tasks_await_one_placeholder() -> None:
    p: Placeholder[int] = Placeholder(asyncio.get_running_loop())

    async def consumer(k: int) -> int:
        return await p + k

    tasks = [asyncio.create_task(consumer(k)) for k in range(3)]
    await asyncio.sleep(0)
    p.set_result(10)
    assert await asyncio.gather(*tasks) == [10, 11, 12]


async def test_cancelling_an_awaiting_task_leaves_the_placeholder_alone() -> None:
    p: Placeholder[int] = Placeholder(asyncio.get_running_loop())

    async def consumer() -> int:
        return await p

    doomed = asyncio.create_task(consumer())
    survivor = asyncio.create_task(consumer())
    await asyncio.sleep(0)
    doomed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await doomed
    assert not p.done()
    p.set_result(5)
    assert await survivor == 5


async def test_timeouts_work_around_placeholders() -> None:
    p: Placeholder[int] = Placeholder(asyncio.get_running_loop())
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(p, 0.01)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await p
    assert not p.done()
    resolve_later(p, 0.002, 9)
    assert await asyncio.wait_for(p, 1.0) == 9


async def test_add_done_callback_runs_on_the_loop_once_done() -> None:
    p: Placeholder[int] = Placeholder(asyncio.get_running_loop())
    seen: list[tuple[str, object]] = []
    p.add_done_callback(lambda q: seen.append(("first", q.result())))
    p.add_done_callback(lambda q: seen.append(("second", q)))
    p.set_result(7)
    assert seen == []  # scheduled with call_soon, not run synchronously
    await asyncio.sleep(0)
    assert seen == [("first", 7), ("second", p)]

    p.add_done_callback(lambda q: seen.append(("late", q.result())))
    await asyncio.sleep(0)
    assert seen[-1] == ("late", 7)


async def test_remove_done_callback() -> None:
    p: Placeholder[int] = Placeholder(asyncio.get_running_loop())
    seen: list[int] = []

    def cb(q: Placeholder[int]) -> None:
        seen.append(q.result())

    p.add_done_callback(cb)
    p.add_done_callback(cb)
    assert p.remove_done_callback(cb) == 2
    assert p.remove_done_callback(cb) == 0
    p.set_result(1)
    await asyncio.sleep(0)
    assert seen == []


async def test_placeholders_cannot_be_pickled() -> None:
    p: Placeholder[int] = Placeholder(asyncio.get_running_loop())
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(p)


# -- gather / wait ---------------------------------------------------------------------------


def placeholders(n: int) -> list[Placeholder[object]]:
    loop = asyncio.get_running_loop()
    return [Placeholder(loop, f"p{i}") for i in range(n)]


async def test_gather_keeps_input_order_when_later_items_finish_first() -> None:
    ps = placeholders(3)
    resolve_later(ps[0], 0.015, "a")
    resolve_later(ps[1], 0.010, "b")
    resolve_later(ps[2], 0.001, "c")
    assert await gather(*ps) == ["a", "b", "c"]


async def test_gather_raises_the_first_error_in_input_order() -> None:
    ps = placeholders(3)
    resolve_later(ps[0], 0.001, "ok")
    resolve_later(ps[1], 0.010, KeyError("second"))
    resolve_later(ps[2], 0.001, ValueError("third, but first to fail"))
    with pytest.raises(KeyError, match="second"):
        await gather(*ps)


async def test_gather_return_exceptions_puts_errors_in_place() -> None:
    ps = placeholders(3)
    err = KeyError("k")
    resolve_later(ps[0], 0.003, 1)
    resolve_later(ps[1], 0.001, err)
    resolve_later(ps[2], 0.002, 3)
    assert await gather(*ps, return_exceptions=True) == [1, err, 3]


async def test_gather_of_nothing_and_of_non_placeholders() -> None:
    assert await gather() == []

    async def coro() -> int:
        return 1

    c = coro()
    with pytest.raises(TypeError, match=r"asyncio\.gather"):
        await gather(c)  # type: ignore[arg-type]
    c.close()


async def test_wait_returns_ready_and_not_ready_in_input_order() -> None:
    ps = placeholders(4)
    resolve_later(ps[3], 0.001, "d")
    resolve_later(ps[1], 0.005, "b")
    resolve_later(ps[0], 0.5, "a")  # too late to matter
    ready, not_ready = await wait(ps, num_returns=2)
    assert ready == [ps[1], ps[3]]
    assert not_ready == [ps[0], ps[2]]
    ps[0].set_result("a")  # let the loop's timer find nothing to do


async def test_wait_caps_ready_at_num_returns() -> None:
    ps = placeholders(3)
    for i, p in enumerate(ps):
        p.set_result(i)
    ready, not_ready = await wait(ps, num_returns=2)
    assert ready == ps[:2]
    assert not_ready == ps[2:]


async def test_wait_timeout_returns_early_with_partial_readiness() -> None:
    ps = placeholders(3)
    resolve_later(ps[2], 0.001, "c")
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    ready, not_ready = await wait(ps, num_returns=3, timeout=0.02)
    elapsed = loop.time() - t0
    assert ready == [ps[2]]
    assert not_ready == [ps[0], ps[1]]
    assert elapsed >= 0.015  # at its timeout: ps[0] and ps[1] never resolve


async def test_timed_out_waits_take_their_wake_ups_back() -> None:
    # The launcher polls `wait([answers], timeout=0.1)` until a step ends: each timed-out
    # wait used to leave its wake-up parked on the set (201 after 200 waits).
    loop = asyncio.get_running_loop()
    pset: PlaceholderSet[int] = PlaceholderSet(loop, 3, "answers")
    one: Placeholder[int] = Placeholder(loop, "one")
    for _ in range(200):
        ready, not_ready = await wait([pset], timeout=0)
        assert (ready, not_ready) == ([], [pset])
        await wait([one, pset], num_returns=2, timeout=0)
    assert pset._n_waiters() == 0
    assert one._n_waiters() == 0
    pset._fill([0, 1, 2], [1, 2, 3])  # still works once the set is done
    assert await wait([pset], timeout=0) == ([pset], [])


async def test_an_early_return_or_a_cancelled_wait_takes_its_wake_ups_back() -> None:
    loop = asyncio.get_running_loop()
    slow = placeholders(2)
    for i in range(50):
        quick: Placeholder[int] = Placeholder(loop, "quick")
        loop.call_soon(quick.set_result, i)
        ready, _ = await wait([quick, *slow], num_returns=1)
        assert ready == [quick]
        with pytest.raises(TimeoutError):  # a Task awaiting it, cancelled at the deadline
            await asyncio.wait_for(slow[0], 0.0005)
        waiter = asyncio.create_task(gather(*slow))
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
    assert [p._n_waiters() for p in slow] == [0, 0]
    for p in slow:
        p.set_result(0)
    assert await gather(*slow) == [0, 0]


async def test_wait_on_the_same_placeholder_twice() -> None:
    p: Placeholder[int] = placeholders(1)[0]  # type: ignore[assignment]
    assert await wait([p, p], timeout=0) == ([], [p, p])
    assert p._n_waiters() == 0
    resolve_later(p, 0.001, 4)
    assert await wait([p, p]) == ([p, p], [])


async def test_wait_defaults_to_all_and_counts_failures_as_ready() -> None:
    ps = placeholders(2)
    resolve_later(ps[0], 0.002, Oops())
    resolve_later(ps[1], 0.001, 2)
    ready, not_ready = await wait(ps)
    assert ready == ps
    assert not_ready == []
    assert isinstance(ps[0].exception(), Oops)


async def test_wait_rejects_impossible_num_returns() -> None:
    ps = placeholders(2)
    with pytest.raises(ValueError, match="between 0 and 2"):
        await wait(ps, num_returns=3)
    with pytest.raises(ValueError):
        await wait(ps, num_returns=-1)


# -- PlaceholderSet from groups --------------------------------------------------------------


class Numbered(Agent):
    """Replies id * 10; members listed in ``slow`` wait on ``gate``; negative content fails."""

    def __init__(self, id: int, profile: object = None, *, gate: asyncio.Future[None],
                 slow: frozenset[int] = frozenset()) -> None:
        super().__init__(id, None)
        self.gate = gate
        self.slow = slow

    async def reply(self, msg: Msg) -> int:
        if self.id in self.slow:
            await self.gate
        if msg.content == "fail-odd" and self.id % 2:
            raise Oops(f"odd {self.id}")
        return self.id * 10


async def numbered(sim: Simulation, n: int, slow: frozenset[int] = frozenset()
                   ) -> tuple[asyncio.Future[None], AgentGroup]:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    group = await sim.create(Numbered, n, init={"gate": gate, "slow": slow})
    return gate, group


async def test_broadcast_results_are_in_member_order() -> None:
    async with Simulation(workers=3) as sim:
        # Members 0 and 1 finish last, so results arrive out of member order.
        gate, group = await numbered(sim, 7, slow=frozenset({0, 1}))
        pset = group.broadcast(Msg("m", "hi"))
        assert isinstance(pset, PlaceholderSet)
        assert len(pset) == 7
        await asyncio.sleep(0.005)
        assert pset.n_done == 5
        assert pset.progress == pytest.approx(5 / 7)
        assert not pset.done()
        with pytest.raises(asyncio.InvalidStateError, match="5/7"):
            pset.result()
        gate.set_result(None)
        assert await pset == [0, 10, 20, 30, 40, 50, 60]
        assert pset.done()
        assert pset.progress == 1.0
        assert pset.n_failed == 0


async def test_results_with_exceptions_in_place_and_exceptions_dict() -> None:
    async with Simulation(workers=2) as sim:
        _, group = await numbered(sim, 5)
        pset = group.broadcast(Msg("m", "fail-odd"))
        await wait([pset])
        out = pset.results(return_exceptions=True)
        assert [type(x) for x in out] == [int, Oops, int, Oops, int]
        assert [out[0], out[2], out[4]] == [0, 20, 40]
        errors = pset.exceptions()
        assert sorted(errors) == [1, 3]
        assert all(type(k) is int for k in errors)
        assert str(errors[3]) == "odd 3"
        assert pset.n_failed == 2
        assert pset.n_done == 5
        assert pset.exception() is errors[1]
        with pytest.raises(Oops, match="odd 1"):
            pset.results(return_exceptions=False)
        with pytest.raises(Oops, match="odd 1"):
            await pset


async def test_unconsumed_group_failure_is_reported_and_consumed_one_is_not() -> None:
    sim = await Simulation(workers=2).start()
    _, group = await numbered(sim, 4)
    seen = group.broadcast(Msg("m", "fail-odd"))
    ignored = group.broadcast(Msg("m", "fail-odd"))
    await wait([seen, ignored])
    assert len(seen.exceptions()) == 2
    assert sim.statistics().unobserved_failures == 2  # the two members of `ignored`
    with pytest.warns(UnobservedFailureWarning, match=r"2 agent call\(s\).*Oops: odd 1"):
        await sim.stop()


async def test_element_placeholders() -> None:
    async with Simulation(workers=2) as sim:
        gate, group = await numbered(sim, 4, slow=frozenset({2}))
        pset = group.broadcast(Msg("m", "hi"))
        early = pset[2]
        last = pset[-1]
        assert isinstance(early, Placeholder)
        assert not early.done()
        await asyncio.sleep(0.005)
        assert last.done() and last.result() == 30
        assert pset[0].result() == 0  # taken after the member finished
        assert not early.done()
        gate.set_result(None)
        assert await early == 20
        with pytest.raises(IndexError, match="member 4 out of range"):
            pset[4]
        with pytest.raises(IndexError):
            pset[-5]


async def test_element_placeholder_of_a_failed_member() -> None:
    async with Simulation(workers=2) as sim:
        _, group = await numbered(sim, 2)
        pset = group.broadcast(Msg("m", "fail-odd"))
        with pytest.raises(Oops, match="odd 1"):
            await pset[1]
        assert await pset[0] == 0
        pset.exceptions()


async def test_empty_group_gives_a_done_set() -> None:
    async with Simulation(workers=2) as sim:
        _, group = await numbered(sim, 0)
        pset = group.broadcast(Msg("m", "hi"))
        assert pset.done()
        assert len(pset) == 0
        assert pset.progress == 1.0
        assert await pset == []
        assert pset.results() == []


async def test_result_is_a_copy_that_cannot_corrupt_the_set() -> None:
    async with Simulation(workers=1) as sim:
        _, group = await numbered(sim, 2)
        pset = group.broadcast(Msg("m", "hi"))
        answers = await pset
        answers.append(99)
        assert pset.done()
        assert len(pset) == 2
        assert pset.result() == [0, 10]


async def test_gather_and_wait_accept_sets() -> None:
    async with Simulation(workers=2) as sim:
        _, group = await numbered(sim, 3)
        pset = group.broadcast(Msg("m", "hi"))
        single = group[1].reply(Msg("m", "hi"))
        assert await gather(single, pset) == [10, [0, 10, 20]]
        ready, not_ready = await wait([pset, single], num_returns=1)
        assert ready == [pset]
        assert not_ready == [single]


async def test_sets_cannot_be_pickled() -> None:
    pset: PlaceholderSet[int] = PlaceholderSet(asyncio.get_running_loop(), 1)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(pset)


async def test_finished_lists_the_members_done_so_far_in_member_order() -> None:
    pset: PlaceholderSet[int | None] = PlaceholderSet(asyncio.get_running_loop(), 5)
    assert pset.finished() == ([], [])
    boom = ValueError("boom")
    pset._fill([3, 0], [30, None])  # None is a value, not "pending"
    pset._fail([2], [boom])
    assert pset.finished() == ([0, 2, 3], [None, boom, 30])
    assert not pset.done()
    pset._fill([1, 4], [10, 40])
    assert pset.finished() == ([0, 1, 2, 3, 4], [None, 10, boom, 30, 40])
    assert pset.exceptions() == {2: boom}
