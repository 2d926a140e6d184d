"""The scripted model's survey rule: questionnaire answers by a fixed, documented rule.

:func:`~populace.llm.offline.scripted_reply` (and ``populace serve-llm --policy scripted``) hands
survey questions, re-asks and coding requests to :func:`survey_reply` (entry point
``survey`` of group ``populace.scripted_rules``, priority 300: after the persona and social
rules, before the guessing game's), so a survey runs offline and still shows effects a
report can measure: education and age move Likert answers, a cue word in a treatment
message moves them by a known amount, nominal answers depend on education, and the first
option shown gets a primacy bonus. The rule, in full (also in ``docs/scripted-model.md``,
section "Surveys"):

**What it reads.** The *question*: the last user message when it has a line
``Question N of M: <text>``; after a re-ask (the last user message starts "Please reply
with only"), the most recent earlier user message that is a question or a coding request.
Its options are the ``N. label`` lines after ``Options:``, in the order shown; its type is
set by its last line: "Reply with the number of one option on this scale." (likert, ``k``
points as listed), "Reply with the number of one option." (single choice), "Reply with
the numbers of every option that applies, separated by commas." (multi choice), "Reply
with one number between ``lo`` and ``hi`` (unit)." (numeric), "Reply in one or two
sentences." (open); any other ending is read as single choice when options are listed,
else as open. The *treatment*: the lines between "Before this question, please read the
following." and the question line (never the question itself). The *persona*, from the
system messages: the education value (``education: V`` or ``Your education is V.``), and
the age (``age: N`` or ``Your age is N``), the last of each stated.

**Persona score** ``p`` = education steps + age term. Education steps: the first entry of
the education table that the game's rule reads too (:data:`populace.population.EDUCATION_STEPS`:
doctorate/PhD 2.0, master 1.5, bachelor 1.0, high school 0.5, primary school 0.0, no
schooling/no formal −0.5) found in the education value, or in the whole persona text when
no value is stated; 0 when none is. Age term: ``(age − 45) / 30``,
0 when no age is stated.

**Treatment cue** ``c``: the number of whole words of the treatment in :data:`POSITIVE`
minus those in :data:`NEGATIVE`, clamped to [−2, 2]; 0 without a treatment.

**Draws.** From the request ``seed`` (a hash of the messages when there is none) and
``q`` = crc32 of the question text, so the questions of one respondent are independent
and a treated and an untreated respondent with the same seed share their draws. ``z``:
one standard normal by Box–Muller; ``g``: a Gumbel draw per option, keyed by the option's
label (not its position). ``affinity(label, e)`` = ``unit_float(derive_seed(crc32(label
lower-cased), crc32(e)))``, ``e`` the education value lower-cased (else the table entry
found, else empty): a fixed number in [0, 1) per label and education.

**The answer.**

- likert: position ``clamp(round((k + 1) / 2 + 0.5 p + c + 0.8 z), 1, k)`` (round half
  up). One positive cue word moves the mean position by +1, less what the clamp cuts off.
- numeric ``[lo, hi]``: ``lo + (hi − lo) × clamp(0.5 + 0.08 p + 0.1 c + 0.12 z, 0, 1)``,
  rounded to an integer when ``hi − lo ≥ 20`` (kept within the bounds), else to 0.01.
- single choice: with probability ``primacy`` the first option shown; otherwise the option
  with the largest ``affinity(label, e) + 0.5 g``.
- multi choice: each option independently with probability ``0.15 + 0.5 affinity(label,
  e)``; the option of highest affinity when none is chosen.
- open: "Mostly it comes down to R." with R the entry of :data:`REASONS` with the largest
  ``affinity(R, e) + 0.5 g``.
- coding request ("Code this answer to a survey question into one category." with
  ``Answer:`` and ``Categories:`` lines): the first category whose label occurs in the
  answer (whole words, any case), else the last category.
- With probability ``invalid`` (drawn with the number of messages mixed in, so a re-ask
  can succeed) the reply settles on no answer.

**The reply.** With a JSON ``response_format``: ``{"answer": V}`` (an integer, a list of
integers in shown order, a number, a string; ``null`` for no answer). Otherwise one
sentence: "I would pick option 3.", "Options 1, 4." ("Option 4." for one), "My answer is
42.", "Category 2.", the open sentence, or "I would rather not say." for no answer.
"""

from __future__ import annotations

import json
import math
import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from populace.core import derive_seed, unit_float
from populace.llm import text_of
from populace.llm.offline import ScriptedParams, is_structured, scripted_rule
from populace.population import EDUCATION_STEPS

Kind = Literal["likert", "single_choice", "multi_choice", "numeric", "open", "coding"]

#: Treatment words that move answers up (+1 each) and down (−1 each).
POSITIVE: frozenset[str] = frozenset(
    {"safe", "effective", "benefit", "benefits", "helps", "trusted", "proven", "improves"})
