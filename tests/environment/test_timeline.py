"""Timeline: time of steps, rounds, listeners, mirroring into an environment."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from populace.environment import Env, Timeline, TimeStep


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
