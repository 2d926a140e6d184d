"""EndpointPool: least-outstanding choice, per-endpoint limits, fair queueing, ejection."""

from __future__ import annotations

import asyncio

import pytest

from populace.llm import EndpointPool, Lease

URLS = ["http://a/v1", "http://b/v1", "http://c/v1"]


async def test_least_outstanding_with_round_robin_ties() -> None:
    pool = EndpointPool(URLS, max_concurrency=10)
    leases = [await pool.acquire() for _ in range(6)]
    assert [x.url for x in leases] == URLS + URLS  # equal loads take turns
    pool.release(leases[1], ok=True)  # b now has the fewest in flight
    assert (await pool.acquire()).url == "http://b/v1"
    stats = {s.url: s for s in pool.statistics()}
    assert stats["http://b/v1"].requests == 3 and stats["http://b/v1"].in_flight == 2
    assert stats["http://a/v1"].in_flight == 2 and stats["http://a/v1"].failures == 0


async def test_limit_queues_callers_first_come_first_served() -> None:
    pool = EndpointPool(URLS[:2], max_concurrency=1)
    first, second = await pool.acquire(), await pool.acquire()
    order: list[int] = []
    got: list[Lease] = []

    async def wait(i: int) -> None:
        lease = await pool.acquire()
        order.append(i)
        got.append(lease)

    tasks = [asyncio.create_task(wait(i)) for i in range(4)]
    await asyncio.sleep(0.01)
    assert order == [] and pool.waiting == 4
    pool.release(second, ok=True)
    pool.release(first, ok=True)
    await asyncio.sleep(0.01)
    assert order == [0, 1]
    assert {x.url for x in got} == set(URLS[:2])
    # A late caller queues behind the earlier ones even though it arrived when none was free.
    late = asyncio.create_task(pool.acquire())
    for lease in list(got):
        pool.release(lease, ok=True)
    await asyncio.sleep(0.01)
    assert order == [0, 1, 2, 3] and not late.done()
    pool.release(got[2], ok=True)
    assert (await late).url == got[2].url
    await asyncio.gather(*tasks)


async def test_cancelled_waiter_gives_its_turn_away() -> None:
    pool = EndpointPool(URLS[:1], max_concurrency=1)
    held = await pool.acquire()
    a = asyncio.create_task(pool.acquire())
    b = asyncio.create_task(pool.acquire())
    await asyncio.sleep(0)
    a.cancel()
    pool.release(held, ok=True)
    lease = await b
    with pytest.raises(asyncio.CancelledError):
        await a
    (stats,) = pool.statistics()
    assert stats.in_flight == 1 and stats.requests == 2
    pool.release(lease, ok=True)
    pool.release(lease, ok=True)  # idempotent
    assert pool.statistics()[0].in_flight == 0


async def test_cancelled_after_handover_releases_the_slot() -> None:
    pool = EndpointPool(URLS[:1], max_concurrency=1)
    held = await pool.acquire()
    waiter = asyncio.create_task(pool.acquire())
    await asyncio.sleep(0)
    pool.release(held, ok=True)  # hands the slot to the waiter ...
    waiter.cancel()  # ... which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await waiter
    (stats,) = pool.statistics()
    assert stats.in_flight == 0 and stats.requests == 1
    assert (await pool.acquire()).url == URLS[0]


async def test_a_closed_caller_leaves_the_queue() -> None:
    # Agents are driven without a Task: an abandoned agent is closed, not cancelled.
    pool = EndpointPool(URLS[:1], max_concurrency=1)
    held = await pool.acquire()
    caller = pool.acquire()
    caller.send(None)  # now queued
    assert pool.waiting == 1
    caller.close()
    assert pool.waiting == 0
    pool.release(held, ok=True)
    assert pool.statistics()[0].in_flight == 0
    assert (await pool.acquire()).url == URLS[0]


async def test_failing_endpoint_is_ejected_then_probed_back() -> None:
    pool = EndpointPool(URLS[:2], max_concurrency=4, eject_after=2, cooldown=0.05)
    for _ in range(2):
        lease = await pool.acquire()
        while lease.url != URLS[0]:
            pool.release(lease, ok=True)
            lease = await pool.acquire()
        pool.release(lease, ok=False)
    a_stats = pool.statistics()[0]
    assert a_stats.state == "ejected" and a_stats.ejections == 1 and a_stats.failures == 2
    # While cooling down every request goes to b.
    leases = [await pool.acquire() for _ in range(3)]
    assert {x.url for x in leases} == {URLS[1]}
    await asyncio.sleep(0.06)
    probe = await pool.acquire()
    assert probe.url == URLS[0] and pool.statistics()[0].state == "probing"
    assert (await pool.acquire()).url == URLS[1]  # one trial at a time
    pool.release(probe, ok=False)  # trial failed: out again
    assert pool.statistics()[0].state == "ejected" and pool.statistics()[0].ejections == 2
    await asyncio.sleep(0.06)
    probe = await pool.acquire()
    assert probe.url == URLS[0]
    pool.release(probe, ok=True)
    assert pool.statistics()[0].state == "up"
    pool.close()


async def test_queued_callers_use_an_endpoint_back_from_cooldown() -> None:
    pool = EndpointPool(URLS[:2], max_concurrency=1, eject_after=1, cooldown=0.05)
    a = await pool.acquire()
    b = await pool.acquire()
    pool.release(a, ok=False)  # a ejected
    waiter = asyncio.create_task(pool.acquire())
    await asyncio.sleep(0.01)
    assert not waiter.done()
    lease = await asyncio.wait_for(waiter, 1.0)  # woken by the cool-down timer
    assert lease.url == URLS[0]
    pool.release(b, ok=True)
    pool.release(lease, ok=True)
    pool.close()


async def test_last_healthy_endpoint_is_never_ejected() -> None:
    pool = EndpointPool(URLS[:1], eject_after=1, cooldown=60)
    for _ in range(3):
        pool.release(await pool.acquire(), ok=False)
    (stats,) = pool.statistics()
    assert stats.state == "up" and stats.failures == 3 and stats.ejections == 0


async def test_rate_limits_do_not_count_against_health() -> None:
    pool = EndpointPool(URLS[:2], eject_after=1)
    for _ in range(4):
        pool.release(await pool.acquire(), ok=False, strike=False)
    assert all(s.state == "up" for s in pool.statistics())
    assert sum(s.failures for s in pool.statistics()) == 4


async def test_latency_is_accumulated() -> None:
    pool = EndpointPool(URLS[:1])
    lease = await pool.acquire()
    await asyncio.sleep(0.02)
    pool.release(lease, ok=True)
    (stats,) = pool.statistics()
    assert stats.latency_sum >= 0.015 and stats.mean_latency == stats.latency_sum


def test_arguments_are_checked() -> None:
    for args, kw in (([], {}), (["http://a", "http://a"], {}), (URLS, {"max_concurrency": 0}),
                     (URLS, {"eject_after": 0}), (URLS, {"cooldown": -1})):
        with pytest.raises(ValueError):
            EndpointPool(args, **kw)  # type: ignore[arg-type]
