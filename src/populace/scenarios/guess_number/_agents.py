"""The participant: reads the moderator's round message, asks its model, reports a number."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from populace.core import Agent, Msg, Profile, seed_for
from populace.llm import ModelClient

from ._rules import parse_number


@dataclass(slots=True)
class Guess:
    """One participant's answer in one round."""

    number: float | None
    raw: str
    latency_s: float
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True, slots=True)
class Rules:
    """What every participant needs to know, shared by all agents of a worker."""

    seed: int
    low: float
    high: float
    temperature: float | None


class Participant(Agent):
    """A player of the guessing game, backed by one model client (shared per worker)."""

    __slots__ = ("model", "rules")

    def __init__(self, id: int, profile: Profile | None = None, *, model: ModelClient,
                 rules: Rules) -> None:
        super().__init__(id, profile)
        self.model = model
        self.rules = rules

    async def reply(self, msg: Msg) -> Msg:
        rules = self.rules
        meta = msg.metadata or {}
        messages = [{"role": "user", "content": msg.content}]
        started = time.perf_counter()
        done = await self.model.complete(
            messages,
            temperature=rules.temperature,
            seed=seed_for(meta.get("seed", rules.seed), self.id),
        )
        guess = Guess(parse_number(done.text, rules.low, rules.high), done.text,
                      time.perf_counter() - started, done.prompt_tokens, done.completion_tokens)
        return Msg(self.id, guess, role="assistant")

