"""The scripted model's survey rule: questionnaire answers whose effects tests can assert."""

from __future__ import annotations

import json
import math
import random
import re
import statistics
from collections import Counter
from typing import Any

import aiohttp
import pytest

from populace.llm.offline import ScriptedParams, ServerOptions, running_server, scripted_reply
from populace.scenarios.survey._scripted import REASONS, affinity, survey_reply

Messages = list[dict[str, Any]]
N = 4000
PLAIN = ScriptedParams()
TRUST = ("Strongly distrust", "Distrust", "Somewhat distrust", "Neither", "Somewhat trust",
         "Trust", "Strongly trust")
TRANSPORT = ("Car", "Bus", "Bicycle", "Walking", "Train")
LIKERT_END = "Reply with the number of one option on this scale."
SINGLE_END = "Reply with the number of one option."
MULTI_END = "Reply with the numbers of every option that applies, separated by commas."


def near(x: float, tol: float = 0.1) -> Any:
    return pytest.approx(x, abs=tol)


def system(persona: str) -> dict[str, Any]:
    return {"role": "system",
            "content": f"You answer a survey as the person described below.\n\n{persona}"}


def about(education: str = "primary school", age: int = 45) -> dict[str, Any]:
    return system(f"About you: age: {age}; gender: female; education: {education}; "
                  f"income: middle.")


def question(text: str = "How much do you trust the national government?",
             options: tuple[str, ...] = TRUST, ending: str = LIKERT_END,
             treatment: str | None = None) -> str:
    """A question exactly as the survey scenario writes it."""
    head = ("Before this question, please read the following.\n"
            f"{treatment}\n\n" if treatment is not None else "")
    listed = "Options:\n" + "".join(f"{i}. {x}\n" for i, x in enumerate(options, 1))
    return f"{head}Question 3 of 10: {text}\n{listed if options else ''}{ending}"


def ask(*messages: dict[str, Any] | str) -> Messages:
    return [{"role": "user", "content": m} if isinstance(m, str) else m for m in messages]


def schema(spec: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "answer", "strict": True, "schema": {
        "type": "object", "properties": {"answer": spec}, "required": ["answer"],
        "additionalProperties": False}}}


def option(text: str) -> int:
    found = re.fullmatch(r"I would pick option (\d+)\.", text)
    assert found is not None, text
    return int(found.group(1))


def positions(messages: Messages, n: int = N, params: ScriptedParams = PLAIN) -> list[int]:
    return [option(scripted_reply(messages, seed=s, params=params)) for s in range(n)]


def expected_position(centre: float, k: int, sd: float = 0.8) -> float:
    """The rule's exact mean: round half up of N(centre, sd²), clamped to 1..k."""
    def below(x: float) -> float:  # P(centre + sd z < x)
        return 0.5 * (1 + math.erf((x - centre) / (sd * math.sqrt(2))))

    edges = [0.0, *(below(j + 0.5) for j in range(1, k)), 1.0]
    return sum(j * (edges[j] - edges[j - 1]) for j in range(1, k + 1))


# -- what it answers and how ------------------------------------------------------------------
def test_same_request_same_reply_and_seeds_vary_it() -> None:
    messages = ask(about("bachelor's degree"), question())
    assert scripted_reply(messages, seed=4) == scripted_reply(messages, seed=4)
    assert scripted_reply(messages) == scripted_reply(messages)  # no seed: a hash of the text
    assert len({scripted_reply(messages, seed=s) for s in range(40)}) >= 4
    opened = ask(about(), question("Why?", (), "Reply in one or two sentences."))
    assert len({scripted_reply(opened, seed=s) for s in range(40)}) > 1


def test_non_survey_prompts_fall_through_to_the_game() -> None:
    for text in ("Pick a number between 0 and 100.", "Question: what now?",
                 "Please reply with only the number of one option, from 1 to 5."):
        assert survey_reply(ask(text), seed=1, response_format=None, params=PLAIN) is None
    assert survey_reply([], seed=1, response_format=None, params=PLAIN) is None


