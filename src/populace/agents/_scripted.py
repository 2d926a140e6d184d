"""The scripted model's rule for persona prompts (decisions, extractions, summaries,
interviews): answers that depend on the persona and, above all, on what it remembers, so
that a message or an intervention visibly changes later decisions offline. Same messages
and seed, same reply. The rule, in full (also in ``docs/scripted-model.md``):

**What it reads.** The persona: every system message. The memory: the lines
``- [step S, KIND] TEXT`` of the last user message, newest last (of a ``decision`` line only
what follows "I answered:"). The question's kind, from its instruction line.

**Choice.** Each option scores ``0.6 × affinity + mentions + noise``: ``affinity`` is a
draw in [0, 1) from the persona text and the option (the same persona prefers the same
option); ``mentions`` adds, for each memory line naming the option, ``0.7 ** age`` (age 0
for the newest line), doubled for an ``intervention``, halved for the persona's own
``decision``; ``noise`` is a Gumbel draw times
0.5 × temperature (1 when unset). The highest score wins.

**Number.** The recency-weighted (``0.7 ** age``) mean of the in-range numbers the memory
names, else ``low + affinity × (high - low)``; plus normal noise of standard deviation
``0.1 × (high - low) × temperature``; clamped, rounded for whole numbers.

**Text.** "I keep thinking about: LATEST." — the newest line the persona did not say
itself (or the persona's first sentence when there is none), then filler sentences up to
``0.75 × max_tokens`` words (40 when unset): a chatty persona.

**Schema.** A JSON object with each property filled by its type: an ``enum`` as a choice,
``integer``/``number`` as a number within ``minimum``/``maximum`` (0–100 by default),
``boolean`` by a fair draw, text as in **Text** (one sentence). **Regex.** One of the
pattern's literal alternatives (``a|b|c``) chosen as a choice; any other pattern gets a
sentence, which the agent cannot read (counted unreadable, as a real model's may be).

**Invalid.** With probability ``invalid`` (the scripted model's knob) a decision's reply is
"I am not sure." — unreadable, so the agent makes its extraction call, which this rule
answers "I CAN'T" when the quoted reply names no answer. **Summary.** The first eight words
of each remembered line but an earlier summary, newest first, joined, cut to the words
asked for (what the earlier summary held is forgotten: a rolling summary loses detail).
**Interview.** "LATEST — that is what stays with me." in character.
"""

from __future__ import annotations

import json
import math
import re
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from populace.core import derive_seed, unit_float
from populace.llm.offline import scripted_rule

from ._agent import INTERVIEWER
from ._answers import UNREADABLE, Choice, Number

_LINE = re.compile(r"^- \[step (\d+), (\w+)\] (.*)$", re.MULTILINE)
_QUESTION = re.compile(r"^Question: (.*)$", re.MULTILINE)
_CHOICE = re.compile(r"^Answer with exactly one of: (.*)\.$", re.MULTILINE)
_NUMBER = re.compile(r"^Answer with (a whole number|a number) from (\S+) to (\S+)\.$",
                     re.MULTILINE)
_REGEX = re.compile(r"^Answer with text matching the regular expression (.*)\.$", re.MULTILINE)
_SCHEMA = re.compile(r"^Answer with one JSON object matching this JSON schema: (.*)$",
                     re.MULTILINE)
_TEXT = "Answer in your own words."
_OPENER = "I keep thinking about:"
_SUMMARY = re.compile(r"Summarise what you remember in at most (\d+) words\.")
_EXTRACT = "Extract the answer the reply gives."
_NUMERAL = re.compile(r"-?\d+(?:\.\d+)?")
_FILLER = (
    "I talk about it with the people around me.", "It reminds me of something from years ago.",
    "I am not in a hurry to make up my mind.", "Everyone seems to have an opinion today.",
    "I would like to hear more before I change anything.", "It matters to my family too.",
    "Some of it makes sense to me, some of it does not.", "I will keep an eye on it.",
)
_DECAY = 0.7
#: How much a mention counts, by the kind of the line (others: 1).
_WEIGHT = {"intervention": 2.0, "decision": 0.5}


