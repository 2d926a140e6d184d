"""The respondent: answers one wave of questions with its own model, persona and memory.

A million respondents answer ten questions each per wave, so what a respondent returns is
packed (one ``bytes`` of fixed-size rows and one joined string, see :class:`Answers`): pickling ten
million small Python objects would cost more memory than the whole population.
"""

from __future__ import annotations

import ast
import functools
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from populace.agents import Persona
from populace.core import ModelError, Profile, mix64, seed_for, uniform_pick
from populace.llm import ChatMessage, ModelClient

from ._prompts import (
    coding_message,
    parse_choice,
    parse_multi,
    parse_numeric,
    question_message,
    reask_message,
    response_format,
)
from ._questionnaire import CHOICE, Question, Questionnaire, compile_condition, holds

#: How a server that does not take ``response_format`` says so (a client error).
_REFUSED = re.compile(r"HTTP (400|422)\b")
#: Separates the texts of one respondent's answers in :attr:`Answers.raw`.
SEP = "\x1f"


@dataclass(frozen=True)
class Plan:
    """What every respondent of a worker shares: the questionnaire and how to ask it."""

    questionnaire: Questionnaire
    model: str
    #: ``bases[w][i]``: the seed base of question ``i`` of wave ``w`` (per respondent:
    #: :func:`~populace.core.seed_for` with its id).
    bases: tuple[tuple[int, ...], ...]
    #: True: answers are asked for as constrained JSON; "auto": so too, until the server
    #: refuses a ``response_format`` (HTTP 400/422), then in plain text for the whole worker.
    structured: bool | str = "auto"
    memory: bool = True
    temperature: float | None = None
    max_tokens: int | None = None
    persona: str | None = None  # a template of profile fields; None: background or attributes
    attributes: tuple[str, ...] = ()
    #: arm → question id → the message its respondents read before that question.
    notes: Mapping[str, Mapping[str, str]] | None = None
    #: What this worker learnt during the run (``"plain"``: the server refused JSON).
    learnt: dict[str, bool] = field(default_factory=dict, compare=False)

    def use_json(self) -> bool:
        return bool(self.structured) and not self.learnt.get("plain")

    @functools.cached_property
    def questions(self) -> dict[str, tuple[int, Question]]:
        """id → (position in the questionnaire, question)."""
        return {q.id: (i, q) for i, q in enumerate(self.questionnaire.questions)}

    @functools.cached_property
    def remembered(self) -> frozenset[str]:
        return self.questionnaire.referenced()

    @functools.cached_property
    def remembered_order(self) -> tuple[str, ...]:
        return tuple(sorted(self.remembered))


@functools.lru_cache(maxsize=256)
def _condition(source: str) -> tuple[ast.expr, tuple[str, ...]]:
    return compile_condition(source)


def _order(k: int, seed: int) -> list[int]:
    """A seeded permutation of ``range(k)`` (Fisher–Yates on SplitMix64 draws)."""
    order = list(range(k))
    r = seed
    for j in range(k - 1, 0, -1):
        r = mix64(r)
        i = r % (j + 1)
        order[i], order[j] = order[j], order[i]
    return order


#: One answer row as packed by a respondent: question index, code, shown position, options
#: shown, valid, prompt and completion tokens, calls (see :data:`ROW_DTYPE`).
ROW = struct.Struct("<hdhhbiib")


class Answers:
    """One respondent's answers to one wave: ``rows`` (each :data:`ROW`: the question's
    index in the questionnaire; the canonical option index 1-based, a number or a
    multi-choice bitmask, NaN when invalid; where the chosen option was shown, 1-based, 0
    for none; options shown; valid; tokens; calls), ``raw`` (the replies) and ``errors``
    (None when no call failed)."""

    __slots__ = ("errors", "n", "raw", "rows")

    def __init__(self) -> None:
        self.rows = bytearray()
        self.n = 0
        self.raw: list[str] = []
        self.errors: list[str] | None = None

    def packed(self) -> tuple[bytes, str, str | None]:
        """``(rows, raw texts joined by SEP, errors joined by SEP or None)``."""
        errors = None if self.errors is None else SEP.join(self.errors)
        return bytes(self.rows), SEP.join(r.replace(SEP, " ") for r in self.raw), errors


class _Call:
    """Accounting of the calls made for one question."""

    __slots__ = ("calls", "ctok", "ptok")

    def __init__(self) -> None:
        self.calls = self.ptok = self.ctok = 0