def test_unstructured_replies_hold_exactly_the_answer() -> None:
    numbers = re.compile(r"-?\d+(?:\.\d+)?")
    for s in range(50):
        for ending in (LIKERT_END, SINGLE_END):
            text = scripted_reply(ask(about(), question(ending=ending)), seed=s)
            assert 1 <= option(text) <= len(TRUST)
        text = scripted_reply(ask(about(), question(
            "How many years?", (), "Reply with one number between 0 and 100 (years).")), seed=s)
        assert re.fullmatch(r"My answer is \d+\.", text) and len(numbers.findall(text)) == 1
        text = scripted_reply(ask(about(), question("Which do you use?", TRANSPORT,
                                                    MULTI_END)), seed=s)
        found = re.fullmatch(r"Options? (\d+(?:, \d+)*)\.", text)
        assert found is not None, text
        chosen = [int(x) for x in found.group(1).split(", ")]
        assert chosen == sorted(set(chosen)) and all(1 <= x <= 5 for x in chosen)
        assert text.startswith("Options " if len(chosen) > 1 else "Option ")


def test_structured_replies_fit_their_schema() -> None:
    k = len(TRUST)
    cases = [
        (question(), {"type": "integer", "enum": list(range(1, k + 1))}),
        (question(ending=SINGLE_END), {"type": "integer", "enum": list(range(1, k + 1))}),
        (question("Which?", TRANSPORT, MULTI_END),
         {"type": "array", "items": {"type": "integer", "enum": [1, 2, 3, 4, 5]}}),
        (question("Rate it.", (), "Reply with one number between -2.5 and 7.5."),
         {"type": "number", "minimum": -2.5, "maximum": 7.5}),
        (question("Why?", (), "Reply in one or two sentences."), {"type": "string"}),
    ]
    for prompt, spec in cases:
        for s in range(60):
            reply = json.loads(scripted_reply(ask(about(), prompt), seed=s,
                                              response_format=schema(spec)))
            assert list(reply) == ["answer"]
            value = reply["answer"]
            if spec["type"] == "integer":
                assert type(value) is int and value in spec["enum"]
            elif spec["type"] == "array":
                assert value and all(type(v) is int and v in spec["items"]["enum"]
                                     for v in value)
            elif spec["type"] == "number":
                assert isinstance(value, int | float) and -2.5 <= value <= 7.5
                assert round(value, 2) == value
            else:
                assert isinstance(value, str) and value.startswith("Mostly it comes down to")


def test_earlier_answers_in_memory_change_nothing() -> None:
    history = [{"role": "user", "content": question("Do you vote?", ("Yes", "No"),
                                                    SINGLE_END)},
               {"role": "assistant", "content": "I would pick option 1."}]
    for s in range(30):
        alone = scripted_reply(ask(about(), question()), seed=s)
        assert scripted_reply(ask(about(), *history, question()), seed=s) == alone


# -- likert: persona and treatment ------------------------------------------------------------
def test_education_and_age_raise_likert_answers_as_documented() -> None:
    low = statistics.fmean(positions(ask(about("primary school"), question())))
    high = statistics.fmean(positions(ask(about("doctorate"), question())))
    assert low == near(expected_position(4.0, 7))
    assert high == near(expected_position(5.0, 7))  # 0.5 × 2.0 steps
    assert high - low == near(1.0)
    old = statistics.fmean(positions(ask(about("primary school", age=75), question())))
    assert old - low == near(0.5)  # (75 − 45) / 30 × 0.5
    # A written background reads the same as the attributes.
    written = system("You are Ines Berg. Your age is 75. Your education is primary school.")
    for s in range(200):
        messages = ask(about("primary school", age=75), question())
        assert scripted_reply(ask(written, question()), seed=s) == scripted_reply(messages,
                                                                                  seed=s)


def test_one_positive_cue_word_shifts_the_mean_by_one() -> None:
    base = statistics.fmean(positions(ask(about(), question())))
    treated = statistics.fmean(positions(ask(about(), question(
        treatment="Studies show the national government keeps its promises and is trusted."))))
    exact = expected_position(5.0, 7) - expected_position(4.0, 7)
    assert 0.99 < exact < 1.0  # clamping is negligible here
    assert treated - base == near(exact)
    negative = statistics.fmean(positions(ask(about(), question(
        treatment="Some say it is harmful.\nOthers call it dangerous and unproven."))))
    assert negative == near(expected_position(2.0, 7))  # clamped at −2
    mixed = statistics.fmean(positions(ask(about(), question(treatment="Safe, but a risk."))))
    assert mixed == near(base, 0.02)