NEGATIVE: frozenset[str] = frozenset(
    {"risk", "risks", "harmful", "dangerous", "unproven", "fails", "worse"})
#: The reasons an open answer gives.
REASONS: tuple[str, ...] = ("cost", "time", "health", "family", "trust", "work", "safety",
                            "money")

READ_FIRST = "Before this question, please read the following."
CODING = "Code this answer to a survey question into one category."
REASK = "Please reply with only"
_ENDINGS: dict[str, Kind] = {
    "Reply with the number of one option on this scale.": "likert",
    "Reply with the number of one option.": "single_choice",
    "Reply with the numbers of every option that applies, separated by commas.":
        "multi_choice",
    "Reply in one or two sentences.": "open",
}
_NUM = r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
_QUESTION = re.compile(r"^Question\s+\d+\s+of\s+\d+:\s*(.*?)\s*$")
_OPTION = re.compile(r"^(\d+)\.\s+(.*?)\s*$")
_NUMERIC = re.compile(rf"^Reply with one number between ({_NUM}) and ({_NUM})"
                      r"(?:\s*\([^)]*\))?\.$")
_EDUCATION = re.compile(r"\beducation\s*(?::|\bis\b)\s*([^;.\n]+)", re.IGNORECASE)
_AGE = re.compile(rf"\bage\s*(?::|\bis\b)\s*({_NUM})", re.IGNORECASE)
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")
_INVALID, _Z1, _Z2, _PRIMACY, _GUMBEL, _PICK = range(0x5D0, 0x5D6)


@dataclass(frozen=True, slots=True)
class SurveyQuestion:
    """What the rule read from a question or coding request."""

    kind: Kind
    text: str
    options: tuple[str, ...] = ()
    low: float = 0.0
    high: float = 100.0
    treatment: str = ""
    answer: str = ""  # the open answer to code (coding requests only)


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().splitlines()]


def _options(lines: Sequence[str], header: str) -> tuple[str, ...]:
    if header not in lines:
        return ()
    labels = []
    for line in lines[lines.index(header) + 1:]:
        found = _OPTION.match(line)
        if found is None:
            break
        labels.append(found.group(2))
    return tuple(labels)


def _coding(lines: list[str]) -> SurveyQuestion | None:
    field = {key: line[len(key):].strip() for line in lines
             for key in ("Question:", "Answer:") if line.startswith(key)}
    categories = _options(lines, "Categories:")
    if not categories:
        return None
    return SurveyQuestion("coding", field.get("Question:", ""), categories,
                          answer=field.get("Answer:", ""))


def parse_question(text: str) -> SurveyQuestion | None:
    """The survey question or coding request in one user message, else None."""
    lines = _lines(text)
    if lines and lines[0] == CODING:
        return _coding(lines)
    at = next((i for i, line in enumerate(lines) if _QUESTION.match(line)), None)
    if at is None:
        return None
    found = _QUESTION.match(lines[at])
    assert found is not None
    treatment = "\n".join(lines[1:at]).strip() if lines[0] == READ_FIRST else ""
    options = _options(lines[at + 1:], "Options:")
    last = next((line for line in reversed(lines[at + 1:]) if line), "")
    low, high = 0.0, 100.0
    kind: Kind
    numeric = _NUMERIC.match(last)
    if numeric is not None:
        kind, low, high = "numeric", float(numeric.group(1)), float(numeric.group(2))
    else:
        kind = _ENDINGS.get(last, "single_choice" if options else "open")
        if kind != "open" and not options:
            kind = "open"
    return SurveyQuestion(kind, found.group(1), options, low, high, treatment)


def _find_question(messages: Sequence[Mapping[str, Any]]) -> SurveyQuestion | None:
    users = [text_of(m.get("content")) for m in messages if m.get("role") == "user"]
    if not users:
        return None
    if not users[-1].lstrip().startswith(REASK):
        return parse_question(users[-1])
    for text in reversed(users[:-1]):
        question = parse_question(text)
        if question is not None:
            return question
    return None


def _crc(text: str) -> int:
    return zlib.crc32(text.encode())


def affinity(label: str, education: str) -> float:
    """A fixed number in [0, 1) for an option label and an education value."""
    return unit_float(derive_seed(_crc(label.strip().lower()), _crc(education)))


def _education(persona: str) -> tuple[float, str]:
    """Education steps and the education value that affinities use."""
    found = _EDUCATION.findall(persona)  # the last: the persona follows the instructions
    value = found[-1].strip().lower() if found else ""
    where = value or persona.lower()
    for key, steps in EDUCATION_STEPS:
        if key in where:
            return steps, value or key
    return 0.0, value


