"""A persona's memory: events with a step and a kind, in two compact values per agent.

A million personas remembering twenty events each would be twenty million Python objects
held as tuples; here an agent's events are one string (their texts, joined by a separator)
and one ``bytes`` (a 32-bit ``step << 3 | kind`` per event), so what an agent costs beyond
the text it remembers is two object headers. Events are read back as :class:`Event` tuples
only when a prompt is built.

What fits a call is bounded by the persona's token budget (:meth:`Memory.window`); what does
not is folded into one ``summary`` event at the front (:meth:`Memory.fold`), written by the
agent's own model (see :meth:`populace.agents.Persona.recall`).

>>> m = Memory()
>>> m.add(1, "message", "Ann: the bridge is closed.")
>>> m.add(2, "decision", "I took the ferry.")
>>> [e.kind for e in m.events()], len(m)
(['message', 'decision'], 2)
"""

from __future__ import annotations

from array import array
from typing import Any, NamedTuple

#: The kinds of event, by code (the code is kept in three bits).
KINDS: tuple[str, ...] = ("message", "observation", "decision", "intervention", "summary")
_CODE = {k: i for i, k in enumerate(KINDS)}
_SEP = "\x1e"
#: Characters per token of the budget's estimate (the usual rule of thumb for English text
#: with BPE tokenisers; what a server counts is in each call's ``prompt_tokens``).
CHARS_PER_TOKEN = 4


class Event(NamedTuple):
    """One remembered event."""

    step: int
    kind: str
    text: str


def tokens(text: str) -> int:
    """The budget's estimate of ``text``'s tokens."""
    return -(-len(text) // CHARS_PER_TOKEN)


def clip(text: str, max_tokens: int) -> str:
    """``text`` on one line, cut to about ``max_tokens`` tokens (an ellipsis marks a cut)."""
    flat = " ".join(str(text).replace(_SEP, " ").split())
    limit = max_tokens * CHARS_PER_TOKEN
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def fitting(events: list[Event], budget: int) -> int:
    """How many of ``events`` (oldest first) do not fit ``budget`` tokens, counting from
    the newest."""
    used, first = 0, len(events)
    while first > 0 and used + tokens(events[first - 1].text) <= budget:
        first -= 1
        used += tokens(events[first].text)
    return first


class Memory:
    """Events an agent remembers, oldest first (see the module docstring)."""

    __slots__ = ("_meta", "_text")

    def __init__(self) -> None:
        self._text = ""
        self._meta = b""

    def add(self, step: int, kind: str, text: str) -> None:
        """Remember ``text`` (one line; the separator is replaced) as ``kind`` at ``step``."""
        code = _CODE.get(kind)
        if code is None:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if not 0 <= step < 1 << 28:
            raise ValueError(f"step must be in [0, 2**28), got {step}")
        text = text.replace(_SEP, " ")
        self._text = f"{self._text}{_SEP}{text}" if self._meta else text
        self._meta += array("i", (step << 3 | code,)).tobytes()

    def __len__(self) -> int:
        return len(self._meta) >> 2

    def __bool__(self) -> bool:
        return bool(self._meta)

    def events(self) -> list[Event]:
        """Every event, oldest first."""
        if not self._meta:
            return []
        meta = array("i")
        meta.frombytes(self._meta)
        return [Event(m >> 3, KINDS[m & 7], t)
                for m, t in zip(meta, self._text.split(_SEP), strict=True)]

    def tokens(self) -> int:
        """The budget's estimate of all events' tokens."""
        return sum(tokens(e.text) for e in self.events())

    def window(self, budget: int) -> tuple[int, list[Event]]:
        """``(n, recent)``: the newest events whose tokens add up to at most ``budget``
        (a summary at the front counts too, and is kept while it fits), and ``n``, how
        many older ones do not fit."""
        events = self.events()
        n = fitting(events, budget)
        return n, events[n:]

    def fold(self, n: int, summary: str | None, step: int) -> None:
        """Replace the ``n`` oldest events by one ``summary`` event at ``step`` (or drop
        them when ``summary`` is None or empty)."""
        kept = self.events()[n:]
        if summary and summary.strip():
            kept.insert(0, Event(step, "summary", summary.strip().replace(_SEP, " ")))
        self._text = _SEP.join(e.text for e in kept)
        self._meta = array("i", (e.step << 3 | _CODE[e.kind] for e in kept)).tobytes()

    def get_state(self) -> tuple[str, bytes] | None:
        """Two plain values (None when empty): cheap to pickle a million of."""
        return (self._text, self._meta) if self._meta else None

    def set_state(self, state: Any) -> None:
        if not state:
            self._text, self._meta = "", b""
            return
        text, meta = state
        if len(meta) % 4 or len(text.split(_SEP)) != len(meta) >> 2:
            raise ValueError("not a memory state: texts and events differ in number")
        self._text, self._meta = str(text), bytes(meta)
