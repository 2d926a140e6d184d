"""The scripted model: an offline stand-in for an LLM whose answers follow the prompt.

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
doctorate."), so the persona rule above finds it again in the game.

Noise draws come from the request ``seed`` (a hash of the messages when there is none).

Survey questions, their re-asks and coding requests are answered by the survey rule of
:mod:`populace.llm._survey_rule` instead, and social-network feed prompts by the social rule
of :mod:`populace.llm._social_rule`. Rules that packages add through the entry point group
``populace.scripted_rules`` (a function of the messages, ``seed``, ``temperature``,
``response_format`` and ``params`` returning the reply, or None for a prompt it does not
know) are asked first, by entry point name: Populace's persona agents add theirs this way
(:mod:`populace.agents`).
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import math
import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from populace.core import derive_seed, mix64, unit_float

from ._base import Completion, ModelClient, ModelStats, Request
from ._latency import SimulatedLatency
from ._replies import extraction, is_structured, json_answer, text_of, words
from ._social_rule import social_reply

#: Persona steps, in the order they are looked for (first match wins within a table).
EDUCATION_STEPS: tuple[tuple[str, float], ...] = (
    ("doctorate", 2.0), ("phd", 2.0), ("master", 1.5), ("bachelor", 1.0),
    ("high school", 0.5), ("primary school", 0.0), ("no schooling", -0.5), ("no formal", -0.5),
)
PROFESSION_STEPS: tuple[tuple[str, float], ...] = (
    ("game theory professor", 3.0), ("game-theory professor", 3.0), ("economist", 2.0),
    ("psychologist", 1.0), ("writer", 0.5), ("athlete", 0.0), ("artist", -0.5),
)
#: Guidance cues of the round prompt, one reasoning step each.
CUES: tuple[tuple[str, ...], ...] = (("step by step",), ("rational",), ("predict", "anticipate"))

_NUM = r"-?\d+(?:\.\d+)?"
_RATIO = re.compile(rf"({_NUM}(?:\s*/\s*{_NUM})?)\s*(?:of|times|×|\*)\s*the\s+(?:average|mean)",
                    re.IGNORECASE)
_OFFSET = re.compile(rf"(?:plus|\+)\s*({_NUM})", re.IGNORECASE)
_RANGE = re.compile(rf"between\s+({_NUM})\s+and\s+({_NUM})", re.IGNORECASE)
_WINNER = re.compile(rf"winning number was\s+({_NUM})", re.IGNORECASE)
_JSON = re.compile(r"\{.*\}", re.DOTALL)
_Z1, _Z2, _INVALID, _NAME, _PLACE, _HABIT = range(0x5C0, 0x5C6)

_FIRST = ("Amara", "Jonas", "Li Wei", "Sofia", "Tomasz", "Nadia", "Kofi", "Ines", "Ravi",
          "Elena", "Mateo", "Yuki", "Farah", "Oskar", "Leila", "Dmitri")
_LAST = ("Okafor", "Lindqvist", "Chen", "Moreau", "Kowalski", "Haddad", "Mensah", "Duarte",
         "Iyer", "Petrova", "Rojas", "Tanaka", "Aziz", "Berg", "Nasser", "Volkov")
_PLACES = ("a fishing town on the coast", "a mountain village", "a busy port city",
           "a farming valley", "the suburbs of a capital", "a university town",
           "an old mining town", "a river delta city")
_HABITS = (
    "You keep a notebook of small predictions and check later how they turned out.",
    "You cook for your neighbours every Sunday and never follow a recipe exactly.",
    "You walk the long way to work to think things over.",
    "You collect old maps and argue about borders with anyone who listens.",
    "You play chess online late at night and lose more often than you admit.",
    "You fix other people's bicycles for free and keep the spare parts.",
)


@dataclass(frozen=True, slots=True)
class ScriptedParams:
    """The knobs of the rule (see the module docstring).

    ``depth``: reasoning steps added to every answer; ``noise``: multiplies the spread;
    ``invalid``: share of replies that settle on no number (or, in a survey, no answer);
    ``low``/``high``: the range used when the prompt states none; ``primacy``: in a survey,
    the share of single-choice answers that take the first option shown.
    """

    depth: float = 0.0
    noise: float = 1.0
    invalid: float = 0.0
    low: float = 0.0
    high: float = 100.0
    primacy: float = 0.15


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


def _first_step(text: str, table: tuple[tuple[str, float], ...]) -> float:
    for key, steps in table:
        if key in text:
            return steps
    return 0.0


def persona_steps(text: str) -> float:
    """Education steps plus profession steps found in ``text`` (0 when neither is)."""
    low = text.lower()
    return _first_step(low, EDUCATION_STEPS) + _first_step(low, PROFESSION_STEPS)


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


def read(messages: Sequence[Mapping[str, Any]], params: ScriptedParams = ScriptedParams()
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


def _background(prompt: str, seed: int) -> str:
    """A short second-person persona restating the attributes of a background request."""
    attributes: dict[str, Any] = {}
    found = _JSON.search(prompt)
    if found is not None:
        try:
            data = json.loads(found.group(0))
        except ValueError:
            data = None
        if isinstance(data, dict):
            attributes = data
    name = (f"{_FIRST[mix64(derive_seed(seed, _NAME)) % len(_FIRST)]} "
            f"{_LAST[mix64(derive_seed(seed, _NAME, 1)) % len(_LAST)]}")
    home = _PLACES[mix64(derive_seed(seed, _PLACE)) % len(_PLACES)]
    now = _PLACES[mix64(derive_seed(seed, _PLACE, 1)) % len(_PLACES)]
    facts = " ".join(f"Your {str(k).replace('_', ' ')} is {v}." for k, v in attributes.items())
    steps = persona_steps(facts)
    style = ("You like to work a problem out on paper before you commit to anything."
             if steps >= 1.5 else "You trust your gut more than any calculation."
             if steps <= 0 else "You weigh things up, but never for long.")
    moved = "and still live there" if home == now else f"and now live in {now}"
    parts = [f"You are {name}. You grew up in {home} {moved}.", facts, style,
             _HABITS[mix64(derive_seed(seed, _HABIT)) % len(_HABITS)]]
    return " ".join(p for p in parts if p)


def _is_background_request(prompt: str) -> bool:
    lowered = prompt.lower()
    if "background" in lowered and "target" not in lowered:
        return True
    found = _JSON.search(prompt)
    if found is None:
        return False
    try:
        return isinstance(json.loads(found.group(0)), dict)
    except ValueError:
        return False


#: The entry point group through which packages add rules to the scripted model.
RULES_GROUP = "populace.scripted_rules"


@functools.cache
def added_rules() -> tuple[Callable[..., str | None], ...]:
    """The rules packages add (entry point group :data:`RULES_GROUP`), by name."""
    found = importlib.metadata.entry_points(group=RULES_GROUP)
    return tuple(ep.load() for ep in sorted(found, key=lambda ep: ep.name))


def scripted_reply(messages: Sequence[Mapping[str, Any]], *, seed: int | None = None,
                   temperature: float | None = None, response_format: Any = None,
                   params: ScriptedParams = ScriptedParams(),
                   max_tokens: int | None = None) -> str:
    """What the scripted model answers to ``messages`` (the rule of the module docstring).

    >>> scripted_reply([{"role": "user", "content": "Extract the number. Reply 'The answer "
    ...                  "is N'.\\n---\\nSo I pick 30. The answer is 30.\\n---"}])
    'The answer is 30'
    """
    if seed is None:
        seed = zlib.crc32("\x1e".join(text_of(m.get("content")) for m in messages).encode())
    from ._survey_rule import survey_reply  # here: the survey rule reads this module's tables

    for rule in added_rules():
        added = rule(messages, seed=seed, temperature=temperature,
                     response_format=response_format, params=params, max_tokens=max_tokens)
        if added is not None:
            return added
    social = social_reply(messages, seed=seed)  # a social feed: populace.llm._social_rule
    if social is not None:
        return social
    survey = survey_reply(messages, seed=seed, response_format=response_format, params=params)
    if survey is not None:
        return survey
    structured = is_structured(response_format)
    extracted = extraction(messages)
    if extracted is not None:
        number = None if extracted == "unknown" else extracted
        if structured:
            return json_answer(response_format, "I read the number stated in the reply.",
                               number)
        return "I CAN'T" if number is None else f"The answer is {number}"
    prompt = next((text_of(m.get("content")) for m in reversed(messages)
                   if m.get("role") == "user"), "")
    if _is_background_request(prompt):
        return _background(prompt, seed)
    value, why = _decide(read(messages, params), seed, temperature, params)
    shown = None if value is None else (int(value) if value == int(value) else value)
    if structured:
        return json_answer(response_format, " ".join(why), shown)
    if shown is None:
        return " ".join(why)
    return " ".join([*why, f"The answer is {shown}."])


class ScriptedModel(ModelClient):
    """A :class:`~populace.llm.ModelClient` answering by :func:`scripted_reply`.

    >>> model = ScriptedModel("scripted", latency=0.0)
    """

    def __init__(self, name: str = "scripted", *, latency: float = 0.0,
                 params: ScriptedParams = ScriptedParams()) -> None:
        self.name = name
        self.latency = latency
        self.params = params
        self._latency = SimulatedLatency(latency)
        self._requests = 0
        self._prompt_tokens = 0
        self._completion_tokens = 0

    async def send(self, request: Request) -> Completion:
        messages, temperature, _, seed, max_tokens, response_format = request
        self._requests += 1
        await self._latency.wait()
        text = scripted_reply(messages, seed=seed, temperature=temperature,
                              response_format=response_format, params=self.params,
                              max_tokens=max_tokens)
        if max_tokens is not None and words(text) > max_tokens:
            text = " ".join(text.split()[:max_tokens])
        ptok = sum(words(text_of(m.get("content"))) for m in messages)
        ctok = words(text)
        self._prompt_tokens += ptok
        self._completion_tokens += ctok
        return Completion(text, self.name, prompt_tokens=ptok, completion_tokens=ctok,
                          latency_s=self.latency)

    def statistics(self) -> ModelStats:
        return ModelStats(self.name, self._requests, 0, self._latency.in_flight,
                          self._prompt_tokens, self._completion_tokens)

    async def aclose(self) -> None:
        self._latency.reset()
