"""A small OpenAI-compatible HTTP server: ``populace serve-llm``, dry runs and tests.

It answers like a chat model would in the guess-the-number game, without any model: a
seeded random number, a short reasoning sentence ending in "The answer is N", an echo, or
(policy ``scripted``) the prompt-dependent rules of :func:`~populace.llm.offline.scripted_reply`;
asked to extract the number from a reply ("Extract ... The answer is N"), it answers "The
answer is <the number in the reply>".

Latency, HTTP 500s, 429s with ``Retry-After``, hung requests and truncated JSON bodies can
be injected at chosen rates, reproducibly: the fate and latency of the *i*-th request depend
only on the server seed and *i*, and the number answered depends only on the request's
``seed`` (the same number :class:`~populace.llm.offline.DummyModel` answers for that seed). An
outage (every completion answered 503 for a while) can be scheduled too, and a concurrency
cap the server does not advertise (``max_running``: 429 beyond it).

With ``engine`` set, the completions are timed by a simulated GPU inference engine
(:mod:`populace.llm.offline._engine`: continuous batching, a prefix cache): the same answers, each
returned once the engine has run it, with the engine's token counts in ``usage`` (and
``prompt_tokens_details.cached_tokens``); ``GET /stats`` then has an ``engine`` section and
``GET /props`` tells the engine's capacity as llama.cpp's server does (``total_slots``).

Endpoints: ``GET /v1/models``, ``POST /v1/chat/completions``, ``POST /v1/completions``,
``GET /health``, ``GET /stats`` (request counters, as JSON), ``GET /props`` (with an engine);
and batch jobs as the OpenAI Batch API runs them: ``POST /v1/files`` (multipart
``purpose=batch``, ``file``), ``GET /v1/files[/{id}[/content]]``, ``DELETE /v1/files/{id}``,
``POST /v1/batches``, ``GET /v1/batches[/{id}]`` and ``POST /v1/batches/{id}/cancel``. A
batch's requests are answered in the background, one after another over ``batch_latency``
seconds, each as the chat endpoint answers it (the same fate and text; no latency, outage
or engine): successes go to the batch's output file, failures (injected 500s, an unknown
model) to its error file, as OpenAI does. :func:`run_batch` answers an input file offline
instead, writing vLLM's ``run_batch`` output format (``populace run-batch``).

>>> async def demo():
...     async with running_server(ServerOptions(latency=0.05)) as base_url:
...         ...  # base_url == "http://127.0.0.1:<port>/v1"
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from aiohttp import BodyPartReader, web

from populace._strict import MAX_LATENCY_S, MAX_TIMEOUT_S
from populace.core import derive_seed, mix64, unit_float

from .._base import text_of
from .._batchfile import (
    CHAT_URL,
    InputProblem,
    encode_lines,
    parse_input,
    read_input,
    result_line,
    write_output,
)
from ._engine import Engine, EngineParams, chat_tokens, text_tokens
from ._reasoning import reasoning_length, reasoning_text
from ._replies import extracted_number, find_number, json_answer, words
from ._scripted import ScriptedParams, scripted_reply, scripted_rules

log = logging.getLogger("populace.llm.server")

Policy = Literal["random", "reasoning", "echo", "scripted"]
_POLICIES = ("random", "reasoning", "echo", "scripted")

# Salts that keep the seeded draws of one request independent of each other.
_FATE, _LATENCY, _ID, _NUMBER, _SENTENCE, _LINE_ID, _REQUEST_ID, _OBJECT_ID = range(8)

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
    (the fates of the others stay as without the outage). ``batch_latency``: the seconds a
    batch job takes to answer all its requests (spread evenly over them). Latencies are at
    most 3600 seconds, the other times at most 86400 (a day).

    ``batch_faults``: how the batches created end, the i-th entry for the i-th batch (those
    past the list complete): ``"ok"``; ``"expired:F"``, ``"failed:F"`` or ``"cancelled:F"``
    (the batch ends so after answering the share F of its requests, in order, their answers
    in its output file as OpenAI keeps them); ``"hold:S"`` (``POST /v1/batches`` creates the
    batch, which runs normally, but answers only S seconds later: a client killed in
    between has lost the batch's id, not the batch); ``"drop"`` (the batch is created and
    runs, but ``POST /v1/batches`` answers 502, as a gateway losing the answer would).

    ``engine``: time completions on a simulated inference engine with these parameters (the
    ``latency`` comes first, as a network's would; batch jobs do not use the engine).
    ``max_running``: a completion request arriving while that many are in flight is
    answered 429 with ``Retry-After: retry_after``, not counted as a request.

    ``reasoning_tokens``: with policy ``reasoning``, a prompt that asks to think "step by
    step" is answered with that many tokens of reasoning drawn from the request's seed
    (a number, or uniform in a ``(low, high)`` range), unique per seed, as a model
    thinking aloud would; 0 answers one canned sentence, as any other prompt.
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
    batch_latency: float = 0.5
    engine: EngineParams | None = None
    max_running: int | None = None
    batch_faults: Sequence[str] = ()
    reasoning_tokens: int | tuple[int, int] = (100, 300)

    def __post_init__(self) -> None:
        models = (self.models,) if isinstance(self.models, str) else tuple(self.models)
        if not models or not all(isinstance(m, str) and m for m in models):
            raise ValueError(f"models must be non-empty names, got {self.models!r}")
        object.__setattr__(self, "models", models)
        lat = self.latency
        if isinstance(lat, tuple | list):
            if len(lat) != 2 or not all(_within(x, MAX_LATENCY_S) for x in lat) or \
                    not lat[0] <= lat[1]:
                raise ValueError(f"latency range must be (low, high) with 0 <= low <= high <= "
                                 f"{MAX_LATENCY_S:g} seconds, got {lat!r}")
            object.__setattr__(self, "latency", (float(lat[0]), float(lat[1])))
        elif not _within(lat, MAX_LATENCY_S):
            raise ValueError(f"latency must be from 0 to {MAX_LATENCY_S:g} seconds, got {lat}")
        if self.policy not in _POLICIES:
            raise ValueError(f"policy must be one of {', '.join(_POLICIES)}, got {self.policy!r}")
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        rates = (self.rate_500, self.rate_429, self.rate_timeout, self.rate_malformed)
        if any(not 0 <= r <= 1 for r in rates) or sum(rates) > 1 + 1e-9:
            raise ValueError(f"error rates must lie in [0, 1] and sum to at most 1, got {rates}")
        for name in ("retry_after", "timeout_sleep", "batch_latency"):
            if not _within(getattr(self, name), MAX_TIMEOUT_S):
                raise ValueError(f"{name} must be from 0 to {MAX_TIMEOUT_S:g} seconds, got "
                                 f"{getattr(self, name)}")
        if self.outage is not None:
            if len(self.outage) != 2 or not all(x >= 0 for x in self.outage):
                raise ValueError(f"outage must be (start, duration) with both >= 0, "
                                 f"got {self.outage!r}")
            if not all(_within(x, MAX_TIMEOUT_S) for x in self.outage):
                raise ValueError(f"outage must be (start, duration) with both at most "
                                 f"{MAX_TIMEOUT_S:g} seconds, got {self.outage!r}")
            object.__setattr__(self, "outage", (float(self.outage[0]), float(self.outage[1])))
        if self.engine is not None and not isinstance(self.engine, EngineParams):
            raise ValueError(f"engine must be EngineParams or None, got {self.engine!r}")
        if self.max_running is not None and (type(self.max_running) is not int
                                             or self.max_running < 1):
            raise ValueError(f"max_running must be an integer >= 1, got {self.max_running!r}")
        tokens = self.reasoning_tokens
        span = tuple(tokens) if isinstance(tokens, tuple | list) else (tokens, tokens)
        if len(span) != 2 or not all(type(t) is int and 0 <= t <= _MOST_REASONING
                                     for t in span) or span[0] > span[1]:
            raise ValueError(f"reasoning_tokens must be a number of tokens or a (low, high) "
                             f"range, from 0 to {_MOST_REASONING}, got {tokens!r}")
        if isinstance(tokens, list):
            object.__setattr__(self, "reasoning_tokens", span)
        faults = (self.batch_faults,) if isinstance(self.batch_faults, str) \
            else tuple(self.batch_faults)
        for fault in faults:
            _batch_fault(fault)
        object.__setattr__(self, "batch_faults", faults)


_FAULTS = ("expired", "failed", "cancelled", "hold")
_MOST_REASONING = 100_000


def _batch_fault(fault: Any) -> tuple[str, float]:
    """An entry of ``ServerOptions.batch_faults`` as ``(kind, number)``; a ValueError names a
    bad one."""
    kind, _, number = fault.partition(":") if isinstance(fault, str) else ("", "", "")
    if kind in ("ok", "drop") and not number:
        return kind, 1.0
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    most = MAX_TIMEOUT_S if kind == "hold" else 1.0
    if kind not in _FAULTS or not 0 <= value <= most:
        raise ValueError(f"batch_faults entries are ok, expired:F, failed:F, cancelled:F (F a "
                         f"share from 0 to 1), hold:S (seconds) or drop, got {fault!r}")
    return kind, value


def _within(seconds: Any, most: float) -> bool:
    """A number of seconds from 0 to ``most`` (not NaN, not a boolean)."""
    return isinstance(seconds, int | float) and not isinstance(seconds, bool) and \
        0 <= seconds <= most


class _State:
    """Counters behind ``GET /stats``."""

    __slots__ = ("batch_requests", "first", "hung", "in_flight", "injected", "models",
                 "requests", "status")

    def __init__(self) -> None:
        self.requests = 0  # completion requests received; also the index of the next one
        self.batch_requests = 0  # of those, the ones answered inside batches
        self.in_flight = 0
        self.hung = 0  # of those, held by an injected timeout: not being computed
        self.status: Counter[str] = Counter()
        self.injected: Counter[str] = Counter()
        self.models: Counter[str] = Counter()
        self.first: float | None = None  # when the first completion request came

    def as_json(self) -> dict[str, Any]:
        return {"requests": self.requests, "batch_requests": self.batch_requests,
                "in_flight": self.in_flight, "computing": self.in_flight - self.hung,
                "status": dict(self.status),
                "injected": dict(self.injected), "models": dict(self.models)}


_OPTIONS = web.AppKey("options", ServerOptions)
_STATE = web.AppKey("state", _State)
_ENGINE = web.AppKey("engine", Engine)  # only with ServerOptions.engine


# -- answers ---------------------------------------------------------------------------------
def _answer(options: ServerOptions, messages: list[dict[str, Any]], seed: int,
            response_format: Any, temperature: Any = None) -> str:
    """What the fake model says, determined by ``options``, ``messages`` and ``seed``
    (and, for the scripted policy, ``temperature``)."""
    if isinstance(response_format, dict) and response_format.get("type") in ("choice",
                                                                             "regex"):
        return _held(_answer(options, messages, seed, None, temperature), response_format,
                     seed)
    if options.policy == "scripted":
        t = float(temperature) if isinstance(temperature, int | float) else None
        return scripted_reply(messages, seed=seed, temperature=t,
                              response_format=response_format,
                              params=ScriptedParams(low=options.low, high=options.high))
    if options.policy == "echo":
        last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
        return text_of(last.get("content")) if last is not None else ""
    extracted = extracted_number(messages)
    reason = _REASONS[mix64(derive_seed(seed, _SENTENCE)) % len(_REASONS)]
    if extracted is not None:
        number: int | str = extracted
        reason = "I read the number stated in the reply."
    else:
        number = options.low + mix64(seed) % (options.high - options.low + 1)
        if options.policy == "reasoning" and any(
                "step by step" in text_of(m.get("content")).lower() for m in messages):
            length = reasoning_length(seed, options.reasoning_tokens)
            if length:
                reason = reasoning_text(seed, length, number, options.low, options.high)
    structured = isinstance(response_format, dict) and response_format.get("type") in (
        "json_schema", "json_object")
    if structured:
        return json_answer(response_format, reason, number)
    if extracted is not None:
        return f"The answer is {number}"
    if options.policy == "reasoning":
        return reason if reason.endswith(f"The answer is {number}.") \
            else f"{reason} The answer is {number}."
    return str(number)


def _wanted(body: dict[str, Any]) -> Any:
    """The answer's required form in any server's spelling (see
    :class:`populace.llm.ServerKind`), as a ``response_format``: OpenAI's, vLLM's
    ``structured_outputs`` (``json``, ``regex``, ``choice``), SGLang's ``regex``,
    llama.cpp's ``json_schema``."""
    spec = body.get("structured_outputs")
    if isinstance(spec, dict):
        if "json" in spec:
            return {"type": "json_schema", "json_schema": {"schema": spec["json"]}}
        if isinstance(spec.get("choice"), list) and spec["choice"]:
            return {"type": "choice", "choice": spec["choice"]}
        if isinstance(spec.get("regex"), str):
            return {"type": "regex", "regex": spec["regex"]}
    if isinstance(body.get("json_schema"), dict):
        return {"type": "json_schema", "json_schema": {"schema": body["json_schema"]}}
    if isinstance(body.get("regex"), str):
        return {"type": "regex", "regex": body["regex"]}
    return body.get("response_format")


