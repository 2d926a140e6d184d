"""The messages a respondent's model sees, and reading its replies.

The format is fixed and documented (``docs/survey.md``); the scripted model's survey rule
(:mod:`populace.scenarios.survey._scripted`) reads exactly this.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from ._questionnaire import Question

READ_FIRST = "Before this question, please read the following."
ENDINGS = {
    "single_choice": "Reply with the number of one option.",
    "likert": "Reply with the number of one option on this scale.",
    "multi_choice": "Reply with the numbers of every option that applies, separated by commas.",
    "open": "Reply in one or two sentences.",
}
CODE_ASK = "Code this answer to a survey question into one category."
_INT = re.compile(r"(?<![\d.])-?\d+(?!\d|\.\d)")
_NUMBER = re.compile(r"(?<![\d.,])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\d])")


def _num(x: float) -> str:
    return f"{x:g}"


def question_message(q: Question, number: int, of: int, shown: Sequence[int],
                     note: str | None) -> str:
    """The user message asking ``q`` (``shown``: canonical option indices, 0-based, in the
    order this respondent sees them; ``note``: a treatment message to read first)."""
    lines = [READ_FIRST, note.strip(), ""] if note else []
    lines.append(f"Question {number} of {of}: {q.text.strip()}")
    if q.type == "numeric":
        assert q.range is not None
        unit = f" ({q.unit})" if q.unit else ""
        lines.append(f"Reply with one number between {_num(q.range[0])} and "
                     f"{_num(q.range[1])}{unit}.")
    else:
        if q.type != "open":
            lines.append("Options:")
            lines.extend(f"{i}. {q.options[k]}" for i, k in enumerate(shown, 1))
        lines.append(ENDINGS[q.type])
    return "\n".join(lines)


def reask_message(q: Question) -> str:
    """The one follow-up after a reply that gave no valid answer."""
    k = len(q.options)
    if q.type == "numeric":
        assert q.range is not None
        return (f"Please reply with only one number between {_num(q.range[0])} and "
                f"{_num(q.range[1])}.")
    if q.type == "multi_choice":
        return (f"Please reply with only the numbers of the options that apply, from 1 to "
                f"{k}, separated by commas.")
    return f"Please reply with only the number of one option, from 1 to {k}."


def coding_message(q: Question, answer: str) -> str:
    """The second call that codes an open answer into ``q``'s categories."""
    lines = [CODE_ASK, f"Question: {q.text.strip()}", f"Answer: {' '.join(answer.split())}",
             "Categories:", *(f"{i}. {c}" for i, c in enumerate(q.options, 1)),
             "Reply with the number of one category."]
    return "\n".join(lines)


def response_format(q: Question, coding: bool = False) -> dict[str, Any] | None:
    """A strict JSON schema for the answer (OpenAI's ``response_format``); None for open
    questions, whose answer is free text."""
    k = len(q.options)
    if coding or q.type in ("single_choice", "likert"):
        spec: dict[str, Any] = {"type": "integer", "enum": list(range(1, k + 1))}
    elif q.type == "multi_choice":
        spec = {"type": "array", "items": {"type": "integer", "enum": list(range(1, k + 1))}}
    elif q.type == "numeric":
        assert q.range is not None
        spec = {"type": "number", "minimum": q.range[0], "maximum": q.range[1]}
    else:
        return None
    return {"type": "json_schema", "json_schema": {
        "name": "answer", "strict": True,
        "schema": {"type": "object", "properties": {"answer": spec}, "required": ["answer"],
                   "additionalProperties": False}}}


def _json_answer(text: str) -> tuple[bool, Any]:
    """``(True, value)`` when ``text`` is a JSON object with an ``answer``."""
    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`").removeprefix("json").strip()
    if not body.startswith("{"):
        return False, None
    try:
        data = json.loads(body)
    except ValueError:
        return False, None
    if isinstance(data, dict) and "answer" in data:
        return True, data["answer"]
    return False, None


def _label_match(text: str, labels: Sequence[str]) -> int | None:
    """The one label that ``text`` is, or names as whole words; None if none or several.
    An occurrence inside a longer label's ("agree" in "strongly agree") does not count."""
    low = " ".join(text.lower().split()).strip(" .!\"'")
    exact = [i for i, lab in enumerate(labels) if lab.lower() == low]
    if len(exact) == 1:
        return exact[0]
    spans = {i: [m.span() for m in re.finditer(rf"(?<!\w){re.escape(lab.lower())}(?!\w)", low)]
             for i, lab in enumerate(labels)}
    longer = [(a, b) for i in spans for a, b in spans[i]]

    def inside(a: int, b: int) -> bool:
        return any(x <= a and b <= y and (x, y) != (a, b) for x, y in longer)

    found = [i for i, found in spans.items() if any(not inside(a, b) for a, b in found)]
    return found[0] if len(found) == 1 else None


def parse_choice(text: str, shown: Sequence[int], labels: Sequence[str]) -> int | None:
    """The canonical index (0-based) of the option a reply picks: a JSON ``answer``, the
    one option number in the reply, or the one option label it names."""
    is_json, value = _json_answer(text)
    if is_json:
        if isinstance(value, bool):
            return None
        if isinstance(value, int | float) and value == int(value) and 1 <= value <= len(shown):
            return shown[int(value) - 1]
        if isinstance(value, str):
            return parse_choice(value, shown, labels)
        return None
    numbers = {int(n) for n in _INT.findall(text)}
    picks = {n for n in numbers if 1 <= n <= len(shown)}
    if len(picks) == 1 and len(numbers) == 1:
        return shown[picks.pop() - 1]
    label = _label_match(text, [labels[k] for k in shown])
    return shown[label] if label is not None else None


def parse_multi(text: str, shown: Sequence[int], labels: Sequence[str]) -> int | None:
    """A bitmask of the canonical options a reply picks (None: no valid set)."""
    is_json, value = _json_answer(text)
    if is_json:
        if not isinstance(value, list) or not value:
            return None
        numbers = value
    else:
        numbers = [int(n) for n in _INT.findall(text)]
    mask = 0
    for n in numbers:
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= len(shown):
            return None
        mask |= 1 << shown[n - 1]
    return mask or None


def parse_numeric(text: str, low: float, high: float) -> float | None:
    """The one number a reply gives within ``[low, high]`` (``1,000`` and ``1.5`` read as
    numbers; a reply with several different numbers in range is not an answer)."""
    is_json, value = _json_answer(text)
    if is_json:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            return None
        text = str(value)
    found = []
    for raw in _NUMBER.findall(text):
        x = float(raw.replace(",", ""))
        if low <= x <= high:
            found.append(x)
    distinct = set(found)
    return found[-1] if len(distinct) == 1 else None
