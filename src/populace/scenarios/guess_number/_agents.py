"""The participant: reads the moderator's round message, asks its model, reports a number."""

from __future__ import annotations

import json
import time
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from populace.core import Agent, Msg, Profile, seed_for
from populace.environment import EnvVerbs, Op
from populace.launch import INTERVIEWER
from populace.llm import ChatMessage, Layout, ModelClient, conversation

from ._prompts import (
    ANSWER_FORMAT,
    CONSTRAINED_FORMAT,
    CONSTRAINED_MAX_TOKENS,
    EXTRACT,
    RESPONSE_SCHEMA,
    STRUCTURED_FORMAT,
    TURN,
    extracted_number,
    number_constraint,
    persona,
)
from ._rules import parse_number
from ._world import group_path


@dataclass(slots=True)
class Guess:
    """One participant's answer in one round."""

    number: float | None
    raw: str
    extract_raw: str | None
    latency_s: float
    prompt_tokens: int
    completion_tokens: int
    calls: int
    retries: int


@dataclass(frozen=True, slots=True)
class Rules:
    """What every participant needs to know, shared by all agents of a worker."""

    seed: int
    low: float
    high: float
    temperature: float | None
    max_tokens: int | None = None
    protocols: Mapping[str, str] | None = None  # model name → direct | two_call | structured
    memory_rounds: int = 5
    attributes: tuple[str, ...] = ()  # per-agent prompt fields, from the profile
    layout: Layout = "shared_first"
    extract: str = "always"  # two_call: always, or when_stated (only if not stated plainly)


