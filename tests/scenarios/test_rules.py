"""The arithmetic of the guessing game: ratios, answer parsing, scoring a round."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from populace.scenarios.guess_number import RoundOutcome, parse_number, parse_ratio, score_round

NAN = float("nan")


# -- parse_ratio ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2/3", Fraction(2, 3)),
        ("51/100", Fraction(51, 100)),
        (" 1 / 2 ", Fraction(1, 2)),
        ("1", Fraction(1)),
        ("0.25", Fraction(1, 4)),
        ("3/2", Fraction(3, 2)),
        (0.5, Fraction(1, 2)),
        (2, Fraction(2)),
        (Fraction(2, 3), Fraction(2, 3)),
    ],
)
def test_parse_ratio_accepts(value: object, expected: Fraction) -> None:
    got = parse_ratio(value)  # type: ignore[arg-type]
    assert got == expected
    assert isinstance(got, Fraction)


def test_parse_ratio_float_is_limited_to_a_readable_fraction() -> None:
    assert parse_ratio(2 / 3) == Fraction(2, 3)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("3/0", "division by zero"),
        ("1/0.0", "division by zero"),
        ("abc", "expected a fraction like 2/3 or a number, got 'abc'"),
        ("2/3/4", "got '2/3/4'"),
        ("", "expected a fraction"),
        ("nan", "expected a fraction"),
        (0, "must be positive"),
        ("0", "must be positive"),
        ("-1/2", "must be positive"),
        (-0.5, "must be positive"),
        (True, "boolean"),
        (False, "boolean"),
        (math.inf, "finite"),
        (math.nan, "finite"),
        (None, "got NoneType"),
        ([1, 2], "got list"),
    ],
)
def test_parse_ratio_rejects(value: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_ratio(value)  # type: ignore[arg-type]
    assert message in str(info.value)


# -- parse_number --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("42", 42.0),
        ("  42\n", 42.0),
        ("33.5", 33.5),
        (".5", 0.5),
        ("0", 0.0),
        ("100", 100.0),
        ("The answer is 42", 42.0),
        ("The answer is 33.25.", 33.25),
        ("Everyone says 50, two thirds of that is 33, so I pick 22", 22.0),
        ("between 10 and 20", 20.0),
        ("1e1", 10.0),
    ],
)
def test_parse_number_reads_the_reported_number(text: str, expected: float) -> None:
    assert parse_number(text, 0, 100) == expected


@pytest.mark.parametrize(
    "text",
    [
        "I CAN'T",
        "",
        "   ",
        "101",
        "-1",
        "100.5",
        "The answer is 150",
        "Between 20 and 1000",  # the last number wins, and it is out of range
        "nan",
        "NaN",
        "inf",
        "-inf",
        "Infinity",
        "1e400",
    ],
)
def test_parse_number_returns_none_when_unusable(text: str) -> None:
    assert parse_number(text, 0, 100) is None


def test_parse_number_uses_the_given_range() -> None:
    assert parse_number("5", 10, 20) is None
    assert parse_number("10", 10, 20) == 10.0
    assert parse_number("20", 10, 20) == 20.0
    assert parse_number("-3.5", -5, 5) == -3.5


# -- score_round ---------------------------------------------------------------------------------
def test_score_round_hand_computed() -> None:
    o = score_round(1, np.array([10.0, 20.0, 30.0, NAN]), Fraction(2, 3))
    assert o.round == 1
    assert o.n == 4
    assert o.n_valid == 3
    assert o.mean == 20.0  # the NaN is excluded, not counted as 0
    assert o.median == 20.0
    assert o.std == pytest.approx(math.sqrt(200 / 3))  # population std
    assert o.target == pytest.approx(40 / 3)
    assert o.winner_number == 10.0
    assert o.n_winners == 1


def test_score_round_counts_every_winner() -> None:
    o = score_round(2, np.array([30.0, 60.0, 30.0, NAN, NAN]), Fraction(2, 3))
    assert (o.n, o.n_valid) == (5, 3)
    assert o.mean == 40.0
    assert o.target == pytest.approx(80 / 3)
    assert o.winner_number == 30.0
    assert o.n_winners == 2


def test_score_round_tie_goes_to_the_smaller_number() -> None:
    # mean 15, ratio 1 → target 15: 10 and 20 are both 5 away.
    o = score_round(1, np.array([20.0, 10.0, 20.0]), Fraction(1))
    assert o.target == pytest.approx(50 / 3)
    assert o.winner_number == 20.0  # not a tie: 16.67 is closer to 20

    o = score_round(1, np.array([20.0, 10.0]), Fraction(1))
    assert o.target == 15.0
    assert o.winner_number == 10.0
    assert o.n_winners == 1


def test_score_round_equilibrium_ten_variant() -> None:
    # target = 5 + mean / 2; everybody at 10 is the equilibrium.
    o = score_round(1, np.array([10.0, 10.0, 10.0]), Fraction(1, 2), 5.0)
    assert (o.mean, o.target, o.winner_number, o.n_winners) == (10.0, 10.0, 10.0, 3)
    assert o.std == 0.0

    o = score_round(3, np.array([0.0, 20.0, 40.0, NAN]), Fraction(1, 2), 5.0)
    assert o.mean == 20.0
    assert o.target == 15.0
    assert o.winner_number == 20.0
    assert o.median == 20.0


def test_score_round_median_of_even_count() -> None:
    o = score_round(1, np.array([1.0, 2.0, 3.0, 10.0]), Fraction(2, 3))
    assert o.median == 2.5
    assert o.mean == 4.0
    assert o.winner_number == 3.0  # target 2.67


@pytest.mark.parametrize("numbers", [np.array([NAN, NAN, NAN]), np.array([], dtype=float)])
def test_score_round_without_valid_answers(numbers: np.ndarray) -> None:
    o = score_round(4, numbers, Fraction(2, 3))
    assert o == RoundOutcome(4, len(numbers), 0, None, None, None, None, None, 0)


def test_score_round_accepts_plain_lists_and_as_dict_is_json_ready() -> None:
    o = score_round(1, [50.0, NAN], Fraction(1, 2))  # type: ignore[arg-type]
    assert o.as_dict() == {
        "round": 1, "n": 2, "n_valid": 1, "mean": 50.0, "median": 50.0, "std": 0.0,
        "target": 25.0, "winner_number": 50.0, "n_winners": 1,
    }
    assert all(type(v) in (int, float) for v in o.as_dict().values())


_answer = st.one_of(
    st.floats(min_value=0, max_value=100, allow_nan=False),
    st.integers(min_value=0, max_value=100).map(float),  # integers make ties likely
    st.just(NAN),
)


@settings(max_examples=300, deadline=None, database=None)
@given(
    numbers=st.lists(_answer, min_size=1, max_size=40),
    ratio=st.fractions(min_value=Fraction(1, 100), max_value=Fraction(3, 2)),
    offset=st.sampled_from([0.0, 5.0]),
)
def test_score_round_winner_is_the_closest_valid_number(
    numbers: list[float], ratio: Fraction, offset: float
) -> None:
    arr = np.array(numbers)
    valid = [x for x in numbers if not math.isnan(x)]
    o = score_round(1, arr, ratio, offset)
    assert o.n == len(numbers)
    assert o.n_valid == len(valid)
    if not valid:
        assert o.winner_number is None and o.target is None and o.n_winners == 0
        return
    assert o.target is not None and o.winner_number is not None
    assert o.target == pytest.approx(offset + float(ratio) * (sum(valid) / len(valid)))
    assert o.winner_number in valid
    best = min(abs(x - o.target) for x in valid)
    assert abs(o.winner_number - o.target) == best
    # Ties go to the smaller number.
    assert o.winner_number == min(x for x in valid if abs(x - o.target) == best)
    assert o.n_winners == valid.count(o.winner_number)
