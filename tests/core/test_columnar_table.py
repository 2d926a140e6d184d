"""Group replies kept as columns: a lossless wire format, and one Arrow table per step.

Covers the wire format's type fidelity (:func:`pack`, :class:`PackedReplies`), the table
built from chunks and errors (:func:`replies_table`, :func:`outcomes_table`),
:meth:`PlaceholderSet.table` on the local and the Ray backend (where the replies stay
packed until the list of results is asked for), and the monitor's measure of packed batches.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import math
import pickle
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from populace.core import Agent, Msg, PlaceholderSet, Simulation, outcomes_table, wait
from populace.core._columnar import CONTENT, PackedReplies, error_text, pack, replies_table
from populace.results import RunMonitor
from populace.scenarios.guess_number import Guess
from populace.scenarios.guess_number._play import _live


@dataclasses.dataclass(frozen=True, slots=True)
class Point:
    x: Any
    label: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class OtherPoint:
    x: Any
    label: str | None = None


@dataclasses.dataclass(slots=True)
class HasError:
    error: str


class Colour(enum.IntEnum):
    RED = 1


# -- helpers -------------------------------------------------------------------------------------
def wire(values: Sequence[Any]) -> tuple[PackedReplies, list[Msg]]:
    """``values`` packed, then through pickle (as a worker's chunk travels), then unpacked."""
    packed = pack(values)
    assert packed is not None, "expected the values to fit the columnar format"
    again = pickle.loads(pickle.dumps(packed))
    assert type(again) is PackedReplies
    return packed, again.unpack()


def scalars(contents: Sequence[Any], role: str = "assistant") -> list[Msg]:
    return [Msg(i, c, role) for i, c in enumerate(contents)]


def points(xs: Sequence[Any], senders: Sequence[Any] | None = None,
           role: str = "assistant", kind: type = Point) -> list[Msg]:
    senders = range(len(xs)) if senders is None else senders
    return [Msg(s, kind(x, None if j % 3 == 0 else f"p{s}"), role)
            for j, (s, x) in enumerate(zip(senders, xs, strict=True))]


def assert_identical(got: Sequence[Any], want: Sequence[Any]) -> None:
    """Equal, and of the same Python type, value by value (NaN equal to NaN, signs of zero)."""
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert type(g) is type(w), (i, g, w)
        if isinstance(w, float):
            assert (math.isnan(g) and math.isnan(w)) or (
                g == w and math.copysign(1.0, g) == math.copysign(1.0, w)), (i, g, w)
        else:
            assert g == w, (i, g, w)


def contents_of(msgs: Sequence[Msg]) -> list[Any]:
    return [m.content for m in msgs]


def assert_same_table(a: pa.Table, b: pa.Table) -> None:
    assert a.schema == b.schema, (a.schema, b.schema)
    assert a.to_pydict() == b.to_pydict()
    assert a.equals(b)


# -- 1. type fidelity of the wire format ---------------------------------------------------------
@pytest.mark.parametrize(("contents", "arrow"), [
    ([1.5, None, -2.25, 0.0], pa.float64()),
    ([1, 2, None, -(2**63)], pa.int64()),
    ([True, False, None], pa.bool_()),
    (["a", None, "", "ünïcödé"], pa.string()),
])
def test_plain_columns_travel_as_arrow_and_come_back_with_their_types(
        contents: list[Any], arrow: pa.DataType) -> None:
    values = scalars(contents)
    packed, out = wire(values)
    column = packed.columns[CONTENT]
    assert isinstance(column, pa.Array) and column.type == arrow
    assert isinstance(packed.senders, pa.Array)
    assert out == values
    assert_identical(contents_of(out), contents)
    assert_identical([m.sender for m in out], [m.sender for m in values])


@pytest.mark.parametrize(("contents", "why"), [
    ([1, 2**63, 3], "a huge int does not fit int64"),
    ([-(2**63) - 1, 0], "nor a huge negative one"),
    ([1, 2.0, 3, None], "ints and floats mixed would come back as floats"),
    ([True, 1, 0, False], "bools and ints mixed would come back as one kind"),
    (["ok", "\ud800", None], "a lone surrogate has no UTF-8"),
    ([Colour.RED, Colour.RED], "an int subclass would come back as a plain int"),
])
def test_columns_that_do_not_fit_arrow_fall_back_to_lists_exactly(
        contents: list[Any], why: str) -> None:
    values = scalars(contents)
    packed, out = wire(values)
    assert isinstance(packed.columns[CONTENT], list), why
    assert out == values
    assert_identical(contents_of(out), contents)


def test_nan_and_negative_zero_survive_the_float_column() -> None:
    contents = [math.nan, -0.0, 0.0, math.inf, -math.inf, None]
    packed, out = wire(scalars(contents))
    assert isinstance(packed.columns[CONTENT], pa.Array)
    got = contents_of(out)
    assert math.isnan(got[0])
    assert got[1] == 0.0 and math.copysign(1.0, got[1]) == -1.0
    assert math.copysign(1.0, got[2]) == 1.0
    assert_identical(got, contents)


@pytest.mark.parametrize(("xs", "arrow"), [
    ([0.5, None, math.nan, -0.0], True),
    ([1, 2, 3], True),
    ([True, False, True], True),
    (["a", None, "b"], True),
    ([1, 2.5, 3], False),
    ([2**64, 1, 2], False),
    (["\ud800", "x", "y"], False),
])
def test_dataclass_fields_keep_their_types_field_by_field(xs: list[Any], arrow: bool) -> None:
    values = points(xs)
    packed, out = wire(values)
    assert packed.content_type is Point and packed.names() == ["x", "label"]
    assert isinstance(packed.columns["x"], pa.Array) is arrow
    assert isinstance(packed.columns["label"], pa.Array)  # str and None
    assert all(type(m) is Msg and type(m.content) is Point for m in out)
    assert_identical([m.content.x for m in out], xs)
    assert_identical([m.content.label for m in out], [m.content.label for m in values])


def test_string_senders_and_mixed_senders_round_trip() -> None:
    named, out = wire(points([1.0, 2.0], senders=["ann", "bob"]))
    assert isinstance(named.senders, pa.Array) and named.senders.type == pa.string()
    assert [m.sender for m in out] == ["ann", "bob"]
    mixed, out = wire(points([1.0, 2.0], senders=[7, "bob"]))
    assert isinstance(mixed.senders, list)
    assert_identical([m.sender for m in out], [7, "bob"])


# -- 2. PackedReplies is a sequence of Msg -------------------------------------------------------
def test_packed_replies_behave_as_a_sequence_of_msg() -> None:
    values = points([0.5, 1.5, 2.5, 3.5], senders=[10, 11, 12, 13])
    packed = pack(values)
    assert packed is not None
    assert isinstance(packed, Sequence)
    assert len(packed) == 4
    assert packed[0] == values[0] and packed[-1] == values[-1]
    assert packed[1:3] == values[1:3]
    assert list(packed) == values
    assert values[2] in packed and packed.index(values[2]) == 2
    assert list(reversed(packed)) == values[::-1]
    first = packed.unpack()
    assert packed.unpack() is first  # made once, then kept
    assert pack(packed) is packed  # already packed: passed on as is


def test_a_packed_chunk_pickles_without_its_unpacked_messages() -> None:
    packed = pack(points([1.0, 2.0]))
    assert packed is not None
    packed.unpack()
    again = pickle.loads(pickle.dumps(packed))
    assert again._msgs is None
    assert again.unpack() == packed.unpack()


# -- 3. replies_table ----------------------------------------------------------------------------
def test_replies_table_restores_member_order_across_shuffled_chunks() -> None:
    n = 30
    rng = np.random.default_rng(7)
    order = rng.permutation(n)
    failed = {int(i) for i in order[:5]}
    ok = [int(i) for i in order if int(i) not in failed]
    chunks = []
    for part in np.array_split(np.asarray(ok), 3):
        chunk = pack(points([i / 4 for i in part.tolist()], senders=part.tolist()))
        assert chunk is not None
        chunks.append((part.astype(np.int64), chunk))
    errors = {i: ValueError(f"member {i} failed") for i in failed}
    table = replies_table(n, chunks, errors)
    assert table.column_names == ["sender", "x", "label", "error"]
    assert table.num_rows == n
    rows = table.to_pylist()
    for i, row in enumerate(rows):
        if i in failed:
            assert row == {"sender": None, "x": None, "label": None,
                           "error": f"ValueError: member {i} failed"}
        else:
            assert row["sender"] == i and row["x"] == i / 4 and row["error"] is None


def test_replies_table_of_one_ascending_chunk_needs_no_reordering() -> None:
    values = points([1.0, 2.0, 3.0])
    packed = pack(values)
    assert packed is not None
    table = replies_table(3, [(np.arange(3), packed)], {})
    assert table.column("sender").to_pylist() == [0, 1, 2]
    assert table.column("x").to_pylist() == [1.0, 2.0, 3.0]
    assert table.column("error").null_count == 3 and table.schema.field("error").type == "string"


def test_error_text_names_the_type_and_the_message() -> None:
    assert error_text(KeyError("k")) == "KeyError: 'k'"
    assert error_text(RuntimeError("server said 500")) == "RuntimeError: server said 500"


def test_chunks_of_ints_floats_and_nulls_are_promoted_to_one_column() -> None:
    ints = pack(points([1, 2], senders=[0, 1]))
    floats = pack(points([2.5, 3.5], senders=[2, 3]))
    nulls = pack(points([None, None], senders=[4, 5]))
    assert ints is not None and floats is not None and nulls is not None
    assert ints.arrow("x").type == pa.int64() and floats.arrow("x").type == pa.float64()
    table = replies_table(6, [(np.array([0, 1]), ints), (np.array([4, 5]), nulls),
                              (np.array([2, 3]), floats)], {})
    assert table.schema.field("x").type == pa.float64()
    assert table.column("x").to_pylist() == [1.0, 2.0, 2.5, 3.5, None, None]


@pytest.mark.parametrize("other", [
    points([1.0], senders=[1], kind=OtherPoint),
    points([1.0], senders=[1], role="user"),
    scalars([1.0]),
])
def test_chunks_of_another_content_type_or_role_raise(other: list[Msg]) -> None:
    first, second = pack(points([0.5], senders=[0])), pack(other)
    assert first is not None and second is not None
    with pytest.raises(TypeError, match="two kinds"):
        replies_table(2, [(np.array([0]), first), (np.array([1]), second)], {})


def test_a_field_named_error_raises() -> None:
    packed = pack([Msg(0, HasError("x"), "assistant")])
    assert packed is not None
    with pytest.raises(TypeError, match="'error'"):
        replies_table(1, [(np.array([0]), packed)], {})
    with pytest.raises(TypeError, match="'error'"):
        outcomes_table([Msg(0, HasError("x"), "assistant")])


@dataclasses.dataclass(slots=True)
class HasSender:
    sender: str
    x: float


def test_a_field_named_sender_raises_a_type_error() -> None:
    with pytest.raises(TypeError, match="'sender'"):
        outcomes_table([Msg(0, HasSender("me", 1.0), "assistant")])


def test_a_lone_surrogate_in_a_table_raises_a_type_error() -> None:
    with pytest.raises(TypeError, match="content"):
        outcomes_table([Msg(0, "\ud800"), Msg(1, "ok")])


def test_all_members_failed_gives_a_row_each_with_its_error() -> None:
    errors = {i: RuntimeError(f"down {i}") for i in range(4)}
    table = replies_table(4, [], errors)
    assert table.num_rows == 4
    assert table.column_names == ["sender", "content", "error"]
    assert table.column("error").to_pylist() == [f"RuntimeError: down {i}" for i in range(4)]
    assert table.column("sender").null_count == 4


def test_outcomes_table_of_objects_that_do_not_fit_raises() -> None:
    with pytest.raises(TypeError, match="not all Msg"):
        outcomes_table([Msg(0, Point(1.0)), Msg(1, 2.0)])


# -- 4. PlaceholderSet.table() on a set filled as the runtime fills it ---------------------------
def packed_set(loop: asyncio.AbstractEventLoop) -> tuple[PlaceholderSet[Any], list[Any]]:
    """A set of 8 filled as the Ray backend fills it: packed chunks at numpy positions,
    failures in between; with the outcomes expected in member order."""
    n = 8
    want: list[Any] = [Msg(i, Point(i if i % 2 else i + 0.5, f"p{i}"), "assistant")
                       for i in range(n)]
    pset: PlaceholderSet[Any] = PlaceholderSet(loop, n, "test.reply()")
    for at in ([6, 1, 4], [0, 7]):
        packed = pack([want[i] for i in at])
        assert packed is not None
        pset._fill(np.asarray(at, dtype=np.int64), packed)
    for i in (2, 3, 5):
        want[i] = ValueError(f"no {i}")
    pset._fail([2, 3, 5], [want[2], want[3], want[5]])
    return pset, want


async def test_a_packed_set_reads_as_a_table_then_as_the_same_objects() -> None:
    pset, want = packed_set(asyncio.get_running_loop())
    assert pset.done() and len(pset._packed) == 2
    table = pset.table()
    assert len(pset._packed) == 2  # the table made no objects
    assert table.column("sender").to_pylist() == [0, 1, None, None, 4, None, 6, 7]
    assert table.column("x").to_pylist() == [0.5, 1.0, None, None, 4.5, None, 6.5, 7.0]
    assert table.column("error").to_pylist()[2:4] == ["ValueError: no 2", "ValueError: no 3"]
    out = pset.results(return_exceptions=True)
    assert pset._packed == []
    for got, w in zip(out, want, strict=True):
        if isinstance(w, BaseException):
            assert got is w
        else:
            assert isinstance(got, Msg) and got == w
            assert type(got.content.x) is type(w.content.x)
    assert_same_table(pset.table(), table)  # now from the objects: the same table
    assert_same_table(outcomes_table(out), table)


async def test_a_member_placeholder_and_finished_see_packed_replies() -> None:
    pset, want = packed_set(asyncio.get_running_loop())
    assert pset[4].result() == want[4]
    assert pset._packed == []
    positions, outcomes = pset.finished()
    assert positions == list(range(8))
    assert [o for o in outcomes if isinstance(o, Msg)] == [w for w in want if isinstance(w, Msg)]
    pset.exceptions()  # seen


# -- 4. on the local and the Ray backend ---------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class Answer:
    score: float  # an int for some members: must not come back as a float
    count: int
    label: str | None
    flag: bool


class Answerer(Agent):
    __slots__ = ()

    async def reply(self, msg: Msg) -> Msg:
        i = self.id
        if i % 7 == 3:
            raise ValueError(f"agent {i} refuses")
        score = i if i % 3 == 0 else i / 4
        return Msg(i, Answer(score, i * i, None if i % 5 == 0 else f"a{i}", i % 2 == 0),
                   role="assistant")


N_AGENTS = 2000


def expected(ids: Sequence[int]) -> list[Any]:
    """What the members ``ids`` reply, in order, errors as (type, text)."""
    out: list[Any] = []
    for i in ids:
        if i % 7 == 3:
            out.append((ValueError, f"agent {i} refuses"))
        else:
            out.append(Msg(i, Answer(i if i % 3 == 0 else i / 4, i * i,
                                     None if i % 5 == 0 else f"a{i}", i % 2 == 0), "assistant"))
    return out


def assert_outcomes(got: Sequence[Any], want: Sequence[Any]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        if isinstance(w, tuple):
            assert type(g) is w[0] and str(g) == w[1], (g, w)
        else:
            assert type(g) is Msg and type(g.content) is Answer and g == w, (g, w)
            assert type(g.content.score) is type(w.content.score), (g, w)


@dataclasses.dataclass
class Observed:
    whole: pa.Table
    whole_results: list[Any]
    picked: pa.Table
    picked_results: list[Any]
    packed_before: int  # replies kept packed after the set was done
    packed_after_table: int
    packed_after_results: int


PICK = np.random.default_rng(3).permutation(N_AGENTS)[:500]


async def observe(backend: str) -> Observed:
    async with Simulation(workers=2, backend=backend) as sim:
        group = await sim.create(Answerer, N_AGENTS)
        pset = group.broadcast(Msg("moderator", "go"))
        await wait([pset])
        before = sum(len(c) for _, c in pset._packed)
        whole = pset.table()
        after_table = sum(len(c) for _, c in pset._packed)
        whole_results = pset.results(return_exceptions=True)
        after_results = len(pset._packed)
        # A shuffled selection: its members' positions in each worker are not a range.
        picked_set = group.select(PICK).broadcast(Msg("moderator", "again"))
        await wait([picked_set])
        picked = picked_set.table()
        picked_results = picked_set.results(return_exceptions=True)
    return Observed(whole, whole_results, picked, picked_results, before, after_table,
                    after_results)


def check_against_agents(seen: Observed) -> None:
    n_failed = sum(1 for i in range(N_AGENTS) if i % 7 == 3)
    assert seen.whole.num_rows == N_AGENTS and seen.picked.num_rows == len(PICK)
    assert seen.whole.column_names == ["sender", "score", "count", "label", "flag", "error"]
    assert seen.whole.schema.field("score").type == pa.float64()
    assert seen.whole.column("error").null_count == N_AGENTS - n_failed
    assert_outcomes(seen.whole_results, expected(range(N_AGENTS)))
    assert_outcomes(seen.picked_results, expected(PICK.tolist()))
    assert seen.whole.column("sender").to_pylist()[:5] == [0, 1, 2, None, 4]
    assert seen.whole.column("error").to_pylist()[3] == "ValueError: agent 3 refuses"
    assert seen.picked.column("sender").to_pylist() == [
        None if i % 7 == 3 else i for i in PICK.tolist()]
    assert_same_table(outcomes_table(seen.whole_results), seen.whole)
    assert_same_table(outcomes_table(seen.picked_results), seen.picked)


async def test_local_table_matches_what_the_agents_replied() -> None:
    seen = await observe("local")
    check_against_agents(seen)
    assert seen.packed_before == 0  # a local worker's replies are objects already


async def test_ray_table_equals_local_and_stays_packed_until_results(ray_cluster: Any) -> None:
    local = await observe("local")
    remote = await observe("ray")
    check_against_agents(remote)
    n_ok = sum(1 for i in range(N_AGENTS) if i % 7 != 3)
    assert remote.packed_before == n_ok  # every reply arrived as columns
    assert remote.packed_after_table == n_ok  # the table made no objects
    assert remote.packed_after_results == 0
    assert_same_table(remote.whole, local.whole)
    assert_same_table(remote.picked, local.picked)
    assert_outcomes(remote.whole_results, expected(range(N_AGENTS)))


# -- 5. outcomes_table ---------------------------------------------------------------------------
def test_outcomes_table_of_a_packed_chunk_equals_that_of_its_messages() -> None:
    values = points([1.0, None, 3.5, -0.0], senders=[4, 5, 6, 7])
    packed = pack(values)
    assert packed is not None
    assert_same_table(outcomes_table(packed), outcomes_table(values))


def test_outcomes_table_of_scalars_and_errors() -> None:
    outcomes = [Msg(0, 1.5), KeyError("k"), Msg(2, None), Msg(3, 2.0)]
    table = outcomes_table(outcomes)
    assert table.to_pydict() == {"sender": [0, None, 2, 3], "content": [1.5, None, None, 2.0],
                                 "error": [None, "KeyError: 'k'", None, None]}


# -- 6. the monitor reads packed batches ---------------------------------------------------------
def guesses(n: int, start: int = 0) -> list[Msg]:
    return [Msg(i, Guess(None if i % 4 == 0 else (i if i % 2 else i + 0.25), f"say {i}",
                         None if i % 3 else f"x{i}", 0.01 * (i + 1), 10, 2, 1, 0),
                "assistant")
            for i in range(start, start + n)]


@pytest.mark.parametrize("values", [
    guesses(12), [m for m in guesses(20) if m.content.number is None],
], ids=["mixed", "all-invalid"])
def test_live_measure_is_the_same_for_a_packed_chunk_and_its_messages(
        values: list[Msg]) -> None:
    packed = pack(values)
    assert packed is not None
    numbers, latency = _live(packed)
    want_numbers, want_latency = _live(values)
    np.testing.assert_array_equal(numbers, want_numbers)
    np.testing.assert_array_equal(latency, want_latency)
    np.testing.assert_array_equal(numbers, [np.nan if m.content.number is None
                                            else m.content.number for m in values])
    np.testing.assert_allclose(latency, [m.content.latency_s for m in values])


async def test_the_monitor_counts_packed_and_object_batches_alike() -> None:
    loop = asyncio.get_running_loop()
    values = guesses(40)

    def monitored(fill: Any) -> Any:
        monitor = RunMonitor(run_id="m")
        monitor.run_started(name="m", agents=42, steps=1, answer_range=(0.0, 50.0))
        pset: PlaceholderSet[Any] = PlaceholderSet(loop, 42, "players.reply()")
        monitor.step_started(1, pset, _live)
        fill(pset)
        monitor.step_progress()
        pset.exceptions()
        return monitor.snapshot()

    def as_columns(pset: PlaceholderSet[Any]) -> None:
        for part in (range(0, 25), range(25, 40)):
            chunk = pack(values[part.start:part.stop])
            assert chunk is not None
            pset._fill(np.asarray(part, dtype=np.int64), chunk)
        pset._fail([40, 41], [RuntimeError("a"), RuntimeError("b")])

    def as_objects(pset: PlaceholderSet[Any]) -> None:
        pset._fill(list(range(40)), values)
        pset._fail([40, 41], [RuntimeError("a"), RuntimeError("b")])

    packed, objects = monitored(as_columns), monitored(as_objects)
    assert packed.answers == objects.answers
    assert packed.llm.latency_s == objects.llm.latency_s
    assert packed.progress == objects.progress
    assert objects.answers.n == sum(1 for m in values if m.content.number is not None)
    assert objects.answers.missing == 10


async def test_a_set_that_prefers_columns_packs_local_replies_as_they_arrive() -> None:
    """``prefer_columns`` (what ``run.collect(as_table=True)`` asks): a local worker's reply
    objects are packed on arrival; the table and the results are what they would be."""
    async with Simulation(workers=2) as sim:
        group = await sim.create(Answerer, N_AGENTS)
        plain = group.broadcast(Msg("moderator", "go"))
        packed = group.broadcast(Msg("moderator", "go"))
        packed.prefer_columns()
        await wait([plain, packed])
        n_ok = sum(1 for i in range(N_AGENTS) if i % 7 != 3)
        assert sum(len(c) for _, c in plain._packed) == 0
        assert sum(len(c) for _, c in packed._packed) == n_ok
        assert_same_table(packed.table(), plain.table())
        assert_outcomes(packed.results(return_exceptions=True), expected(range(N_AGENTS)))
