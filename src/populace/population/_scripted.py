"""The scripted model's background writer, and the persona tables its rules share.

A background request (the last user message holds a JSON object of attributes, or asks for
a background and names no target) is answered with a second-person persona that restates
every attribute ("Your education is doctorate."), so that the rules reading a persona — the
guessing game's and the survey's — find it again when the background is the system prompt.
When the request asks for a length ("at most 120 words"), the persona has that many words
(within 15%): seeded sentences about the person's days, people, past, skills and views are
added, so that a persona costs what a real model's would in the prompts that carry it.
The rule joins the scripted model through the entry point group
``populace.scripted_rules`` (priority 500: after the survey rule and the game's extraction
answer, before the game's rule, which answers anything); see ``docs/scripted-model.md``.

:data:`EDUCATION_STEPS` and :data:`PROFESSION_STEPS` say how many reasoning steps an
education level or a profession is worth to the scripted model: the game's rule reads both
(:func:`persona_steps`), the survey's rule the education table, and the writer below the two
to choose a sentence of style. They live here, with the population's vocabulary, so that
every rule reads one copy.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from populace.core import derive_seed, mix64
from populace.llm import text_of
from populace.llm.offline import scripted_rule

#: Persona steps, in the order they are looked for (first match wins within a table).
EDUCATION_STEPS: tuple[tuple[str, float], ...] = (
    ("doctorate", 2.0), ("phd", 2.0), ("master", 1.5), ("bachelor", 1.0),
    ("high school", 0.5), ("primary school", 0.0), ("no schooling", -0.5), ("no formal", -0.5),
)
PROFESSION_STEPS: tuple[tuple[str, float], ...] = (
    ("game theory professor", 3.0), ("game-theory professor", 3.0), ("economist", 2.0),
    ("psychologist", 1.0), ("writer", 0.5), ("athlete", 0.0), ("artist", -0.5),
)

_JSON = re.compile(r"\{.*\}", re.DOTALL)
_NAME, _PLACE, _HABIT = range(0x5C3, 0x5C6)

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


# Sentences that lengthen a background to the words asked, in this order, each drawn from
# its own list by the seed: a person's day, people, past, skills and views.
_MORE: tuple[tuple[str, ...], ...] = (
    ("Most mornings start early, with coffee and the radio news before anyone else is up.",
     "Your days follow a loose routine: work, a long walk, and dinner later than most.",
     "Weekdays are full and noisy; on weekends you disappear for hours without a plan.",
     "You work shifts, so your week rarely looks like anyone else's."),
    ("Your closest friend is someone you met at school and still call every week.",
     "You live with a partner who teases you about how long you take to decide things.",
     "Your family is large and loud, and you are the one they ask to settle arguments.",
     "You have a sister abroad and a small circle of friends you trust completely."),
    ("A job you lost years ago taught you to keep savings and a second plan.",
     "Moving away from home at eighteen shaped how independent you are today.",
     "Caring for a sick parent for two years made you patient and practical.",
     "A lucky win early in life made you curious about chance more than greedy."),
    ("You are good with numbers in daily life but distrust anything that looks too clever.",
     "You read people well and notice when someone is bluffing.",
     "You are quick to learn a new tool and slow to give up an old habit.",
     "You remember details other people forget, and you lose your keys every week."),
    ("You believe most people mean well but rarely think far ahead.",
     "You think fairness matters more than winning, though you do like to win.",
     "You expect others to follow the crowd, and you like to stand slightly apart from it.",
     "You care about your neighbourhood and vote in every local election."),
    ("When you compete, you study the others before you make a move.",
     "Risk does not scare you if you have thought it through; surprises do.",
     "You prefer a sure small gain to a long shot, except in games.",
     "In groups you tend to go along at first and change course later."),
)
_MORE_SALT = 0x5C7
_ASKED = re.compile(r"(\d+)\s+words", re.IGNORECASE)


def _lengthened(parts: list[str], words: int, seed: int) -> str:
    """``parts`` joined and lengthened with :data:`_MORE` sentences to ``words`` words
    (within one sentence), or cut to them when already longer."""
    text = " ".join(p for p in parts if p)
    count = len(text.split())
    extra: list[str] = []
    i = 0
    while count < words:
        pool = _MORE[i % len(_MORE)]
        pick = mix64(derive_seed(seed, _MORE_SALT, i))
        fresh = [s for s in pool if s not in extra] or list(pool)  # repeats only when out
        sentence = fresh[pick % len(fresh)]
        extra.append(sentence)
        count += len(sentence.split())
        i += 1
    if extra and count - words > words - (count - len(extra[-1].split())):
        count -= len(extra.pop().split())  # stop one sentence short: nearer the length
    text = " ".join([text, *extra]) if extra else text
    if count > words * 1.15:
        text = " ".join(text.split()[:words]).rstrip(",;:") + "."
    return text


def _first_step(text: str, table: tuple[tuple[str, float], ...]) -> float:
    for key, steps in table:
        if key in text:
            return steps
    return 0.0


def persona_steps(text: str) -> float:
    """Education steps plus profession steps found in ``text`` (0 when neither is).

    >>> persona_steps("A doctorate; works as an economist.")
    4.0
    """
    low = text.lower()
    return _first_step(low, EDUCATION_STEPS) + _first_step(low, PROFESSION_STEPS)


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
    asked = _ASKED.search(prompt)
    if asked is None:
        return " ".join(p for p in parts if p)
    return _lengthened(parts, int(asked.group(1)), seed)


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


@scripted_rule(priority=500)
def background_reply(messages: Sequence[Mapping[str, Any]], *, seed: int, **_: Any
                     ) -> str | None:
    """The scripted reply to a background request (the module docstring); None for any
    other prompt."""
    prompt = next((text_of(m.get("content")) for m in reversed(messages)
                   if m.get("role") == "user"), "")
    return _background(prompt, seed) if _is_background_request(prompt) else None
