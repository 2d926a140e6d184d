"""Many keys in one operation: Env.query_many / incr_many / update_many, the service's
per-key order for them, and EnvClient's merging of like one-key ops."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from populace.environment import (
    Env,
    EnvClient,
    EnvServedError,
    EnvService,
    Op,
    UnknownKeyError,
)


def tree() -> tuple[Env, Env]:
    world = Env("world")
    for i in range(4):
        world.register(f"k{i}", 0)
    town = world.child("town")
    town.register("k0", 100)  # shadows world's k0
    return world, town


# -- Env ---------------------------------------------------------------------------------------

def test_many_keys_fall_through_and_change_where_they_live() -> None:
    world, town = tree()
    assert town.incr_many(["k0", "k1", "k1"], 1).tolist() == [101, 1, 2]
    assert world.query_many(["k0", "k1"]) == [0, 2]
    assert town.query_many(["k0", "k1"]) == [101, 2]
    assert world.incr_many(["k2", "k3"], np.array([5, 6])).tolist() == [5, 6]
    world.update_many(["k3", "k2"], ["a", "b"])
    assert world.query_many(["k2", "k3"]) == ["b", "a"]
    town.update_many(["k0", "k1"], fn=lambda v: v * 10)
    assert town.query_many(["k0", "k1"]) == [1010, 20]
    assert world.statistics().writes == 4 + 2 + 2 + 2 + 1  # registers, k1 k1, k2 k3 twice, k1
    assert world.query_many([]) == [] and world.incr_many([], 1).size == 0


def test_an_unknown_key_changes_nothing() -> None:
    world, town = tree()
    for env in (world, town):
        with pytest.raises(UnknownKeyError) as caught:
            env.incr_many(["k1", "k1", "nope", "k2"], 1)
        assert caught.value.key == "nope"
        with pytest.raises(UnknownKeyError):
            env.update_many(["k1", "nope"], [7, 8])
        with pytest.raises(UnknownKeyError):
            env.query_many(["k1", "nope"])
    assert world.query_many(["k1", "k2"]) == [0, 0] and town.query("k0") == 100


def test_listeners_hear_each_key_in_order() -> None:
    world, town = tree()
    heard: list[tuple[str, str, Any, Any]] = []
    world.monitor(lambda e: heard.append((e.env, e.key, e.old, e.new)), descendants=True)
    town.incr_many(["k0", "k1", "k0"], [1, 2, 3])
    assert heard == [("world/town", "k0", 100, 101), ("world", "k1", 0, 2),
                     ("world/town", "k0", 101, 104)]


def test_bad_arguments_say_what_is_expected() -> None:
    world, _ = tree()
    with pytest.raises(ValueError, match="one entry per key: 2 keys, 3 deltas"):
        world.incr_many(["k1", "k2"], [1, 2, 3])
    with pytest.raises(TypeError, match="one value per key"):
        world.update_many(["k1"], 5)
    with pytest.raises(TypeError, match="sequence of keys, got one string"):
        world.query_many("k1")
    with pytest.raises(TypeError, match="either values or fn="):
        world.update_many(["k1"])

    async def later(old: int) -> int:
        return old  # pragma: no cover - refused before it runs

    with pytest.raises(TypeError, match="plain function"):
        world.update_many(["k1"], fn=later)
    with pytest.raises(TypeError, match="plain data"):
        world.update_many(["k1"], [print])
    assert world.query("k1") == 0


def test_at_addresses_the_elements_of_an_array() -> None:
    world, town = tree()
    world.register("heard", np.zeros(6, dtype=np.int64))
    before = world.query("heard")
    events: list[tuple[list[int], list[int]]] = []
    world.monitor(lambda e: events.append((e.old.tolist(), e.new.tolist())), key="heard")
    assert town.incr_many("heard", 1, at=[3, 4, 3]).tolist() == [2, 1, 2]
    assert before.tolist() == [0] * 6  # a new array: the old one is left as it was
    assert town.query_many("heard", at=np.array([3, 0])).tolist() == [2, 0]
    world.update_many("heard", 7, at=[0])
    world.update_many("heard", fn=lambda a: a * 2, at=[3, 0])
    world.update_many("heard", [5, 6], at=[1, 2])
    assert world.query("heard").tolist() == [14, 5, 6, 4, 1, 0]
    assert events[0] == ([0] * 6, [0, 0, 0, 2, 1, 0]) and len(events) == 4
    with pytest.raises(IndexError, match=r"in \[0, 6\)"):
        world.incr_many("heard", 1, at=[6])
    with pytest.raises(IndexError):
        world.incr_many("heard", 1, at=[-1])
    with pytest.raises(TypeError, match="integer positions"):
        world.incr_many("heard", 1, at=[1.5])
    with pytest.raises(TypeError, match="holds int"):
        world.incr_many("k1", 1, at=[0])
    with pytest.raises(UnknownKeyError):
        world.query_many("nope", at=[0])
    assert world.query("heard").tolist() == [14, 5, 6, 4, 1, 0]


def test_a_served_tree_names_the_many_verb_to_use() -> None:
    world, _ = tree()
    world._serve_elsewhere("a remote service (test)")
    with pytest.raises(EnvServedError, match=r"await service\.incr_many\(keys, deltas\)"):
        world.incr_many(["k1"], 1)
    with pytest.raises(EnvServedError, match=r"await service\.query_many\(keys\)"):
        world.query_many("heard", at=[0])


# -- the service -------------------------------------------------------------------------------

async def times_ten_later(old: int) -> int:
    await asyncio.sleep(0.01)
    return old * 10


async def test_a_held_key_keeps_its_order_and_the_others_go_at_once() -> None:
    async with EnvService() as service:
        for key in ("a", "b", "c"):
            await service.register(key, 1)
        held = asyncio.ensure_future(service.update("a", fn=times_ten_later))
        await asyncio.sleep(0)
        many = asyncio.ensure_future(service.incr_many(["a", "b", "c", "a"], [1, 2, 3, 4]))
        await asyncio.sleep(0)
        assert service.env.query_many(["a", "b", "c"]) == [1, 3, 4]  # b, c done; a waits
        assert not many.done()
        assert (await many).tolist() == [11, 3, 4, 15] and await held == 10
        with pytest.raises(UnknownKeyError):  # looked up first, also with keys held
            held = asyncio.ensure_future(service.update("b", fn=times_ten_later))
            await asyncio.sleep(0)
            await service.incr_many(["b", "nope"], 1)
        await held
        assert await service.query_many(["a", "b"]) == [15, 30]
        stats = service.statistics()
        assert stats.queued == 0 and stats.active == 0


async def test_no_increment_is_lost_under_concurrent_writers() -> None:
    """Writers of one-key, many-key and held async ops on the same keys, interleaved: every
    increment lands, through the service directly and through clients."""
    keys = [f"n/{i}" for i in range(50)]
    rng = random.Random(5)
    async with EnvService(max_concurrency=4) as service:
        for key in keys:
            await service.register(key, 0)
        await service.register("arr", np.zeros(50, dtype=np.int64))
        clients = [EnvClient(service), EnvClient(service, merge=False), service]
        expected = dict.fromkeys(keys, 0)
        arr = np.zeros(50, dtype=np.int64)

        async def plus_one_later(old: int) -> int:
            await asyncio.sleep(0)
            return old + 1

        async def writer(w: int) -> None:
            via = clients[w % 3]
            for _ in range(20):
                pick = rng.sample(keys, 5) + rng.sample(keys, 3)  # some keys twice
                for key in pick:
                    expected[key] += 1
                at = rng.sample(range(50), 4)
                arr[at] += 1
                await asyncio.gather(via.incr_many(pick, 1), via.incr(pick[0]),
                                     via.update(pick[1], fn=plus_one_later),
                                     via.incr_many("arr", 1, at=at))
                expected[pick[0]] += 1
                expected[pick[1]] += 1

        await asyncio.gather(*(writer(w) for w in range(12)))
        assert dict(zip(keys, await service.query_many(keys), strict=True)) == expected
        assert (await service.query("arr")).tolist() == arr.tolist()
        assert service.statistics().peak_queued > 0  # the held updates did make ops wait


# -- EnvClient merging -------------------------------------------------------------------------

def random_ops(rng: random.Random, n: int) -> list[Op]:
    keys = [f"k{i}" for i in range(6)] + ["missing"]
    out: list[Op] = []
    for _ in range(n):
        key = rng.choice(keys)
        env = rng.choice([None, "world/town"])
        kind = rng.choice(["incr", "incr", "query", "query", "set", "append"])
        if kind == "incr":
            out.append(Op.incr(key, rng.choice([1, 2, "x"]), env=env))  # "x": a TypeError
        elif kind == "query":
            out.append(Op.query(key, env=env))
        elif kind == "set":
            out.append(Op.set(key, rng.randint(0, 9), env=env))
        else:
            out.append(Op.append("log", key))
    return out


async def outcomes(client: EnvClient, ops: list[Op]) -> list[Any]:
    async def one(op: Op) -> Any:
        return (await client.apply([op], return_exceptions=True))[0]

    got = await asyncio.gather(*(one(op) for op in ops))
    return [type(v).__name__ if isinstance(v, BaseException) else v for v in got]


@pytest.mark.parametrize("seed", range(5))
async def test_merged_ops_give_what_one_key_ops_give(seed: int) -> None:
    ops = random_ops(random.Random(seed), 300)
    results = []
    for merge in (True, False):
        world, _ = tree()
        world.register("log", [])
        world.register("k4", 0)
        world.register("k5", 0)
        async with EnvService(world) as service:
            client = EnvClient(service, merge=merge)
            results.append((await outcomes(client, ops), world.get_state(),
                            client.statistics().merged))
    (merged, state_m, n_merged), (plain, state_p, n_plain) = results
    assert merged == plain and state_m == state_p
    assert n_merged > 30 and n_plain == 0
    assert "UnknownKeyError" in merged and "TypeError" in merged


async def test_a_merged_run_crosses_as_one_op() -> None:
    seen: list[list[Op]] = []

    class Spy(EnvService):
        def submit(self, ops: Any) -> Any:
            seen.append(list(ops))
            return super().submit(ops)

    async with Spy() as service:
        for i in range(3):
            await service.register(f"k{i}", 0)
        client = EnvClient(service)
        got = await asyncio.gather(*(client.incr(f"k{i % 3}") for i in range(9)),
                                   client.query("k0"), client.query("k1"))
        assert list(got) == [1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3]
        assert [op.kind for op in seen[-1]] == ["each", "each"]
        assert client.statistics().merged == 11
        assert service.statistics().ops == 3 + 11  # key operations, many-key ops included


@pytest.mark.parametrize("keys", [["heard/1", "heard/2"], [], [""], ["", ""], ["a\0b", "c"],
                                  ["x"]])
def test_the_keys_of_a_many_key_op_pickle_back_as_they_were(keys: list[str]) -> None:
    import pickle

    op = Op.incr_many(keys, 1)
    back = pickle.loads(pickle.dumps(op))
    assert list(back.arg[0]) == keys and back == op


# -- a many-key op is the one-key ops it stands for ------------------------------------------

ENVS = ("world", "world/town")


def one_by_one(env: Env, kind: str, keys: list[str], args: list[Any]) -> list[Any]:
    out: list[Any] = []
    for key, arg in zip(keys, args, strict=True):
        try:
            if kind == "incr":
                out.append(env.update(key, fn=lambda old, by=arg: old + by))
            elif kind == "set":
                out.append(env.update(key, arg))
            else:
                out.append(env.query(key))
        except Exception as error:
            out.append(type(error).__name__)
    return out


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(["incr", "set", "query"]),
       picks=st.lists(st.tuples(st.sampled_from(["k0", "k1", "k2", "k3", "nope", "s"]),
                                st.integers(-3, 3)), max_size=12),
       where=st.sampled_from(ENVS), listening=st.booleans())
def test_each_is_the_one_key_ops_in_order(kind: str, picks: list[tuple[str, int]],
                                          where: str, listening: bool) -> None:
    """The loop services run for merged ops (fast path, or key by key with listeners,
    keys in ancestors, unknown keys, a failing add) against one-key ops."""
    from populace.environment._many import each

    results = []
    for many in (True, False):
        world, _ = tree()
        world.register("s", "text")  # "text" + 1 fails: a TypeError for that key alone
        heard: list[Any] = []
        if listening:
            world.monitor(lambda e, heard=heard: heard.append((e.env, e.key, e.new)),
                          descendants=True)
        env = world.find(where)
        keys = [k for k, _ in picks]
        args = [a for _, a in picks]
        if many:
            errors: dict[int, BaseException] = {}
            got = each(env, kind, keys, None if kind == "query" else args, errors)
            for j, error in errors.items():
                got[j] = type(error).__name__
        else:
            got = one_by_one(env, kind, keys, args)
        results.append((got, world.get_state(), heard))
    assert results[0] == results[1]


CLEAN = st.lists(st.tuples(st.lists(st.integers(0, 5), max_size=6),
                          st.sampled_from([1, 2, -3, "array"])), min_size=1, max_size=10)
ANY = st.lists(st.tuples(st.lists(st.integers(-1, 6), max_size=5),  # -1, 6: out of range
                         st.sampled_from([1, 2, -3, "array", 0.5, "int8", "short", 2**70])),
               min_size=1, max_size=10)


@settings(max_examples=120, deadline=None)
@given(ops=st.one_of(CLEAN, ANY),
       dtype=st.sampled_from(["int64", "int64", "int32", "uint64", "float64"]),
       listening=st.sampled_from([False, False, True]))
async def test_merged_at_ops_give_what_they_give_alone(ops: list[tuple[list[int], Any]],
                                                       dtype: str, listening: bool) -> None:
    """A run of incr_many(key, ..., at=) merged by the client (one vectorised pass for
    integers) against the same ops one by one: each op's result, error and the array."""
    results = []
    for merge in (True, False):
        world = Env("world")
        world.register("column", np.arange(6, dtype=dtype) * 10)
        heard: list[Any] = []
        if listening:
            world.monitor(lambda e, heard=heard: heard.append(e.new.tolist()), key="column")
        async with EnvService(world) as service:
            client = EnvClient(service, merge=merge)

            async def one(at: list[int], by: Any, client: EnvClient = client) -> Any:
                delta = {"array": np.arange(len(at)) + 1,  # one per position
                         "int8": np.full(len(at), -2, dtype=np.int8),
                         "short": np.arange(len(at) + 1)}.get(by, by)
                try:
                    return (await client.incr_many("column", delta, at=at)).tolist()
                except Exception as error:
                    return type(error).__name__

            got = await asyncio.gather(*(one(at, by) for at, by in ops))
            results.append((got, world.query("column").tolist(), heard,
                            client.statistics().merged > 0))
    (merged, column_m, heard_m, did_merge), (alone, column_a, heard_a, _) = results
    assert merged == alone and column_m == column_a and heard_m == heard_a
    assert did_merge == (len(ops) > 1)
