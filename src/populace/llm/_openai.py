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
import time
import zlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from populace.core import ModelBadResponse, ModelHTTPError, ModelTimeout

from ._base import Completion, ModelClient, Request, text_of
from ._pool import EndpointPool, EndpointStats, Lease
from ._servers import server_kind
from ._transport import AiohttpTransport, Response, Transport, TransportError
from ._wrappers import Coalescing, Counted, Retrying, Wrapper

log = logging.getLogger("populace.llm.openai")

# Statuses worth another try: the server is busy, restarting, or briefly unwell.
_RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


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


class _Bad(Exception):
    """A 200 response that is not an answer; ``cause`` is its countable kind."""

    def __init__(self, message: str, cause: str) -> None:
        super().__init__(message)
        self.cause = cause


def _content_text(message: Any) -> str:
    """The text of ``choices[0].message``; raises :class:`_Bad` saying what is wrong."""
    try:
        content = message["content"]
    except (KeyError, TypeError) as exc:
        raise _Bad("response without choices[0].message.content", "without choices") from exc
    if isinstance(content, bool) or not isinstance(content, str | int | float | list | None):
        raise _Bad("response without choices[0].message.content as text "
                   f"(got {type(content).__name__})", "without choices")
    if isinstance(content, int | float):  # a bare JSON number ("content": 42) is its text
        return str(content)
    text = text_of(content)  # multi-part content keeps its text parts
    if not text.strip():
        raise _Bad("empty content" + (" (null)" if content is None else ""), "empty content")
    return text


def _cached_tokens(usage: Any) -> int:
    """``usage.prompt_tokens_details.cached_tokens`` (OpenAI, vLLM, SGLang), else 0."""
    if type(usage) is dict:
        details = usage.get("prompt_tokens_details")
        if type(details) is dict:
            return _token_count(details.get("cached_tokens")) or 0
    return 0


#: The characters of a prompt hashed together when estimating its reused prefix.
_BLOCK = 64
#: Prefix blocks remembered per endpoint (least recently seen forgotten first).
_REMEMBERED_BLOCKS = 50_000


def _prompt_text(messages: Any) -> str:
    """A request's messages as one text, roughly as a server's chat template lays them out."""
    return "".join(f"<{m.get('role')}>{text_of(m.get('content'))}\n" for m in messages)


def affinity_key(messages: Any) -> int:
    """The routing key of a request: a hash of the leading system messages (the text many
    calls share — the rules, then an agent's persona — so an agent's calls meet its own
    prefix again), or of the first 256 characters when there is no system message."""
    head = []
    for m in messages:
        if m.get("role") != "system":
            break
        head.append(text_of(m.get("content")))
    if not head:
        head = [text_of(messages[0].get("content"))[:256]] if messages else []
    return zlib.crc32("\x1e".join(head).encode())


