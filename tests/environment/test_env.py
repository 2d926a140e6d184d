"""Env: the tree, fall-through reads, writes where the key lives, listeners, checkpoints."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest

from populace.core import PopulaceError
from populace.environment import (
    DuplicateKeyError,
    Env,
    EnvError,
    EnvEvent,
    EnvServedError,
    EnvService,
    UnknownKeyError,
)


@pytest.fixture
def tree() -> tuple[Env, Env, Env]:
    world = Env("global")
    world.register("rules", "guess 2/3 of the mean")
    world.register("round", 0)
    return world, world.child("g1"), world.child("g2")


def test_register_query_update_delete() -> None:
    env = Env("global")
    env.register("price", 10, owner="market")
    assert env.query("price") == 10
    assert env.owner("price") == "market"
    assert env.update("price", 12) == 12
    assert env.update("price", fn=lambda p: p * 2) == 24
    assert env.delete("price") == 24
    assert "price" not in env
    with pytest.raises(UnknownKeyError):
        env.query("price")


def test_register_twice_is_an_error_naming_key_and_env() -> None:
    env = Env("global")
    env.register("k", 1)
    with pytest.raises(DuplicateKeyError, match=r"'k'.*'global'"):
        env.register("k", 2)
    assert env.query("k") == 1


def test_unknown_key_names_key_and_path_and_is_a_key_error(tree: tuple[Env, Env, Env]) -> None:
    _, g1, _ = tree
    with pytest.raises(KeyError) as info:
        g1.query("nope")
    assert isinstance(info.value, UnknownKeyError | EnvError | PopulaceError)
    assert str(info.value) == "no key 'nope' in environment 'global/g1' or its ancestors"
    for op in (lambda: g1.update("nope", 1), lambda: g1.delete("nope"),
               lambda: g1.update("nope", fn=lambda v: v)):
        with pytest.raises(UnknownKeyError):
            op()


def test_reads_fall_through_to_ancestors(tree: tuple[Env, Env, Env]) -> None:
    world, g1, _ = tree
    deep = g1.child("team-a")
    assert deep.path == "global/g1/team-a"
    assert deep.query("rules") == "guess 2/3 of the mean"
    g1.register("rules", "group rules")  # shadows the global key for g1 and below
    assert deep.query("rules") == "group rules"
    assert world.query("rules") == "guess 2/3 of the mean"
    assert "rules" in deep and "other" not in deep


def test_groups_are_isolated_but_share_the_parent(tree: tuple[Env, Env, Env]) -> None:
    world, g1, g2 = tree
    g1.register("mean", 40.0)
    g2.register("mean", 55.0)
    g1.register("only-g1", True)
    assert (g1.query("mean"), g2.query("mean")) == (40.0, 55.0)
    assert "only-g1" not in g2
    with pytest.raises(UnknownKeyError):
        g2.query("only-g1")
    with pytest.raises(UnknownKeyError):
        world.query("mean")
    assert g1.query("round") == g2.query("round") == 0
    world.update("round", 1)
    assert g1.query("round") == g2.query("round") == 1
    assert set(g1.query_prefix("")) == {"rules", "round", "mean", "only-g1"}
    assert set(g2.query_prefix("")) == {"rules", "round", "mean"}


def test_writes_go_where_the_key_lives(tree: tuple[Env, Env, Env]) -> None:
    world, g1, g2 = tree
    assert g1.update("round", fn=lambda r: r + 1) == 1
    assert world.query("round") == 1 and g2.query("round") == 1
    assert "round" not in g1.query_prefix("", inherited=False)


def test_query_prefix_and_where_merge_with_nearest_winning(tree: tuple[Env, Env, Env]) -> None:
    world, g1, _ = tree
    world.register("score/a", 1)
    world.register("score/b", 2)
    g1.register("score/b", 20)
    g1.register("score/c", 30)
    assert g1.query_prefix("score/") == {"score/a": 1, "score/b": 20, "score/c": 30}
    assert g1.query_prefix("score/", inherited=False) == {"score/b": 20, "score/c": 30}
    assert world.query_prefix("score/") == {"score/a": 1, "score/b": 2}
    big = g1.query_where(lambda k, v: isinstance(v, int) and v >= 2)
    assert big == {"score/b": 20, "score/c": 30}


def test_values_must_be_plain_data_and_keys_strings() -> None:
    env = Env()

    async def coro() -> int:
        return 1

    with pytest.raises(TypeError, match="plain data"):
        env.register("f", lambda: 1)
    with pytest.raises(TypeError, match="plain data"):
        env.register("c", coro())
    with pytest.raises(TypeError, match="strings"):
        env.register(3, 1)  # type: ignore[arg-type]
    env.register("ok", {"nested": [1, 2.5, "x", None]})
    with pytest.raises(TypeError):
        env.update("ok", 1, fn=lambda v: v)
    with pytest.raises(TypeError):
        env.update("ok")


def test_env_names_and_children() -> None:
    world = Env()
    assert world.path == "global" and world.parent is None
    g = world.child("g")
    assert world.child("g") is g and world.children["g"] is g and g.root is world
    assert world.find("global/g") is g and g.find("global") is world
    with pytest.raises(ValueError):
        Env("g", parent=world)
    with pytest.raises(ValueError):
        Env("a/b")
    with pytest.raises(LookupError):
        world.find("global/nope")


# -- listeners --------------------------------------------------------------------------------

def test_listeners_run_after_the_change_in_subscription_order() -> None:
    env = Env()
    env.register("x", 0)
    seen: list[tuple[str, object, object, object]] = []
    env.monitor(lambda e: seen.append(("first", e.old, e.new, env.query("x"))), key="x")
    env.monitor(lambda e: seen.append(("all", e.old, e.new, env.query(e.key))))
    env.monitor(lambda e: seen.append(("third", e.old, e.new, env.query("x"))), key="x")
    env.update("x", 5)
    assert seen == [("first", 0, 5, 5), ("all", 0, 5, 5), ("third", 0, 5, 5)]


def test_event_fields_and_filters() -> None:
    env = Env("global")
    events: list[EnvEvent] = []
    by_prefix: list[str] = []
    deletes: list[str] = []
    env.monitor(events.append)
    env.monitor(lambda e: by_prefix.append(e.key), prefix="agent/")
    env.monitor(lambda e: deletes.append(e.key), event="delete")
    env.register("agent/1", "a")
    env.register("other", 1)
    env.update("agent/1", "b")
    env.delete("agent/1")
    assert events == [
        EnvEvent("global", "agent/1", "register", None, "a"),
        EnvEvent("global", "other", "register", None, 1),
        EnvEvent("global", "agent/1", "update", "a", "b"),
        EnvEvent("global", "agent/1", "delete", "b", None),
    ]
    assert by_prefix == ["agent/1"] * 3
    assert deletes == ["agent/1"]
    with pytest.raises(ValueError, match="unknown event"):
        env.monitor(print, event="upsert")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        env.monitor(print, key="a", prefix="b")


def test_unsubscribe_stops_events() -> None:
    env = Env()
    env.register("x", 0)
    seen: list[int] = []
    sub = env.monitor(lambda e: seen.append(e.new), key="x")
    env.update("x", 1)
    sub.cancel()
    sub.cancel()
    env.update("x", 2)
    assert seen == [1] and not sub.active
    assert env.statistics().listeners == 0


def test_listener_errors_are_reported_never_raised(caplog: pytest.LogCaptureFixture) -> None:
    env = Env("global")
    env.register("x", 0)
    after: list[int] = []

    def broken(event: EnvEvent) -> None:
        raise RuntimeError("listener bug")

    env.monitor(broken, key="x")
    env.monitor(lambda e: after.append(e.new), key="x")
    with caplog.at_level(logging.ERROR, logger="populace.environment"):
        assert env.update("x", 1) == 1  # the writer is not disturbed
    assert env.query("x") == 1
    assert after == [1]  # later listeners still run
    [err] = env.listener_errors()
    assert isinstance(err.error, RuntimeError) and "broken" in err.listener
    assert err.event.new == 1
    assert "listener bug" in caplog.text and "broken" in caplog.text
    stats = env.statistics()
    assert stats.listener_errors == 1 and stats.listener_calls == 2


def test_async_listener_is_reported_as_a_mistake() -> None:
    env = Env()
    env.register("x", 0)

    async def listener(event: EnvEvent) -> None:  # pragma: no cover - never run
        pass

    env.monitor(listener)
    env.update("x", 1)
    [err] = env.listener_errors()
    assert isinstance(err.error, TypeError) and "awaitable" in str(err.error)


def test_listener_writes_are_delivered_in_order_after_the_current_event() -> None:
    env = Env()
    env.register("a", 0)
    env.register("b", 0)
    log: list[str] = []

    def on_a(e: EnvEvent) -> None:
        log.append(f"1:{e.key}={e.new}")
        if e.key == "a":
            env.update("b", e.new * 10)

    env.monitor(on_a)
    env.monitor(lambda e: log.append(f"2:{e.key}={e.new}"))
    env.update("a", 1)
    assert log == ["1:a=1", "2:a=1", "1:b=10", "2:b=10"]


def test_descendant_listeners_see_group_changes(tree: tuple[Env, Env, Env]) -> None:
    world, g1, g2 = tree
    seen: list[tuple[str, str]] = []
    own: list[str] = []
    world.monitor(lambda e: seen.append((e.env, e.key)), prefix="mean", descendants=True)
    world.monitor(lambda e: own.append(e.env))
    g1.register("mean", 1.0)
    g2.register("mean", 2.0)
    g2.register("other", 2.0)
    world.update("round", 3)
    assert seen == [("global/g1", "mean"), ("global/g2", "mean")]
    assert own == ["global"]


def test_statistics_show_monitored_values_live(tree: tuple[Env, Env, Env]) -> None:
    world, g1, _ = tree
    world.monitor(lambda e: None, key="round")
    g1.register("mean", 0.0)
    g1.monitor(lambda e: None, key="mean")
    world.query("rules")
    world.update("round", 4)
    g1.update("mean", 33.3)
    stats = world.statistics()
    assert dict(stats.monitored) == {"round": 4}
    assert stats.keys == 2 and stats.reads == 1 and stats.writes == 3
    assert [c.path for c in stats.children] == ["global/g1", "global/g2"]
    assert dict(stats.children[0].monitored) == {"mean": 33.3}
    with pytest.raises(TypeError):
        stats.monitored["round"] = 5  # type: ignore[index]


def test_get_state_set_state_round_trip(tree: tuple[Env, Env, Env]) -> None:
    world, g1, _ = tree
    g1.register("mean", 12.5, owner="moderator")
    state = world.get_state()
    fresh = Env("global")
    seen: list[EnvEvent] = []
    fresh.monitor(seen.append, descendants=True)
    fresh.set_state(state)
    assert seen == []
    assert fresh.child("g1").query("mean") == 12.5
    assert fresh.child("g1").owner("mean") == "moderator"
    assert fresh.child("g2").query("round") == 0
    assert fresh.get_state() == state


# -- a tree served elsewhere: every use of the stale copy says what to call instead ----------

SERVED = "a remote service (test)"


@pytest.mark.parametrize(("use", "instead"), [
    (lambda e: e.query("round"), "`await service.query('round')`"),
    (lambda e: e.query_prefix("ro"), "`await service.query_prefix('ro')`"),
    (lambda e: e.query_where(lambda k, v: True), "`await service.query_where(predicate)`"),
    (lambda e: "round" in e, "`await service.query('round')` (it raises UnknownKeyError"),
    (lambda e: e.owner("round"), "`await service.fetch_state()` (owners are under 'owners')"),
    (lambda e: e.register("new", 1), "`await service.register('new', value)`"),
    (lambda e: e.update("round", 1), "`await service.update('round', value)` (or fn=)"),
    (lambda e: e.update("round", fn=abs), "`await service.update('round', value)`"),
    (lambda e: e.delete("round"), "`await service.delete('round')`"),
    (lambda e: e.monitor(print, key="round"), "`await service.monitor(listener, key='round')`"),
    (lambda e: e.monitor(print), "`await service.monitor(listener)` (it runs where"),
    (lambda e: e.statistics(), "`await service.fetch_statistics()`"),
    (lambda e: e.listener_errors(), "`await service.fetch_statistics()`"),
    (lambda e: e.get_state(), "`await service.fetch_state()`"),
    (lambda e: e.set_state({"data": {}}), "`await service.load_state(state)`"),
    (lambda e: e.child("new"), "add every child environment before serve()"),
])
def test_a_tree_served_elsewhere_refuses_every_use_naming_the_service_call(
        tree: tuple[Env, Env, Env], use: Any, instead: str) -> None:
    world = tree[0]
    world._serve_elsewhere(SERVED)
    with pytest.raises(EnvServedError) as info:
        use(world)
    message = str(info.value)
    assert message.startswith(f"environment 'global' is served by {SERVED}: ")
    assert instead in message
    assert isinstance(info.value, EnvError)


def test_a_served_child_names_its_path_and_the_write_is_not_made(
        tree: tuple[Env, Env, Env]) -> None:
    world, g1, g2 = tree
    g1.register("report", "r1")
    world._serve_elsewhere(SERVED)
    with pytest.raises(EnvServedError, match=r"environment 'global/g1' is served by .*: a write "
                       r"to this Env object would never reach the agents\. .*`await "
                       r"service\.update\('report', value, env='global/g1'\)`"):
        g1.update("report", "r2")
    with pytest.raises(EnvServedError, match=r"a read of this Env object would be stale\. .*"
                       r"`await service\.query\('rules', env='global/g2'\)`"):
        g2.query("rules")
    with pytest.raises(EnvServedError, match="add every child environment before serve"):
        Env("late", world)
    assert world.find("global/g1") is g1 and world.children["g2"] is g2  # the shape stays
    assert repr(g1) == f"<Env 'global/g1': served by {SERVED}>"
    assert g1._data["report"] == "r1"


def test_a_local_service_owns_the_env_and_refuses_a_served_one() -> None:
    world = Env("global")
    assert EnvService(world).env is world
    world._serve_elsewhere(SERVED)
    with pytest.raises(EnvServedError, match=re.escape(f"is served by {SERVED} already; serve "
                                                       "it once")):
        EnvService(world)
