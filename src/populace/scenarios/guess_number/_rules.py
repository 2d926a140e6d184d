"""The arithmetic of "guess ratio × the average": parsing answers, target, winner."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction

import numpy as np


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


# -- reading a number out of an answer ---------------------------------------------------------
# Digits with "," and "." inside (a run never ends in a separator: "42." is 42 and a full stop).
_RUN = r"\d(?:[\d,.]*\d)?|\.\d+"
_TOKEN = re.compile(
    rf"(?:(?<![^\W_])(?P<sign>[-+]))?(?<![^\W_])(?P<num>{_RUN})(?P<exp>[eE][-+]?\d+)?"
    rf"(?:[ ]?/[ ]?(?P<den>{_RUN}))?%?")
_THOUSANDS = {",": re.compile(r"\d{1,3}(?:,\d{3})+"), ".": re.compile(r"\d{1,3}(?:\.\d{3})+")}
_UNITS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen "
          "fourteen fifteen sixteen seventeen eighteen nineteen").split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_WORD = re.compile(
    rf"\b(?:(?P<hundred>(?:a|one)\s+hundred)|(?P<tens>{'|'.join(_TENS)})"
    rf"(?:[-\s](?P<unit>{'|'.join(_UNITS[1:10])}))?|(?P<small>{'|'.join(_UNITS)}))\b"
    r"(?![-\s]*(?:thirds?|halves|half|quarters?|fifths?|tenths?|of|percent)\b)",
    re.IGNORECASE)
# After a number, what makes it part of a formula ("2/3 of the average", "2/3 × 33 = 22").
_FORMULA = re.compile(r"\s*(?:of\b|times\b|[×*x·÷/+-]\s*\d)", re.IGNORECASE)
# Between a marker and its number: punctuation, markdown, LaTeX, hedges.
_GAP = re.compile(
    r"(?:[\s:=*_\"'`(\[{$~≈]|\\[(\[]|\\(?:boxed|text|textbf|mathbf)\{|(?:approximately|approx\."
    r"|about|around|roughly|exactly|precisely|simply|just|likely|probably|then|therefore|thus"
    r"|definitely|the\s+number)\b)*", re.IGNORECASE)
# An explicit statement of the answer; the last one that gives a number counts.
_STATED = re.compile(
    r"\banswer\b[*_]*\s*(?:is|would\s+be|will\s+be|[:=])"
    r"|\\boxed\{"
    r"|[\"'](?:number|answer|guess|choice|final_answer)[\"']\s*:", re.IGNORECASE)
# A first-person choice, read when no answer is stated.
_CHOSEN = re.compile(
    r"\bI(?:'ll|'d|'m\s+going\s+to|\s+will|\s+would|\s+shall|\s+am\s+going\s+to)?\s+"
    r"(?:(?:probably|then|therefore|thus|also|just|finally|now|instead)\s+)?"
    r"(?:choose|chose|pick|picked|select|selected|guess|submit|say|settle\s+on|stick\s+with"
    r"|opt\s+for|go\s+with)\b"
    r"|\b(?:let's|let\s+me)\s+(?:go\s+with|choose|pick|say)\b"
    r"|\bI'm\s+(?:going\s+with|choosing|picking)\b"
    r"|\bmy\s+(?:final\s+)?(?:guess|number|choice|pick|selection|decision)\b[*_]*\s*"
    r"(?:is|will\s+be|would\s+be|[:=])"
    r"|\b(?:number|one|value)\s+I(?:'ll|'d|\s+will|\s+would)?\s+(?:choose|pick|select|go\s+with)"
    r"\s+(?:is|will\s+be|would\s+be)"
    r"|\bfinal\s+(?:number|guess|choice|pick)\b[*_]*\s*(?:is|[:=])"
    r"|^[\s*_#]*(?:number|guess|choice)\b[*_]*\s*[:=]", re.IGNORECASE | re.MULTILINE)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_LATEX_FRAC = re.compile(r"\\[dt]?frac\{\s*(\d+(?:\.\d+)?)\s*\}\{\s*(\d+(?:\.\d+)?)\s*\}")
_SPELLING = str.maketrans({"\u2212": "-", "\u2019": "'", "\u00a0": " ", "\u202f": " "})


def _run_values(run: str) -> list[str]:
    """What a run of digits and separators stands for: one decimal, or several (a list).

    A lone "." is the decimal point ("1.000" is 1). "," (or several ".") group thousands
    when every group after the first has three digits ("1,000", "12,345", "1.000.000"); with
    both, the last one is the decimal point if the other groups thousands ("1,234.5",
    "1.234,5"); a lone "," before one or two digits is a decimal comma ("33,5", "0,67");
    anything else is a list ("0,50,100", "1,2345").
    """
    commas, dots = run.count(","), run.count(".")
    if not commas and dots <= 1:
        return [run]
    if commas and dots:
        point = "," if run.rfind(",") > run.rfind(".") else "."
        group = "." if point == "," else ","
        whole, _, frac = run.rpartition(point)
        if _THOUSANDS[group].fullmatch(whole):
            return [whole.replace(group, "") + "." + frac]
        return [v for part in run.split(",") if part for v in _run_values(part)]
    sep = "," if commas else "."
    if _THOUSANDS[sep].fullmatch(run):
        return [run.replace(sep, "")]
    whole, _, frac = run.partition(",")
    if commas == 1 and len(frac) <= 2:
        return [whole + "." + frac]
    return [part for part in run.split(sep) if part]


def _token_values(m: re.Match[str]) -> list[float]:
    nums = _run_values(m["num"])
    sign = -1.0 if m["sign"] == "-" else 1.0
    if m["den"] is None:
        values = [float(v) for v in nums]
        if m["exp"]:
            values[-1] = float(nums[-1] + m["exp"])
        values[0] *= sign
        return values
    dens = _run_values(m["den"])
    if len(nums) != 1 or len(dens) != 1 or float(dens[0]) == 0:
        return []
    return [sign * float(nums[0] + (m["exp"] or "")) / float(dens[0])]


def _word_value(m: re.Match[str]) -> float:
    if m["hundred"]:
        return 100.0
    if m["tens"]:
        unit = _UNITS.index(m["unit"].lower()) if m["unit"] else 0
        return float(20 + 10 * _TENS.index(m["tens"].lower()) + unit)
    return float(_UNITS.index(m["small"].lower()))


def _number_at(text: str, pos: int) -> tuple[str, float] | None:
    """The number that starts at ``pos`` (digits, a fraction or words), unless it is part
    of a formula."""
    m = _TOKEN.match(text, pos)
    if m is not None:
        values = _token_values(m)
        if not values:
            return None
        literal = m.group().removesuffix("%").replace(" ", "")
        value = values[0]
    else:
        m = _WORD.match(text, pos)
        if m is None:
            return None
        literal, value = m.group(), _word_value(m)
    if _FORMULA.match(text, m.end()):
        return None
    return literal, value


def _after_last(marker: re.Pattern[str], text: str) -> tuple[str, float] | None:
    for m in reversed(list(marker.finditer(text))):
        gap = _GAP.match(text, m.end())
        found = _number_at(text, gap.end() if gap else m.end())
        if found is not None:
            return found
    return None


def read_answer(text: str, *, stated_only: bool = False) -> tuple[str, float] | None:
    """The number an answer commits to, as ``(as written, value)``; None if it has none.

    In order: the last explicitly stated answer ("The answer is 22", "Answer: 22",
    ``\\boxed{22}``, ``"number": 22``); then the last first-person choice ("I'll go with
    22", "My guess is 22"); then the last number in the text that is not part of a formula
    ("2/3 of 33"); then an answer that is one number word ("Zero."). A marker followed by
    no number ("The answer is N") is passed over. ``stated_only`` (for the extraction
    reply) keeps the first step and an answer that is just one number.

    >>> read_answer("2/3 of 50 is 33, so the answer is 22, I think.")
    ('22', 22.0)
    """
    text = text.translate(_SPELLING)
    text = _LATEX_FRAC.sub(r"\1/\2", text)
    outside = _THINK.sub("", text)
    if outside.strip():
        text = outside
    found = _after_last(_STATED, text)
    if found is None and not stated_only:
        found = _after_last(_CHOSEN, text)
        if found is None:
            for m in reversed(list(_TOKEN.finditer(text))):
                values = _token_values(m)
                if values and not _FORMULA.match(text, m.end()):
                    return m.group().removesuffix("%").replace(" ", ""), values[-1]
    if found is None:
        bare = text.strip().strip("*_.!`$ \t\n")
        if _TOKEN.fullmatch(bare) or _WORD.fullmatch(bare):
            found = _number_at(bare, 0)
    return found


def parse_number(text: str, low: float, high: float) -> float | None:
    """The number an answer reports, or None when it has none or it is outside [low, high].

    See :func:`read_answer` for which number counts. Fractions count as their value
    ("2/3"), "," and "." as thousands separators or a decimal point as
    :func:`_run_values` reads them ("1,000", "33,5"), "50%" as 50. An explicit answer out
    of range is None, not a fall back to another number of the text.

    >>> parse_number("The answer is 33.5", 0, 100)
    33.5
    >>> parse_number("I CAN'T", 0, 100) is None
    True
    """
    try:
        value = float(text)
    except ValueError:
        found = read_answer(text)
        if found is None:
            return None
        value = found[1]
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