class PrefixMemory:
    """What prompt prefixes one endpoint has seen: an estimate, without a tokenizer, of the
    share of a prompt a server's prefix cache could reuse (blocks of 64 characters hashed
    as a chain, as servers hash 16-token blocks; the last 50,000 blocks are remembered)."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: OrderedDict[int, None] = OrderedDict()

    def reused(self, text: str) -> float:
        """The share of ``text`` whose leading blocks were seen before; remembers it."""
        if not text:
            return 0.0
        seen = self._seen
        data = text.encode()
        h = 0
        matched = 0
        prefix = True
        for start in range(0, len(data) - _BLOCK + 1, _BLOCK):
            h = zlib.crc32(data[start:start + _BLOCK], h)  # a chain: the prefix up to here
            block = h | (start << 32)  # and where the block is
            if block in seen:
                seen.move_to_end(block)
                if prefix:
                    matched += _BLOCK
            else:
                prefix = False
                seen[block] = None
        while len(seen) > _REMEMBERED_BLOCKS:
            seen.popitem(last=False)
        return matched / len(data)


def _answer(raw: bytes, n: int = 1) -> tuple[list[str], Any]:
    """``(contents, usage)`` of a 200 body: the first ``n`` choices' texts (fewer when the
    server sent fewer: it ignores ``n``); raises :class:`_Bad`."""
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise _Bad(f"malformed JSON body ({len(raw)} bytes)", "malformed JSON") from exc
    try:
        choices = data["choices"]
        texts = [_content_text(choices[k]["message"]) for k in range(min(n, len(choices)))]
    except (KeyError, IndexError, TypeError) as exc:
        raise _Bad("response without choices[0].message.content", "without choices") from exc
    if not texts:
        raise _Bad("response without choices[0].message.content", "without choices")
    return texts, data.get("usage")


class OpenAIChat(ModelClient):
    """One attempt per call at an OpenAI-compatible server: the request body, an endpoint
    from the pool, the exchange through the transport, and the answer or a
    :class:`~populace.core.ModelError` saying whether another attempt may help
    (``retryable``, ``retry_after``). :class:`OpenAIModel` puts retries and accounting
    around it."""

    def __init__(self, name: str, *, model: str, base_urls: Sequence[str], pool: EndpointPool,
                 transport: Transport, api_key: str | None = None,
                 temperature: float | None = None, top_p: float | None = None,
                 max_tokens: int | None = None, server: str = "auto",
                 timeout: float | None = None) -> None:
        self.name = name
        self.model = model
        self.server = server
        #: What the server can do: its spelling of structured decoding, its busy probe.
        self.kind = server_kind(server)
        self.temperature = temperature
        self.top_p = top_p
        self.max_tokens = max_tokens
        self.pool = pool
        self.transport = transport
        self._chat_urls = [u + "/chat/completions" for u in base_urls]
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        #: Successful responses whose ``usage`` was malformed (tokens counted as 0).
        self.anomalies = 0
        self._prefixes = [PrefixMemory() for _ in base_urls]
        #: Per endpoint, the seconds an attempt may take: the transport's own at first,
        #: doubled after each timeout (up to 8 times): a server that computes longer than
        #: the timeout is waited for, not abandoned and asked again and again.
        self._timeouts: list[float | None] = [None] * len(base_urls)
        self._base_timeout = timeout
        #: Timeouts ridden out because the server showed it was still computing.
        self.waited = 0

    def body(self, request: Request) -> dict[str, Any]:
        """The chat completion request body, the client's defaults filled in."""
        messages, temperature, top_p, seed, max_tokens, response_format = request
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
            self.kind.constrain(body, response_format)
        if self.kind.prompt_cache_key:  # OpenAI routes equal keys to the same cache
            body["prompt_cache_key"] = f"{affinity_key(messages):08x}"
        return body

    async def send(self, request: Request) -> Completion:
        return (await self.send_choices(request, 1))[0]

    async def send_choices(self, request: Request, n: int) -> list[Completion]:
        """``n`` answers to ``request`` from one HTTP request (``"n": n``), or fewer when the
        server ignores ``n``. The request's prompt tokens, cached or not, are counted on the
        first answer (a server prefills them once); its completion tokens are shared out."""
        body = self.body(request)
        if n > 1:
            body["n"] = n
        payload = json.dumps(body).encode()
        loop = asyncio.get_running_loop()
        start = loop.time()
        pool = self.pool
        messages = request.messages
        lease = await pool.acquire(affinity_key(messages))
        # Queueing runs in the caller (cheap futures, even for 100,000 waiting agents); only
        # the HTTP exchange gets a Task, because agents are driven without one and aiohttp's
        # timeouts need asyncio.current_task().
        index = lease.index
        soft = self._timeouts[index]
        probe = self.kind.busy is not None and self._base_timeout is not None
        # A server that shows what it computes is given up to 8 timeouts while it does
        # (see _await); the transport enforces only that outer bound.
        hard = 8 * self._base_timeout if probe and self._base_timeout else soft
        task = asyncio.create_task(self.transport.post(self._chat_urls[index], payload,
                                                       self.headers, timeout=hard))
        url = lease.url
        try:
            if probe:
                response = await self._await(task, lease, soft or self._base_timeout or 0.0)
            else:
                response = await task
        except TransportError as exc:
            timed_out = exc.cause == "timed out"
            if timed_out and self._base_timeout is not None:
                now = self._timeouts[index] or self._base_timeout
                self._timeouts[index] = min(2 * now, 8 * self._base_timeout)
            pool.release(lease, ok=False, congested=timed_out)
            raise exc.error(f"model {self.name!r}: {exc} from {url}", cause=exc.cause,
                            retryable=exc.retryable) from exc.__cause__
        except BaseException:  # cancelled or abandoned: stop the request too
            task.cancel()
            pool.release(lease, ok=False, strike=False, count=False)
            raise
        status = response.status
        if status != 200:
            detail = _error_detail(response.content)
            delay = _retry_after(response.headers) if status in (429, 503) else None
            retryable = status in _RETRY_STATUSES or status >= 500
            # a rate limit or a client error says nothing about the endpoint's health
            pool.release(lease, ok=False, strike=retryable and status != 429,
                         congested=status == 503, rate_limited=status == 429)
            what = "HTTP 429 rate limited" if status == 429 else f"HTTP {status}"
            raise ModelHTTPError(f"model {self.name!r}: {what}: {detail} from {url}",
                                 cause=f"HTTP {status}", retryable=retryable,
                                 retry_after=delay)
        try:
            texts, usage = _answer(response.content, n)
        except _Bad as exc:
            pool.release(lease, ok=False)
            raise ModelBadResponse(f"model {self.name!r}: {exc} from {url}", cause=exc.cause,
                                   retryable=True) from exc.__cause__
        pool.release(lease, ok=True)
        prompt_tokens, completion_tokens = self._usage(usage, url)
        reused = self._prefixes[lease.index].reused(_prompt_text(messages))
        latency = loop.time() - start
        first = Completion(texts[0], self.name, prompt_tokens, completion_tokens, latency, url,
                           cached_tokens=_cached_tokens(usage),
                           prefix_tokens=round(prompt_tokens * reused))
        if len(texts) == 1:
            return [first]
        share, extra = divmod(completion_tokens, len(texts))
        first.completion_tokens = share + extra
        return [first, *(Completion(text, self.name, 0, share, latency, url)
                         for text in texts[1:])]

    async def _await(self, task: asyncio.Task[Response], lease: Lease, timeout: float
                     ) -> Response:
        """The response of ``task``, waiting ``timeout`` seconds at a time for as long as
        the server shows it is computing: a request it is working on is not abandoned only
        to be sent again behind it."""
        while True:
            done, _ = await asyncio.wait((task,), timeout=timeout)
            if done:
                return task.result()
            computing, queued = await self._computing(lease.index)
            if not computing:
                task.cancel()
                raise TransportError(f"timed out after {timeout:g} s, the server idle",
                                     cause="timed out", error=ModelTimeout)
            if queued:  # requests wait in the server: fewer of ours should be there
                self.pool.congest(lease)
            self.waited += 1

    async def _computing(self, index: int) -> tuple[bool, bool]:
        """Whether the server behind endpoint ``index`` is computing requests now, and
        whether requests wait in its queue, as its kind's :class:`~populace.llm.BusyProbe`
        reads them (llama.cpp's ``/slots``, vLLM's ``/metrics``, serve-llm's ``/stats``)."""
        busy = self.kind.busy
        assert busy is not None  # only servers with a probe are waited for
        root = self.pool.urls[index].removesuffix("/v1")
        try:  # in a Task of its own, as the request: agents are driven without one
            answer = await asyncio.create_task(
                self.transport.get(root + busy.path, self.headers, timeout=5.0))
        except TransportError:
            return False, False
        if answer.status != 200:
            return False, False
        try:
            return busy.read(answer.content)
        except (ValueError, TypeError, AttributeError, IndexError):
            return False, False

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
        self.anomalies += 1
        if self.anomalies == 1:  # once per client: a server that does it once does it always
            log.warning("model %r: %s sent malformed usage %.200r; its tokens are counted as 0",
                        self.name, url, usage)
        return pt or 0, ct or 0

    def endpoint_statistics(self) -> tuple[EndpointStats, ...]:
        return self.pool.statistics()

    async def aclose(self) -> None:
        self.pool.close()
        await self.transport.aclose()