def _held(text: str, wanted: Any, seed: int) -> str:
    """``text`` held to a ``choice`` or ``regex`` form: the number it settles on (a choice
    equal to it, else a seeded one)."""
    number = find_number(text)
    if wanted.get("type") == "regex":
        return number if number is not None else "0"
    choices = [str(c) for c in wanted["choice"]]
    if number is not None and number in choices:
        return number
    return choices[mix64(derive_seed(seed, _SENTENCE)) % len(choices)]


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


def _error_body(message: str, kind: str, code: str | None = None,
                param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _error(state: _State, status: int, message: str, kind: str, code: str | None = None,
           param: str | None = None, *, headers: dict[str, str] | None = None
           ) -> web.Response:
    return _json(state, _error_body(message, kind, code, param), status, headers)


class _Refusal(NamedTuple):
    """A request the chat endpoint refuses before answering."""

    status: int
    message: str
    kind: str
    code: str | None = None
    param: str | None = None


# Injected failures answered without a completion: status, message, error type.
_INJECTED = {
    "timeout": (504, "Injected timeout elapsed.", "server_error"),
    "500": (500, "Injected internal server error.", "server_error"),
    "429": (429, "Injected rate limit; retry later.", "rate_limit_error"),
}


def _unauthorized(request: web.Request) -> bool:
    key = request.app[_OPTIONS].api_key
    return key is not None and request.headers.get("Authorization") != f"Bearer {key}"


def _refusal(options: ServerOptions, body: dict[str, Any]) -> _Refusal | None:
    """Why a parsed completion request is refused (its model, streaming); None: answer it."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return _Refusal(400, "you must provide a model parameter", "invalid_request_error",
                        param="model")
    if model not in options.models:
        return _Refusal(404, f"The model `{model}` does not exist or you do not have "
                        f"access to it. Served models: {', '.join(options.models)}.",
                        "invalid_request_error", code="model_not_found", param="model")
    if body.get("stream"):
        return _Refusal(400, "stream=true is not supported by this server.",
                        "invalid_request_error", param="stream")
    return None


def _chat_messages(body: dict[str, Any]) -> list[dict[str, Any]] | _Refusal:
    messages = body.get("messages")
    if (not isinstance(messages, list) or not messages
            or not all(isinstance(m, dict) for m in messages)):
        return _Refusal(400, "messages must be a non-empty list of objects",
                        "invalid_request_error", param="messages")
    return messages


async def _admit(request: web.Request) -> tuple[dict[str, Any], str] | web.Response:
    """Authenticate, parse and check the model of a completion request."""
    options, state = request.app[_OPTIONS], request.app[_STATE]
    if _unauthorized(request):
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
    refused = _refusal(options, body)
    if refused is not None:
        return _error(state, *refused)
    return body, body["model"]


def _seconds(after: float) -> str:
    """A ``Retry-After`` value: ``1``, not ``1.0``."""
    return str(int(after)) if after == int(after) else f"{after:g}"


def _fate(options: ServerOptions, index: int) -> str:
    """What happens to the ``index``-th request: a key of ``_INJECTED``, "malformed" or
    "ok"."""
    fate = unit_float(derive_seed(options.seed, index, _FATE))
    edge = 0.0
    for kind, rate in (("timeout", options.rate_timeout), ("500", options.rate_500),
                       ("429", options.rate_429), ("malformed", options.rate_malformed)):
        edge += rate
        if fate < edge:
            return kind
    return "ok"


def _completion(options: ServerOptions, index: int, body: dict[str, Any],
                messages: list[dict[str, Any]], model: str, legacy: bool) -> dict[str, Any]:
    """The completion object answering the ``index``-th request."""
    seed = body.get("seed")
    if type(seed) is not int:
        seed = derive_seed(options.seed, index, _NUMBER)
    n = body.get("n")
    n = n if type(n) is int and 1 <= n <= 128 else 1
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
    prompt_tokens = sum(words(text_of(m.get("content"))) for m in messages)
    wanted = _wanted(body)
    choices = []
    completion_tokens = 0
    for k in range(n):
        text = _answer(options, messages, seed if k == 0 else derive_seed(seed, k),
                       wanted, body.get("temperature"))
        text, finish = _truncate(text, max_tokens)
        completion_tokens += words(text)
        if legacy:
            choices.append({"index": k, "text": text, "logprobs": None,
                            "finish_reason": finish})
        else:
            choices.append({"index": k, "message": {"role": "assistant", "content": text},
                            "logprobs": None, "finish_reason": finish})
    return {
        "id": f"{'cmpl' if legacy else 'chatcmpl'}-{derive_seed(options.seed, index, _ID):x}",
        "object": "text_completion" if legacy else "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
        "system_fingerprint": "populace-serve-llm",
    }


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
    if options.max_running is not None and state.in_flight >= options.max_running:
        state.injected["over_limit"] += 1
        return _error(state, 429, "Rate limit reached: too many requests in flight; retry "
                      "later.", "rate_limit_error",
                      headers={"Retry-After": _seconds(options.retry_after)})
    index = state.requests
    state.requests += 1
    state.models[model] += 1
    state.in_flight += 1
    try:
        fate = _fate(options, index)
        if fate in _INJECTED:
            state.injected[fate] += 1
            status, message, kind = _INJECTED[fate]
            if fate == "timeout":
                state.hung += 1
                try:
                    await asyncio.sleep(options.timeout_sleep)
                finally:
                    state.hung -= 1
            headers = {"Retry-After": _seconds(options.retry_after)} if fate == "429" else None
            return _error(state, status, message, kind, headers=headers)
        lat = options.latency
        if isinstance(lat, tuple):
            delay = lat[0] + (lat[1] - lat[0]) * unit_float(
                derive_seed(options.seed, index, _LATENCY))
        else:
            delay = lat
        if delay > 0:
            await asyncio.sleep(delay)
        payload = _completion(options, index, body, messages, model, legacy)
        engine = request.app.get(_ENGINE)
        if engine is not None:
            await _run_on(engine, payload, messages, legacy)
        if fate == "malformed":
            state.injected["malformed"] += 1
            raw = json.dumps(payload).encode()
            state.status["200"] += 1
            return web.Response(body=raw[: len(raw) // 2], content_type="application/json")
        return _json(state, payload)
    finally:
        state.in_flight -= 1


async def _run_on(engine: Engine, payload: dict[str, Any], messages: list[dict[str, Any]],
                  legacy: bool) -> None:
    """Wait for the engine to run the completion ``payload``; its usage becomes the engine's
    token counts."""
    prompt = text_tokens(text_of(messages[0].get("content"))) if legacy \
        else chat_tokens(messages)
    lengths = [len(text_tokens(c["text"] if legacy else c["message"]["content"]))
               for c in payload["choices"]]
    done = await engine.generate(prompt, lengths)
    payload["usage"] = {"prompt_tokens": done.prompt_tokens,
                        "completion_tokens": done.completion_tokens,
                        "total_tokens": done.prompt_tokens + done.completion_tokens,
                        "prompt_tokens_details": {"cached_tokens": done.cached_tokens}}


def _answer_batched(options: ServerOptions, state: _State, body: dict[str, Any]
                    ) -> tuple[int, dict[str, Any]]:
    """One chat request of a batch, answered as the chat endpoint answers it (same checks,
    fate, seed and text; no latency, no outage): its status and JSON body. A "malformed"
    fate is answered normally: a batch line cannot be half a body."""
    refused = _refusal(options, body)
    messages = _chat_messages(body) if refused is None else refused
    if isinstance(messages, _Refusal):
        return messages.status, _error_body(*messages[1:])
    index = state.requests
    state.requests += 1
    state.batch_requests += 1
    state.models[body["model"]] += 1
    fate = _fate(options, index)
    if fate in _INJECTED:
        state.injected[fate] += 1
        status, message, kind = _INJECTED[fate]
        return status, _error_body(message, kind)
    return 200, _completion(options, index, body, messages, body["model"], legacy=False)


async def _chat(request: web.Request) -> web.Response:
    admitted = await _admit(request)
    if isinstance(admitted, web.Response):
        return admitted
    body, model = admitted
    messages = _chat_messages(body)
    if isinstance(messages, _Refusal):
        return _error(request.app[_STATE], *messages)
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
    if _unauthorized(request):
        return _error(request.app[_STATE], 401, "Incorrect API key provided.",
                      "invalid_request_error", code="invalid_api_key")
    created = int(time.time())
    data = [{"id": m, "object": "model", "created": created, "owned_by": "populace"}
            for m in request.app[_OPTIONS].models]
    return web.json_response({"object": "list", "data": data})


async def _health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def _stats(request: web.Request) -> web.Response:
    engine = request.app.get(_ENGINE)
    extra = {} if engine is None else {"engine": engine.stats()}
    return web.json_response({**request.app[_STATE].as_json(),
                              "batches": request.app[_JOBS].summary(),
                              "batch_answered_again": request.app[_JOBS].answered_again,
                              **extra})


async def _props(request: web.Request) -> web.Response:
    """The engine's capacity, in the shape of llama.cpp's server ``GET /props`` (public, as
    there): ``total_slots`` is the most sequences it decodes at once."""
    engine = request.app.get(_ENGINE)
    if engine is None:
        return web.json_response(_error_body(
            "This server runs no engine model; start it with --engine.", "not_found_error"),
            status=404)
    return web.json_response({
        "default_generation_settings": {}, "total_slots": engine.params.max_batch,
        "chat_template": "", "model_alias": request.app[_OPTIONS].models[0],
        "model_path": "", "build_info": "populace-serve-llm",
        "engine": engine.stats()["params"]})


# -- files and batch jobs --------------------------------------------------------------------
_MAX_FILE = 200 * 1024 * 1024  # what OpenAI accepts as a batch input file
_DAY = 24 * 3600
_FINAL = ("completed", "failed", "cancelled", "expired")


@dataclass(frozen=True)
class _File:
    id: str
    filename: str
    purpose: str
    data: bytes
    created_at: int

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "object": "file", "bytes": len(self.data),
                "created_at": self.created_at, "filename": self.filename,
                "purpose": self.purpose, "status": "processed", "status_details": None}


class _Batch:
    """One batch job: its OpenAI batch object, moved along by the task that runs it."""

    def __init__(self, serial: int, batch_id: str, input_file: _File, endpoint: str,
                 completion_window: str, metadata: dict[str, str] | None) -> None:
        self.serial = serial
        self.id = batch_id
        self.input = input_file
        self.endpoint = endpoint
        self.completion_window = completion_window
        self.metadata = metadata
        self.status = "validating"
        self.created_at = int(time.time())
        self.times: dict[str, int | None] = dict.fromkeys(
            (f"{s}_at" for s in ("in_progress", "finalizing", "completed", "failed", "expired",
                                 "cancelling", "cancelled")), None)
        self.total = self.completed = self.failed = 0
        self.errors: list[InputProblem] = []
        self.output_file_id: str | None = None
        self.error_file_id: str | None = None
        self.stop = asyncio.Event()  # cancel was asked
        self.fault: tuple[str, float] = ("ok", 1.0)  # ServerOptions.batch_faults's entry

    def move(self, status: str) -> None:
        self.status = status
        self.times[f"{status}_at"] = int(time.time())

    def as_json(self) -> dict[str, Any]:
        errors = None if not self.errors else {"object": "list", "data": [
            {"code": p.code, "message": p.message, "param": None, "line": p.line}
            for p in self.errors]}
        return {"id": self.id, "object": "batch", "endpoint": self.endpoint, "errors": errors,
                "input_file_id": self.input.id, "completion_window": self.completion_window,
                "status": self.status, "output_file_id": self.output_file_id,
                "error_file_id": self.error_file_id, "created_at": self.created_at,
                "expires_at": self.created_at + _DAY, **self.times,
                "request_counts": self.counts(), "metadata": self.metadata}

    def counts(self) -> dict[str, int]:
        return {"total": self.total, "completed": self.completed, "failed": self.failed}


class _Jobs:
    """The files and batch jobs of one app; owns the tasks that run the jobs."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.files: dict[str, _File] = {}
        self.batches: dict[str, _Batch] = {}
        self._made = 0
        self._batches_made = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self.answered: set[tuple[str, str]] = set()  # (model, custom_id) answered 2xx
        #: answers to a (model, custom_id) already answered: a request paid twice
        self.answered_again = 0

    def _id(self, prefix: str) -> tuple[int, str]:
        self._made += 1
        return self._made, f"{prefix}{derive_seed(self.seed, _OBJECT_ID, self._made):016x}"

    def add_file(self, filename: str, purpose: str, data: bytes) -> _File:
        _, file_id = self._id("file-")
        made = self.files[file_id] = _File(file_id, filename, purpose, data, int(time.time()))
        return made

    def add_batch(self, app: web.Application, input_file: _File, endpoint: str,
                  completion_window: str, metadata: dict[str, str] | None) -> _Batch:
        serial, batch_id = self._id("batch_")
        job = self.batches[batch_id] = _Batch(serial, batch_id, input_file, endpoint,
                                              completion_window, metadata)
        faults = app[_OPTIONS].batch_faults
        if self._batches_made < len(faults):
            job.fault = _batch_fault(faults[self._batches_made])
        self._batches_made += 1
        task = asyncio.get_running_loop().create_task(_run_job(app, job), name=batch_id)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return job

    def summary(self) -> dict[str, dict[str, Any]]:
        return {b.id: {"status": b.status, **b.counts()} for b in self.batches.values()}

    async def aclose(self) -> None:
        """Cancel the jobs still running and wait for them (the app's cleanup)."""
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks)


