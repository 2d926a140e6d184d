"""The participant: reads the moderator's round message, asks its model, reports a number."""

from __future__ import annotations

import functools
import json
import string
import time
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from populace.agents import Persona, PersonaOptions
from populace.core import Msg, Profile, seed_for
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


#: The game's memory is bounded by rounds (``memory_rounds``), not by tokens: nothing is
#: cut or summarised, so a conversation is the rounds as they were said.
GAME_MEMORY = PersonaOptions(memory_tokens=1_000_000, event_tokens=100_000, summarise=False)
#: Events an agent keeps at least (interviews read them all; the prompt its last rounds).
KEPT = 32


class Participant(Persona):
    """A player of the guessing game, backed by one model client (shared per worker).

    The model is the profile's ``model`` column when there is one (mixed models), else the
    only one in ``models``. Its memory holds its answers (``decision``), the results it
    read (``observation``) and what it was told (``intervention``, ``message``), one event
    per turn of the conversation its next rounds show.
    """

    __slots__ = ("env", "game", "place", "protocol")

    def __init__(self, id: int, profile: Profile | None = None, *,
                 models: Mapping[str, ModelClient], rules: Rules,
                 env: EnvVerbs | None = None) -> None:
        if profile is None:
            name = next(iter(models))
            self.place = None
        else:
            name = profile["model"] if "model" in profile else next(iter(models))
            # Where I read the game's news: my group's environment in group play (so I see
            # my group's report and, falling through, the global announcement), else the
            # global one.
            self.place = group_path(profile["group"]) if "group" in profile else None
        super().__init__(id, profile, models=models, model=name, persona=GAME_MEMORY)
        self.game = rules  # not .rules: a persona's rules are the text it is told
        self.env = env
        self.protocol = rules.protocols.get(name, "direct") if rules.protocols else "direct"

    def persona_text(self) -> str:
        """The persona as the game states it (its background, else its attributes)."""
        return persona(self.profile, self.game.attributes) or ""

    def _remember(self, step: int, kind: str, text: str) -> None:
        """Remember a turn as it was said (not cut: the conversation shows it again)."""
        memory = self.memory
        memory.add(step, kind, text)
        kept = max(KEPT, 2 * self.game.memory_rounds)
        if len(memory) > kept:
            memory.fold(len(memory) - kept, None, step)

    def observe(self, msg: Msg) -> None:
        """A message or an intervention: a turn of the next rounds' conversations."""
        meta = msg.metadata or {}
        kind = "intervention" if msg.sender == "intervention" else "message"
        self._remember(int(meta.get("step", meta.get("round", 0))), kind, str(msg.content))

    def conversation(self, prompt: str, shared: bool = False) -> list[ChatMessage]:
        """The round prompt, the persona and earlier rounds from memory (own answers, the
        moderator's results), in the run's layout (see ``populace.llm.conversation``);
        ``shared``: an archetype's (its persona, no earlier rounds)."""
        rules = self.game
        keep = 0 if shared else 2 * rules.memory_rounds
        about = self.archetype_text() if shared else None
        if rules.attributes:
            if not shared:
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
        """The last ``keep`` events as turns: my answers, the results and what I was told."""
        if not keep or not self._memory:
            return []
        return [{"role": "assistant" if e.kind == "decision" else "user", "content": e.text}
                for e in self.memory.events()[-keep:]]

    def interview_messages(self, question: str) -> list[ChatMessage]:
        """What an interviewer's ``question`` shows my model: the interviewer's
        instruction, my persona as the game states it, the rounds I remember."""
        about = persona(self.profile, self.game.attributes) if self.game.attributes \
            else None
        return conversation(INTERVIEWER, question, persona=about,
                            history=self._history(len(self._memory or ())))

    def set_state(self, state: Any) -> None:
        """A checkpoint's memory; one written before the game's agents were personas (a
        mapping of ``(sender, content, role, metadata)`` messages) is read too."""
        if isinstance(state, Mapping):
            self._memory = None
            for sender, content, _role, meta in state.get("memory") or ():
                kind = ("decision" if sender == self.id else "observation"
                        if sender == "moderator" else "intervention"
                        if sender == "intervention" else "message")
                meta = meta or {}
                self._remember(int(meta.get("round", meta.get("step", 0))), kind,
                               str(content))
            return
        super().set_state(state)

    async def reply(self, msg: Msg) -> Msg:
        rules = self.game
        meta = msg.metadata or {}
        round_no = int(meta.get("round", 0))
        started = time.perf_counter()
        # A model that ignores prompts (the dummy) is not handed one to ignore, and nothing
        # is remembered for conversations that will never be built.
        model = self.seat.model  # a slot read, not the property: a million calls a round
        assert model is not None
        base = meta.get("seed", rules.seed)
        if self._sampling() is None:  # every agent asked: no sampling's bookkeeping
            play = await self._play(model, msg.content, False, seed_for(base, self.id))
        else:
            play, own = await self.sampled(
                "guess", self._prompt_key(msg.content), base, round_no,
                functools.partial(self._play, model, msg.content), _number,
                lambda p: (p[5], p[3], p[4]), lambda v: (v, "", None, 0, 0, 0, 0))
            if not own:  # an archetype's answer: its calls are not this agent's
                play = (*play[:3], 0, 0, 0, 0)
        number, text, extract_raw, ptok, ctok, calls, retries = play
        if rules.memory_rounds and model.reads_prompt:
            self._remember(round_no, "decision", text)
        guess = Guess(number, text, extract_raw, time.perf_counter() - started,
                      ptok, ctok, calls, retries)
        return Msg(self.id, guess, "assistant")

    def _prompt_key(self, content: str) -> Any:
        """What an archetype's prompt depends on besides its persona: the round prompt, and
        my values of the per-agent fields it leaves to fill (members differing in one, say
        a ``{profession}`` outside ``sampling.by``, must not share the first one's prompt)."""
        attributes = self.game.attributes
        if not attributes or "{" not in content:
            return content
        return content, tuple(self.profile[f] for f in _fields(content) if f in attributes)

    async def _play(self, model: ModelClient, content: str, shared: bool, seed: int
                    ) -> tuple[float | None, str, str | None, int, int, int, int]:
        """One round's calls (nothing kept): ``(number, reply, extraction's reply, prompt
        and completion tokens, calls, retries)``; ``shared``: the archetype's prompt (its
        persona, no earlier rounds)."""
        rules = self.game
        structured = self.protocol == "structured"
        messages = self.conversation(content, shared) if model.reads_prompt else ()
        max_tokens, response_format = rules.max_tokens, None
        if structured:
            response_format = RESPONSE_SCHEMA
        elif self.protocol == "constrained":
            max_tokens = min(max_tokens or CONSTRAINED_MAX_TOKENS, CONSTRAINED_MAX_TOKENS)
            response_format = number_constraint(rules.low, rules.high)
        answer = await model.complete(
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
            extraction = await model.complete(
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
        return number, answer.text, extract_raw, ptok, ctok, calls, retries


    def listens(self) -> bool:
        """Whether I remember how rounds ended: I have a memory, an environment to read
        and a model that reads prompts (the game tells only those who listen)."""
        return self.env is not None and bool(self.game.memory_rounds) \
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
        self._remember(round_no, "observation", text)


@functools.lru_cache(maxsize=16)
def _fields(prompt: str) -> tuple[str, ...]:
    """The template fields of a round prompt (what the moderator left to each agent)."""
    return tuple(sorted({f for _, f, _, _ in string.Formatter().parse(prompt) if f}))


def _number(play: tuple[Any, ...]) -> Any:
    """What the audit compares of a round: the number played (None: none read)."""
    return play[0]


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
