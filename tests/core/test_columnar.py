"""The columnar wire format of group replies: a lossless round trip, or None to send as is."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import pytest

from populace.core import Msg
from populace.core._columnar import PackedReplies, pack


@dataclasses.dataclass(frozen=True, slots=True)
class Guess:
    number: float
    text: str
    valid: bool = True


@dataclasses.dataclass
class Other:
    number: float


@dataclasses.dataclass
class Derived:
    number: float
    double: float = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.double = 2 * self.number


class Reply(Msg):
    """A subclass: the format only knows Msg itself."""


def wire(packed: PackedReplies) -> list[Msg]:
    """What the central process gets: the packed columns pickled, then unpacked."""
    again = pickle.loads(pickle.dumps(packed))
    assert type(again) is PackedReplies
    return again.unpack()


def test_scalar_replies_round_trip_through_columns() -> None:
    values = [Msg(i, c, "assistant") for i, c in enumerate([42, 2.5, "forty", None, True])]
    packed = pack(values)
    assert packed is not None
    assert len(packed) == 5 and packed.content_type is None and packed.role == "assistant"
    assert packed.arrow("sender").to_pylist() == [0, 1, 2, 3, 4]
    assert packed.columns == {"": [42, 2.5, "forty", None, True]}  # mixed: kept as a list
    out = wire(packed)
    assert out == values
    assert [type(m.content) for m in out] == [int, float, str, type(None), bool]


def test_dataclass_replies_round_trip_as_one_column_per_field() -> None:
    values = [Msg(f"agent-{i}", Guess(i / 2, f"I pick {i}", i % 2 == 0), "assistant")
              for i in range(4)]
    packed = pack(values)
    assert packed is not None and packed.content_type is Guess and packed.role == "assistant"
    assert list(packed.columns) == ["number", "text", "valid"]
    assert packed.columns["valid"].to_pylist() == [True, False, True, False]  # Arrow
    assert packed.columns["number"].type == "double" and packed.columns["text"].type == "string"
    out = wire(packed)
    assert out == values
    assert all(type(m.content) is Guess for m in out)


@pytest.mark.parametrize(("values", "why"), [
    ([], "nothing to pack"),
    ([[1], [2]], "not messages, nor plain values"),
    ([1, Msg(0, 1)], "a plain value, then a message"),
    ([Reply(0, 1), Reply(1, 2)], "a Msg subclass would come back as Msg"),
    ([Msg(0, 1), Reply(1, 2)], "a subclass after the first"),
    ([Msg(0, 1), Msg(1, 2, "assistant")], "two roles"),
    ([Msg(0, 1), Msg(1, 2, metadata={"k": 1})], "metadata is not a column"),
    ([Msg(0, 1), Msg(1, Guess(1.0, "x"))], "a scalar, then a dataclass"),
    ([Msg(0, Guess(1.0, "x")), Msg(1, 1)], "a dataclass, then a scalar"),
    ([Msg(0, Guess(1.0, "x")), Msg(1, Other(1.0))], "two dataclass types"),
    ([Msg(0, Guess(1.0, "x"), metadata={"k": 1})], "a dataclass with metadata"),
    ([Msg(0, Derived(1.0))], "a field the constructor does not take"),
    ([Msg(0, {"number": 1}), Msg(1, {"number": 2})], "not a dataclass"),
    ([Msg(0, [1, 2])], "a list is not a scalar"),
])
def test_what_does_not_fit_is_sent_as_it_is(values: list[Any], why: str) -> None:
    assert pack(values) is None, why


def test_a_dataclass_type_is_not_packed_as_its_content() -> None:
    # A class object is not an instance: it travels as is.
    assert pack([Msg(0, Guess)]) is None


@pytest.mark.parametrize("values", [
    [None] * 5, [1, 2, 3], [0.5, None, 2.5], ["a", None], [True, False], [1, "a", None, 2.5],
])
def test_plain_values_of_a_map_round_trip_with_no_senders(values: list[Any]) -> None:
    packed = pack(values)
    assert packed is not None and packed.role is None and packed.senders is None
    assert len(packed) == len(values)
    again = pickle.loads(pickle.dumps(packed))
    out = again.unpack()
    assert out == values and [type(v) for v in out] == [type(v) for v in values]
    assert again.arrow("sender").null_count == len(values)