def persona_score(persona: str) -> float:
    """``p``: education steps plus ``(age - 45) / 30`` (the age term is 0 without an age)."""
    steps, _ = _education(persona)
    age = _AGE.findall(persona)
    return steps + ((float(age[-1]) - 45) / 30 if age else 0.0)


def cue(treatment: str) -> int:
    """``c``: positive minus negative words of the treatment, clamped to [-2, 2]."""
    tokens = _WORD.findall(treatment.lower())
    score = sum(t in POSITIVE for t in tokens) - sum(t in NEGATIVE for t in tokens)
    return max(-2, min(2, score))


def _normal(seed: int, q: int) -> float:
    u1 = max(unit_float(derive_seed(seed, _Z1, q)), 1e-12)
    return math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * unit_float(
        derive_seed(seed, _Z2, q)))


def _gumbel(seed: int, q: int, label: str) -> float:
    u = max(unit_float(derive_seed(seed, _GUMBEL, q, _crc(label.strip().lower()))), 1e-12)
    return -math.log(-math.log(u)) if u < 1 else 40.0


def _best(labels: Sequence[str], education: str, seed: int, q: int) -> int:
    """Index of the label with the largest ``affinity + 0.5 g``."""
    scores = [affinity(x, education) + 0.5 * _gumbel(seed, q, x) for x in labels]
    return max(range(len(labels)), key=scores.__getitem__)


def _number(x: float) -> int | float:
    return int(x) if x == int(x) else x


def _decide(question: SurveyQuestion, persona: str, seed: int, params: ScriptedParams
            ) -> int | list[int] | float | str:
    """The answer: an option number (1-based, as shown), a list of them, a number or text."""
    q = _crc(question.text)
    _, education = _education(persona)
    labels = question.options
    if question.kind == "coding":
        said = question.answer.lower()
        for i, label in enumerate(labels, 1):
            if re.search(rf"(?<!\w){re.escape(label.strip().lower())}(?!\w)", said):
                return i
        return len(labels)
    if question.kind == "open":
        return f"Mostly it comes down to {REASONS[_best(REASONS, education, seed, q)]}."
    if question.kind == "single_choice":
        if unit_float(derive_seed(seed, _PRIMACY, q)) < params.primacy:
            return 1
        return _best(labels, education, seed, q) + 1
    if question.kind == "multi_choice":
        weights = [affinity(x, education) for x in labels]
        chosen = [i + 1 for i, (x, w) in enumerate(zip(labels, weights, strict=True))
                  if unit_float(derive_seed(seed, _PICK, q, _crc(x.strip().lower())))
                  < 0.15 + 0.5 * w]
        return chosen or [max(range(len(labels)), key=weights.__getitem__) + 1]
    p, c, z = persona_score(persona), cue(question.treatment), _normal(seed, q)
    if question.kind == "likert":
        k = len(labels)
        return min(max(math.floor((k + 1) / 2 + 0.5 * p + c + 0.8 * z + 0.5), 1), k)
    lo, hi = question.low, question.high
    share = min(max(0.5 + 0.08 * p + 0.1 * c + 0.12 * z, 0.0), 1.0)
    value = lo + (hi - lo) * share if hi > lo else lo
    if hi - lo >= 20:
        return min(max(round(value), math.ceil(lo)), math.floor(hi))
    return _number(min(max(round(value, 2), lo), hi))


def _text(kind: Kind, answer: int | list[int] | float | str) -> str:
    if isinstance(answer, str):
        return answer
    if isinstance(answer, list):
        return f"Option{'s' if len(answer) > 1 else ''} {', '.join(map(str, answer))}."
    if kind == "numeric":
        return f"My answer is {answer}."
    if kind == "coding":
        return f"Category {answer}."
    return f"I would pick option {answer}."


@scripted_rule(priority=300)
def survey_reply(messages: Sequence[Mapping[str, Any]], *, seed: int, response_format: Any,
                 params: ScriptedParams, **_: Any) -> str | None:
    """The scripted reply to a survey question, re-ask or coding request (the rule of the
    module docstring); None when the last user message is none of these.

    >>> survey_reply([{"role": "user", "content": "Question 1 of 1: Why?\\n"
    ...                "Reply in one or two sentences."}], seed=1, response_format=None,
    ...              params=ScriptedParams())
    'Mostly it comes down to health.'
    """
    question = _find_question(messages)
    if question is None:
        return None
    structured = is_structured(response_format)
    if unit_float(derive_seed(seed, _INVALID, len(messages))) < params.invalid:
        return json.dumps({"answer": None}) if structured else "I would rather not say."
    persona = "\n".join(text_of(m.get("content")) for m in messages
                        if m.get("role") == "system")
    answer = _decide(question, persona, seed, params)
    if structured:
        return json.dumps({"answer": answer})
    return _text(question.kind, answer)
