"""The persona agent: what a model is told about itself, what it remembers, and how its
answers are asked for and read — one model for every LLM-driven scenario.

A prompt is assembled shared-first, so servers' prefix caches reuse what agents share:

1. a system message with the scenario's ``rules`` and the step's ``context`` (alike for
   every agent of a step);
2. a system message with the persona (:meth:`PersonaOptions.render`);
3. the user's turn: what the agent remembers (a summary, then recent events, within the
   token budget), the question, and the answer kind's instruction.

The answer is constrained in the server's own spelling where it can take the constraint;
a reply that still cannot be read gets one extraction call (the paper's second call); what
that cannot read either is an unreadable decision (``valid=False``, ``value=None``),
counted per model in the step's ``llm`` traffic (``unreadable``), never a default.
"""

from __future__ import annotations

import asyncio
import dataclasses
import weakref
import zlib
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from populace.core import (
    Agent,
    ConfigError,
    Msg,
    Profile,
    derive_seed,
    seed_for,
    uniform_pick,
)
from populace.llm import ChatMessage, ModelClient

from ._answers import UNREADABLE, Answer, Choice, Number, Schema, Text
from ._memory import Event, Memory, clip, fitting
from ._persona import PersonaOptions
from ._sampling import audited, draw, frozen, samples_of

T = TypeVar("T")
#: Salt of a member's pick among its archetype's samples.
_PICK = 0xA7C4

#: The interviewer's instruction (an interview is not a step: nothing is written back).
INTERVIEWER = ("You are being interviewed by a researcher about the simulation you take "
               "part in. Answer the question in character, briefly and in your own words.")
#: What the agent's model is told when it summarises its memory.
SUMMARISER = ("You keep the memory of the person described below. Summarise what they "
              "remember in a few sentences, keeping what matters for their later decisions.")
_TEXT = Text()
_DEFAULT = PersonaOptions()


@dataclass(slots=True)
class Decision:
    """What :meth:`Persona.decide` returns: the answer read (None when unreadable), whether
    it could be read, the reply (an extraction's reply after ``\\n---\\n``), and the calls
    and tokens it took."""

    value: Any
    valid: bool
    text: str
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


def render_memory(events: list[Event]) -> str:
    """The memory section of a prompt (empty when there is nothing to remember)."""
    if not events:
        return ""
    lines = [f"- [step {e.step}, {e.kind}] {e.text}" for e in events]
    return "What you remember (oldest first):\n" + "\n".join(lines)


class Seat:
    """What the personas of one worker that share a model and options hold in common: the
    models, the model's name and client, and the options. One per worker and model, so an
    agent holds one reference, not three (a million agents, 16 MB less).

    >>> Seat.of({"m": object()}, None, PersonaOptions()).name
    'm'
    """

    __slots__ = ("__weakref__", "model", "models", "name", "persona")

    _made: ClassVar[weakref.WeakValueDictionary[tuple[int, str | None, int], Seat]] = \
        weakref.WeakValueDictionary()

    def __init__(self, models: Mapping[str, ModelClient], name: str | None,
                 persona: PersonaOptions) -> None:
        self.models, self.name, self.persona = models, name, persona
        self.model = models[name] if name is not None else None

    @classmethod
    def of(cls, models: Mapping[str, ModelClient], model: str | None,
           persona: PersonaOptions) -> Seat:
        """The worker's seat for ``model`` (default: the first of ``models``; none when
        ``models`` is empty: an agent whose decisions are made elsewhere)."""
        if model is not None and model not in models:
            raise ValueError(f"model {model!r} is not among the models ({', '.join(models)})")
        name = model if model is not None else next(iter(models), None)
        # the seat holds models and persona: their ids stay theirs while it lives
        key = (id(models), name, id(persona))
        seat = cls._made.get(key)
        if seat is None:
            seat = cls._made[key] = cls(models, name, persona)
        return seat


