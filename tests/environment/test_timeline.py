"""Timeline: time of steps, rounds, listeners, mirroring into an environment or a service."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime, timedelta

import pytest

from populace.core import Placeholder
from populace.environment import (
    Env,
    EnvServedError,
    EnvService,
    Op,
    Reply,
    ServiceClosed,
    Timeline,
    TimeStep,
)


def test_datetime_timeline_advances_and_converts() -> None:
    t = Timeline(datetime(2024, 3, 1), timedelta(hours=6), steps_per_round=4)
    assert t.now == datetime(2024, 3, 1) and t.step == 0 and t.round == 0
    assert t.advance() == datetime(2024, 3, 1, 6)
    assert t.advance(3) == datetime(2024, 3, 2)
    assert (t.step, t.round) == (4, 1)
    assert t.time_at(10) == datetime(2024, 3, 3, 12)
    assert t.step_at(datetime(2024, 3, 3, 13)) == 10
    assert t.step_at(datetime(2024, 2, 29, 23)) == -1
    assert t.time_of_round(2) == datetime(2024, 3, 3)
    assert t.round_at(datetime(2024, 3, 3, 23, 59)) == 2
    assert t.advance_to_round(3) == datetime(2024, 3, 4)
    assert t.advance_to_round(1) == datetime(2024, 3, 4)  # never backwards


def test_numeric_timeline_round_trips_steps_exactly() -> None:
    t = Timeline(0.0, 0.1)
    for k in range(-50, 1000):
        assert t.step_at(t.time_at(k)) == k
    assert t.step_at(0.35) == 3


def test_bad_arguments() -> None:
    with pytest.raises(TypeError):
        Timeline(datetime(2024, 1, 1), 1.0)
    with pytest.raises(ValueError):
        Timeline(0.0, 0.0)
    with pytest.raises(ValueError):
        Timeline(0.0, 1.0).advance(-1)
    with pytest.raises(TypeError):
        Timeline(0.0, 1.0).step_at(datetime(2024, 1, 1))


def test_step_listeners_fire_once_per_step_and_errors_are_reported() -> None:
    t = Timeline(0.0, 1.0, steps_per_round=2)
    every: list[TimeStep] = []
    rounds: list[int] = []
    t.on_step(every.append)
    sub = t.on_step(lambda s: rounds.append(s.round), every=2)

    def broken(s: TimeStep) -> None:
        raise RuntimeError("oops")

    t.on_step(broken)
    t.advance(4)
    assert every == [TimeStep(1, 1.0, 0), TimeStep(2, 2.0, 1), TimeStep(3, 3.0, 1),
                     TimeStep(4, 4.0, 2)]
    assert rounds == [1, 2]
    sub.cancel()
    t.advance(2)
    assert rounds == [1, 2]
    assert len(t.listener_errors()) == 6


def test_mirror_keeps_an_env_key_in_step_and_state_round_trips() -> None:
    env = Env()
    t = Timeline(datetime(2024, 1, 1), timedelta(days=1))
    t.mirror(env, "today")
    seen: list[object] = []
    env.monitor(lambda e: seen.append(e.new), key="today")
    t.advance(2)
    assert env.query("today") == datetime(2024, 1, 3)
    assert seen == [datetime(2024, 1, 2), datetime(2024, 1, 3)]
    other = Timeline(datetime(2024, 1, 1), timedelta(days=1))
    other.set_state(t.get_state())
    assert other.now == t.now


# -- mirroring through a service (what serve() returns on every backend) --------------------


async def test_mirror_through_a_service_registers_then_sets_each_step() -> None:
    env = Env()
    t = Timeline(datetime(2024, 1, 1), timedelta(days=1))
    async with EnvService(env) as service:
        t.mirror(service, "today")
        await t.synced()
        assert env.query("today") == datetime(2024, 1, 1) and env.owner("today") == "timeline"
        seen: list[object] = []
        await service.monitor(lambda e: seen.append(e.new), key="today")
        t.advance(2)
        await t.synced()
        assert await service.query("today") == datetime(2024, 1, 3)
        assert seen == [datetime(2024, 1, 2), datetime(2024, 1, 3)]
        t.set_state({"step": 10})
        await t.synced()
        assert await service.query("today") == datetime(2024, 1, 11)


async def test_mirror_through_a_service_onto_an_existing_key_keeps_its_owner() -> None:
    env = Env()
    env.register("day", -1.0, owner="scenario")
    t = Timeline(0.0, 1.0)
    async with EnvService(env) as service:
        t.mirror(service, "day")
        t.advance()
        await t.synced()
        assert (env.query("day"), env.owner("day")) == (1.0, "scenario")


async def test_a_failed_mirror_write_is_raised_never_dropped(
        caplog: pytest.LogCaptureFixture) -> None:
    env = Env()
    t = Timeline(0.0, 1.0)
    service = EnvService(env)
    t.mirror(service, "day")
    await service.aclose()
    with pytest.raises(ServiceClosed, match="closed"):
        t.advance()  # a closed local service refuses at once
    assert t.step == 1

    class Failing:
        """Answers every batch with a failure, later (like a remote service that died)."""

        def __init__(self) -> None:
            self.pending: list[tuple[Placeholder[Reply], int]] = []

        def submit(self, ops: Sequence[Op]) -> Placeholder[Reply]:
            p: Placeholder[Reply] = Placeholder(asyncio.get_running_loop(), "batch")
            self.pending.append((p, len(ops)))
            return p

        def fail(self) -> None:
            pending, self.pending = self.pending, []
            for p, n in pending:
                p.set_result(Reply([None] * n, {n - 1: ServiceClosed("the service is gone")}))

    other, remote = Timeline(0.0, 1.0), Failing()
    other.mirror(remote, "day")
    other.advance()
    remote.fail()  # the first write (register, set) and the step-1 set fail
    with pytest.raises(ServiceClosed, match="the service is gone") as info:
        await other.synced()
    assert "the timeline writing 'day' at step 0" in "".join(info.value.__notes__)
    assert "timeline: writing 'day' at step 0" in caplog.text
    other.advance()  # the failures raised once are not raised again
    remote.fail()  # the step-2 write fails; nobody awaits synced() ...
    await asyncio.sleep(0)
    with pytest.raises(ServiceClosed, match="the service is gone") as info:
        other.advance()  # ... so the next advance raises it, before moving
    assert "at step 2" in "".join(info.value.__notes__)
    assert other.step == 2


def test_mirror_refuses_what_it_cannot_write_to() -> None:
    t = Timeline(0.0, 1.0)
    with pytest.raises(TypeError, match=r"an Env or an environment service \(what serve\(\) "
                       r"returns\), got dict"):
        t.mirror({}, "day")  # type: ignore[arg-type]
    served = Env()
    served._serve_elsewhere("a remote service (test)")
    with pytest.raises(EnvServedError, match=r"`timeline\.mirror\(service, 'day'\)`, and "
                       r"`await timeline\.synced\(\)`"):
        t.mirror(served, "day")
