"""A small OpenAI-compatible HTTP server: ``populace serve-llm``, dry runs and tests.

It answers like a chat model would in the guess-the-number game, without any model: a
seeded random number, a short reasoning sentence ending in "The answer is N", an echo, or
(policy ``scripted``) the prompt-dependent rule of :mod:`populace.llm._scripted`;
asked to extract the number from a reply ("Extract ... The answer is N"), it answers "The
answer is <the number in the reply>".

Latency, HTTP 500s, 429s with ``Retry-After``, hung requests and truncated JSON bodies can
be injected at chosen rates, reproducibly: the fate and latency of the *i*-th request depend
only on the server seed and *i*, and the number answered depends only on the request's
``seed`` (the same number :class:`~populace.llm.DummyModel` answers for that seed). An
outage (every completion answered 503 for a while) can be scheduled too.

Endpoints: ``GET /v1/models``, ``POST /v1/chat/completions``, ``POST /v1/completions``,
``GET /health`` and ``GET /stats`` (request counters, as JSON).

>>> async def demo():
...     async with running_server(ServerOptions(latency=0.05)) as base_url:
...         ...  # base_url == "http://127.0.0.1:<port>/v1"
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

from aiohttp import web

from populace.core import derive_seed, mix64, unit_float

from ._replies import extraction, json_answer, text_of, words
from ._scripted import ScriptedParams, scripted_reply

log = logging.getLogger("populace.llm.server")

Policy = Literal["random", "reasoning", "echo", "scripted"]
_POLICIES = ("random", "reasoning", "echo", "scripted")

# Salts that keep the seeded draws of one request independent of each other.
_FATE, _LATENCY, _ID, _NUMBER, _SENTENCE = range(5)

_REASONS = (
    "Most players will not think many steps ahead, so I aim a little below the crowd.",
    "If everyone picked at random the average would be near the middle, so I go lower.",
    "Others will reason one level deep; reasoning one level further, I shade my guess down.",
    "I expect the average to shrink as players anticipate each other, so I pick below it.",
    "Balancing naive and strategic players, I settle on a moderate guess.",
)



@dataclass(frozen=True)
class ServerOptions:
    """How the server behaves; every field has a harmless default.

    ``latency`` is a fixed number of seconds or a ``(low, high)`` uniform range. The
    ``rate_*`` fields are probabilities per completion request (their sum must not exceed
    1): ``rate_500`` answers HTTP 500, ``rate_429`` answers 429 with ``Retry-After:
    retry_after``, ``rate_timeout`` holds the request for ``timeout_sleep`` seconds (far past
    any client timeout), ``rate_malformed`` answers 200 with a truncated JSON body. With
    ``api_key`` set, requests must carry ``Authorization: Bearer <api_key>``. ``outage``
    ``(start, duration)``: from ``start`` to ``start + duration`` seconds after the first
    completion request, every completion request is answered 503 with ``Retry-After:
    retry_after`` (a model down behind its gateway); those answers do not count as requests
    (the fates of the others stay as without the outage).
    """

    models: Sequence[str] = ("dummy",)
    latency: float | tuple[float, float] = 0.0
    policy: Policy = "random"
    low: int = 0
    high: int = 100
    rate_500: float = 0.0
    rate_429: float = 0.0
    rate_timeout: float = 0.0
    rate_malformed: float = 0.0
    retry_after: float = 1.0
    timeout_sleep: float = 3600.0
    seed: int = 0
    api_key: str | None = None
    outage: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        models = (self.models,) if isinstance(self.models, str) else tuple(self.models)
        if not models or not all(isinstance(m, str) and m for m in models):
            raise ValueError(f"models must be non-empty names, got {self.models!r}")
        object.__setattr__(self, "models", models)
        lat = self.latency
        if isinstance(lat, tuple | list):
            if len(lat) != 2 or not 0 <= lat[0] <= lat[1]:
                raise ValueError(f"latency range must be (low, high) with 0 <= low <= high, "
                                 f"got {lat!r}")
            object.__setattr__(self, "latency", (float(lat[0]), float(lat[1])))
        elif lat < 0:
            raise ValueError(f"latency must be >= 0, got {lat}")
        if self.policy not in _POLICIES:
            raise ValueError(f"policy must be one of {', '.join(_POLICIES)}, got {self.policy!r}")
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        rates = (self.rate_500, self.rate_429, self.rate_timeout, self.rate_malformed)
        if any(not 0 <= r <= 1 for r in rates) or sum(rates) > 1 + 1e-9:
            raise ValueError(f"error rates must lie in [0, 1] and sum to at most 1, got {rates}")
        if self.retry_after < 0 or self.timeout_sleep < 0:
            raise ValueError("retry_after and timeout_sleep must be >= 0")
        if self.outage is not None:
            if len(self.outage) != 2 or not all(x >= 0 for x in self.outage):
                raise ValueError(f"outage must be (start, duration) with both >= 0, "
                                 f"got {self.outage!r}")
            object.__setattr__(self, "outage", (float(self.outage[0]), float(self.outage[1])))


class _State:
    """Counters behind ``GET /stats``."""

    __slots__ = ("first", "in_flight", "injected", "models", "requests", "status")

    def __init__(self) -> None:
        self.requests = 0  # completion requests received; also the index of the next one
        self.in_flight = 0
        self.status: Counter[str] = Counter()
        self.injected: Counter[str] = Counter()
        self.models: Counter[str] = Counter()
        self.first: float | None = None  # when the first completion request came

    def as_json(self) -> dict[str, Any]:
        return {"requests": self.requests, "in_flight": self.in_flight,
                "status": dict(self.status), "injected": dict(self.injected),
                "models": dict(self.models)}


_OPTIONS = web.AppKey("options", ServerOptions)
_STATE = web.AppKey("state", _State)


# -- answers ---------------------------------------------------------------------------------
def _answer(options: ServerOptions, messages: list[dict[str, Any]], seed: int,
            response_format: Any, temperature: Any = None) -> str:
    """What the fake model says, determined by ``options``, ``messages`` and ``seed``
    (and, for the scripted policy, ``temperature``)."""
    if options.policy == "scripted":
        t = float(temperature) if isinstance(temperature, int | float) else None
        return scripted_reply(messages, seed=seed, temperature=t,
                              response_format=response_format,
                              params=ScriptedParams(low=options.low, high=options.high))
    if options.policy == "echo":
        last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
        return text_of(last.get("content")) if last is not None else ""
    extracted = extraction(messages)
    reason = _REASONS[mix64(derive_seed(seed, _SENTENCE)) % len(_REASONS)]
    if extracted is not None:
        number: int | str = extracted
        reason = "I read the number stated in the reply."
    else:
        number = options.low + mix64(seed) % (options.high - options.low + 1)
    structured = isinstance(response_format, dict) and response_format.get("type") in (
        "json_schema", "json_object")
    if structured:
        return json_answer(response_format, reason, number)
    if extracted is not None:
        return f"The answer is {number}"
    if options.policy == "reasoning":
        return f"{reason} The answer is {number}."
    return str(number)


def _truncate(text: str, max_tokens: Any) -> tuple[str, str]:
    """Cut ``text`` to ``max_tokens`` words; returns ``(text, finish_reason)``."""
    if type(max_tokens) is int and max_tokens > 0:
        words = text.split()
        if len(words) > max_tokens:
            return " ".join(words[:max_tokens]), "length"
    return text, "stop"


# -- HTTP plumbing ---------------------------------------------------------------------------
def _json(state: _State, payload: Any, status: int = 200,
          headers: dict[str, str] | None = None) -> web.Response:
    state.status[str(status)] += 1
    return web.Response(body=json.dumps(payload).encode(), status=status, headers=headers,
                        content_type="application/json")


def _error(state: _State, status: int, message: str, kind: str, *, code: str | None = None,
           param: str | None = None, headers: dict[str, str] | None = None) -> web.Response:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return _json(state, body, status, headers)


async def _admit(request: web.Request) -> tuple[dict[str, Any], str] | web.Response:
    """Authenticate, parse and check the model of a completion request."""
    options, state = request.app[_OPTIONS], request.app[_STATE]
    if options.api_key is not None:
        if request.headers.get("Authorization") != f"Bearer {options.api_key}":
            return _error(state, 401, "Incorrect API key provided.", "invalid_request_error",
                          code="invalid_api_key")
    try:
        body = json.loads(await request.read())
    except ValueError:
        return _error(state, 400, "We could not parse the JSON body of your request.",
                      "invalid_request_error")
    if not isinstance(body, dict):
        return _error(state, 400, "The request body must be a JSON object.",
                      "invalid_request_error")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return _error(state, 400, "you must provide a model parameter", "invalid_request_error",
                      param="model")
    if model not in options.models:
        return _error(state, 404, f"The model `{model}` does not exist or you do not have "
                      f"access to it. Served models: {', '.join(options.models)}.",
                      "invalid_request_error", code="model_not_found", param="model")
    if body.get("stream"):
        return _error(state, 400, "stream=true is not supported by this server.",
                      "invalid_request_error", param="stream")
    return body, model


def _seconds(after: float) -> str:
    """A ``Retry-After`` value: ``1``, not ``1.0``."""
    return str(int(after)) if after == int(after) else f"{after:g}"


async def _complete(request: web.Request, messages: list[dict[str, Any]], body: dict[str, Any],
                    model: str, legacy: bool) -> web.Response:
    """Shared by both completion endpoints once the request is valid."""
    options, state = request.app[_OPTIONS], request.app[_STATE]
    now = time.monotonic()
    if state.first is None:
        state.first = now
    if options.outage is not None and 0 <= now - state.first - options.outage[0] \
            < options.outage[1]:
        state.injected["outage"] += 1
        return _error(state, 503, "Injected outage: the model is unavailable.", "server_error",
                      headers={"Retry-After": _seconds(options.retry_after)})
    index = state.requests
    state.requests += 1
    state.models[model] += 1
    state.in_flight += 1
    try:
        fate = unit_float(derive_seed(options.seed, index, _FATE))
        edge = options.rate_timeout
        if fate < edge:
            state.injected["timeout"] += 1
            await asyncio.sleep(options.timeout_sleep)
            return _error(state, 504, "Injected timeout elapsed.", "server_error")
        edge += options.rate_500
        if fate < edge:
            state.injected["500"] += 1
            return _error(state, 500, "Injected internal server error.", "server_error")
        edge += options.rate_429
        if fate < edge:
            state.injected["429"] += 1
            return _error(state, 429, "Injected rate limit; retry later.", "rate_limit_error",
                          headers={"Retry-After": _seconds(options.retry_after)})
        malformed = fate < edge + options.rate_malformed
        lat = options.latency
        if isinstance(lat, tuple):
            delay = lat[0] + (lat[1] - lat[0]) * unit_float(
                derive_seed(options.seed, index, _LATENCY))
        else:
            delay = lat
        if delay > 0:
            await asyncio.sleep(delay)

        seed = body.get("seed")
        if type(seed) is not int:
            seed = derive_seed(options.seed, index, _NUMBER)
        n = body.get("n")
        n = n if type(n) is int and 1 <= n <= 128 else 1
        max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
        prompt_tokens = sum(words(text_of(m.get("content"))) for m in messages)
        choices = []
        completion_tokens = 0
        for k in range(n):
            text = _answer(options, messages, seed if k == 0 else derive_seed(seed, k),
                           body.get("response_format"), body.get("temperature"))
            text, finish = _truncate(text, max_tokens)
            completion_tokens += words(text)
            if legacy:
                choices.append({"index": k, "text": text, "logprobs": None,
                                "finish_reason": finish})
            else:
                choices.append({"index": k, "message": {"role": "assistant", "content": text},
                                "logprobs": None, "finish_reason": finish})
        payload = {
            "id": f"{'cmpl' if legacy else 'chatcmpl'}-{derive_seed(options.seed, index, _ID):x}",
            "object": "text_completion" if legacy else "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": choices,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
            "system_fingerprint": "populace-serve-llm",
        }
        if malformed:
            state.injected["malformed"] += 1
            raw = json.dumps(payload).encode()
            state.status["200"] += 1
            return web.Response(body=raw[: len(raw) // 2], content_type="application/json")
        return _json(state, payload)
    finally:
        state.in_flight -= 1


async def _chat(request: web.Request) -> web.Response:
    admitted = await _admit(request)
    if isinstance(admitted, web.Response):
        return admitted
    body, model = admitted
    messages = body.get("messages")
    if (not isinstance(messages, list) or not messages
            or not all(isinstance(m, dict) for m in messages)):
        return _error(request.app[_STATE], 400, "messages must be a non-empty list of objects",
                      "invalid_request_error", param="messages")
    return await _complete(request, messages, body, model, legacy=False)


async def _legacy(request: web.Request) -> web.Response:
    admitted = await _admit(request)
    if isinstance(admitted, web.Response):
        return admitted
    body, model = admitted
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        return _error(request.app[_STATE], 400, "prompt must be a string",
                      "invalid_request_error", param="prompt")
    return await _complete(request, [{"role": "user", "content": prompt}], body, model,
                           legacy=True)


async def _models(request: web.Request) -> web.Response:
    options = request.app[_OPTIONS]
    if options.api_key is not None and (request.headers.get("Authorization")
                                        != f"Bearer {options.api_key}"):
        return _error(request.app[_STATE], 401, "Incorrect API key provided.",
                      "invalid_request_error", code="invalid_api_key")
    created = int(time.time())
    data = [{"id": m, "object": "model", "created": created, "owned_by": "populace"}
            for m in request.app[_OPTIONS].models]
    return web.json_response({"object": "list", "data": data})


async def _health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def _stats(request: web.Request) -> web.Response:
    return web.json_response(request.app[_STATE].as_json())


def create_app(options: ServerOptions | None = None) -> web.Application:
    """The aiohttp application serving ``options`` (run it with any aiohttp runner)."""
    app = web.Application(client_max_size=16 * 1024 * 1024)
    app[_OPTIONS] = options if options is not None else ServerOptions()
    app[_STATE] = _State()
    app.router.add_get("/v1/models", _models)
    app.router.add_post("/v1/chat/completions", _chat)
    app.router.add_post("/v1/completions", _legacy)
    app.router.add_get("/health", _health)
    app.router.add_get("/stats", _stats)
    return app


@asynccontextmanager
async def running_server(options: ServerOptions | None = None, host: str = "127.0.0.1",
                         port: int = 0, *, shutdown_timeout: float = 1.0
                         ) -> AsyncIterator[str]:
    """Serve on ``host:port`` (0: any free port) while the block runs; yields the base URL.

    >>> async def demo():
    ...     async with running_server(ServerOptions(policy="echo")) as url:
    ...         ...  # url == "http://127.0.0.1:PORT/v1"
    """
    runner = web.AppRunner(create_app(options), access_log=None, handler_cancellation=True,
                           shutdown_timeout=shutdown_timeout)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound_host, bound_port = runner.addresses[0][:2]
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        yield f"http://{shown}:{bound_port}/v1"
    finally:
        await runner.cleanup()


async def serve(host: str = "127.0.0.1", port: int = 8000, options: ServerOptions | None = None,
                *, ready: Callable[[str], None] | None = None) -> None:
    """Serve until cancelled (Ctrl-C in ``populace serve-llm``); ``ready`` gets the base URL."""
    options = options if options is not None else ServerOptions()
    async with running_server(options, host, port, shutdown_timeout=5.0) as url:
        log.info("serving %s at %s", ", ".join(options.models), url)
        if ready is not None:
            ready(url)
        await asyncio.Event().wait()