_JOBS = web.AppKey("jobs", _Jobs)


async def _answer_all(options: ServerOptions, state: _State,
                      requests: Sequence[tuple[str, dict[str, Any]]], stop: asyncio.Event | None,
                      record: Callable[[int, str, int, dict[str, Any]], None]) -> None:
    """Answer ``requests`` in order over ``options.batch_latency`` seconds, passing each
    ``(index, custom_id, status, body)`` to ``record``; ends early once ``stop`` is set."""
    pause = options.batch_latency / len(requests) if requests else 0.0
    for i, (custom_id, body) in enumerate(requests):
        if pause > 0:
            if stop is None:
                await asyncio.sleep(pause)
            else:
                with suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), pause)
        if stop is not None and stop.is_set():
            return
        status, answer = _answer_batched(options, state, body)
        record(i, custom_id, status, answer)


async def _run_job(app: web.Application, job: _Batch) -> None:
    """Validate, answer and file one batch job."""
    options, state, jobs = app[_OPTIONS], app[_STATE], app[_JOBS]
    try:
        requests, problems = parse_input(job.input.data, url=job.endpoint)
        if problems:
            job.errors = problems[:100]
            job.move("failed")
            return
        if job.stop.is_set():
            job.move("cancelled")
            return
        job.total = len(requests)
        job.move("in_progress")
        good: list[dict[str, Any]] = []
        bad: list[dict[str, Any]] = []

        def record(i: int, custom_id: str, status: int, body: dict[str, Any]) -> None:
            ok = 200 <= status < 300
            (good if ok else bad).append(result_line(
                "openai", custom_id=custom_id, status=status, body=body,
                line_id=f"batch_req_{derive_seed(jobs.seed, job.serial, i, _LINE_ID):016x}",
                request_id=f"req_{derive_seed(jobs.seed, job.serial, i, _REQUEST_ID):016x}"))
            if ok:
                job.completed += 1
                seen = (str(requests[i][1].get("model")), custom_id)
                jobs.answered_again += seen in jobs.answered
                jobs.answered.add(seen)
            else:
                job.failed += 1

        kind, share = job.fault
        ends = kind in ("expired", "failed", "cancelled")
        answered = requests[:int(share * len(requests) + 1e-9)] if ends else requests
        await _answer_all(options, state, answered, job.stop, record)
        if job.stop.is_set() or kind in ("expired", "cancelled"):
            # OpenAI's error file holds a line for each request the batch never ran
            code, message = ("batch_expired", "This request could not be executed before "
                             "the completion window expired.") if kind == "expired" and \
                not job.stop.is_set() else ("batch_cancelled", "The batch was cancelled "
                                            "before this request executed.")
            for i in range(job.completed + job.failed, len(requests)):
                line_id = derive_seed(jobs.seed, job.serial, i, _LINE_ID)
                bad.append({"id": f"batch_req_{line_id:016x}",
                            "custom_id": requests[i][0], "response": None,
                            "error": {"code": code, "message": message}})
        if not job.stop.is_set() and not ends:
            job.move("finalizing")
        if good:
            job.output_file_id = jobs.add_file(f"{job.id}_output.jsonl", "batch_output",
                                               encode_lines(good)).id
        if bad:
            job.error_file_id = jobs.add_file(f"{job.id}_error.jsonl", "batch_error",
                                              encode_lines(bad)).id
        if kind == "failed":
            job.errors = [InputProblem(None, "server_error", "the batch failed (injected)")]
        job.move("cancelled" if job.stop.is_set() else kind if ends else "completed")
    except Exception:  # a bug must not leave the batch in progress for ever
        log.exception("batch %s failed", job.id)
        job.errors = [InputProblem(None, "server_error", "the server failed running it")]
        job.move("failed")