def _text(content: Any) -> str:
    return content if isinstance(content, str) else "" if content is None else str(content)


def _options(listed: str) -> list[str]:
    return [o for o in re.findall(r'"((?:[^"\\]|\\.)*)"', listed)]


def _memory(prompt: str) -> list[tuple[str, str]]:
    """``(kind, text)`` of each remembered line, oldest first."""
    out = []
    for _step, kind, text in _LINE.findall(prompt):
        if kind == "decision" and "I answered:" in text:
            text = text.rsplit("I answered:", 1)[1]
        out.append((kind, text))
    return out


def _affinity(persona: str, thing: str) -> float:
    return unit_float(derive_seed(zlib.crc32(persona.encode()), zlib.crc32(thing.encode())))


def _temperature(t: float | None) -> float:
    return 1.0 if t is None else min(max(t, 0.0), 2.0)


def _choose(options: Sequence[str], persona: str, memory: list[tuple[str, str]], seed: int,
            temperature: float | None) -> str:
    scores = []
    n = len(memory)
    for i, option in enumerate(options):
        pattern = re.compile(rf"(?<!\w){re.escape(option.lower())}(?!\w)")
        mentions = sum(_DECAY ** (n - 1 - j) * _WEIGHT.get(kind, 1.0)
                       for j, (kind, text) in enumerate(memory)
                       if pattern.search(text.lower()))
        u = max(unit_float(derive_seed(seed, 0xC401, i)), 1e-12)
        gumbel = -math.log(-math.log(u)) if u < 1 else 0.0
        scores.append(0.6 * _affinity(persona, option) + mentions
                      + 0.5 * _temperature(temperature) * gumbel)
    return options[max(range(len(options)), key=scores.__getitem__)]


def _number(low: float, high: float, integer: bool, persona: str, question: str,
            memory: list[tuple[str, str]], seed: int, temperature: float | None) -> float:
    total = weight = 0.0
    n = len(memory)
    for j, (_kind, text) in enumerate(memory):
        for x in _NUMERAL.findall(text):
            value = float(x)
            if low <= value <= high:
                w = _DECAY ** (n - 1 - j)
                total += w * value
                weight += w
    centre = total / weight if weight else low + _affinity(persona, question) * (high - low)
    u1 = max(unit_float(derive_seed(seed, 0x7A1)), 1e-12)
    z = math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * unit_float(derive_seed(seed, 0x7A2)))
    x = min(max(centre + 0.1 * (high - low) * _temperature(temperature) * z, low), high)
    return float(round(x)) if integer else round(x, 2)


def _latest(persona: str, memory: list[tuple[str, str]]) -> str:
    """The newest thing the persona was told (not its own words), else its first line."""
    for kind, text in reversed(memory):
        if kind != "decision":
            return text.strip().removeprefix(_OPENER).strip().rstrip(".")
    return persona.split(".")[0].strip() or "my day"


def _chatter(persona: str, memory: list[tuple[str, str]], seed: int, words: int) -> str:
    latest = _latest(persona, memory)
    out = [f"{_OPENER} {latest}."]
    i = 0
    while sum(len(s.split()) for s in out) < words:
        out.append(_FILLER[derive_seed(seed, 0xF1, i) % len(_FILLER)])
        i += 1
    return " ".join(out)


def _show(x: float) -> str:
    return str(int(x)) if x == int(x) else str(x)


def _schema_value(spec: Mapping[str, Any], name: str, persona: str,
                  memory: list[tuple[str, str]], seed: int, temperature: float | None) -> Any:
    kind = spec.get("type")
    if "enum" in spec:
        return _choose([str(e) for e in spec["enum"]], persona, memory, seed, temperature)
    if kind in ("integer", "number"):
        low, high = float(spec.get("minimum", 0)), float(spec.get("maximum", 100))
        x = _number(low, high, kind == "integer", persona, name, memory, seed, temperature)
        return int(x) if kind == "integer" else x
    if kind == "boolean":
        return unit_float(derive_seed(seed, zlib.crc32(name.encode()))) < 0.5
    return _chatter(persona, memory, seed, 1).split(". ")[0].rstrip(".") + "."