class Respondent(Persona):
    """A survey respondent: a persona (its profile, and a memory of the messages and
    interventions it received) answering the questionnaire with its model (shared per
    worker). Its answers so far are a conversation (``history``), kept apart from the
    memory so that the questionnaire's prompts stay what they were."""

    __slots__ = ("arm", "history", "known", "plan", "reads", "system")

    def __init__(self, id: int, profile: Profile | None = None, *,
                 models: Mapping[str, ModelClient], plan: Plan) -> None:
        super().__init__(id, profile, models=models, model=plan.model)
        self.plan = plan
        self.reads = getattr(self.model, "reads_prompt", True)
        self.arm: str | None = profile.get("arm") if profile is not None else None
        self.known: dict[str, Any] = {}  # answers that an ask_if reads
        self.history: list[tuple[str, str]] = []  # (question asked, reply) when memory is on
        self.system: str | None = None

    def persona_text(self) -> str:
        """The persona as the respondent's model is told it (its template, else its
        background, else its attributes; never the arm, group or id)."""
        plan, profile = self.plan, self.profile
        if plan.persona is not None:
            return plan.persona.format_map({a: profile[a] for a in plan.attributes})
        if "background" in profile:
            return str(profile["background"])
        if plan.attributes:
            return "About you: " + "; ".join(f"{a}: {profile[a]}"
                                             for a in plan.attributes) + "."
        return ""

    def _system(self) -> str:
        if self.system is None:
            about = self.persona_text()
            self.system = self.plan.questionnaire.instructions.strip() + (
                f"\n\n{about}" if about else "")
        return self.system

    def interview_context(self) -> str | None:
        """An interview hears the respondent's answers so far."""
        answers = "\n".join(f"- {asked.splitlines()[0]} You answered: {reply}"
                            for asked, reply in self.history)
        return f"Your answers so far:\n{answers}" if answers else None

    async def _ask(self, messages: list[ChatMessage], seed: int, fmt: dict[str, Any] | None,
                   call: _Call) -> str:
        plan = self.plan
        try:
            answer = await self.model.complete(messages, temperature=plan.temperature,
                                               seed=seed, max_tokens=plan.max_tokens,
                                               response_format=fmt)
        except ModelError as e:
            if fmt is None or plan.structured != "auto" or not _REFUSED.search(str(e)):
                raise
            plan.learnt["plain"] = True  # this server takes no response_format: ask in text
            call.calls += 1
            answer = await self.model.complete(messages, temperature=plan.temperature,
                                               seed=seed, max_tokens=plan.max_tokens)
        call.calls += 1 + answer.retries
        call.ptok += answer.prompt_tokens
        call.ctok += answer.completion_tokens
        return answer.text

    async def answer(self, wave: int) -> tuple[bytes, str, str | None]:
        """Answer every question of wave ``wave`` (0-based) that its ``ask_if`` allows; a
        question whose call failed is a row with its error (the step counts them)."""
        plan = self.plan
        wave_ids = plan.questionnaire.plan[wave]
        out = Answers()
        notes = (plan.notes or {}).get(self.arm or "", {})
        sampling = self._sampling()
        for i, qid in enumerate(wave_ids):
            index, q = plan.questions[qid]
            if q.ask_if is not None:
                condition, _ = _condition(q.ask_if)
                if not holds(condition, self.known):
                    continue
            note = notes.get(qid)
            error, own = None, True
            try:
                if sampling is None:  # every respondent asked: _ask_one, inline (a
                    # million respondents × ten questions: no coroutine more per answer)
                    seed = seed_for(plan.bases[wave][i], self.id)
                    shown, call, turn = _shown(q, seed), _Call(), None
                    if self.reads:
                        value, raw, turn = await self._read(q, i + 1, len(wave_ids), shown,
                                                            seed, note, call, wave + 1)
                    else:
                        value, raw = await self._draw(q, shown, seed, call)
                else:
                    (value, raw, shown, call, turn), own = await self.sampled(
                        qid, (wave, i, note), plan.bases[wave][i], wave + 1,
                        functools.partial(self._ask_one, q, i + 1, len(wave_ids), note,
                                          wave + 1),
                        functools.partial(_audited, q), _cost,
                        functools.partial(_from_value, q,
                                          seed_for(plan.bases[wave][i], self.id)))
            except ModelError as e:
                shown = _shown(q, seed_for(plan.bases[wave][i], self.id))
                value, raw, call, turn = None, "", _Call(), None
                error = f"{type(e).__name__}: {e}"
            if not own:  # one of the archetype's answers: its calls are not this agent's
                call = _Call()
            if turn is not None and plan.memory:
                self.history.append(turn)
            if error is None and value is None and q.type != "open":
                self.note_unreadable()  # also a row with valid false
            self._keep(out, index, q, shown, value, raw, call, error)
        return out.packed()

    async def _ask_one(self, q: Question, number: int, of: int, note: str | None, step: int,
                       shared: bool, seed: int) -> tuple[Any, str, list[int], _Call,
                                                         tuple[str, str] | None]:
        """One question asked (its calls made, nothing kept): ``(value, raw, shown order,
        calls, the conversation's turn)``; ``shared``: with the archetype's prompt."""
        shown = _shown(q, seed)
        call = _Call()
        if not self.reads:
            value, raw = await self._draw(q, shown, seed, call)
            return value, raw, shown, call, None
        value, raw, turn = await self._read(q, number, of, shown, seed, note, call, step,
                                            shared)
        return value, raw, shown, call, turn

    def _keep(self, out: Answers, index: int, q: Question, shown: list[int], value: Any,
              raw: str, call: _Call, error: str | None) -> None:
        """Add one row; remember what an ask_if will read."""
        valid = value is not None
        if not valid or (q.type == "open" and not q.coded):
            code = float("nan")
        elif q.type in CHOICE or q.coded:
            code = float(value + 1)
        else:
            code = float(value)
        out.rows += ROW.pack(index, code,
                             shown.index(value) + 1 if valid and q.type in CHOICE else 0,
                             len(shown), valid, call.ptok, call.ctok, min(call.calls, 127))
        out.n += 1
        out.raw.append(raw)
        if error is not None and out.errors is None:
            out.errors = [""] * (out.n - 1)
        if out.errors is not None:
            out.errors.append("" if error is None else error.replace(SEP, " "))
        if q.id in self.plan.remembered:
            self.known[q.id] = None if not valid else _answer_value(q, value, raw)

    async def _draw(self, q: Question, shown: list[int], seed: int, call: _Call
                    ) -> tuple[Any, str]:
        """A model that reads no prompt (the dummy): its number picks the answer uniformly.

        The number alone cannot: the dummy's 101 values (0..100 by default) split unevenly
        over 5 or 11 options and reach only 101 numbers of a range. So it is added to a
        seeded offset uniform over the answers (mod their count), which is uniform whatever
        the number's own distribution.
        """
        text = await self._ask([], seed, None, call)
        try:
            n = int(text)
        except ValueError:
            return None, text
        k = len(shown)
        if q.type in CHOICE:
            return shown[uniform_pick(n, seed, k)], text
        if q.type == "multi_choice":
            # a non-empty set of shown positions
            picked, mask = uniform_pick(n, seed, (1 << k) - 1) + 1, 0
            for pos in range(k):
                if picked >> pos & 1:
                    mask |= 1 << shown[pos]
            return mask, text
        if q.type == "numeric":
            assert q.range is not None
            low, high = q.range
            if high - low >= 20 and low == int(low) and high == int(high):
                return low + uniform_pick(n, seed, int(high - low + 1)), text
            return low + (high - low) * uniform_pick(n, seed, 101) / 100, text
        if q.coded:
            return uniform_pick(n, seed, len(q.options)), text
        return True, text  # an open answer: the text is the answer

    async def _read(self, q: Question, number: int, of: int, shown: list[int], seed: int,
                    note: str | None, call: _Call, step: int, shared: bool = False
                    ) -> tuple[Any, str, tuple[str, str]]:
        """Ask a model that reads prompts (at ``step``, the wave's); re-ask once when the
        reply is not an answer. ``shared``: the archetype's prompt (its persona, no memory,
        no conversation). Returns the value, the raw replies and the conversation's turn."""
        plan = self.plan
        asked = question_message(q, number, of, shown, note)
        if shared:
            messages: list[ChatMessage] = [{"role": "system", "content": (
                f"{plan.questionnaire.instructions.strip()}\n\n{self.archetype_text()}")}]
        else:
            messages = [{"role": "system", "content": self._system()}]
            if self._memory:  # what it was told since (a message, an intervention)
                messages.append({"role": "system",
                                 "content": await self.recall(step, seed)})
            for question, reply in self.history:
                messages.append({"role": "user", "content": question})
                messages.append({"role": "assistant", "content": reply})
        messages.append({"role": "user", "content": asked})
        fmt = response_format(q) if plan.use_json() else None
        text = await self._ask(messages, seed, fmt, call)
        value = _parse(q, text, shown)
        raw = text
        if value is None and q.type != "open":
            messages += [{"role": "assistant", "content": text},
                         {"role": "user", "content": reask_message(q)}]
            text = await self._ask(messages, seed + 1, fmt, call)
            value = _parse(q, text, shown)
            raw = f"{raw}\n---\n{text}"
        if q.type == "open" and text.strip():
            value = True
            if q.coded:
                coding = [{"role": "user", "content": coding_message(q, text)}]
                coded = await self._ask(coding, seed + 2, response_format(q, coding=True)
                                        if plan.use_json() else None, call)
                value = parse_choice(coded, range(len(q.options)), q.options)
                raw = f"{raw}\n---\n{coded}"
        return value, raw, (asked, text)

    def get_state(self) -> Any:
        """The remembered answers (in :attr:`Plan.remembered_order`), the conversation and,
        when it received any message, the persona's memory; a tuple, not a dict: a million
        of them are checkpointed after every wave. None when there is nothing."""
        memory = super().get_state()
        if not self.known and not self.history and memory is None:
            return None
        state = (tuple(self.known.get(q) for q in self.plan.remembered_order),
                 tuple(self.history))
        return state if memory is None else (*state, memory)

    def set_state(self, state: Any) -> None:
        if state is None:
            self.known, self.history = {}, []
            super().set_state(None)
            return
        known, history = state[0], state[1]  # checkpoints before persona memories had two
        self.known = dict(zip(self.plan.remembered_order, known, strict=True))
        self.history = [(q, a) for q, a in history]
        super().set_state(state[2] if len(state) > 2 else None)


