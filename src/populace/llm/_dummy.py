"""The dummy model: waits, then answers with a seeded random integer.

It is the paper's efficiency benchmark (each agent "thinks" for a fixed latency, then picks a
number) and the default model, so that every simulation runs with no server at all. The wait
does not block the loop and costs one shared timer per millisecond bucket, not one per call.
"""

from __future__ import annotations

from populace.core import mix64

from ._base import Completion, ModelClient, ModelStats, Request
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
    #: assembling conversations nobody reads was most of a dummy round's cost).
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

    async def send(self, request: Request) -> Completion:
        self._requests += 1
        seed = request.seed
        if seed is None:
            self._counter += 1
            seed = self._counter
        wait = self.latency
        if self.jitter:  # from another hash of the seed than the answer's: independent
            wait *= 1 + self.jitter * ((mix64(seed ^ _JITTER) % 2001) / 1000 - 1)
        await self._latency.wait(wait)
        number = self.low + mix64(seed) % self.span
        fmt = request.response_format
        text = json_answer(fmt, "", number) if fmt is not None and is_structured(fmt) \
            else str(number)
        return Completion(text, self.name, latency_s=wait)

    def statistics(self) -> ModelStats:
        return ModelStats(self.name, self._requests, 0, self._latency.in_flight, 0, 0)

    async def aclose(self) -> None:
        self._latency.reset()