def _decision(prompt: str, persona: str, seed: int, temperature: float | None,
              max_tokens: int | None) -> str | None:
    memory = _memory(prompt)
    found = _QUESTION.search(prompt)
    question = found.group(1) if found else ""
    if (m := _CHOICE.search(prompt)) is not None:
        options = _options(m.group(1))
        return _choose(options, persona, memory, seed, temperature) if options else None
    if (m := _NUMBER.search(prompt)) is not None:
        try:
            low, high = float(m.group(2)), float(m.group(3))
        except ValueError:
            return None
        x = _number(low, high, m.group(1) == "a whole number", persona, question, memory,
                    seed, temperature)
        return _show(x)
    if (m := _SCHEMA.search(prompt)) is not None:
        try:
            schema = json.loads(m.group(1))
        except ValueError:
            return None
        props = schema.get("properties") or {}
        return json.dumps({k: _schema_value(v, k, persona, memory, derive_seed(seed, i),
                                            temperature)
                           for i, (k, v) in enumerate(props.items())})
    if (m := _REGEX.search(prompt)) is not None:
        pattern = m.group(1)
        literal = pattern.strip("()^$")
        parts = literal.split("|")
        if all(p and re.escape(p) == p for p in parts) and \
                all(re.fullmatch(pattern, p) for p in parts):
            return _choose(parts, persona, memory, seed, temperature)
        return "I would rather describe it in my own words."
    if _TEXT in prompt:
        words = int(max_tokens * 0.75) if max_tokens else 40
        return _chatter(persona, memory, seed, max(words, 1))
    return None


def _extract(prompt: str) -> str:
    """The answer of the quoted reply, read as the instruction says; or "I CAN'T"."""
    parts = prompt.split("\n---\n")
    quoted = parts[1] if len(parts) >= 3 else ""
    answer: Any = None
    if (m := _CHOICE.search(prompt)) is not None:
        answer = Choice(_options(m.group(1))) if len(_options(m.group(1))) >= 2 else None
    elif (m := _NUMBER.search(prompt)) is not None:
        answer = Number(float(m.group(2)), float(m.group(3)),
                        integer=m.group(1) == "a whole number")
    if answer is None:
        return "I CAN'T"
    value = answer.read(quoted)
    return "I CAN'T" if value is UNREADABLE else _show(value) if isinstance(value, float) \
        else str(value)


@scripted_rule(priority=100)  # first: its prompts are recognised by their own lines
def persona_reply(messages: Sequence[Mapping[str, Any]], *, seed: int,
                  temperature: float | None = None, response_format: Any = None,
                  params: Any = None, max_tokens: int | None = None) -> str | None:
    """The scripted model's reply to a persona prompt (the module docstring's rule), or
    None for a prompt that is not one."""
    if not messages:
        return None
    last = next((_text(m.get("content")) for m in reversed(messages)
                 if m.get("role") == "user"), None)
    if last is None:
        return None
    system = [_text(m.get("content")) for m in messages if m.get("role") == "system"]
    persona = "\n\n".join(system)
    if _EXTRACT in last and last.startswith("Here is someone's reply"):
        return _extract(last)
    if (m := _SUMMARY.search(last)) is not None:
        heads = [" ".join(text.split()[:8]).rstrip(".;") for _step, kind, text in
                 reversed(_LINE.findall(last)) if kind != "summary" and text.strip()]
        return " ".join("; ".join(h for h in heads if h).split()[: int(m.group(1))]) \
            or "Nothing much."
    if system and system[0] == INTERVIEWER and _QUESTION.search(last) is not None:
        persona = "\n\n".join(system[1:])
        return f"{_latest(persona, _memory(last))} — that is what stays with me."
    if _QUESTION.search(last) is None:
        return None
    invalid = getattr(params, "invalid", 0.0)
    if invalid and unit_float(derive_seed(seed, 0x1BAD)) < invalid:
        return "I am not sure."
    return _decision(last, persona, seed, temperature, max_tokens)
