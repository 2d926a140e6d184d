"""Behaviour added around any model client: retries, accounting, replay-then-live.

Each wrapper is a :class:`~populace.llm.ModelClient` holding another one (``inner``) and
changes one thing about its :meth:`~populace.llm.ModelClient.send`; the rest passes through.
``OpenAIModel`` is one HTTP attempt per call under :class:`Retrying` under :class:`Counted`;
the same wrappers fit the dummy, scripted or a user's own model.
"""

from __future__ import annotations

import asyncio
import copy
import json
import random
from collections.abc import Awaitable, Callable
from typing import Any

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
        return (await self._retry(lambda: self.inner.send(request), many=False))[0]

    async def send_choices(self, request: Request, n: int) -> list[Completion]:
        """``n`` answers from one request of a client that has ``send_choices`` (see
        :class:`Coalescing`), retried as a whole."""
        inner: Any = self.inner
        return await self._retry(lambda: inner.send_choices(request, n), many=True)

    async def _retry(self, attempt_once: Callable[[], Awaitable[Any]], *, many: bool
                     ) -> list[Completion]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        attempt = 0
        while True:
            try:
                got = await attempt_once()
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
            answers: list[Completion] = got if many else [got]
            answers[0].retries += attempt  # the attempts were made once, for all of them
            for answer in answers:
                answer.latency_s = loop.time() - start  # the whole call: every attempt, wait
            return answers


class Coalescing(Wrapper):
    """Identical calls made at the same moment go as one request for ``n`` answers.

    Calls whose messages and sampling settings (temperature, top_p, max_tokens,
    response_format) are equal, made in the same turn of the event loop, are sent as one
    request with ``n`` = their number (at most ``max_n``); the answers go to the callers in
    the order they called (agents of a broadcast call in id order), and the request takes
    the first caller's seed. A server prefills the prompt once instead of ``n`` times. It
    changes which sample each caller gets, not their distribution, and the result is
    reproducible for the same seed and population. A server that answers fewer than ``n``
    choices does not support ``n``: the rest of the callers are sent their own requests,
    and from then on every call is.

    ``inner`` must have ``send_choices(request, n)`` (:class:`Retrying` around
    :class:`~populace.llm.OpenAIChat` has). Answers shared this way are marked
    :attr:`~populace.llm.Completion.coalesced`, so :class:`Counted` can tell calls from
    requests.
    """

    def __init__(self, inner: ModelClient, *, max_n: int = 128) -> None:
        if max_n < 1:
            raise ValueError(f"max_n must be >= 1, got {max_n}")
        super().__init__(inner)
        self.max_n = max_n
        self.supports_n = True
        self._groups: dict[str, list[tuple[Request, asyncio.Future[Completion]]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def send(self, request: Request) -> Completion:
        if not self.supports_n:
            return await self.inner.send(request)
        loop = asyncio.get_running_loop()
        _, temperature, top_p, _, max_tokens, response_format = request
        key = json.dumps([request.messages, temperature, top_p, max_tokens,
                          response_format], sort_keys=True, default=str)
        if not self._groups:
            loop.call_soon(self._flush)
        future: asyncio.Future[Completion] = loop.create_future()
        self._groups.setdefault(key, []).append((request, future))
        return await future

    def _flush(self) -> None:
        groups, self._groups = self._groups, {}
        for members in groups.values():
            for at in range(0, len(members), self.max_n):
                task = asyncio.ensure_future(self._send(members[at:at + self.max_n]))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _send(self, members: list[tuple[Request, asyncio.Future[Completion]]]) -> None:
        inner: Any = self.inner
        try:
            if len(members) == 1 or not self.supports_n:
                answers = [await self.inner.send(members[0][0])]
            else:
                answers = await inner.send_choices(members[0][0], len(members))
                if len(answers) < len(members):
                    self.supports_n = False  # the server ignores n
        except Exception as error:
            for k, (_, future) in enumerate(members):
                if not future.done():
                    if k and isinstance(error, ModelError):  # one request: one count of it
                        error = copy.copy(error)
                        error.attempts = 1
                    future.set_exception(error)
            return
        for k, answer in enumerate(answers):
            answer.coalesced = k > 0
            if not members[k][1].done():
                members[k][1].set_result(answer)
        for request, future in members[len(answers):]:  # the server ignored n
            task = asyncio.ensure_future(self._one(request, future))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _one(self, request: Request, future: asyncio.Future[Completion]) -> None:
        try:
            answer = await self.inner.send(request)
        except Exception as error:
            if not future.done():
                future.set_exception(error)
            return
        if not future.done():
            future.set_result(answer)


class Counted(Wrapper):
    """Counts calls, failures, calls in flight, retries and tokens (prompt, completion,
    cached, prefix): :meth:`statistics`.

    ``retries`` are attempts beyond the first, of answered and failed calls alike, and
    ``coalesced`` the calls answered by another call's request, so
    ``requests + retries - coalesced`` is what the server saw.
    """

    def __init__(self, inner: ModelClient) -> None:
        super().__init__(inner)
        self._requests = self._failures = self._in_flight = self._retries = 0
        self._prompt_tokens = self._completion_tokens = 0
        self._cached_tokens = self._prefix_tokens = self._coalesced = 0

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
        self._coalesced += answer.coalesced
        return answer

    def statistics(self) -> ModelStats:
        return ModelStats(self.name, self._requests, self._failures, self._in_flight,
                          self._prompt_tokens, self._completion_tokens, self._retries,
                          self.inner.endpoint_statistics(), self._cached_tokens,
                          self._prefix_tokens, self._coalesced)


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
