"""The scripted model: an offline stand-in for an LLM whose answers follow the prompt.

``provider: scripted`` (and ``populace serve-llm --policy scripted``) answers each prompt by
a fixed, documented *rule*, so that a whole run — backgrounds, personas, rounds, surveys,
feeds — works without a GPU and still shows structure worth plotting. Same messages, seed
and temperature: same answer.

This module holds the client and the registry, not the rules: each rule lives with what
it answers (the guessing game's, the survey's and the social feed's with their scenarios,
the background writer with the population, the persona agents' with them) and joins
through the entry point group :data:`RULES_GROUP` (``populace.scripted_rules``). A rule is
a function of the messages and the keywords ``seed`` (always an int: a hash of the messages
when the request has none), ``temperature``, ``response_format``, ``params``
(:class:`ScriptedParams`) and ``max_tokens``, returning the reply, or None for a prompt it
does not know.

**Order.** Rules are asked by priority, lowest first, then by entry point name; the first
reply wins. A rule states its priority with :func:`scripted_rule`; one without has
:data:`DEFAULT_PRIORITY` (100), so a package's own rule is asked before Populace's scenario
rules. Populace's: persona agents 100 (the default), social feeds 200, surveys 300, the
game's extraction prompt 400, backgrounds 500, the game 1000 (it answers any prompt). The
whole table is in ``docs/scripted-model.md``.
"""

from __future__ import annotations

import functools
import importlib.metadata
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from populace.core import ConfigError

from .._base import Completion, ModelClient, ModelStats, Request, text_of
from ._latency import SimulatedLatency
from ._replies import words

#: The entry point group through which rules join the scripted model.
RULES_GROUP = "populace.scripted_rules"
#: The priority of a rule that states none (lower: asked earlier).
DEFAULT_PRIORITY = 100

Rule = Callable[..., str | None]
_R = TypeVar("_R", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class ScriptedParams:
    """The knobs of the rules (``docs/scripted-model.md``).

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


def scripted_rule(priority: int) -> Callable[[_R], _R]:
    """Give a rule of the scripted model its place in the order: lower is asked earlier
    (:data:`DEFAULT_PRIORITY` when a rule has none). Register the rule in your package's
    ``pyproject.toml`` under ``[project.entry-points."populace.scripted_rules"]``.

    >>> @scripted_rule(priority=50)
    ... def haiku(messages, *, seed, **_):
    ...     return "An old silent pond." if "haiku" in str(messages[-1]["content"]) else None
    >>> haiku.priority
    50
    """
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise TypeError(f"scripted_rule(priority=...) takes an int, got {priority!r}")

    def mark(rule: _R) -> _R:
        rule.priority = priority  # type: ignore[attr-defined]
        return rule

    return mark


def _priority(rule: Rule) -> int:
    return int(getattr(rule, "priority", DEFAULT_PRIORITY))


@functools.cache
def scripted_rules() -> tuple[Rule, ...]:
    """Every rule of entry point group :data:`RULES_GROUP`, in the order they are asked:
    by priority, then by entry point name."""
    found = [(ep.name, ep.load()) for ep in importlib.metadata.entry_points(group=RULES_GROUP)]
    return tuple(rule for _, rule in sorted(found, key=lambda x: (_priority(x[1]), x[0])))


def scripted_reply(messages: Sequence[Mapping[str, Any]], *, seed: int | None = None,
                   temperature: float | None = None, response_format: Any = None,
                   params: ScriptedParams = ScriptedParams(),
                   max_tokens: int | None = None) -> str:
    """What the scripted model answers to ``messages``: the reply of the first rule that
    knows the prompt (the module docstring).

    >>> scripted_reply([{"role": "user", "content": "Extract the number. Reply 'The answer "
    ...                  "is N'.\\n---\\nSo I pick 30. The answer is 30.\\n---"}])
    'The answer is 30'
    """
    if seed is None:
        seed = zlib.crc32("\x1e".join(text_of(m.get("content")) for m in messages).encode())
    for rule in scripted_rules():
        reply = rule(messages, seed=seed, temperature=temperature,
                     response_format=response_format, params=params, max_tokens=max_tokens)
        if reply is not None:
            return reply
    raise ConfigError(f"no rule of the scripted model answers this prompt (entry point group "
                      f"{RULES_GROUP}: is populace installed, e.g. pip install -e .?)")


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
