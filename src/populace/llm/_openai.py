"""A model client for any OpenAI-compatible chat-completions server.

vLLM, SGLang, Ollama, llama.cpp, OpenAI itself and ``populace serve-llm`` all speak the same
``POST {base_url}/chat/completions``. :class:`OpenAIModel` talks to one or several such
servers through an :class:`~populace.llm.EndpointPool`, retries what is worth retrying, and
turns whatever still fails into a :class:`~populace.core.ModelError` that names the endpoint
and the cause.

It uses aiohttp directly rather than the ``openai`` SDK: the SDK validates every response
into pydantic objects and costs several times more CPU per request (see
``benchmarks/llm_client.py``), which matters when one worker hosts a hundred thousand agents.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import math
import random
import time
from collections.abc import Sequence
from typing import Any

import aiohttp

from populace.core import (
    ModelBadResponse,
    ModelError,
    ModelHTTPError,
    ModelTimeout,
    ModelUnreachable,
)

from ._base import ChatMessage, Completion, ModelStats
from ._pool import EndpointPool, EndpointStats, Lease
from ._replies import text_of

log = logging.getLogger("populace.llm.openai")

# Statuses worth another try: the server is busy, restarting, or briefly unwell.
_RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class _Failure(Exception):
    """One attempt failed; the retry loop decides what happens next. ``error`` is the
    :class:`ModelError` subclass the call fails with if this was its last attempt, ``kind``
    its countable cause."""

    def __init__(self, cause: str, *, retryable: bool = True, strike: bool = True,
                 delay: float | None = None, error: type[ModelError] = ModelBadResponse,
                 kind: str | None = None) -> None:
        super().__init__(cause)
        self.cause = cause
        self.error = error
        self.kind = kind
        self.retryable = retryable
        self.strike = strike  # counts against the endpoint's health
        self.delay = delay  # server-requested wait (Retry-After)


def _retry_after(headers: Any) -> float | None:
    """Seconds from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date)."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_detail(raw: bytes) -> str:
    """The ``error.message`` of an OpenAI-style error body, else a short excerpt."""
    try:
        data = json.loads(raw)
        message = data["error"]["message"]
        if isinstance(message, str):
            return message
    except (ValueError, KeyError, TypeError):
        pass
    text = raw[:200].decode("utf-8", "replace").strip()
    return text or "empty body"


def _token_count(value: Any) -> int | None:
    """A ``usage`` count as an int; None when it is not a count (negative, fractional, a
    string or a boolean). An absent count is 0: some servers send no usage."""
    if value is None:
        return 0
    if type(value) is int:
        return value if value >= 0 else None
    if type(value) is float and math.isfinite(value) and value >= 0 and value.is_integer():
        return int(value)
    return None


def _content_text(message: Any) -> str:
    """The text of ``choices[0].message``; raises :class:`_Failure` saying what is wrong."""
    try:
        content = message["content"]
    except (KeyError, TypeError) as exc:
        raise _Failure("response without choices[0].message.content",
                       kind="without choices") from exc
    if isinstance(content, bool) or not isinstance(content, str | int | float | list | None):
        raise _Failure("response without choices[0].message.content as text "
                       f"(got {type(content).__name__})", kind="without choices")
    if isinstance(content, int | float):  # a bare JSON number ("content": 42) is its text
        return str(content)
    text = text_of(content)  # multi-part content keeps its text parts
    if not text.strip():
        raise _Failure("empty content" + (" (null)" if content is None else ""),
                       kind="empty content")
    return text