def _api_error(status: int, message: str, kind: str = "invalid_request_error",
               code: str | None = None, param: str | None = None) -> web.Response:
    """An error of the files and batches API (not counted with the completions)."""
    return web.json_response(_error_body(message, kind, code, param), status=status)


@web.middleware
async def _guard(request: web.Request,
                 handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                 ) -> web.StreamResponse:
    """The API key, for every files and batches route."""
    if request.path.startswith(("/v1/files", "/v1/batches")) and _unauthorized(request):
        return _api_error(401, "Incorrect API key provided.", code="invalid_api_key")
    return await handler(request)


def _file_of(request: web.Request) -> _File | web.Response:
    file_id = request.match_info["file_id"]
    found = request.app[_JOBS].files.get(file_id)
    if found is None:
        return _api_error(404, f"No such File object: {file_id}", param="file_id")
    return found


def _batch_of(request: web.Request) -> _Batch | web.Response:
    batch_id = request.match_info["batch_id"]
    found = request.app[_JOBS].batches.get(batch_id)
    if found is None:
        return _api_error(404, f"No batch found with id '{batch_id}'.", param="batch_id")
    return found


async def _upload(request: web.Request) -> web.Response:
    if not request.content_type.startswith("multipart/"):
        return _api_error(400, "Upload a file as multipart/form-data with the fields "
                          "purpose and file.")
    purpose = filename = None
    data: bytearray | None = None
    reader = await request.multipart()
    while (part := await reader.next()) is not None:
        if not isinstance(part, BodyPartReader):
            continue
        if part.name == "purpose":
            purpose = await part.text()
        elif part.name == "file":
            filename, data = part.filename or "upload.jsonl", bytearray()
            while chunk := await part.read_chunk():
                data += chunk
                if len(data) > _MAX_FILE:
                    return _api_error(413, f"The file is larger than {_MAX_FILE} bytes.",
                                      param="file")
    if data is None or filename is None:
        return _api_error(400, "Missing the file to upload.", param="file")
    if not purpose:
        return _api_error(400, "Missing the purpose of the file.", param="purpose")
    return web.json_response(request.app[_JOBS].add_file(filename, purpose, bytes(data))
                             .as_json())


