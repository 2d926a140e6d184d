"""The scripted model's rule for the guessing game: any prompt no other rule answers.

``provider: scripted`` (and ``populace serve-llm --policy scripted``) answers the guessing
game by a fixed, documented rule, so that the whole pipeline — backgrounds, personas, prompt
levels, multi-round feedback, reports — runs without a GPU and still shows structure worth
plotting. Same messages, seed and temperature: same answer. The rule, in full (also in
``docs/scripted-model.md``):

**What it reads.** From the round prompt (the *last user message*, or in the shared-first
layout the first system message, when it states a target "of the average"): the ratio ``r`` and
offset ``c`` of "``r`` of the average …, plus ``c``" (default 2/3 and 0), the range of
"between ``L`` and ``H``" (default 0 and 100) and guidance cues, one reasoning step each:
"step by step", "rational", "predict"/"anticipate"; "famous" (the prior-knowledge note) adds
one more. From the other *system messages* (the persona: sampled attributes or a background): an
education level and a profession, the first of each table below found in the text. From
*any non-assistant message*: the last "winning number was ``W``" (feedback of an earlier
round).

=====================  =====  ======================  =====
education              steps  profession              steps
=====================  =====  ======================  =====
doctorate / PhD        2.0    game theory professor   3.0
master                 1.5    economist               2.0
bachelor               1.0    psychologist            1.0
high school            0.5    writer                  0.5
primary school         0.0    athlete                 0.0
no schooling / formal  -0.5   artist                  -0.5
=====================  =====  ======================  =====

**The number.** ``s`` = cues + persona steps + the model's ``depth``. Players reason in
steps of best response towards the equilibrium ``E = c / (1 - r)`` (0 for plain 2/3; 10 for
5 + 1/2 × mean): from the anchor ``A``, the centre is ``E + (A - E) × r**k``. In a first
round ``A`` is the middle of the range and ``k = s``, so P1 answers cluster near 50, and
each cue, a higher education level or a game-theory profession moves them down. Once a
winning number is known, ``A = W`` and ``k = 0.5 + max(s, 0) / 2``: every round moves
towards the equilibrium, faster for more steps. Noise is normal with standard deviation
``noise × (6 + 2.5 t) × (|centre - E| + 5) / (|middle - E| + 5)`` (``t``: the request's
temperature, 1 if unset): the spread grows with temperature and shrinks near the
equilibrium. The result is clamped to the range and rounded to an integer (to 0.01 on a
range narrower than 20). With probability ``invalid`` the reply settles on no number.

**The reply.** A few short reasoning sentences ending "The answer is N."; for a request
with a JSON ``response_format``, a JSON object with ``reasoning`` and ``number``. The
extraction prompt ("Extract … 'The answer is N'") is answered "The answer is N" with the
number the quoted reply settled on, or "I CAN'T". A background request (the last user
message holds a JSON object of attributes, or asks for a background and names no target)
gets a short second-person persona that restates each attribute ("Your education is
doctorate."), so the persona rule above finds it again in the game: that is the background
writer of :mod:`populace.population` (a rule of its own, asked between the two below).

Noise draws come from the request ``seed`` (a hash of the messages when there is none).

Two rules join the scripted model through the entry point group ``populace.scripted_rules``
(``pyproject.toml``): :func:`extraction_reply` (priority 400, the extraction prompt) and
:func:`game_reply` (priority 1000, the last rule asked: it answers any prompt, so the
scripted model always has a reply).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from populace.core import derive_seed, unit_float
from populace.llm import text_of
from populace.llm.offline import (
    ScriptedParams,
    extracted_number,
    is_structured,
    json_answer,
    scripted_rule,
)
from populace.population import persona_steps

#: Guidance cues of the round prompt, one reasoning step each.
CUES: tuple[tuple[str, ...], ...] = (("step by step",), ("rational",), ("predict", "anticipate"))

_NUM = r"-?\d+(?:\.\d+)?"
_RATIO = re.compile(rf"({_NUM}(?:\s*/\s*{_NUM})?)\s*(?:of|times|×|\*)\s*the\s+(?:average|mean)",
                    re.IGNORECASE)
_OFFSET = re.compile(rf"(?:plus|\+)\s*({_NUM})", re.IGNORECASE)
_RANGE = re.compile(rf"between\s+({_NUM})\s+and\s+({_NUM})", re.IGNORECASE)
_WINNER = re.compile(rf"winning number was\s+({_NUM})", re.IGNORECASE)
_Z1, _Z2, _INVALID = range(0x5C0, 0x5C3)
_PLAIN = ScriptedParams()  # the knobs when none are given


@dataclass(frozen=True, slots=True)
class Reading:
    """What the rule read from a conversation."""

    ratio: float
    offset: float
    low: float
    high: float
    cues: int
    famous: bool
    persona: float
    winner: float | None


def _fraction(text: str) -> float | None:
    num, _, den = text.partition("/")
    try:
        value = float(num) / float(den) if den else float(num)
    except (ValueError, ZeroDivisionError):
        return None
    return value if value > 0 and math.isfinite(value) else None


def _round_prompt_at(messages: Sequence[Mapping[str, Any]]) -> int:
    """Where the round prompt is: a first system message stating a target "of the average"
    (the shared-first layout), else the last user message; -1 when there is none."""
    if messages and messages[0].get("role") == "system" and \
            _RATIO.search(text_of(messages[0].get("content"))):
        return 0
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    return -1


def read(messages: Sequence[Mapping[str, Any]], params: ScriptedParams = _PLAIN
         ) -> Reading:
    """Read the rule's inputs from ``messages`` (see the module docstring)."""
    at = _round_prompt_at(messages)
    prompt = text_of(messages[at].get("content")) if at >= 0 else ""
    ratio, offset = 2 / 3, 0.0
    found = _RATIO.search(prompt)
    if found is not None:
        ratio = _fraction(found.group(1).replace(" ", "")) or ratio
        sentence = re.split(r"\.(?:\s|$)", prompt[found.end():], maxsplit=1)[0]
        plus = _OFFSET.search(sentence)
        if plus is not None:
            offset = float(plus.group(1))
    low, high = params.low, params.high
    bounds = _RANGE.search(prompt)
    if bounds is not None and float(bounds.group(1)) < float(bounds.group(2)):
        low, high = float(bounds.group(1)), float(bounds.group(2))
    lowered = prompt.lower()
    cues = sum(any(word in lowered for word in cue) for cue in CUES)
    persona = persona_steps(" ".join(text_of(m.get("content")) for i, m in enumerate(messages)
                                     if m.get("role") == "system" and i != at))
    winner = None
    for m in messages:
        if m.get("role") != "assistant":
            for w in _WINNER.findall(text_of(m.get("content"))):
                winner = float(w)
    return Reading(ratio, offset, low, high, cues, "famous" in lowered, persona, winner)


