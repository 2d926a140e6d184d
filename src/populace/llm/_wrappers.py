"""Behaviour added around any model client: retries, accounting, replay-then-live.

Each wrapper is a :class:`~populace.llm.ModelClient` holding another one (``inner``) and
changes one thing about its :meth:`~populace.llm.ModelClient.send`; the rest passes through.
``OpenAIModel`` is one HTTP attempt per call under :class:`Retrying` under :class:`Counted`;
the same wrappers fit the dummy, scripted or a user's own model.
"""

from __future__ import annotations

import asyncio
import random

from populace.core import ModelError, RecordingMiss

from ._base import Completion, ModelClient, ModelStats, Request
from ._pool import EndpointStats


class Wrapper(ModelClient):
    """A client around ``inner``: the same name, prompt reading, statistics and closing."""

    def __init__(self, inner: ModelClient) -> None:
        self.inner = inner
        self.name = inner.name
        self.reads_prompt = inner.reads_prompt

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"

    async def send(self, request: Request) -> Completion:
        return await self.inner.send(request)

    def statistics(self) -> ModelStats:
        return self.inner.statistics()

    def endpoint_statistics(self) -> tuple[EndpointStats, ...]:
        return self.inner.endpoint_statistics()

    async def aclose(self) -> None:
        await self.inner.aclose()


class Retrying(Wrapper):
    """Tries a call again when its error is :attr:`~populace.core.ModelError.retryable`.

    Up to ``max_retries`` more attempts with exponential backoff and "equal jitter"
    (from ``backoff`` seconds, at most ``max_backoff``); a server's ``retry_after`` is
    honoured up to ``max_retry_after``. With ``retry_deadline`` (seconds from the call's
    start) a call instead keeps retrying until then, however many attempts it takes: a
    server that restarts within the deadline loses no answers. The answer's ``retries`` and
    a final error's ``attempts`` say how many attempts it took.
    """

    def __init__(self, inner: ModelClient, *, max_retries: int = 4, backoff: float = 0.25,
                 max_backoff: float = 8.0, max_retry_after: float = 30.0,
                 retry_deadline: float | None = None) -> None:
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if backoff < 0 or max_backoff < 0 or max_retry_after < 0:
            raise ValueError("backoff, max_backoff and max_retry_after must be >= 0")
        super().__init__(inner)
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_retry_after = max_retry_after
        self.retry_deadline = retry_deadline
        self._jitter = random.Random()

    def delay(self, attempt: int, requested: float | None = None) -> float:
        """Seconds to wait before attempt ``attempt + 1`` (0-based ``attempt`` failed)."""
        if requested is not None:
            return min(requested, self.max_retry_after)
        ceiling = min(self.max_backoff, self.backoff * (2.0 ** attempt))
        return ceiling * (0.5 + 0.5 * self._jitter.random())

    async def send(self, request: Request) -> Completion:
        loop = asyncio.get_running_loop()
        start = loop.time()
        attempt = 0
        while True:
            try:
                answer = await self.inner.send(request)
            except ModelError as error:
                wait = self.delay(attempt, error.retry_after)
                if self.retry_deadline is not None:
                    out_of_time = loop.time() + wait - start > self.retry_deadline
                else:
                    out_of_time = attempt >= self.max_retries
                if not error.retryable or out_of_time:
                    error.attempts = attempt + 1
                    error.args = (f"{error} (after {attempt + 1} "
                                  f"attempt{'s' if attempt else ''})",)
                    raise
                attempt += 1
                await asyncio.sleep(wait)
                continue
            answer.retries += attempt
            answer.latency_s = loop.time() - start  # the whole call: every attempt and wait
            return answer


class Counted(Wrapper):
    """Counts calls, failures, calls in flight, retries and tokens (prompt, completion,
    cached, prefix): :meth:`statistics`.

    ``retries`` are attempts beyond the first, of answered and failed calls alike, so
    ``requests + retries`` is what the server saw.
    """

    def __init__(self, inner: ModelClient) -> None:
        super().__init__(inner)
        self._requests = self._failures = self._in_flight = self._retries = 0
        self._prompt_tokens = self._completion_tokens = 0
        self._cached_tokens = self._prefix_tokens = 0

    async def send(self, request: Request) -> Completion:
        self._requests += 1
        self._in_flight += 1
        try:
            answer = await self.inner.send(request)
        except ModelError as error:
            self._failures += 1
            self._retries += error.attempts - 1
            raise
        finally:
            self._in_flight -= 1
        self._retries += answer.retries
        self._prompt_tokens += answer.prompt_tokens
        self._completion_tokens += answer.completion_tokens
        self._cached_tokens += answer.cached_tokens
        self._prefix_tokens += answer.prefix_tokens
        return answer

    def statistics(self) -> ModelStats:
        return ModelStats(self.name, self._requests, self._failures, self._in_flight,
                          self._prompt_tokens, self._completion_tokens, self._retries,
                          self.inner.endpoint_statistics(), self._cached_tokens,
                          self._prefix_tokens)


class ReplayThenLive(Wrapper):
    """Answers from ``recording`` when it can, from the live model (``inner``) otherwise: a
    resumed run gets the interrupted attempt's answers first. Only a call the recording does
    not hold (:class:`~populace.core.RecordingMiss`) goes to the live model; any other
    error of the recording is raised."""

    def __init__(self, recording: ModelClient, live: ModelClient) -> None:
        super().__init__(live)
        self.recording = recording

    async def send(self, request: Request) -> Completion:
        try:
            return await self.recording.send(request)
        except RecordingMiss:
            return await self.inner.send(request)

    async def aclose(self) -> None:
        await self.recording.aclose()
        await self.inner.aclose()