async def _list_files(request: web.Request) -> web.Response:
    purpose = request.query.get("purpose")
    data = [f.as_json() for f in request.app[_JOBS].files.values()
            if purpose is None or f.purpose == purpose]
    return web.json_response({"object": "list", "data": data, "has_more": False})


async def _get_file(request: web.Request) -> web.Response:
    found = _file_of(request)
    return found if isinstance(found, web.Response) else web.json_response(found.as_json())


async def _file_content(request: web.Request) -> web.Response:
    found = _file_of(request)
    if isinstance(found, web.Response):
        return found
    return web.Response(body=found.data, content_type="application/octet-stream")


async def _delete_file(request: web.Request) -> web.Response:
    found = _file_of(request)
    if isinstance(found, web.Response):
        return found
    del request.app[_JOBS].files[found.id]
    return web.json_response({"id": found.id, "object": "file", "deleted": True})


async def _create_batch(request: web.Request) -> web.Response:
    try:
        body = json.loads(await request.read())
    except ValueError:
        return _api_error(400, "We could not parse the JSON body of your request.")
    if not isinstance(body, dict):
        return _api_error(400, "The request body must be a JSON object.")
    jobs = request.app[_JOBS]
    for field in ("input_file_id", "endpoint", "completion_window"):
        if not isinstance(body.get(field), str):
            return _api_error(400, f"Missing required parameter: '{field}'.",
                              code="missing_required_parameter", param=field)
    input_file = jobs.files.get(body["input_file_id"])
    if input_file is None:
        return _api_error(404, f"No such File object: {body['input_file_id']}",
                          param="input_file_id")
    if input_file.purpose != "batch":
        return _api_error(400, f"The input file's purpose is {input_file.purpose!r}, not "
                          "'batch'.", param="input_file_id")
    if body["endpoint"] != CHAT_URL:
        return _api_error(400, f"This server runs batches of {CHAT_URL} only, got "
                          f"{body['endpoint']!r}.", param="endpoint")
    if body["completion_window"] != "24h":
        return _api_error(400, "completion_window must be '24h'.", param="completion_window")
    metadata = body.get("metadata")
    if metadata is not None and (not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
        return _api_error(400, "metadata must map strings to strings.", param="metadata")
    job = jobs.add_batch(request.app, input_file, CHAT_URL, "24h", metadata)
    if job.fault[0] == "hold":  # the batch exists and runs; its id reaches the client late
        await asyncio.sleep(job.fault[1])
    if job.fault[0] == "drop":  # the batch exists and runs; its id never reaches the client
        return _api_error(502, "Bad gateway (injected after creating the batch).",
                          kind="server_error")
    return web.json_response(job.as_json())


async def _list_batches(request: web.Request) -> web.Response:
    try:
        limit = int(request.query.get("limit", "20"))
    except ValueError:
        limit = 0
    if not 1 <= limit <= 100:
        return _api_error(400, "limit must be an integer from 1 to 100.", param="limit")
    newest = list(reversed(request.app[_JOBS].batches.values()))
    after = request.query.get("after")
    if after is not None:
        ids = [b.id for b in newest]
        newest = newest[ids.index(after) + 1:] if after in ids else []
    page = [b.as_json() for b in newest[:limit]]
    return web.json_response({"object": "list", "data": page,
                              "first_id": page[0]["id"] if page else None,
                              "last_id": page[-1]["id"] if page else None,
                              "has_more": len(newest) > limit})


async def _get_batch(request: web.Request) -> web.Response:
    found = _batch_of(request)
    return found if isinstance(found, web.Response) else web.json_response(found.as_json())


async def _cancel_batch(request: web.Request) -> web.Response:
    found = _batch_of(request)
    if isinstance(found, web.Response):
        return found
    if found.status in _FINAL:
        return _api_error(409, f"Cannot cancel a batch with status '{found.status}'.")
    if not found.stop.is_set():
        found.stop.set()
        found.move("cancelling")
    return web.json_response(found.as_json())


async def run_batch(input_file: str | os.PathLike[str], output_file: str | os.PathLike[str],
                    options: ServerOptions | None = None) -> dict[str, int]:
    """Answer a batch input file offline, as ``python -m vllm.entrypoints.openai.run_batch
    -i IN -o OUT`` does, and write OUT in vLLM's output format (``populace run-batch``).

    Each request is answered as serve-llm's chat endpoint with ``options`` answers it on a
    fresh server (the same checks, fates and texts), over ``options.batch_latency`` seconds.
    A bad input line raises a one-line ValueError naming the file and line. Returns the
    request counts ``{"total", "completed", "failed"}``.

    >>> asyncio.run(run_batch("in.jsonl", "out.jsonl", ServerOptions(policy="scripted")))
    ... # doctest: +SKIP
    {'total': 3, 'completed': 3, 'failed': 0}
    """
    options = options if options is not None else ServerOptions()
    requests = read_input(input_file)
    lines: list[dict[str, Any]] = []

    def record(i: int, custom_id: str, status: int, body: dict[str, Any]) -> None:
        lines.append(result_line(
            "vllm", custom_id=custom_id, status=status, body=body,
            line_id=f"vllm-{derive_seed(options.seed, i, _LINE_ID):016x}",
            request_id=f"vllm-batch-{derive_seed(options.seed, i, _REQUEST_ID):016x}"))

    await _answer_all(options, _State(), requests, None, record)
    write_output(output_file, lines)
    failed = sum(line["error"] is not None for line in lines)
    return {"total": len(lines), "completed": len(lines) - failed, "failed": failed}


def create_app(options: ServerOptions | None = None) -> web.Application:
    """The aiohttp application serving ``options`` (run it with any aiohttp runner)."""
    app = web.Application(client_max_size=16 * 1024 * 1024, middlewares=[_guard])
    app[_OPTIONS] = options if options is not None else ServerOptions()
    app[_STATE] = _State()
    app[_JOBS] = jobs = _Jobs(app[_OPTIONS].seed)
    if app[_OPTIONS].policy == "scripted":
        # The rules' modules load now: loaded by the first request, they held every request
        # of the first wave for a second or more (issue 28: a pilot's backgrounds)
        scripted_rules()
    engine_params = app[_OPTIONS].engine
    engine = Engine(engine_params) if engine_params is not None else None
    if engine is not None:
        app[_ENGINE] = engine
    app.router.add_get("/v1/models", _models)
    app.router.add_post("/v1/chat/completions", _chat)
    app.router.add_post("/v1/completions", _legacy)
    app.router.add_post("/v1/files", _upload)
    app.router.add_get("/v1/files", _list_files)
    app.router.add_get("/v1/files/{file_id}", _get_file)
    app.router.add_delete("/v1/files/{file_id}", _delete_file)
    app.router.add_get("/v1/files/{file_id}/content", _file_content)
    app.router.add_post("/v1/batches", _create_batch)
    app.router.add_get("/v1/batches", _list_batches)
    app.router.add_get("/v1/batches/{batch_id}", _get_batch)
    app.router.add_post("/v1/batches/{batch_id}/cancel", _cancel_batch)
    app.router.add_get("/health", _health)
    app.router.add_get("/stats", _stats)
    app.router.add_get("/props", _props)

    async def stop_jobs(app: web.Application) -> None:
        await jobs.aclose()
        if engine is not None:
            await engine.aclose()

    app.on_cleanup.append(stop_jobs)
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