def _from_value(q: Question, seed: int, answer: Any) -> tuple[Any, ...]:
    """An answer outcome (as :meth:`Respondent._ask_one` returns) of a surrogate's answer
    (what :func:`_audited` gives): no call, no reply, no turn of the conversation."""
    value: Any = None
    if answer is None:
        pass
    elif q.type == "multi_choice":
        chosen = dict(answer)
        if None not in chosen.values():
            value = sum(1 << j for j, o in enumerate(q.options) if chosen.get(o) == "chosen")
    elif q.type in CHOICE or q.coded:
        value = q.options.index(answer) if answer in q.options else None
    elif q.type == "numeric":
        value = answer
    else:  # an open answer: its text
        return True, str(answer), _shown(q, seed), _Call(), None
    return value, "", _shown(q, seed), _Call(), None


def _cost(outcome: tuple[Any, ...]) -> tuple[int, int, int]:
    """An answer's calls and tokens."""
    call: _Call = outcome[3]
    return call.calls, call.ptok, call.ctok


def _shown(q: Question, seed: int) -> list[int]:
    """The order in which ``q``'s options are shown to the respondent of ``seed``."""
    k = len(q.options) if q.type != "open" else 0
    return _order(k, seed ^ 0x5F1E) if q.shuffled else list(range(k))


def _audited(q: Question, outcome: tuple[Any, ...]) -> Any:
    """What the audit compares of an answer: an option's label, a number, an open
    answer's text; None when unreadable. A multi-choice answer is audited per option
    (chosen or not), as its marginals are reported."""
    value, raw = outcome[0], outcome[1]
    if q.type == "multi_choice":
        return {o: None if value is None else "chosen" if value >> j & 1 else "not chosen"
                for j, o in enumerate(q.options)}
    return None if value is None else _answer_value(q, value, raw)


def _parse(q: Question, text: str, shown: list[int]) -> Any:
    if q.type in CHOICE:
        return parse_choice(text, shown, q.options)
    if q.type == "multi_choice":
        return parse_multi(text, shown, q.options)
    if q.type == "numeric":
        assert q.range is not None
        return parse_numeric(text, *q.range)
    return None


def _answer_value(q: Question, value: Any, raw: str) -> Any:
    """What an ``ask_if`` compares: a label, a number, a list of labels, or a text."""
    if q.type in CHOICE or q.coded:
        return q.options[value]
    if q.type == "multi_choice":
        return [o for j, o in enumerate(q.options) if value >> j & 1]
    if q.type == "numeric":
        return value
    return raw