class Persona(Agent):
    """An LLM persona. Subclass it, set :attr:`rules`, and call :meth:`decide` from your
    agent's methods; :meth:`observe` is where messages and interventions arrive.

    ``init`` keyword arguments: ``models`` (what ``run.models()`` gives), ``persona`` (a
    :class:`PersonaOptions`, usually ``run.settings.persona``) and ``model`` (the name
    among ``models``; default: the first).

    >>> class Voter(Persona):
    ...     rules = "An election is held every step."
    ...     async def vote(self, t: int, seed: int) -> str | None:
    ...         d = await self.decide("Whom do you vote for?", Choice(["red", "green"]),
    ...                               step=t, seed=seed)
    ...         return d.value
    """

    __slots__ = ("seat",)

    #: Text every agent of the scenario is told first (rules, setting): shared by all calls.
    rules: ClassVar[str] = ""

    def __init__(self, id: int, profile: Profile | None = None, *,
                 models: Mapping[str, ModelClient], persona: PersonaOptions | None = None,
                 model: str | None = None) -> None:
        super().__init__(id, profile)
        self.seat = Seat.of(models, model, persona if persona is not None else _DEFAULT)

    @classmethod
    async def populate(cls, run: Any, n: int | None = None, *,
                       persona: PersonaOptions | None = None, model: str | None = None,
                       init: Mapping[str, Any] | None = None, **options: Any) -> Any:
        """Create ``n`` (default: the run's ``agents``) personas of this class in ``run``
        (a :class:`~populace.launch.Run`) with the run's models and ``persona`` (default:
        ``run.settings.persona``), refusing in one line a ``shown`` column the profiles
        lack; ``init`` and ``options`` (``name``, ``profiles``, ``colocate``) go to
        :meth:`Run.create`. Returns the :class:`~populace.core.AgentGroup`.

        >>> people = await Voter.populate(run)  # doctest: +SKIP
        """
        if persona is None:
            persona = getattr(run.settings, "persona", None) or _DEFAULT
        profiles = options.get("profiles")
        table = profiles if profiles is not None else run.population
        columns = getattr(table, "column_names", None) or list(table or ())
        persona.check(columns, f"{run.run_file.path}: settings.persona")
        if model is not None and model not in run.options.models:
            raise ConfigError(f"{run.run_file.path}: model {model!r} is not under models: "
                              f"(have: {', '.join(run.options.models)})")
        given = {"models": run.models(), "persona": persona, **(init or {})}
        if model is not None:
            given["model"] = model
        return await run.create(cls, n, init=given, **options)

    # -- what the model is told ------------------------------------------------------------
    @property
    def model(self) -> ModelClient:
        """The agent's model client."""
        model = self.seat.model
        if model is None:
            raise LookupError(f"{type(self).__name__} {self.id} was given no model")
        return model

    @property
    def models(self) -> Mapping[str, ModelClient]:
        """Every model of the agent's worker (what ``init`` gave)."""
        return self.seat.models

    @property
    def model_name(self) -> str | None:
        """The name of the agent's model among :attr:`models` (None: it has none)."""
        return self.seat.name

    @property
    def persona(self) -> PersonaOptions:
        """How the agent is shown to its model and what it remembers."""
        return self.seat.persona

    def note_unreadable(self) -> None:
        """Count a decision whose reply could not be read (in the model's statistics)."""
        count = getattr(self.seat.models, "count_unreadable", None)
        if count is not None and self.seat.name is not None:
            count(self.seat.name)

    @property
    def memory(self) -> Memory:  # type: ignore[override]  # events, not messages
        """The agent's memory (created on first use)."""
        if self._memory is None:
            self._memory = Memory()  # type: ignore[assignment]  # events, not messages
        return self._memory  # type: ignore[return-value]

    def persona_text(self) -> str:
        """The persona exactly as the model is shown it."""
        return self.persona.render(self.profile)

    def remember(self, step: int, kind: str, text: str) -> None:
        """Add an event (``kind`` one of :data:`~populace.agents.KINDS`), cut to the
        persona's ``event_tokens``."""
        self.memory.add(step, kind, clip(text, self.persona.event_tokens))

    def observe(self, msg: Msg) -> None:
        """Remember a message: an intervention (sender ``"intervention"``) as one, any
        other as a ``message`` from its sender; ``metadata["step"]`` is its step."""
        meta = msg.metadata or {}
        step = int(meta.get("step", 0))
        if msg.sender == "intervention":
            self.remember(step, "intervention", str(msg.content))
        else:
            kind = meta.get("kind", "message")
            self.remember(step, kind, f"{msg.sender}: {msg.content}" if kind == "message"
                          else str(msg.content))

    async def recall(self, step: int, seed: int) -> str:
        """The memory section of this step's prompt. When the memory outgrows its budget,
        the oldest events are folded into a summary written by the agent's model (one
        recorded call), so that the newest half of the budget stays verbatim."""
        memory: Memory | None = self._memory  # type: ignore[assignment]
        if not memory:
            return ""
        budget = self.persona.memory_tokens
        events = memory.events()
        if fitting(events, budget):  # outgrown: fold what the newest half-budget leaves
            n = fitting(events, budget // 2)
            summary = None
            if self.persona.summarise and self.model.reads_prompt:
                summary = await self._persona_summarise(events[:n], seed)
            memory.fold(n, summary, step)
            events = memory.events()
        return render_memory(events[fitting(events, budget):])

    async def _persona_summarise(self, events: list[Event], seed: int) -> str:
        words = max(self.persona.event_tokens * 3 // 4, 1)
        messages: list[ChatMessage] = [{"role": "system", "content": SUMMARISER}]
        persona = self.persona_text()
        if persona:
            messages.append({"role": "system", "content": persona})
        messages.append({"role": "user", "content": (
            f"{render_memory(events)}\n\nSummarise what you remember in at most {words} "
            "words.")})
        answer = await self.model.complete(messages, seed=derive_seed(seed, 0x5111),
                                           max_tokens=self.persona.event_tokens * 2)
        return clip(answer.text, self.persona.event_tokens)

    def messages(self, question: str, answer: Answer, memory: str,
                 context: str | None = None, *, persona: str | None = None
                 ) -> list[ChatMessage]:
        """The messages of a decision (see the module docstring); ``persona``: shown
        instead of :meth:`persona_text` (an archetype's)."""
        shared = "\n\n".join(p for p in (self.rules.strip(), (context or "").strip()) if p)
        out: list[ChatMessage] = []
        if shared:
            out.append({"role": "system", "content": shared})
        if persona is None:
            persona = self.persona_text()
        if persona:
            out.append({"role": "system", "content": persona})
        ask = f"Question: {question.strip()}\n{answer.instruction()}"
        out.append({"role": "user", "content": f"{memory}\n\n{ask}" if memory else ask})
        return out

    # -- sampling -----------------------------------------------------------------------------
    def archetype(self, columns: list[str]) -> tuple[Any, ...]:
        """The agent's values of ``columns`` (its archetype under ``sampling.by``)."""
        profile = self.profile
        try:
            return tuple(profile[c] for c in columns)
        except KeyError as e:
            listed = ", ".join(c for c in profile if c != "agent_id") or "none"
            raise ConfigError(f"sampling.by: no profile column {e.args[0]!r} (have: "
                              f"{listed})") from None

    def archetype_text(self) -> str:
        """The persona an archetype's prompt shows: only the ``sampling.by`` columns."""
        sampling = self._sampling()
        columns = sampling.by if sampling is not None else []
        values = self.archetype(columns)
        return "About you: " + "; ".join(f"{c}: {v}" for c, v in zip(columns, values,
                                                                      strict=True)) + "."

    def _sampling(self) -> Any:
        get = getattr(self.seat.models, "sampling", None)
        return get(self.seat.name) if get is not None and self.seat.name is not None else None

    async def sampled(self, decision: str, key: Hashable, base: int, step: int,
                      ask: Callable[[bool, int], Awaitable[T]],
                      value: Callable[[T], Any],
                      cost: Callable[[T], tuple[int, int, int]] | None = None,
                      from_value: Callable[[Any], T] | None = None) -> tuple[T, bool]:
        """One decision, asked as the model's ``sampling:`` says: ``(outcome, own)``.

        ``ask(shared, seed)`` makes the decision's calls and returns what they gave, with no
        side effect on the agent: ``shared=False`` with the agent's own prompt,
        ``shared=True`` with its archetype's (:meth:`archetype_text`, no individual
        memory; everything else that prompt depends on must be in ``key``). ``base`` is the
        decision's seed (the agent's is ``seed_for(base, id)``); ``value(outcome)`` is what
        the audit compares (a label or a number; None when unreadable; a mapping of parts
        to such values is audited per part, as ``decision=part``); ``cost(outcome)``: its
        ``(calls, prompt tokens, completion tokens)``, from which the step's summary
        estimates what asking every agent would have cost; ``from_value(answer)``: an
        outcome made of an answer alone (what ``value`` gives), for the surrogate mode
        (without it, a surrogate-mode decision is sampled by archetypes).

        ``own`` is False when the outcome is one of the archetype's samples, shared with
        other members (treat it as read-only, and its calls as not this agent's).
        """
        seed = seed_for(base, int(self.id))
        sampling = self._sampling()
        models: Any = self.seat.models
        mode = sampling.mode_of(decision) if sampling is not None else "individual"
        if mode == "individual" or decision in models.fallen.get(self.seat.name, ()):
            return await ask(False, seed), True
        name = self.seat.name
        cell = self.archetype(sampling.by)
        fitted = models.surrogates.get(name, {}).get(decision) \
            if mode == "surrogate" and from_value is not None else None
        if fitted is not None:  # the surrogate's answer for this archetype, by my seed
            got = from_value(draw(fitted, cell, seed))  # type: ignore[misc]
        else:
            got = await self._archetype_answer(
                models, name, decision, key, cell, base, step, seed, ask,
                samples_of(sampling, models, name, cell))
        models.count_shared(name)
        if not audited(base, int(self.id), sampling.audit):
            return got, False
        own = await ask(False, seed)  # the audit: asked individually too, and kept
        if cost is not None:
            models.count_audit_cost(name, *cost(own))
        mine, theirs = value(own), value(got)
        if mode == "surrogate":
            models.count_cell(name, decision, cell, frozen(mine))
        if isinstance(mine, Mapping):  # one pair per part (a multi-choice: per option)
            for part, v in mine.items():
                models.count_audit(name, f"{decision}={part}", v, theirs.get(part))
        else:
            models.count_audit(name, decision, mine, theirs)
        return own, True

    async def _archetype_answer(self, models: Any, name: str | None, decision: str,
                                key: Hashable, cell: tuple[Any, ...], base: int, step: int,
                                seed: int, ask: Callable[[bool, int], Awaitable[T]],
                                samples: int) -> T:
        """One of the archetype's ``samples`` answers (asked once per worker and step),
        picked by ``seed``."""
        if models.pooled_step != step:  # an archetype's answers hold for one step
            models.pooled.clear()
            models.pooled_step = step
        whole = (name, decision, key, cell)
        pending = models.pooled.get(whole)
        if pending is None:
            # seeds from the prompt's key: the same samples on any worker
            first = derive_seed(base, zlib.crc32(repr(whole[1:]).encode()))
            pending = models.pooled[whole] = asyncio.ensure_future(asyncio.gather(
                *(ask(True, seed_for(first, j)) for j in range(samples)),
                return_exceptions=True))
        got = (await asyncio.shield(pending))[uniform_pick(0, seed ^ _PICK, samples)]
        if isinstance(got, BaseException):
            raise got
        return got

    # -- deciding ---------------------------------------------------------------------------
    async def decide(self, question: str, answer: Answer = _TEXT, *, step: int = 0,
                     context: str | None = None, seed: int | None = None,
                     temperature: float | None = None, max_tokens: int | None = None,
                     remember: bool = True, name: str | None = None) -> Decision:
        """Ask the agent's model ``question`` and read the reply as ``answer``.

        ``context``: this step's shared text (the round's state); ``seed``: a base seed
        (each call's seed is derived from it, the step and the agent's id; default: the
        question's hash); ``remember``: the decision becomes a
        ``decision`` event of the memory; ``name``: the decision's name in the model's
        ``sampling:`` and its audit (default: the question).
        """
        base = derive_seed(seed if seed is not None else zlib.crc32(question.encode()), step)
        model = self.model

        async def ask(shared: bool, call_seed: int) -> Decision:
            if not model.reads_prompt:
                return await self._persona_draw(model, answer, call_seed)
            memory = "" if shared else await self.recall(step, call_seed)
            messages = self.messages(question, answer, memory, context,
                                     persona=self.archetype_text() if shared else None)
            return await self._persona_ask(model, messages, question, answer, call_seed,
                                           temperature, max_tokens)

        if self._sampling() is None:  # every agent asked: no sampling's bookkeeping
            decision = await ask(False, seed_for(base, int(self.id)))
        else:
            key = (self.rules, context, question, answer.instruction(), temperature,
                   max_tokens)
            decision, own = await self.sampled(name or question, key, base, step, ask,
                                               lambda d: answer.show(d.value) if d.valid
                                               and not isinstance(d.value, int | float)
                                               else d.value,
                                               lambda d: (d.calls, d.prompt_tokens,
                                                          d.completion_tokens),
                                               None if isinstance(answer, Schema) else
                                               lambda v: Decision(v, v is not None, ""))
            if not own:  # an archetype's sample: its calls are not this agent's
                decision = dataclasses.replace(decision, calls=0, prompt_tokens=0,
                                               completion_tokens=0)
        if not decision.valid:
            self.note_unreadable()
        elif remember:
            self.remember(step, "decision", f"{question.strip()} I answered: "
                          f"{answer.show(decision.value)}")
        return decision

    async def _persona_ask(self, model: ModelClient, messages: list[ChatMessage],
                           question: str, answer: Answer, seed: int,
                           temperature: float | None, max_tokens: int | None) -> Decision:
        fmt = answer.response_format()
        reply = await model.complete(messages, temperature=temperature, seed=seed,
                                     max_tokens=max_tokens, response_format=fmt)
        d = Decision(UNREADABLE, False, reply.text, 1 + reply.retries, reply.prompt_tokens,
                     reply.completion_tokens)
        d.value = answer.read(reply.text)
        if d.value is UNREADABLE and not isinstance(answer, Text):
            # the paper's second call: a short prompt that only reads the reply
            ask = (f"Here is someone's reply to the question \"{question.strip()}\":\n---\n"
                   f"{reply.text.strip()}\n---\nExtract the answer the reply gives. "
                   f"{answer.instruction()}")
            second = await model.complete([{"role": "user", "content": ask}],
                                          temperature=0.0, seed=derive_seed(seed, 0xE7),
                                          max_tokens=max_tokens, response_format=fmt)
            d.value = answer.read(second.text)
            d.text = f"{reply.text}\n---\n{second.text}"
            d.calls += 1 + second.retries
            d.prompt_tokens += second.prompt_tokens
            d.completion_tokens += second.completion_tokens
        d.valid = d.value is not UNREADABLE
        if not d.valid:
            d.value = None
        return d

    async def _persona_draw(self, model: ModelClient, answer: Answer, seed: int) -> Decision:
        """A model that reads no prompt (the dummy): its number picks the answer, uniformly
        over the choices or the range (see :func:`~populace.core.uniform_pick`)."""
        reply = await model.complete((), seed=seed)
        d = Decision(None, False, reply.text, 1 + reply.retries)
        try:
            n = int(reply.text)
        except ValueError:
            return d
        if isinstance(answer, Choice):
            d.value = answer.options[uniform_pick(n, seed, len(answer.options))]
        elif isinstance(answer, Number):
            span = answer.high - answer.low
            d.value = (answer.low + uniform_pick(n, seed, int(span) + 1) if answer.integer
                       else answer.low + span * uniform_pick(n, seed, 1001) / 1000)
        else:
            d.value = reply.text
        d.valid = True
        return d

    # -- interviews -------------------------------------------------------------------------
    def interview_context(self) -> str | None:
        """What the scenario adds to an interview's prompt (the survey: the respondent's
        answers so far); None by default."""
        return None

    def interview_messages(self, question: str) -> list[ChatMessage]:
        """An interview's messages: the interviewer's instruction, the persona, what the
        agent remembers (the window that fits, nothing folded) and the scenario's context,
        then the question. Nothing is written back."""
        memory: Memory | None = self._memory  # type: ignore[assignment]
        recent = memory.window(self.persona.memory_tokens)[1] if memory else []
        parts = [render_memory(recent), (self.interview_context() or "").strip(),
                 f"Question: {question.strip()}"]
        out: list[ChatMessage] = [{"role": "system", "content": INTERVIEWER}]
        persona = self.persona_text()
        if persona:
            out.append({"role": "system", "content": persona})
        out.append({"role": "user", "content": "\n\n".join(p for p in parts if p)})
        return out

    def mind(self) -> dict[str, Any]:
        """What the studio shows of the agent: the persona as the model sees it and the
        memory as a list."""
        memory: Memory | None = self._memory  # type: ignore[assignment]
        return {"persona": self.persona_text(),
                "memory": [e._asdict() for e in (memory.events() if memory else [])]}

    # -- checkpoints ------------------------------------------------------------------------
    def get_state(self) -> Any:
        """The memory as two plain values (None when empty); subclasses with state of their
        own extend it (``(super().get_state(), mine)``)."""
        memory: Memory | None = self._memory  # type: ignore[assignment]
        return memory.get_state() if memory else None

    def set_state(self, state: Any) -> None:
        if state:
            self.memory.set_state(state)
        else:
            self._memory = None