def test_cue_words_in_the_question_itself_change_nothing() -> None:
    base = statistics.fmean(positions(ask(about(), question())))
    cued = statistics.fmean(positions(ask(about(), question(
        "Is the proven, safe and trusted national government effective?"))))
    assert cued == near(base)
    assert cued == near(expected_position(4.0, 7))
    # Not even inside words of the treatment: "unsafe" is not "safe".
    assert positions(ask(about(), question(treatment="Unsafeness and safety.")), 300) \
        == positions(ask(about(), question()), 300)


# -- nominal answers -------------------------------------------------------------------------
def shuffled(seed: int) -> tuple[str, ...]:
    order = list(TRANSPORT)
    random.Random(seed).shuffle(order)
    return tuple(order)


def chosen_labels(education: str, params: ScriptedParams, n: int = N) -> list[str]:
    labels = []
    for s in range(n):
        options = shuffled(s)
        reply = scripted_reply(ask(about(education), question("How do you travel?", options,
                                                              SINGLE_END)), seed=s,
                               params=params)
        labels.append(options[option(reply) - 1])
    return labels


def test_primacy_favours_the_first_option_shown() -> None:
    k = len(TRANSPORT)
    for primacy in (0.15, 0.4):
        first = 0
        for s in range(N):
            options = shuffled(s)
            messages = ask(about("master's degree"), question("How do you travel?", options,
                                                               SINGLE_END))
            first += option(scripted_reply(messages, seed=s,
                                           params=ScriptedParams(primacy=primacy))) == 1
        assert first / N == near(primacy + (1 - primacy) / k, 0.04)
        assert first / N > 1 / k + 0.1
    none = chosen_labels("master's degree", ScriptedParams(primacy=0.0), 400)
    # Without primacy the label chosen does not depend on the order shown.
    for s in range(400):
        messages = ask(about("master's degree"), question("How do you travel?", TRANSPORT,
                                                           SINGLE_END))
        reply = scripted_reply(messages, seed=s, params=ScriptedParams(primacy=0.0))
        assert TRANSPORT[option(reply) - 1] == none[s]


def test_single_choice_answers_depend_on_education() -> None:
    by = {e: Counter(chosen_labels(e, PLAIN, 2000)) for e in ("primary school", "doctorate")}
    a, b = by["primary school"], by["doctorate"]
    distance = sum(abs(a[x] - b[x]) for x in TRANSPORT) / 2 / 2000
    assert distance > 0.1
    for e, counts in by.items():  # the favourite is the option of highest affinity
        assert counts.most_common(1)[0][0] == max(TRANSPORT, key=lambda x: affinity(x, e))


def test_multi_choice_picks_each_option_by_its_affinity() -> None:
    counts: Counter[str] = Counter()
    for s in range(N):
        options = shuffled(s)
        reply = json.loads(scripted_reply(
            ask(about("doctorate"), question("Which do you use?", options, MULTI_END)), seed=s,
            response_format=schema({"type": "array", "items": {"type": "integer"}})))
        assert reply["answer"]
        counts.update(options[i - 1] for i in reply["answer"])
    for x in TRANSPORT:
        share = 0.15 + 0.5 * affinity(x, "doctorate")
        none = math.prod(1 - (0.15 + 0.5 * affinity(y, "doctorate")) for y in TRANSPORT)
        top = x == max(TRANSPORT, key=lambda y: affinity(y, "doctorate"))
        assert counts[x] / N == near(share + (none if top else 0), 0.03)


# -- numeric, open and coding ----------------------------------------------------------------
def numeric(ending: str, persona: dict[str, Any], treatment: str | None = None,
            n: int = N) -> list[float]:
    values = []
    for s in range(n):
        text = scripted_reply(ask(persona, question("How many?", (), ending,
                                                    treatment=treatment)), seed=s)
        found = re.fullmatch(r"My answer is (-?\d+(?:\.\d+)?)\.", text)
        assert found is not None, text
        values.append(float(found.group(1)))
    return values