def _fmt(x: float) -> str:
    return f"{x:.0f}" if x == round(x) else f"{x:.2f}"


def _decide(r: Reading, seed: int, temperature: float | None, params: ScriptedParams
            ) -> tuple[float | None, list[str]]:
    """The number (None: no number) and the reasoning sentences before it."""
    if unit_float(derive_seed(seed, _INVALID)) < params.invalid:
        return None, ["There are too many unknowns here; I cannot settle on one choice."]
    middle = (r.low + r.high) / 2
    steps = r.cues + r.famous + r.persona + params.depth
    eq = r.offset / (1 - r.ratio) if r.ratio < 1 else r.low
    if r.winner is None:
        anchor, k = middle, steps
    else:
        anchor, k = r.winner, 0.5 + max(steps, 0.0) / 2
    centre = eq + (anchor - eq) * r.ratio ** k
    t = 1.0 if temperature is None else min(max(temperature, 0.0), 2.0)
    sigma = params.noise * (6 + 2.5 * t) * (abs(centre - eq) + 5) / (abs(middle - eq) + 5)
    u1 = max(unit_float(derive_seed(seed, _Z1)), 1e-12)
    z = math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * unit_float(derive_seed(seed, _Z2)))
    x = min(max(centre + sigma * z, r.low), r.high)
    x = float(round(x)) if r.high - r.low >= 20 else round(x, 2)
    ratio = _fmt(r.ratio) if r.ratio == round(r.ratio) else f"{r.ratio:.2f}"
    if r.winner is not None:
        why = [f"Last round the winning number was {_fmt(r.winner)}.",
               f"Everyone will aim at about {ratio} of that now, so I move down with them."]
    elif k < 0.25:
        why = ["I go with my first instinct."]
    else:
        why = []
        guess = middle
        for _ in range(min(math.ceil(k), 4)):
            nxt = eq + (guess - eq) * r.ratio
            why.append(f"If the others choose about {guess:.0f}, the target is about {nxt:.0f}.")
            guess = nxt
    return x, why


@scripted_rule(priority=400)
def extraction_reply(messages: Sequence[Mapping[str, Any]], *, seed: int,
                     response_format: Any = None, **_: Any) -> str | None:
    """The reply to the extraction prompt of the two-call protocol ("Extract … 'The answer
    is N'"): the number the quoted reply settled on, or "I CAN'T"; None for another prompt.

    >>> extraction_reply([{"role": "user", "content": "Extract the number. Reply 'The "
    ...                   "answer is N'.\\n---\\nSo I pick 30. The answer is 30.\\n---"}], seed=1)
    'The answer is 30'
    """
    extracted = extracted_number(messages)
    if extracted is None:
        return None
    number = None if extracted == "unknown" else extracted
    if is_structured(response_format):
        return json_answer(response_format, "I read the number stated in the reply.", number)
    return "I CAN'T" if number is None else f"The answer is {number}"


@scripted_rule(priority=1000)
def game_reply(messages: Sequence[Mapping[str, Any]], *, seed: int,
               temperature: float | None = None, response_format: Any = None,
               params: ScriptedParams = _PLAIN, **_: Any) -> str:
    """The reply to a round of the game (the rule of the module docstring) — and to any
    prompt, read as one: the scripted model's last rule, so it always has a reply."""
    value, why = _decide(read(messages, params), seed, temperature, params)
    shown = None if value is None else (int(value) if value == int(value) else value)
    if is_structured(response_format):
        return json_answer(response_format, " ".join(why), shown)
    if shown is None:
        return " ".join(why)
    return " ".join([*why, f"The answer is {shown}."])
