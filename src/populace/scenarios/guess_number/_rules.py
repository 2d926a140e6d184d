"""The arithmetic of "guess ratio × the average": parsing answers, target, winner."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


def parse_ratio(value: str | int | float | Fraction) -> Fraction:
    """``"2/3"``, ``0.5``, ``"51/100"`` → Fraction; raises ValueError with the reason.

    >>> parse_ratio("2/3")
    Fraction(2, 3)
    """
    if isinstance(value, bool):
        raise ValueError("expected a fraction like 2/3 or a number, got a boolean")
    if isinstance(value, Fraction):
        ratio = value
    elif isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError(f"expected a finite number, got {value}")
        ratio = Fraction(value).limit_denominator(10**6)
    elif isinstance(value, str):
        text = value.strip()
        num, sep, den = text.partition("/")
        try:
            if sep:
                if "/" in den:  # Fraction() would read "2/3/4" as 2/(3/4)
                    raise ValueError("more than one '/'")
                d = Fraction(den.strip())
                if d == 0:
                    raise ValueError(
                        f"expected a fraction like 2/3, got {text!r} (division by zero)")
                ratio = Fraction(num.strip()) / d
            else:
                ratio = Fraction(text)
        except (ValueError, ZeroDivisionError) as e:
            if "division by zero" in str(e):
                raise
            raise ValueError(f"expected a fraction like 2/3 or a number, got {text!r}") from None
    else:
        raise ValueError(f"expected a fraction like 2/3 or a number, got {type(value).__name__}")
    if ratio <= 0:
        raise ValueError(f"ratio must be positive, got {ratio}")
    return ratio


def parse_number(text: str, low: float, high: float) -> float | None:
    """The number an answer reports, or None when it is unparsable or outside [low, high].

    A bare number is taken as is; otherwise the last number in the text counts, since
    answers usually end with their conclusion ("… so the answer is 33").

    >>> parse_number("The answer is 33.5", 0, 100)
    33.5
    >>> parse_number("I CAN'T", 0, 100) is None
    True
    """
    try:
        value = float(text)
    except ValueError:
        found = _NUMBER.findall(text)
        if not found:
            return None
        value = float(found[-1])
    if not math.isfinite(value) or not low <= value <= high:
        return None
    return value


@dataclass(frozen=True, slots=True)
class RoundOutcome:
    """What a round produced, as summary.json reports it."""

    round: int
    n: int
    n_valid: int
    mean: float | None
    median: float | None
    std: float | None
    target: float | None
    winner_number: float | None
    n_winners: int

    def as_dict(self) -> dict[str, float | int | None]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


def score_round(round_no: int, numbers: np.ndarray, ratio: Fraction, offset: float = 0.0
                ) -> RoundOutcome:
    """Score one round. ``numbers`` holds every answer, NaN for invalid ones.

    target = offset + ratio × mean of the valid answers; the winning number is the valid
    answer closest to the target (the smaller one on a tie); ``std`` is the population
    standard deviation.
    """
    numbers = np.asarray(numbers, dtype=np.float64)
    valid = numbers[~np.isnan(numbers)]
    n, k = int(numbers.size), int(valid.size)
    if k == 0:
        return RoundOutcome(round_no, n, 0, None, None, None, None, None, 0)
    mean = float(valid.mean())
    target = float(offset + float(ratio) * mean)
    dist = np.abs(valid - target)
    best = float(dist.min())
    winner = float(valid[dist == best].min())
    return RoundOutcome(round_no, n, k, mean, float(np.median(valid)), float(valid.std()),
                        target, winner, int(np.count_nonzero(valid == winner)))


@dataclass(frozen=True, slots=True)
class GroupScores:
    """Group-level play: each group reports the mean of its members' valid numbers.

    ``reports`` holds one entry per group id present (NaN for a group without a valid
    number); the round's target is ``offset + ratio × mean of the reports`` and the group
    whose report is closest wins (the lower group id on a tie).
    """

    group_ids: np.ndarray
    sizes: np.ndarray
    n_valid: np.ndarray
    reports: np.ndarray
    target: float | None
    winner_group: int | None
    winner_report: float | None

    @property
    def mean(self) -> float | None:
        valid = self.reports[~np.isnan(self.reports)]
        return float(valid.mean()) if valid.size else None

    def as_list(self) -> list[dict[str, float | int | None]]:
        """One dict per group, as summary.json's ``groups`` lists them."""
        return [{"group": int(g), "n": int(n), "n_valid": int(k),
                 "report": None if np.isnan(r) else float(r)}
                for g, n, k, r in zip(self.group_ids, self.sizes, self.n_valid, self.reports,
                                      strict=True)]


def score_groups(numbers: np.ndarray, groups: np.ndarray, ratio: Fraction,
                 offset: float = 0.0) -> GroupScores:
    """Score a round of group-level play. ``numbers`` has NaN for invalid answers.

    >>> s = score_groups(np.array([10., 30., 60., np.nan]), np.array([0, 0, 1, 1]),
    ...                  Fraction(1, 2))
    >>> s.reports.tolist(), s.target, s.winner_group
    ([20.0, 60.0], 20.0, 0)
    """
    numbers = np.asarray(numbers, dtype=np.float64)
    groups = np.asarray(groups)
    ids, inverse = np.unique(groups, return_inverse=True)
    sizes = np.bincount(inverse, minlength=ids.size)
    ok = ~np.isnan(numbers)
    n_valid = np.bincount(inverse[ok], minlength=ids.size)
    sums = np.bincount(inverse[ok], weights=numbers[ok], minlength=ids.size)
    with np.errstate(invalid="ignore", divide="ignore"):
        reports = np.where(n_valid > 0, sums / np.maximum(n_valid, 1), np.nan)
    have = ~np.isnan(reports)
    if not have.any():
        return GroupScores(ids, sizes, n_valid, reports, None, None, None)
    target = float(offset + float(ratio) * float(reports[have].mean()))
    dist = np.where(have, np.abs(reports - target), np.inf)
    best = int(np.argmin(dist))  # argmin takes the first, i.e. the lowest group id
    return GroupScores(ids, sizes, n_valid, reports, target, int(ids[best]),
                       float(reports[best]))


def group_outcome(individual: RoundOutcome, scores: GroupScores) -> RoundOutcome:
    """``individual`` (statistics of every answer) with the target and winner of the groups."""
    tied = 0
    if scores.winner_report is not None:
        tied = int(np.count_nonzero(scores.reports == scores.winner_report))
    return RoundOutcome(individual.round, individual.n, individual.n_valid, individual.mean,
                        individual.median, individual.std, scores.target,
                        scores.winner_report, tied)