def test_numeric_answers_stay_in_bounds_and_are_rounded() -> None:
    wide = numeric("Reply with one number between 0 and 100 (years).", about())
    assert all(0 <= v <= 100 and v == int(v) for v in wide)
    assert statistics.fmean(wide) == near(50, 0.5)
    assert statistics.pstdev(wide) == near(12, 0.5)
    narrow = numeric("Reply with one number between -1.5 and 2.5.", about())
    assert all(-1.5 <= v <= 2.5 and round(v, 2) == v for v in narrow)
    assert any(v != round(v, 1) for v in narrow)
    assert statistics.fmean(narrow) == near(0.5, 0.02)
    odd = numeric("Reply with one number between 0.5 and 30.5.", about(), n=500)
    assert all(1 <= v <= 30 and v == int(v) for v in odd)
    big = numeric("Reply with one number between 0 and 1e+06 (euros).", about(), n=200)
    assert all(0 <= v <= 1e6 and v == int(v) for v in big) and max(big) > 5e5


def test_numeric_answers_follow_persona_and_treatment() -> None:
    ending = "Reply with one number between 0 and 100."
    doctor = statistics.fmean(numeric(ending, about("doctorate", age=75)))
    assert doctor == near(100 * (0.5 + 0.08 * 3.0), 0.5)
    treated = statistics.fmean(numeric(ending, about(), treatment="It is proven to help."))
    assert treated == near(60, 0.5)  # one cue word: +0.1 of the range


def coding(answer: str, categories: tuple[str, ...] = ("cost", "time", "other")) -> str:
    listed = "".join(f"{i}. {x}\n" for i, x in enumerate(categories, 1))
    return (f"Code this answer to a survey question into one category.\n"
            f"Question: Why did you not apply?\nAnswer: {answer}\nCategories:\n{listed}"
            f"Reply with the number of one category.")


def test_coding_picks_the_first_category_named_in_the_answer() -> None:
    def code(answer: str, **kw: Any) -> str:
        return scripted_reply(ask(coding(answer, **kw)), seed=1)

    assert code("Mostly it comes down to cost.") == "Category 1."
    assert code("No TIME, and the cost too.") == "Category 1."  # first in the list wins
    assert code("I had no time.") == "Category 2."
    assert code("It was too costly.") == "Category 3."  # whole words only: the last one
    assert code("Family reasons.", categories=("health", "family ties", "family")) \
        == "Category 3."
    structured = scripted_reply(ask(coding("time!")), seed=2,
                                response_format=schema({"type": "integer", "enum": [1, 2, 3]}))
    assert json.loads(structured) == {"answer": 2}


def test_open_answers_give_a_listed_reason_that_codes_back() -> None:
    reasons: Counter[str] = Counter()
    for s in range(400):
        text = scripted_reply(ask(about("high school"), question(
            "Why did you not apply?", (), "Reply in one or two sentences.")), seed=s)
        found = re.fullmatch(r"Mostly it comes down to (\w+)\.", text)
        assert found is not None and found.group(1) in REASONS, text
        reasons[found.group(1)] += 1
        coded = scripted_reply(ask(coding(text, REASONS)), seed=s)
        assert coded == f"Category {REASONS.index(found.group(1)) + 1}."
    assert len(reasons) >= 4


# -- invalid replies and re-asks -------------------------------------------------------------
def test_invalid_share_and_reasks_that_succeed() -> None:
    params = ScriptedParams(invalid=0.3)
    first = ask(about(), question(ending=SINGLE_END))
    replies = [scripted_reply(first, seed=s, params=params) for s in range(N)]
    invalid = [s for s, r in enumerate(replies) if r == "I would rather not say."]
    assert len(invalid) / N == near(0.3, 0.03)
    valid = 0
    for s in invalid:
        again = [*first, {"role": "assistant", "content": replies[s]},
                 {"role": "user", "content": "Please reply with only the number of one option, "
                                             "from 1 to 7."}]
        reply = scripted_reply(again, seed=s, params=params)
        if reply != "I would rather not say.":
            assert 1 <= option(reply) <= 7
            valid += 1
    assert valid / len(invalid) == near(0.7, 0.06)
    spec = schema({"type": "integer", "enum": list(range(1, 8))})
    nulls = sum(json.loads(scripted_reply(first, seed=s, params=params, response_format=spec))
                == {"answer": None} for s in range(N))
    assert nulls == len(invalid)