class OpenAIModel(Wrapper):
    """A :class:`~populace.llm.ModelClient` over OpenAI-compatible HTTP servers.

    >>> model = OpenAIModel("qwen", model="Qwen/Qwen2.5-7B-Instruct",
    ...                     base_urls=["http://gpu1:8000/v1", "http://gpu2:8000/v1"])
    >>> async def ask():
    ...     c = await model.complete([{"role": "user", "content": "Pick a number"}], seed=1)
    ...     return c.text

    ``base_urls`` are API roots (ending in ``/v1`` for most servers). ``max_concurrency``
    bounds requests in flight per endpoint; callers beyond it queue. With ``adaptive`` (the
    default) each endpoint's limit moves between ``min_concurrency`` and ``max_concurrency``
    by additive increase and multiplicative decrease on 429s, 503s and timeouts (see
    :class:`~populace.llm.EndpointPool`). Requests are routed by a hash of their leading
    system messages (:func:`affinity_key`) so each server's prefix cache stays hot, with
    bounded load. With ``coalesce``, identical calls made at the same moment go as one
    request for ``n`` answers (see :class:`~populace.llm.Coalescing`). ``timeout`` bounds one
    attempt (connect to last byte), not the time spent queued; after a timeout, an
    endpoint's attempts get twice as long (up to 8 × ``timeout``), so a server slower than
    the timeout is waited for instead of being asked again and again. A failed attempt is
    retried
    up to ``max_retries`` times with exponential backoff and jitter (starting at ``backoff``
    seconds, at most ``max_backoff``); the ``Retry-After`` of a 429 or 503 is honoured up to
    ``max_retry_after`` seconds. Client errors (400, 401, 404...) are not retried.
    ``temperature``, ``top_p`` and ``max_tokens`` are defaults that per-call arguments
    override. A completion's ``latency_s`` spans the whole call: queueing, every attempt and
    the waits between them.

    ``usage`` counts that are not counts (negative, fractional, strings, booleans) are taken
    as 0 and counted in :attr:`protocol_anomalies`, so a misbehaving server cannot corrupt
    the token totals; a content that is a bare number is read as its text.

    It is :class:`OpenAIChat` (one attempt) under :class:`~populace.llm.Retrying` under
    :class:`~populace.llm.Counted`. ``transport``: how requests travel (default: aiohttp;
    :class:`~populace.llm.MockTransport` in tests). The client binds to the event loop of its
    first call; build one per worker (``PerWorker(OpenAIModel, ...)``) and
    ``await model.aclose()`` at the end.
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
        min_concurrency: int = 1,
        adaptive: bool = True,
        temperature: float | None = None,
        top_p: float | None = None,
        max_tokens: int | None = None,
        eject_after: int = 5,
        cooldown: float = 10.0,
        backoff: float = 0.25,
        max_backoff: float = 8.0,
        max_retry_after: float = 30.0,
        retry_deadline: float | None = None,
        transport: Transport | None = None,
        server: str = "auto",
        coalesce: bool = False,
    ) -> None:
        if isinstance(base_urls, str):
            base_urls = [base_urls]
        urls = [u.rstrip("/") for u in base_urls]
        for u in urls:
            if not u.startswith(("http://", "https://")):
                raise ValueError(f"base URL must start with http:// or https://, got {u!r}")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0, got {timeout}")
        pool = EndpointPool(urls, max_concurrency=max_concurrency, eject_after=eject_after,
                            cooldown=cooldown, adaptive=adaptive,
                            min_concurrency=min_concurrency)
        if transport is None:
            transport = AiohttpTransport(timeout=timeout,
                                         connections=max_concurrency * len(urls))
        self.chat = OpenAIChat(name, model=model, base_urls=urls, pool=pool,
                               transport=transport, api_key=api_key, temperature=temperature,
                               top_p=top_p, max_tokens=max_tokens, server=server,
                               timeout=timeout)
        self.retrying = Retrying(self.chat, max_retries=max_retries, backoff=backoff,
                                 max_backoff=max_backoff, max_retry_after=max_retry_after,
                                 retry_deadline=retry_deadline)
        super().__init__(Counted(Coalescing(self.retrying) if coalesce else self.retrying))
        self.model = model
        self.timeout = timeout

    def __repr__(self) -> str:
        return (f"OpenAIModel({self.name!r}, model={self.model!r}, "
                f"base_urls={self.chat.pool.urls!r})")

    def body(self, request: Request) -> dict[str, Any]:
        """The chat completion request for ``request`` (what a call sends; a batch job
        sends the same)."""
        return self.chat.body(request)

    @property
    def protocol_anomalies(self) -> int:
        """Successful responses whose ``usage`` was malformed (its tokens counted as 0)."""
        return self.chat.anomalies
