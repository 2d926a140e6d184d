"""Reading and writing the replies of the fake chat models (``serve-llm`` and ``scripted``).

Both answer the extraction prompt of the two-call protocol ("Extract ... The answer is N")
and JSON ``response_format`` requests the same way; these helpers are what they share, and
what the scripted model's rules (which live with their scenarios) read messages with.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .._base import text_of

# A numeral as written: "22", "-3.5", "1,000" (thousands) or a fraction "2/3"; kept as is so
# that an extraction reply echoes what the player wrote.
_NUMBER = r"-?(?:\d{1,3}(?:,\d{3})+(?![\d,])|\d+)(?:\.\d+)?(?:/\d+(?:\.\d+)?)?"
_ANSWER_IS = re.compile(rf"answer\s+is\s*[:=]?\s*[*\"'(\[]*\s*({_NUMBER})", re.IGNORECASE)
_TEMPLATE = re.compile(r"answer\s+is", re.IGNORECASE)
_EXTRACT = re.compile(r"\bextract", re.IGNORECASE)
_NUMERAL = re.compile(_NUMBER)


def words(text: str) -> int:
    return len(text.split())


def find_number(text: str) -> str | None:
    """The number a reply commits to: after "answer is", else the last one outside the
    sentences that only state the answer template (``The answer is N``)."""
    found = _ANSWER_IS.findall(text)
    if found:
        return str(found[-1])
    kept = [part for part in re.split(r"(?<=[.!?\n])\s*", text) if not _TEMPLATE.search(part)]
    numbers = _NUMERAL.findall(" ".join(kept))
    return numbers[-1] if numbers else None


def extracted_number(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """If the last user message asks to extract a number as "The answer is N", the number
    (as written; "unknown" when the reply to read holds none); None for any other prompt.

    Both the word "extract" and the template must appear: a game prompt that merely asks
    players to end with "The answer is N" is answered like any other.

    >>> extracted_number([{"role": "user", "content": "Extract the number as 'The answer "
    ...                    "is N': I say 1,000. The answer is 1,000."}])
    '1,000'
    """
    last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    if last is None:
        return None
    text = text_of(last.get("content"))
    if not (_TEMPLATE.search(text) and _EXTRACT.search(text)):
        return None
    number = find_number(text)
    if number is None:  # the reply to read may be an earlier assistant turn
        for m in reversed(messages):
            if m.get("role") == "assistant":
                number = find_number(text_of(m.get("content")))
                break
    return number if number is not None else "unknown"


def json_answer(response_format: dict[str, Any], reasoning: str,
                number: int | float | str | None) -> str:
    """A JSON object for ``response_format``; fills a json_schema's properties by type
    (numbers with ``number``, which may be None: no number settled on).

    >>> json_answer({"type": "json_object"}, "Half of 60.", "30")
    '{"reasoning": "Half of 60.", "number": 30}'
    """
    value: int | float | str | None = number
    if isinstance(number, str):
        digits = number.replace(",", "")
        num, slash, den = digits.partition("/")
        try:
            value = float(num) / float(den) if slash else (
                float(digits) if "." in digits else int(digits))
        except (ValueError, ZeroDivisionError):
            value = number
    schema = response_format.get("json_schema") or {}
    props = (schema.get("schema") or {}).get("properties") if isinstance(schema, dict) else None
    if not isinstance(props, dict) or not props:
        return json.dumps({"reasoning": reasoning, "number": value})
    out: dict[str, Any] = {}
    for key, spec in props.items():
        kind = spec.get("type") if isinstance(spec, dict) else None
        if kind in ("integer", "number"):
            out[key] = value
        elif kind == "string":
            out[key] = reasoning
        elif kind == "boolean":
            out[key] = True
        elif kind == "array":
            out[key] = []
        elif kind == "object":
            out[key] = {}
        else:
            out[key] = None
    return json.dumps(out)


def is_structured(response_format: Any) -> bool:
    """Whether a request asks for a JSON answer.

    >>> is_structured({"type": "json_object"}), is_structured(None)
    (True, False)
    """
    return isinstance(response_format, dict) and response_format.get("type") in (
        "json_schema", "json_object")