def test_a_reask_answers_the_question_asked_before() -> None:
    params = ScriptedParams(invalid=1.0)
    messages = ask(about(), question("How many?", (), "Reply with one number between 0 and 5."),
                   {"role": "assistant", "content": "Hard to say."},
                   "Please reply with only one number between 0 and 5.")
    assert scripted_reply(messages, seed=3, params=params) == "I would rather not say."
    assert re.fullmatch(r"My answer is [0-5](\.\d+)?\.", scripted_reply(messages, seed=3))
    multi = ask(about(), question("Which?", TRANSPORT, MULTI_END),
                {"role": "assistant", "content": "Not sure."},
                "Please reply with only the numbers of the options that apply, from 1 to 5, "
                "separated by commas.")
    assert re.fullmatch(r"Options? \d(, \d)*\.", scripted_reply(multi, seed=3))


# -- the game is unchanged, and HTTP ----------------------------------------------------------
GAME_SYSTEM = {"role": "system", "content": "You are a player. About you: age: 34; gender: "
                                            "female; education: doctorate; profession: economist."}
GAME = ("You are one of 100 players. Each player picks a number between 0 and 100. The winner "
        "is the player whose number is closest to 2/3 of the average of all numbers. Think step "
        "by step. End with 'The answer is N'.")
STEPS = ("If the others choose about 50, the target is about 33. If the others choose about 33, "
         "the target is about 22. If the others choose about 22, the target is about 15. If the "
         "others choose about 15, the target is about 10.")


def test_game_replies_are_unchanged() -> None:
    game = ask(GAME_SYSTEM, GAME)
    assert scripted_reply(game, seed=7, temperature=0.7) == f"{STEPS} The answer is 8."
    assert scripted_reply(game) == f"{STEPS} The answer is 7."
    later = ask(GAME_SYSTEM, GAME, {"role": "assistant", "content": "The answer is 20."},
                "The winning number was 21. " + GAME)
    assert scripted_reply(later, seed=3, temperature=1.0) == (
        "Last round the winning number was 21. Everyone will aim at about 0.67 of that now, "
        "so I move down with them. The answer is 3.")
    fmt = schema({"type": "integer"})
    fmt["json_schema"]["schema"]["properties"] = {"reasoning": {"type": "string"},
                                                  "number": {"type": "integer"}}
    assert json.loads(scripted_reply(game, seed=11, response_format=fmt)) == {
        "reasoning": STEPS, "number": 4}
    assert scripted_reply(game, seed=5, params=ScriptedParams(invalid=0.5)) == (
        "There are too many unknowns here; I cannot settle on one choice.")
    background = ask('Write a short background for this person: {"age": 61, "education": '
                     '"master"}')
    assert scripted_reply(background, seed=9) == (
        "You are Leila Moreau. You grew up in a busy port city and now live in a river delta "
        "city. Your age is 61. Your education is master. You like to work a problem out on "
        "paper before you commit to anything. You collect old maps and argue about borders "
        "with anyone who listens.")


async def test_serve_llm_answers_survey_questions() -> None:
    messages = ask(about("doctorate"), question(treatment="It is safe."))
    spec = schema({"type": "integer", "enum": list(range(1, 8))})
    async with running_server(ServerOptions(policy="scripted")) as base, \
            aiohttp.ClientSession() as session:
        for body, expected in (
            ({"seed": 12}, scripted_reply(messages, seed=12)),
            ({"seed": 12, "response_format": spec},
             scripted_reply(messages, seed=12, response_format=spec)),
        ):
            async with session.post(f"{base}/chat/completions", json={
                    "model": "dummy", "messages": messages, **body}) as resp:
                assert resp.status == 200
                text = (await resp.json())["choices"][0]["message"]["content"]
            assert text == expected
    assert json.loads(text)["answer"] in range(1, 8)
