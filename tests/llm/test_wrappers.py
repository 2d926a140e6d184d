"""The wrappers, each on its own: retries, accounting and replay-then-live around any client,
and the OpenAI client's parsing over a mock transport (no server, nothing patched)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from populace.core import (
    ModelBadResponse,
    ModelError,
    ModelHTTPError,
    ModelTimeout,
    ModelUnreachable,
    RecordingMiss,
)
from populace.llm import (
    Completion,
    Counted,
    MockTransport,
    ModelClient,
    OpenAIModel,
    ReplayThenLive,
    Request,
    Response,
    Retrying,
    TransportError,
)
from populace.llm.offline import DummyModel

ASK = Request([{"role": "user", "content": "Pick a number"}], seed=3)


class Flaky(ModelClient):
    """Fails its first ``failures`` calls with ``error``, then answers."""

    name = "flaky"

    def __init__(self, failures: int, error: ModelError | None = None) -> None:
        self.failures = failures
        self.error = error or ModelUnreachable("down", cause="cannot connect", retryable=True)
        self.calls = 0

    async def send(self, request: Request) -> Completion:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return Completion("42", self.name, prompt_tokens=5, completion_tokens=2)


def reply(content: Any = "The answer is 7", usage: Any = None) -> Response:
    body: dict[str, Any] = {"choices": [{"message": {"role": "assistant", "content": content}}]}
    if usage is not None:
        body["usage"] = usage
    return Response.json(body)


def openai(transport: MockTransport, **kw: Any) -> OpenAIModel:
    kw.setdefault("backoff", 0.001)
    return OpenAIModel("m", model="served", base_urls="http://test/v1", transport=transport,
                       **kw)


# -- the callers' spelling --------------------------------------------------------------------
async def test_complete_is_send_of_one_request_record() -> None:
    seen: list[Request] = []

    class Spy(ModelClient):
        name = "spy"

        async def send(self, request: Request) -> Completion:
            seen.append(request)
            return Completion("ok", self.name)

    await Spy().complete(ASK.messages, seed=3, max_tokens=9)
    assert seen == [ASK._replace(max_tokens=9)]
    with pytest.raises(AttributeError):
        seen[0].seed = 4  # type: ignore[misc]  # frozen


# -- Retrying ---------------------------------------------------------------------------------
async def test_retrying_tries_again_until_an_answer() -> None:
    inner = Flaky(2)
    answer = await Retrying(inner, max_retries=3, backoff=0.001).send(ASK)
    assert (answer.text, answer.retries, inner.calls) == ("42", 2, 3)


async def test_retrying_gives_up_after_max_retries_and_says_how_many_attempts() -> None:
    inner = Flaky(10)
    with pytest.raises(ModelUnreachable, match=r"down \(after 3 attempts\)") as info:
        await Retrying(inner, max_retries=2, backoff=0.001).send(ASK)
    assert info.value.attempts == 3 and inner.calls == 3


async def test_retrying_does_not_retry_what_cannot_succeed() -> None:
    inner = Flaky(10, ModelHTTPError("bad request", cause="HTTP 400"))
    with pytest.raises(ModelHTTPError, match=r"\(after 1 attempt\)") as info:
        await Retrying(inner, max_retries=5, backoff=0.001).send(ASK)
    assert info.value.attempts == 1 and inner.calls == 1


async def test_retrying_honours_the_server_s_wait_up_to_a_bound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    error = ModelHTTPError("busy", cause="HTTP 503", retryable=True, retry_after=0.2)
    retrying = Retrying(Flaky(1, error), max_retries=1, backoff=0.0, max_retry_after=0.05)
    assert retrying.delay(0, 0.2) == 0.05
    slept: list[float] = []
    sleep = asyncio.sleep

    async def recorded(delay: float) -> None:  # the wait asked for, not a clock's reading
        slept.append(delay)
        await sleep(delay)

    monkeypatch.setattr(asyncio, "sleep", recorded)
    answer = await retrying.send(ASK)
    monkeypatch.undo()
    assert slept == [0.05] and answer.retries == 1


async def test_a_retry_deadline_outlasts_max_retries() -> None:
    inner = Flaky(8)
    answer = await Retrying(inner, max_retries=0, backoff=0.001, max_backoff=0.002,
                            retry_deadline=5.0).send(ASK)
    assert answer.retries == 8
    with pytest.raises(ModelUnreachable):
        await Retrying(Flaky(10**6), backoff=0.01, retry_deadline=0.05).send(ASK)


async def test_retrying_fits_any_model() -> None:
    answer = await Retrying(DummyModel(latency=0)).send(ASK)
    assert answer.retries == 0 and answer.text.isdigit()


# -- Counted ----------------------------------------------------------------------------------
async def test_counted_counts_calls_failures_retries_and_tokens() -> None:
    counted = Counted(Retrying(Flaky(1), max_retries=1, backoff=0.001))
    await counted.send(ASK)
    await counted.send(ASK)
    failing = Counted(Retrying(Flaky(10), max_retries=2, backoff=0.001))
    with pytest.raises(ModelUnreachable):
        await failing.send(ASK)
    s = counted.statistics()
    assert (s.requests, s.failures, s.retries, s.prompt_tokens, s.completion_tokens,
            s.in_flight) == (2, 0, 1, 10, 4, 0)
    f = failing.statistics()
    assert (f.requests, f.failures, f.retries) == (1, 1, 2)  # the server saw 3 requests


async def test_counted_sees_calls_in_flight() -> None:
    counted = Counted(DummyModel(latency=0.2))
    calls = [asyncio.ensure_future(counted.send(ASK._replace(seed=s))) for s in range(5)]
    await asyncio.sleep(0.05)
    assert counted.statistics().in_flight == 5
    await asyncio.gather(*calls)
    assert counted.statistics().in_flight == 0


# -- ReplayThenLive ---------------------------------------------------------------------------
class Recording(ModelClient):
    name = "flaky"

    def __init__(self, error: ModelError | None) -> None:
        self.error = error

    async def send(self, request: Request) -> Completion:
        if self.error is not None:
            raise self.error
        return Completion("recorded", self.name)


async def test_replay_then_live_goes_live_only_on_a_miss() -> None:
    live = Flaky(0)
    assert (await ReplayThenLive(Recording(None), live).send(ASK)).text == "recorded"
    assert live.calls == 0
    missed = ReplayThenLive(Recording(RecordingMiss("not there")), live)
    assert (await missed.send(ASK)).text == "42" and live.calls == 1
    broken = ReplayThenLive(Recording(ModelBadResponse("unreadable")), live)
    with pytest.raises(ModelBadResponse):
        await broken.send(ASK)
    assert live.calls == 1


# -- OpenAIModel over a mock transport --------------------------------------------------------
async def test_openai_model_retries_a_503_with_retry_after_and_counts_what_was_sent() -> None:
    answers = iter([Response.json({"error": {"message": "warming up"}}, 503,
                                  {"Retry-After": "0.01"}),
                    reply(usage={"prompt_tokens": 11, "completion_tokens": 4})])
    transport = MockTransport(lambda url, body: next(answers))
    model = openai(transport, api_key="k", temperature=0.5)
    answer = await model.complete(ASK.messages, seed=3)
    assert (answer.text, answer.retries, answer.endpoint) == (
        "The answer is 7", 1, "http://test/v1")
    s = model.statistics()
    assert (s.requests, s.retries, s.failures, s.prompt_tokens, s.completion_tokens) == (
        1, 1, 0, 11, 4)
    assert len(transport.requests) == 2
    url, body, headers = transport.requests[0]
    assert url == "http://test/v1/chat/completions"
    assert body == {"model": "served", "messages": list(ASK.messages), "temperature": 0.5,
                    "seed": 3}
    assert headers["Authorization"] == "Bearer k"
    assert s.endpoints[0].requests == 2 and s.endpoints[0].failures == 1


async def test_openai_model_does_not_retry_a_client_error() -> None:
    transport = MockTransport(lambda url, body: Response.json(
        {"error": {"message": "no such model"}}, 404))
    model = openai(transport, max_retries=4)
    with pytest.raises(ModelHTTPError, match=r"HTTP 404: no such model from http://test/v1 "
                                             r"\(after 1 attempt\)") as info:
        await model.send(ASK)
    assert info.value.status == 404 and len(transport.requests) == 1
    assert model.statistics().failures == 1


@pytest.mark.parametrize(("fault", "error", "cause"), [
    (TransportError("timed out after 1 s", cause="timed out", error=ModelTimeout),
     ModelTimeout, "timed out"),
    (TransportError("cannot connect (refused)", cause="cannot connect"), ModelUnreachable,
     "cannot connect"),
    (Response(200, b"{not json"), ModelBadResponse, "malformed JSON"),
    (reply(content=None), ModelBadResponse, "empty content"),
    (Response.json({"choices": []}), ModelBadResponse, "without choices"),
])
async def test_openai_model_names_each_fault_and_retries_it(
        fault: Any, error: type[ModelError], cause: str) -> None:
    def handler(url: str, body: Any) -> Response:
        if isinstance(fault, Exception):
            raise fault
        return fault

    transport = MockTransport(handler)
    with pytest.raises(error) as info:
        await openai(transport, max_retries=2).send(ASK)
    assert info.value.cause == cause and info.value.attempts == 3
    assert len(transport.requests) == 3


async def test_openai_model_takes_malformed_usage_as_zero_and_counts_it() -> None:
    transport = MockTransport(lambda url, body: reply(
        42, usage={"prompt_tokens": -500, "completion_tokens": 3}))
    model = openai(transport)
    answer = await model.send(ASK)
    assert (answer.text, answer.prompt_tokens, answer.completion_tokens) == ("42", 0, 3)
    assert model.protocol_anomalies == 1


async def test_an_async_handler_can_hold_a_call_in_flight() -> None:
    gate = asyncio.Event()

    async def handler(url: str, body: Any) -> Response:
        await gate.wait()
        return reply()

    model = openai(MockTransport(handler), max_concurrency=2)
    calls = [asyncio.ensure_future(model.send(ASK)) for _ in range(3)]
    await asyncio.sleep(0.05)
    s = model.statistics()
    assert s.in_flight == 3 and s.endpoints[0].in_flight == 2  # the third waits its turn
    gate.set()
    assert [a.text for a in await asyncio.gather(*calls)] == ["The answer is 7"] * 3
