"""The dummy model: waits, then answers with a seeded random integer.

It is the paper's efficiency benchmark (each agent "thinks" for a fixed latency, then picks a
number) and the default model, so that every simulation runs with no server at all. The wait
does not block the loop and costs one shared timer per millisecond bucket, not one per call.
"""

from __future__ import annotations

from collections.abc import Coroutine, Generator, Iterator, Sequence
from typing import Any

from populace.core import Signal, mix64

from .._base import ChatMessage, Completion, ModelClient, ModelStats, Request
from ._latency import SimulatedLatency
from ._replies import is_structured, json_answer

_JITTER = 0x5EED_1A7E


class DummyModel(ModelClient):
    """Answers ``str(n)`` with ``n`` uniform in ``[low, high]``, determined by ``seed``; a
    request with a JSON ``response_format`` gets ``n`` in the schema's number fields, as a
    server with structured decoding would answer it.

    Without a seed, answers come from an internal counter (still reproducible per client).
    """

    #: The answer ignores the messages: callers may skip building them (a million agents
    #: assembling conversations nobody reads was most of a dummy step's cost).
    reads_prompt = False

    def __init__(self, name: str = "dummy", *, latency: float = 1.0, jitter: float = 0.0,
                 low: int = 0, high: int = 100) -> None:
        if high < low:
            raise ValueError(f"high ({high}) must be >= low ({low})")
        if not 0 <= jitter <= 1:
            raise ValueError(f"jitter must be within [0, 1], got {jitter}")
        self.name = name
        self.latency = latency
        self.jitter = jitter
        self.low = low
        self.span = high - low + 1
        self._latency = SimulatedLatency(latency)
        self._counter = 0
        self._requests = 0

    def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        max_tokens: int | None = None,
        response_format: dict[str, Any] | None = None,
    ) -> Coroutine[Any, Any, Completion]:
        # The paper's benchmark calls this a million times a step: no Request and no
        # coroutine frame per call, only a small object (see _Answer).
        return _Answer(self, seed, response_format)

    async def send(self, request: Request) -> Completion:
        return await _Answer(self, request.seed, request.response_format)

    def _begin(self, seed: int | None) -> tuple[int, float]:
        """Count a call; the number it answers and its wait in seconds. The number is
        drawn when the call starts, not when it ends: a worker starts its calls while the
        first ones wait, and finishes them all at once when the wait is over."""
        self._requests += 1
        if seed is None:
            self._counter += 1
            seed = self._counter
        wait = self.latency
        if self.jitter:  # from another hash of the seed than the answer's: independent
            wait *= 1 + self.jitter * ((mix64(seed ^ _JITTER) % 2001) / 1000 - 1)
        return self.low + mix64(seed) % self.span, wait

    def _answer(self, number: int, fmt: dict[str, Any] | None, wait: float) -> Completion:
        text = json_answer(fmt, "", number) if fmt is not None and is_structured(fmt) \
            else str(number)
        return Completion(text, self.name, 0, 0, wait)  # positional: a million a step

    def statistics(self) -> ModelStats:
        return ModelStats(self.name, self._requests, 0, self._latency.in_flight, 0, 0)

    async def aclose(self) -> None:
        self._latency.reset()


class _Answer:
    """One dummy call: waits on the shared timer, then is the Completion.

    A coroutine by protocol (``send``, ``throw``, ``close``, ``__await__``: ``asyncio``
    takes it as one, ``create_task`` included) but a six-slot object, not a frame: a
    million waiting calls are a million small objects. Stepped by a worker's driver, it
    yields the timer's signal itself; in an asyncio Task it waits on a future of its own.
    """

    __slots__ = ("_fmt", "_model", "_number", "_seed", "_wait", "_waiting")

    def __init__(self, model: DummyModel, seed: int | None,
                 fmt: dict[str, Any] | None) -> None:
        self._model = model
        self._seed = seed
        self._fmt = fmt
        self._waiting: Iterator[Any] | None = None
        self._number = 0
        self._wait = 0.0

    def __await__(self) -> Generator[Any, None, Completion]:
        return self  # an iterator is all await needs

    def __iter__(self) -> _Answer:
        return self

    def __next__(self) -> Any:
        waiting = self._waiting
        if waiting is None:  # the first step: the call starts
            model = self._model
            self._number, self._wait = model._begin(self._seed)
            signal = model._latency.signal(self._wait)
            if signal is None:  # no latency: answered at once
                raise StopIteration(model._answer(self._number, self._fmt, self._wait))
            waiting = self._waiting = signal.__await__()
        if type(waiting) is Signal:  # stepped by a driver, which parks on the signal itself
            if not waiting.done():
                return waiting
        else:  # a Task's own wait, or none (the signal had fired)
            try:
                return next(waiting)
            except StopIteration:
                pass
        raise StopIteration(self._model._answer(self._number, self._fmt, self._wait))

    def send(self, value: Any) -> Any:
        return self.__next__()

    def throw(self, typ: Any, value: Any = None, traceback: Any = None) -> Any:
        """An exception at the wait (a cancelled Task): the wait ends, the call fails."""
        waiting = self._waiting
        if isinstance(waiting, Generator):  # a Task's own wait: let it take back its wake-up
            return waiting.throw(typ if value is None else value)
        raise typ if value is None else value

    def close(self) -> None:
        if isinstance(self._waiting, Generator):
            self._waiting.close()
