"""serve-llm's ``reasoning`` policy: long, unique step-by-step answers of a configurable
length, and the short canned sentence for every other prompt."""

from __future__ import annotations

import pytest

from populace.core import mix64
from populace.llm.offline import ServerOptions
from populace.llm.offline._engine import text_tokens
from populace.llm.offline._replies import find_number
from populace.llm.offline._server import _answer

STEP_BY_STEP = [{"role": "user", "content": "Pick a number from 0 to 100, two thirds of the "
                 "average wins. Think the problem through step by step first, then give "
                 "your number."}]
DIRECT = [{"role": "user", "content": "Pick a number from 0 to 100. Give it directly."}]


def test_step_by_step_answers_are_hundreds_of_tokens_by_default() -> None:
    options = ServerOptions(policy="reasoning")
    lengths = [len(text_tokens(_answer(options, STEP_BY_STEP, seed, None)))
               for seed in range(200)]
    assert 100 <= min(lengths) and max(lengths) <= 300 + 40  # at most a sentence over
    assert 190 <= sum(lengths) / len(lengths) <= 230


def test_the_length_is_configurable_and_0_is_one_sentence() -> None:
    fixed = ServerOptions(policy="reasoning", reasoning_tokens=50)
    assert all(50 <= len(text_tokens(_answer(fixed, STEP_BY_STEP, s, None))) <= 90
               for s in range(50))
    off = ServerOptions(policy="reasoning", reasoning_tokens=0)
    assert len(text_tokens(_answer(off, STEP_BY_STEP, 3, None))) < 30
    with pytest.raises(ValueError, match="reasoning_tokens must be"):
        ServerOptions(reasoning_tokens=(300, 100))


def test_answers_are_unique_per_seed_early_and_end_with_their_number() -> None:
    options = ServerOptions(policy="reasoning")
    answers = [_answer(options, STEP_BY_STEP, seed, None) for seed in range(100)]
    # two agents' answers part within the first 16 tokens: an extraction prompt quoting
    # one shares no block of the answer with another's
    assert len({tuple(text_tokens(a)[:16]) for a in answers}) >= 95
    for seed, text in enumerate(answers):
        number = str(options.low + mix64(seed) % (options.high - options.low + 1))
        assert text.endswith(f"The answer is {number}.")
        assert find_number(text) == number
    assert _answer(options, STEP_BY_STEP, 5, None) == answers[5]  # same seed, same text


def test_other_prompts_keep_the_short_answer() -> None:
    options = ServerOptions(policy="reasoning")
    assert len(text_tokens(_answer(options, DIRECT, 1, None))) < 30
