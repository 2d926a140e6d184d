"""Answer kinds: what each asks for, how replies are read, and bad kinds in one line."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from populace.agents import UNREADABLE, Choice, Number, Regex, Schema, Text
from populace.core import ConfigError


class Vote(BaseModel):
    party: str
    sure: int


@pytest.mark.parametrize(("reply", "read"), [
    ("yes", "yes"), (" Yes. ", "yes"), ('{"answer": "no"}', "no"), ("I say no to it", "no"),
    ("yes and no", UNREADABLE), ("maybe", UNREADABLE)])
def test_a_choice_reads_the_option_the_reply_names(reply: str, read: object) -> None:
    assert Choice(["yes", "no"]).read(reply) == read


def test_an_option_inside_another_is_not_counted_twice() -> None:
    assert Choice(["agree", "disagree"]).read("I disagree.") == "disagree"
    assert Choice(["agree", "disagree"]).read("I agree.") == "agree"


@pytest.mark.parametrize(("reply", "read"), [
    ("7", 7), ("I think 3, no: the answer is 8.", 8), ("11", UNREADABLE), ("7.5", UNREADABLE),
    ("none", UNREADABLE)])
def test_a_whole_number_in_range(reply: str, read: object) -> None:
    assert Number(0, 10, integer=True).read(reply) == read


def test_a_number_keeps_its_fraction_and_asks_for_digits() -> None:
    n = Number(0.0, 1.0)
    assert n.read("0.25") == 0.25
    assert n.response_format() == {"type": "regex", "regex": r"-?\d+(\.\d+)?"}
    assert "from 0 to 1" in n.instruction()


def test_a_regex_reads_the_whole_reply_else_its_first_match() -> None:
    r = Regex(r"[A-D]")
    assert r.read("C") == "C"
    assert r.read("I pick B here") == "B"
    assert r.read("none of them") is UNREADABLE


def test_a_schema_answer_is_the_model_instance() -> None:
    s = Schema(Vote)
    value = s.read('Here: {"party": "green", "sure": 3}')
    assert isinstance(value, Vote) and value.party == "green"
    assert s.read('{"party": "green"}') is UNREADABLE
    assert s.response_format()["json_schema"]["schema"]["required"] == ["party", "sure"]


def test_text_is_any_non_empty_reply() -> None:
    assert Text().read("  fine ") == "fine"
    assert Text().read("   ") is UNREADABLE


@pytest.mark.parametrize(("make", "says"), [
    (lambda: Regex("(unclosed"), "Regex('(unclosed'): cannot compile"),
    (lambda: Schema(dict), "expected a pydantic model class"),
    (lambda: Choice(["only"]), "at least two options"),
    (lambda: Choice(["a", "A"]), "distinct"),
    (lambda: Number(5, 1), "low < high")])
def test_a_bad_answer_kind_is_one_line(make: object, says: str) -> None:
    with pytest.raises(ConfigError) as e:
        make()  # type: ignore[operator]
    assert says in str(e.value) and "\n" not in str(e.value)
