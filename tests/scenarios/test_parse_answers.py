"""Reading the number out of answers that real (often small) instruct models write.

Each case is an answer seen from, or typical of, llama.cpp / vLLM models playing "guess 2/3
of the average"; the range is [0, 100] unless a case gives another.
"""

from __future__ import annotations

from typing import Any

import pytest

from populace.scenarios.guess_number import parse_number
from populace.scenarios.guess_number._prompts import extracted_number

REASONING = ("Let me think. If everyone picks 50, 2/3 of 50 is 33.33. If everyone thinks that, "
             "2/3 of 33.33 is 22.22. ")

CASES: list[tuple[Any, ...]] = [
    # fractions, thousands separators, decimal commas
    ("The answer is 2/3", 2 / 3),
    ("The answer is 2 / 3.", 2 / 3),
    ("The answer is \\frac{2}{3}", 2 / 3),
    ("The answer is 1,000", 1000, 0, 10_000),
    ("1,000", 1000, 0, 5000),
    ("The answer is 1,000", None),  # 1000 is out of range, not 1 (nor 0)
    ("The answer is 12,345.", 12_345, 0, 100_000),
    ("The answer is 1,000,000", 1_000_000, 0, 10**7),
    ("The answer is 33,5", 33.5),
    ("Answer: 1,5", 1.5),
    ("Based on the reasoning, the answer is 0,67", 0.67),
    # the template echoed back, no number at all
    ("The answer is N", None),
    ("The answer is N.", None),
    ("I need to end with 'The answer is N'. Everyone is rational, so 0 is the equilibrium. "
     "The answer is 0.", 0),
    ("Nothing to pick here.", None),
    ("I CAN'T", None),
    # the explicit answer wins over the numbers of the reasoning
    (REASONING + "The answer is 22.", 22),
    ("I choose 33 because level-1 players pick 50. On reflection, the others reason too. "
     "The answer is 22.", 22),
    ("The answer is 22, because I expect the average to be around 33.", 22),
    ("The answer is 22. (If others are naive, 2/3 of 50 is 33.)", 22),
    ("The answer is 33.\n\nNote: 2/3 of 50 is 33, and 2/3 of 33 is 22, but I think others "
     "will go to 33 or higher like 40.", 33),
    ("Answer: 22 (three levels below the naive 50).", 22),
    ("Final answer: 0. Iterating the best response from 50 gives 33, then 22, then 15, "
     "converging towards 0 after about 10 steps.", 0),
    ("The answer is 2/3 of 33, which is 22.", 22),  # "2/3 of" is the rule, not the answer
    ("The answer is 66.7% of 33, about 22", 22),
    ("Since the target is 2/3 of the average, I'll choose 22.22.", 22.22),
    # formats: markdown, LaTeX, JSON, punctuation, units
    ("Answer: 22", 22),
    ("**Answer:** 22", 22),
    ("The answer is **42**", 42),
    ("The answer is 42.", 42),
    ("The answer is: 42", 42),
    ("The answer is 42!", 42),
    ("Answer = 42", 42),
    ("The answer is 33.33...", 33.33),
    ("\\boxed{22}", 22),
    ("The final answer is $\\boxed{22}$. Two thirds of 33 is 22.", 22),
    ('{"number": 22, "reasoning": "about 2/3 of 33"}', 22),
    ('Here is my reply: {"reasoning": "level-2 thinking from 50", "number": 22.2} Hope it '
     "helps with round 3!", 22.2),
    ("The answer is 50%", 50),
    ("50%", 50),
    ("The answer is 0.5.", 0.5),
    # first-person choices when there is no "answer is"
    ("My guess is 33.3", 33.3),
    ("I'll go with 0.", 0),
    ("I'd pick 21 since the average is likely near 33.", 21),
    ("I choose 33. If everyone picks 50, that's close to two thirds of it; most players end "
     "up at 40 or so.", 33),
    ("Round 2: I'll go with 15 this time, down from 22 last round.", 15),
    ("My final number is 17", 17),
    ("So the number I choose is 22. That is level 3 thinking.", 22),
    ("My number: 33", 33),
    ("Everyone says 50, two thirds of that is 33, so I pick 22", 22),
    ("I pick 20 out of 1000", 20),
    # reasoning models' think blocks
    ("<think>The average might be 50, 2/3 of it is 33.</think>\nThe answer is 22.", 22),
    ("<think>Average 50, then 33, then 22.</think>\n\n**15**", 15),
    # number words
    ("I'll go with zero.", 0),
    ("The answer is zero.", 0),
    ("Zero.", 0),
    ("The answer is one hundred.", 100),
    ("The answer is twenty-two", 22),
    ("The answer is two thirds of the average, so 22.", 22),
    # out of range, negatives, unicode minus
    ("The answer is 150.", None),
    ("The answer is 150, or if that is not allowed then 100.", None),
    ("Between 20 and 1000", None),
    ("The answer is -5", None),
    ("The answer is -5", -5, -10, 10),
    ("The answer is \u22127", -7, -10, 10),
    ("Level-2 thinking gives 3", 3, -10, 10),  # a hyphen in a word is no minus sign
]


def _case_id(case: tuple[Any, ...]) -> str:
    return repr(case[0])[:60]


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_parse_number_reads_real_answers(case: tuple[Any, ...]) -> None:
    text, expected, *limits = case
    low, high = limits or (0, 100)
    assert isinstance(text, str)
    got = parse_number(text, low, high)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected)


def test_the_table_is_large_enough() -> None:
    assert len(CASES) >= 40


@pytest.mark.parametrize(
    ("reply", "found", "value"),
    [
        ("The answer is 22", "22", 22),
        ("The answer is **22**.", "22", 22),
        ("The answer is 2/3", "2/3", 2 / 3),
        ("The answer is 1,000", "1,000", 1000),
        ("The answer is: 33.5", "33.5", 33.5),
        ("Answer: 22", "22", 22),
        ("22", "22", 22),
        ("**22**", "22", 22),
        ("The answer is zero.", "zero", 0),
        ("The answer is \u22127", "-7", -7),
        ("The answer is N", None, None),
        ("I CAN'T", None, None),
        ("The player considered 50 and 33", None, None),  # no statement of an answer
    ],
)
def test_extracted_number_reads_the_extraction_reply(
    reply: str, found: str | None, value: float | None
) -> None:
    assert extracted_number(reply) == found
    if found is not None:
        assert parse_number(found, -10, 10_000) == pytest.approx(value)
