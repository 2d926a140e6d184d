"""The compact memory: events kept in order, windows within a budget, folding, state."""

from __future__ import annotations

import pickle

import pytest

from populace.agents import Event, Memory


def filled(n: int, chars: int = 40) -> Memory:
    m = Memory()
    for i in range(n):
        m.add(i, "message" if i % 2 else "decision", f"{i:03d}" + "x" * (chars - 3))
    return m


def test_events_come_back_in_order_with_step_and_kind() -> None:
    m = Memory()
    m.add(1, "message", "Ann: hello")
    m.add(2, "intervention", "a storm\x1eis coming")  # the separator cannot split an event
    assert m.events() == [Event(1, "message", "Ann: hello"),
                          Event(2, "intervention", "a storm is coming")]
    assert len(m) == 2


def test_the_window_holds_the_newest_events_within_the_budget() -> None:
    m = filled(10)  # 40 characters: 10 tokens each
    n, recent = m.window(35)
    assert n == 7 and [e.step for e in recent] == [7, 8, 9]
    assert m.window(1000) == (0, m.events())


def test_folding_replaces_the_oldest_events_by_one_summary() -> None:
    m = filled(10)
    m.fold(7, "they talked", step=10)
    assert [(e.kind, e.step) for e in m.events()][:2] == [("summary", 10), ("message", 7)]
    assert len(m) == 4
    m.fold(2, None, step=11)  # no summary: dropped
    assert [e.step for e in m.events()] == [8, 9]


def test_state_round_trips_through_pickle_and_refuses_a_torn_one() -> None:
    m = filled(5)
    again = Memory()
    again.set_state(pickle.loads(pickle.dumps(m.get_state())))
    assert again.events() == m.events()
    assert Memory().get_state() is None
    with pytest.raises(ValueError, match="differ in number"):
        again.set_state(("a\x1eb", b"\0\0\0\0"))


def test_an_unknown_kind_or_step_is_refused() -> None:
    with pytest.raises(ValueError, match="kind must be one of"):
        Memory().add(1, "gossip", "x")
    with pytest.raises(ValueError, match="step must be"):
        Memory().add(-1, "message", "x")