class Participant(Agent):
    """A player of the guessing game, backed by one model client (shared per worker).

    The model is the profile's ``model`` column when there is one (mixed models), else the
    only one in ``models``.
    """

    __slots__ = ("env", "model", "place", "protocol", "rules")

    def __init__(self, id: int, profile: Profile | None = None, *,
                 models: Mapping[str, ModelClient], rules: Rules,
                 env: EnvVerbs | None = None) -> None:
        super().__init__(id, profile)
        self.rules = rules
        self.env = env
        if profile is None:
            name = next(iter(models))
            self.place = None
        else:
            name = profile["model"] if "model" in profile else next(iter(models))
            # Where I read the game's news: my group's environment in group play (so I see
            # my group's report and, falling through, the global announcement), else the
            # global one.
            self.place = group_path(profile["group"]) if "group" in profile else None
        self.model = models[name]
        self.protocol = rules.protocols.get(name, "direct") if rules.protocols else "direct"

    @property
    def memory_size(self) -> int:  # type: ignore[override]
        """Room for ``memory_rounds`` rounds (an answer and a result each), at least the
        default: the bounded memory must not cut what the conversation should include."""
        return max(Agent.memory_size, 2 * self.rules.memory_rounds)

    def conversation(self, prompt: str) -> list[ChatMessage]:
        """The round prompt, the persona and earlier rounds from memory (own answers, the
        moderator's results), in the run's layout (see ``populace.llm.conversation``)."""
        rules = self.rules
        keep = 2 * rules.memory_rounds
        about = None
        if rules.attributes:
            about = persona(self.profile, rules.attributes)
            if "{" in prompt:  # per-agent fields the moderator left for us
                prompt = prompt.format_map({a: self.profile[a] for a in rules.attributes})
        history = self._history(keep)
        if self.protocol == "direct":
            prompt += ANSWER_FORMAT
        elif self.protocol == "structured":
            prompt += STRUCTURED_FORMAT
        elif self.protocol == "constrained":
            prompt += CONSTRAINED_FORMAT
        if rules.layout == "persona_first":
            return conversation(prompt, "", persona=about, history=history,
                                layout="persona_first")
        return conversation(prompt, TURN, persona=about, history=history)

    def _history(self, keep: int) -> list[ChatMessage]:
        """The last ``keep`` memories as turns: my answers, the moderator's results."""
        history: list[ChatMessage] = []
        if keep and self._memory is not None:
            for m in list(self._memory)[-keep:]:
                role = "assistant" if m.sender == self.id else "user"
                history.append({"role": role, "content": str(m.content)})
        return history

    def interview_messages(self, question: str) -> list[ChatMessage]:
        """What an interviewer's ``question`` shows my model: the interviewer's
        instruction, my persona as the game states it, the rounds I remember."""
        about = persona(self.profile, self.rules.attributes) if self.rules.attributes \
            else None
        return conversation(INTERVIEWER, question, persona=about,
                            history=self._history(len(self._memory or ())))

    async def reply(self, msg: Msg) -> Msg:
        rules = self.rules
        meta = msg.metadata or {}
        seed = seed_for(meta.get("seed", rules.seed), self.id)
        structured = self.protocol == "structured"
        started = time.perf_counter()
        # A model that ignores prompts (the dummy) is not handed one to ignore, and nothing
        # is remembered for conversations that will never be built.
        reads = getattr(self.model, "reads_prompt", True)
        messages = self.conversation(msg.content) if reads else ()
        max_tokens, response_format = rules.max_tokens, None
        if structured:
            response_format = RESPONSE_SCHEMA
        elif self.protocol == "constrained":
            max_tokens = min(max_tokens or CONSTRAINED_MAX_TOKENS, CONSTRAINED_MAX_TOKENS)
            response_format = number_constraint(rules.low, rules.high)
        answer = await self.model.complete(
            messages, temperature=rules.temperature, seed=seed, max_tokens=max_tokens,
            response_format=response_format,
        )
        ptok, ctok, retries, calls = (answer.prompt_tokens, answer.completion_tokens,
                                      answer.retries, 1)
        extract_raw = None
        stated = extracted_number(answer.text) \
            if self.protocol == "two_call" and rules.extract == "when_stated" else None
        if stated is not None:  # stated plainly: no second call needed to read it
            number = parse_number(stated, rules.low, rules.high)
        elif self.protocol == "two_call":
            # The paper's second call: have the model state the number it chose.
            extraction = await self.model.complete(
                [{"role": "user", "content": EXTRACT.format(answer=answer.text)}],
                temperature=0.0, seed=seed, max_tokens=24,
            )
            extract_raw = extraction.text
            ptok += extraction.prompt_tokens
            ctok += extraction.completion_tokens
            retries += extraction.retries
            calls = 2
            found = extracted_number(extraction.text)
            number = parse_number(found, rules.low, rules.high) if found is not None else None
        elif structured:
            number = _structured_number(answer.text, rules.low, rules.high)
        else:
            number = parse_number(answer.text, rules.low, rules.high)
        if rules.memory_rounds and reads:
            self.memory.add(Msg(self.id, answer.text, role="assistant"))
        guess = Guess(number, answer.text, extract_raw, time.perf_counter() - started,
                      ptok, ctok, calls, retries)
        return Msg(self.id, guess, "assistant")


    def listens(self) -> bool:
        """Whether I remember how rounds ended: I have a memory, an environment to read
        and a model that reads prompts (the game tells only those who listen)."""
        return self.env is not None and bool(self.rules.memory_rounds) \
            and getattr(self.model, "reads_prompt", True)

    def hear(self, round_no: int) -> Coroutine[Any, Any, None] | None:
        """Learn how round ``round_no`` ended, from the game's environment.

        Nothing is read when nothing would be remembered (see :meth:`listens`): a million
        agents then cost no environment traffic.
        """
        if not self.listens():
            return None
        return self._hear(round_no)

    async def _hear(self, round_no: int) -> None:
        assert self.env is not None
        if self.place is None:
            text = await self.env.query("announcement")
        else:
            text, report = await self.env.apply([Op.query("announcement", env=self.place),
                                                 Op.query("report", env=self.place)])
            if report is not None:
                text += f" Your group's number was {report:.2f}."
        self.memory.add(Msg("moderator", text, role="system", metadata={"round": round_no}))


def _structured_number(text: str, low: float, high: float) -> float | None:
    """The ``number`` field of a JSON answer, if valid and within range."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    value = data.get("number") if isinstance(data, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    return parse_number(str(value), low, high)