class OpenAIModel:
    """A :class:`~populace.llm.ModelClient` over OpenAI-compatible HTTP servers.

    >>> model = OpenAIModel("qwen", model="Qwen/Qwen2.5-7B-Instruct",
    ...                     base_urls=["http://gpu1:8000/v1", "http://gpu2:8000/v1"])
    >>> async def ask():
    ...     c = await model.complete([{"role": "user", "content": "Pick a number"}], seed=1)
    ...     return c.text

    ``base_urls`` are API roots (ending in ``/v1`` for most servers). ``max_concurrency``
    bounds requests in flight per endpoint; callers beyond it queue. ``timeout`` bounds one
    attempt (connect to last byte), not the time spent queued. A failed attempt is retried
    up to ``max_retries`` times with exponential backoff and jitter (starting at ``backoff``
    seconds, at most ``max_backoff``); the ``Retry-After`` of a 429 or 503 is honoured up to
    ``max_retry_after`` seconds. Client errors (400, 401, 404...) are not retried.
    ``temperature``, ``top_p`` and ``max_tokens`` are defaults that per-call arguments
    override. A completion's ``latency_s`` spans the whole call: queueing, every attempt and
    the waits between them.

    ``usage`` counts that are not counts (negative, fractional, strings, booleans) are taken
    as 0 and counted in :attr:`protocol_anomalies`, so a misbehaving server cannot corrupt
    the token totals; a content that is a bare number is read as its text.

    The client binds to the event loop of its first call; build one per worker
    (``PerWorker(OpenAIModel, ...)``) and ``await model.aclose()`` at the end.
    """

    def __init__(
        self,
        name: str,
        *,
        model: str,
        base_urls: Sequence[str] | str,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 4,
        max_concurrency: int = 64,
        temperature: float | None = None,
        top_p: float | None = None,
        max_tokens: int | None = None,
        eject_after: int = 5,
        cooldown: float = 10.0,
        backoff: float = 0.25,
        max_backoff: float = 8.0,
        max_retry_after: float = 30.0,
        retry_deadline: float | None = None,
    ) -> None:
        if isinstance(base_urls, str):
            base_urls = [base_urls]
        urls = [u.rstrip("/") for u in base_urls]
        for u in urls:
            if not u.startswith(("http://", "https://")):
                raise ValueError(f"base URL must start with http:// or https://, got {u!r}")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0, got {timeout}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if backoff < 0 or max_backoff < 0 or max_retry_after < 0:
            raise ValueError("backoff, max_backoff and max_retry_after must be >= 0")
        self.name = name
        self.model = model
        self.timeout = timeout
        self.max_retries = max_retries
        self.temperature = temperature
        self.top_p = top_p
        self.max_tokens = max_tokens
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_retry_after = max_retry_after
        # With a deadline a call keeps retrying until then, however many attempts it takes:
        # a server that restarts within the deadline loses no answers.
        self.retry_deadline = retry_deadline
        self._pool = EndpointPool(urls, max_concurrency=max_concurrency,
                                  eject_after=eject_after, cooldown=cooldown)
        self._chat_urls = [u + "/chat/completions" for u in urls]
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._jitter = random.Random()
        self._requests = 0
        self._failures = 0
        self._in_flight = 0
        self._retries = 0
        self._prompt_tokens = 0
        self._completion_tokens = 0
        self._anomalies = 0

    def __repr__(self) -> str:
        return f"OpenAIModel({self.name!r}, model={self.model!r}, base_urls={self._pool.urls!r})"

    # -- the interface -----------------------------------------------------------------------
    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        max_tokens: int | None = None,
        response_format: dict[str, Any] | None = None,
    ) -> Completion:
        body = self.body(messages, temperature=temperature, top_p=top_p, seed=seed,
                         max_tokens=max_tokens, response_format=response_format)
        payload = json.dumps(body).encode()
        self._requests += 1
        self._in_flight += 1
        try:
            return await self._call(payload)
        finally:
            self._in_flight -= 1

    def body(self, messages: Sequence[ChatMessage], *, temperature: float | None = None,
             top_p: float | None = None, seed: int | None = None,
             max_tokens: int | None = None,
             response_format: dict[str, Any] | None = None) -> dict[str, Any]:
        """The chat completion request for these arguments, the client's defaults filled in
        (what :meth:`complete` sends; a batch job sends the same)."""
        body: dict[str, Any] = {"model": self.model, "messages": list(messages)}
        if temperature is None:
            temperature = self.temperature
        if temperature is not None:
            body["temperature"] = temperature
        if top_p is None:
            top_p = self.top_p
        if top_p is not None:
            body["top_p"] = top_p
        if max_tokens is None:
            max_tokens = self.max_tokens
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if seed is not None:
            body["seed"] = seed
        if response_format is not None:
            body["response_format"] = response_format
        return body

    def statistics(self) -> ModelStats:
        return ModelStats(self.name, self._requests, self._failures, self._in_flight,
                          self._prompt_tokens, self._completion_tokens, self._retries,
                          self._pool.statistics())

    @property
    def protocol_anomalies(self) -> int:
        """Successful responses whose ``usage`` was malformed (its tokens counted as 0)."""
        return self._anomalies

    def endpoint_statistics(self) -> tuple[EndpointStats, ...]:
        """Per-endpoint counters of the underlying pool."""
        return self._pool.statistics()

    async def aclose(self) -> None:
        """Close the HTTP session; a later call opens a new one. Idempotent."""
        session, self._session = self._session, None
        self._loop = None
        self._pool.close()
        if session is not None:
            await session.close()

    # -- internals ---------------------------------------------------------------------------
    def _open(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is not None:
            if self._loop is loop:
                return self._session
            raise RuntimeError(
                f"{self!r} is bound to another event loop; build one client per loop "
                "(PerWorker does) or await aclose() before reusing it"
            )
        # The pool enforces the per-endpoint limit (endpoints may share a host and port, so
        # a per-host limit would be wrong); the connector only caps the total.
        connector = aiohttp.TCPConnector(
            limit=self._pool.max_concurrency * len(self._chat_urls), limit_per_host=0)
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=self.timeout),
        )
        self._loop = loop
        return self._session

    async def _call(self, payload: bytes) -> Completion:
        session = self._open()
        loop = asyncio.get_running_loop()
        start = loop.time()
        pool = self._pool
        attempt = 0
        while True:
            # Queueing and backoff run in the caller (cheap futures, even for 100,000 waiting
            # agents); only the HTTP exchange gets a Task, because agents are driven without
            # one and aiohttp's timeouts need asyncio.current_task().
            lease = await pool.acquire()
            task = asyncio.create_task(self._attempt(session, lease, payload))
            try:
                text, usage = await task
            except _Failure as failure:
                pool.release(lease, ok=False, strike=failure.strike)
                delay = self._delay(attempt, failure.delay)
                if self.retry_deadline is not None:
                    out_of_time = loop.time() + delay - start > self.retry_deadline
                else:
                    out_of_time = attempt >= self.max_retries
                if not failure.retryable or out_of_time:
                    self._failures += 1
                    tries = f"{attempt + 1} attempt{'s' if attempt else ''}"
                    raise failure.error(
                        f"model {self.name!r}: {failure.cause} from {lease.url} "
                        f"(after {tries})", cause=failure.kind,
                    ) from failure.__cause__
                attempt += 1
                self._retries += 1
                await asyncio.sleep(delay)
                continue
            except BaseException:  # cancelled or abandoned: stop the request too
                task.cancel()
                pool.release(lease, ok=False, strike=False, count=False)
                raise
            pool.release(lease, ok=True)
            prompt_tokens, completion_tokens = self._usage(usage, lease.url)
            self._prompt_tokens += prompt_tokens
            self._completion_tokens += completion_tokens
            return Completion(text, self.name, prompt_tokens, completion_tokens,
                              loop.time() - start, lease.url, attempt)

    def _usage(self, usage: Any, url: str) -> tuple[int, int]:
        """``(prompt_tokens, completion_tokens)`` of a response; a malformed count is 0."""
        if usage is None:
            return 0, 0
        if type(usage) is dict:
            pt = _token_count(usage.get("prompt_tokens"))
            ct = _token_count(usage.get("completion_tokens"))
            if pt is not None and ct is not None:
                return pt, ct
        else:
            pt = ct = None
        self._anomalies += 1
        if self._anomalies == 1:  # once per client: a server that does it once does it always
            log.warning("model %r: %s sent malformed usage %.200r; its tokens are counted as 0",
                        self.name, url, usage)
        return pt or 0, ct or 0

    def _delay(self, attempt: int, requested: float | None) -> float:
        if requested is not None:
            return min(requested, self.max_retry_after)
        ceiling = min(self.max_backoff, self.backoff * (2.0 ** attempt))
        return ceiling * (0.5 + 0.5 * self._jitter.random())  # "equal jitter"

    async def _attempt(self, session: aiohttp.ClientSession, lease: Lease,
                       payload: bytes) -> tuple[str, Any]:
        """One request; returns ``(content, usage)`` or raises :class:`_Failure`."""
        try:
            async with session.post(self._chat_urls[lease.index], data=payload,
                                    headers=self._headers) as resp:
                status = resp.status
                raw = await resp.read()
                delay = _retry_after(resp.headers) if status in (429, 503) else None
        except TimeoutError as exc:  # aiohttp's own timeouts derive from it too
            raise _Failure(f"timed out after {self.timeout} s", error=ModelTimeout,
                           kind="timed out") from exc
        except aiohttp.ClientConnectorError as exc:
            raise _Failure(f"cannot connect ({exc.os_error.strerror or exc})",
                           error=ModelUnreachable, kind="cannot connect") from exc
        except aiohttp.ServerDisconnectedError as exc:
            raise _Failure("server disconnected", error=ModelUnreachable,
                           kind="server disconnected") from exc
        except aiohttp.ClientPayloadError as exc:
            raise _Failure(f"truncated response ({exc})", kind="truncated response") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise _Failure(f"connection error ({type(exc).__name__}: {exc})",
                           error=ModelUnreachable, kind="connection error") from exc
        if status != 200:
            detail = _error_detail(raw)
            kind = f"HTTP {status}"
            if status == 429:
                raise _Failure(f"HTTP 429 rate limited: {detail}", strike=False, delay=delay,
                               error=ModelHTTPError, kind=kind)
            if status in _RETRY_STATUSES or status >= 500:
                raise _Failure(f"HTTP {status}: {detail}", delay=delay, error=ModelHTTPError,
                               kind=kind)
            raise _Failure(f"HTTP {status}: {detail}", retryable=False, strike=False,
                           error=ModelHTTPError, kind=kind)
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise _Failure(f"malformed JSON body ({len(raw)} bytes)",
                           kind="malformed JSON") from exc
        try:
            message = data["choices"][0]["message"]
        except (KeyError, IndexError, TypeError) as exc:
            raise _Failure("response without choices[0].message.content",
                           kind="without choices") from exc
        return _content_text(message), data.get("usage")
