"""OpenAIModel against real loopback servers: balance, retries, ejection, errors, agents."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from populace.core import Agent, ModelError, Msg, PerWorker, Simulation, mix64
from populace.llm import ModelClient, OpenAIModel
from populace.llm.offline import ServerOptions, running_server

USER = [{"role": "user", "content": "Pick a number between 0 and 100."}]


async def stats_of(base: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s, s.get(base.removesuffix("/v1") + "/stats") as r:
        return await r.json()


async def test_complete_returns_text_tokens_and_endpoint() -> None:
    async with running_server() as base:
        model = OpenAIModel("m", model="dummy", base_urls=[base + "/"])
        assert isinstance(model, ModelClient)
        try:
            c = await model.complete(USER, seed=5)
            assert c.text == str(mix64(5) % 101)
            assert c.model == "m" and c.endpoint == base
            assert (c.prompt_tokens, c.completion_tokens) == (7, 1) and c.latency_s > 0
            st = model.statistics()
            assert (st.requests, st.failures, st.in_flight, st.retries) == (1, 0, 0, 0)
            assert (st.prompt_tokens, st.completion_tokens) == (7, 1)
        finally:
            await model.aclose()
            await model.aclose()


async def test_request_carries_defaults_overrides_and_key(
    chat_body: Any, scripted_server: Any
) -> None:
    seen: list[tuple[dict[str, Any], str | None]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append((await request.json(), request.headers.get("Authorization")))
        return web.json_response(chat_body("42"))

    async with scripted_server(handler) as base:
        model = OpenAIModel("m", model="served", base_urls=[base], api_key="k1",
                            temperature=0.3, max_tokens=50)
        try:
            await model.complete(USER)
            fmt = {"type": "json_object"}
            await model.complete(USER, temperature=1.0, top_p=0.9, seed=3, max_tokens=5,
                                 response_format=fmt)
        finally:
            await model.aclose()
    (first, auth), (second, _) = seen
    assert auth == "Bearer k1"
    assert first == {"model": "served", "messages": USER, "temperature": 0.3, "max_tokens": 50}
    assert second == {"model": "served", "messages": USER, "temperature": 1.0, "top_p": 0.9,
                      "max_tokens": 5, "seed": 3, "response_format": fmt}


async def test_two_servers_share_the_load_within_20_percent() -> None:
    opts = ServerOptions(latency=(0.001, 0.01), seed=1)
    async with running_server(opts) as a, running_server(opts) as b:
        model = OpenAIModel("m", model="dummy", base_urls=[a, b], max_concurrency=16)
        try:
            await asyncio.gather(*(model.complete(USER, seed=i) for i in range(300)))
        finally:
            await model.aclose()
        na, nb = (await stats_of(a))["requests"], (await stats_of(b))["requests"]
    assert na + nb == 300
    assert abs(na - nb) <= 0.2 * max(na, nb)
    eps = model.endpoint_statistics()
    assert [e.requests for e in eps] == [na, nb] and all(e.in_flight == 0 for e in eps)


async def test_retries_ride_out_500s_and_malformed_bodies() -> None:
    opts = ServerOptions(rate_500=0.3, rate_malformed=0.05, seed=2)
    async with running_server(opts) as base:
        model = OpenAIModel("m", model="dummy", base_urls=[base], max_retries=8,
                            backoff=0.001, max_backoff=0.01, max_concurrency=8)
        try:
            out = await asyncio.gather(*(model.complete(USER, seed=i) for i in range(200)))
        finally:
            await model.aclose()
        stats = await stats_of(base)
    assert [c.text for c in out] == [str(mix64(i) % 101) for i in range(200)]
    injected = stats["injected"]
    st = model.statistics()
    assert st.retries == injected["500"] + injected["malformed"] > 0
    assert st.failures == 0 and st.requests == 200
    assert stats["requests"] == 200 + st.retries


async def test_retry_after_of_a_429_is_honoured_and_capped(
    chat_body: Any, scripted_server: Any
) -> None:
    calls: list[float] = []

    def limited(after: str) -> Any:
        async def handler(request: web.Request) -> web.Response:
            calls.append(time.monotonic())
            if len(calls) % 2 == 1:
                return web.json_response({"error": {"message": "slow down"}}, status=429,
                                         headers={"Retry-After": after})
            return web.json_response(chat_body("7"))
        return handler

    async with scripted_server(limited("0.3")) as base:
        model = OpenAIModel("m", model="m", base_urls=[base], backoff=0.001)
        try:
            assert (await model.complete(USER)).text == "7"
        finally:
            await model.aclose()
    assert 0.29 <= calls[1] - calls[0] < 1.0
    assert model.statistics().retries == 1
    assert model.endpoint_statistics()[0].state == "up"  # a 429 is not ill health

    calls.clear()
    async with scripted_server(limited("120")) as base:
        model = OpenAIModel("m", model="m", base_urls=[base], max_retry_after=0.1)
        try:
            assert (await model.complete(USER)).text == "7"
        finally:
            await model.aclose()
    assert 0.09 <= calls[1] - calls[0] < 1.0


async def test_empty_content_is_retried(chat_body: Any, scripted_server: Any) -> None:
    replies = iter(["", "  ", "9"])

    async def handler(request: web.Request) -> web.Response:
        return web.json_response(chat_body(next(replies)))

    async with scripted_server(handler) as base:
        model = OpenAIModel("m", model="m", base_urls=[base], backoff=0.001)
        try:
            assert (await model.complete(USER)).text == "9"
        finally:
            await model.aclose()
    assert model.statistics().retries == 2


async def test_a_down_endpoint_is_ejected_and_the_rest_keep_serving(dead_url: str) -> None:
    async with running_server() as a, running_server() as b:
        model = OpenAIModel("m", model="dummy", base_urls=[a, dead_url, b], eject_after=2,
                            cooldown=60, backoff=0.001, max_concurrency=4)
        try:
            out = await asyncio.gather(*(model.complete(USER, seed=i) for i in range(90)))
        finally:
            await model.aclose()
    assert [c.text for c in out] == [str(mix64(i) % 101) for i in range(90)]
    up_a, dead, up_b = model.endpoint_statistics()
    assert dead.state == "ejected" and dead.ejections == 1
    assert dead.failures == dead.requests <= 2 + 4  # the strikes, plus requests already out
    assert up_a.failures == up_b.failures == 0
    assert up_a.requests + up_b.requests == 90
    assert {c.endpoint for c in out} == {a, b}


async def test_model_error_after_the_last_retry_names_endpoint_and_cause() -> None:
    async with running_server(ServerOptions(rate_500=1.0)) as base:
        model = OpenAIModel("m", model="dummy", base_urls=[base], max_retries=2, backoff=0.001)
        try:
            with pytest.raises(ModelError) as info:
                await model.complete(USER)
        finally:
            await model.aclose()
    message = str(info.value)
    assert base in message and "HTTP 500" in message and "3 attempts" in message
    st = model.statistics()
    assert (st.retries, st.failures, st.in_flight) == (2, 1, 0)


async def test_client_errors_fail_at_once(dead_url: str) -> None:
    async with running_server(ServerOptions(api_key="right")) as base:
        model = OpenAIModel("m", model="dummy", base_urls=[base], api_key="wrong")
        other = OpenAIModel("m", model="nope", base_urls=[base], api_key="right")
        try:
            with pytest.raises(ModelError, match="HTTP 401"):
                await model.complete(USER)
            with pytest.raises(ModelError, match="HTTP 404: The model `nope` does not exist"):
                await other.complete(USER)
        finally:
            await model.aclose()
            await other.aclose()
    assert model.statistics().retries == other.statistics().retries == 0
    down = OpenAIModel("m", model="dummy", base_urls=[dead_url], max_retries=1, backoff=0.001)
    try:
        with pytest.raises(ModelError, match="cannot connect") as info:
            await down.complete(USER)
    finally:
        await down.aclose()
    assert dead_url in str(info.value)
    assert isinstance(info.value.__cause__, aiohttp.ClientConnectorError)


async def test_timeouts_are_retried_then_reported() -> None:
    async with running_server(ServerOptions(rate_timeout=1.0)) as base:
        model = OpenAIModel("m", model="dummy", base_urls=[base], timeout=0.1, max_retries=1,
                            backoff=0.001)
        try:
            # the second attempt is given twice as long; each ends at its client-side
            # timeout (the server would hold it for ever), as the message says
            with pytest.raises(ModelError,
                               match=r"timed out after 0\.2 s from .* \(after 2 attempts"):
                await model.complete(USER)
        finally:
            await model.aclose()
    assert model.statistics().retries == 1


async def test_concurrency_limit_per_endpoint_is_respected() -> None:
    async with running_server(ServerOptions(latency=0.02)) as base:
        model = OpenAIModel("m", model="dummy", base_urls=[base], max_concurrency=3)
        peak = 0

        async def watch() -> None:
            nonlocal peak
            while True:
                peak = max(peak, (await stats_of(base))["in_flight"])
                await asyncio.sleep(0.005)

        watcher = asyncio.create_task(watch())
        try:
            await asyncio.gather(*(model.complete(USER) for _ in range(30)))
        finally:
            watcher.cancel()
            await model.aclose()
    assert 1 <= peak <= 3


async def test_cancelling_a_call_releases_its_slot() -> None:
    async with running_server(ServerOptions(latency=5.0)) as base:
        model = OpenAIModel("m", model="dummy", base_urls=[base], max_concurrency=1)
        try:
            call = asyncio.create_task(model.complete(USER))
            await asyncio.sleep(0.05)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            await asyncio.sleep(0)
            (ep,) = model.endpoint_statistics()
            assert ep.in_flight == 0 and model.statistics().in_flight == 0
        finally:
            await model.aclose()


def test_arguments_are_checked() -> None:
    for kw in ({"base_urls": ["ftp://x"]}, {"timeout": 0}, {"max_retries": -1}):
        with pytest.raises(ValueError):
            OpenAIModel("m", **{"model": "x", "base_urls": ["http://x/v1"], **kw})  # type: ignore[arg-type]


class Guesser(Agent):
    __slots__ = ("model",)

    def __init__(self, id: int, profile: Any = None, *, model: OpenAIModel) -> None:
        super().__init__(id, profile)
        self.model = model

    async def reply(self, msg: Msg) -> int:
        c = await self.model.complete([{"role": "user", "content": msg.content}], seed=self.id)
        return int(json.loads(c.text)["number"]) if c.text.startswith("{") else int(c.text)


async def test_agents_call_the_model_inside_reply() -> None:
    # Agents run without an asyncio Task: queueing for a slot, backoff after injected 500s
    # and the aiohttp request itself (which needs a Task for its timeout) must all work.
    async with running_server(ServerOptions(latency=0.01, rate_500=0.2, seed=4)) as base:
        spec = PerWorker(OpenAIModel, "m", model="dummy", base_urls=[base], timeout=5.0,
                         max_concurrency=3, max_retries=10, backoff=0.001)
        async with Simulation(workers=2) as sim:
            group = await sim.create(Guesser, 40, init={"model": spec})
            answers = await group.broadcast(Msg("moderator", "Pick a number."))
            one = await group[3].reply(Msg("moderator", "Again."))
        stats = await stats_of(base)
    assert list(answers) == [mix64(i) % 101 for i in range(40)]
    assert one == mix64(3) % 101
    assert stats["status"]["200"] == 41 and stats["injected"]["500"] > 0


# -- a misbehaving server: usage and content ----------------------------------------------------
def _with_usage(chat_body: Any, usage: Any, *, omit: bool = False) -> dict[str, Any]:
    body = chat_body("42")
    if omit:
        del body["usage"]
    else:
        body["usage"] = usage
    return body


@pytest.mark.parametrize(
    ("usage", "tokens", "anomalies"),
    [
        ({"prompt_tokens": 3, "completion_tokens": 1}, (3, 1), 0),
        ({"prompt_tokens": -500, "completion_tokens": 1}, (0, 1), 1),
        ({"prompt_tokens": 3, "completion_tokens": -1}, (3, 0), 1),
        ({"prompt_tokens": "7", "completion_tokens": 1}, (0, 1), 1),
        ({"prompt_tokens": True, "completion_tokens": False}, (0, 0), 1),
        ({"prompt_tokens": 2.5, "completion_tokens": 1}, (0, 1), 1),
        ({"prompt_tokens": 7.0, "completion_tokens": 1}, (7, 1), 0),  # integral: a count
        ({"prompt_tokens": [3], "completion_tokens": {"n": 1}}, (0, 0), 1),
        ({"completion_tokens": 1}, (0, 1), 0),  # an absent count is 0, not an anomaly
        ({}, (0, 0), 0),
        (None, (0, 0), 0),
        ("lots", (0, 0), 1),
        ([3, 1], (0, 0), 1),
        (-500, (0, 0), 1),
    ],
)
async def test_usage_counts_that_are_not_counts_are_zero_and_an_anomaly(
    chat_body: Any, scripted_server: Any, usage: Any, tokens: tuple[int, int], anomalies: int
) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response(_with_usage(chat_body, usage))

    async with scripted_server(handler) as base:
        model = OpenAIModel("m", model="m", base_urls=[base])
        try:
            c = await model.complete(USER)
            await model.complete(USER)
        finally:
            await model.aclose()
    assert c.text == "42"
    assert (c.prompt_tokens, c.completion_tokens) == tokens
    st = model.statistics()
    assert (st.prompt_tokens, st.completion_tokens) == (2 * tokens[0], 2 * tokens[1])
    assert st.prompt_tokens >= 0 and st.completion_tokens >= 0
    assert model.protocol_anomalies == 2 * anomalies
    assert (st.requests, st.failures, st.retries) == (2, 0, 0)


async def test_a_response_without_usage_counts_no_tokens(
    chat_body: Any, scripted_server: Any
) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response(_with_usage(chat_body, None, omit=True))

    async with scripted_server(handler) as base:
        model = OpenAIModel("m", model="m", base_urls=[base])
        try:
            c = await model.complete(USER)
        finally:
            await model.aclose()
    assert (c.text, c.prompt_tokens, c.completion_tokens) == ("42", 0, 0)
    assert model.protocol_anomalies == 0


async def test_a_malformed_usage_is_logged_once(
    chat_body: Any, scripted_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response(_with_usage(chat_body, {"prompt_tokens": -500}))

    async with scripted_server(handler) as base:
        model = OpenAIModel("m", model="m", base_urls=[base])
        try:
            with caplog.at_level("WARNING", logger="populace.llm.openai"):
                for _ in range(3):
                    await model.complete(USER)
        finally:
            await model.aclose()
    [record] = caplog.records
    assert "malformed usage" in record.getMessage() and "-500" in record.getMessage()
    assert model.protocol_anomalies == 3 and model.statistics().prompt_tokens == 0


@pytest.mark.parametrize(
    ("content", "text"),
    [
        (42, "42"),
        (0, "0"),
        (33.5, "33.5"),
        (-3, "-3"),
        ([{"type": "text", "text": "The answer is 22."}], "The answer is 22."),
    ],
)
async def test_a_content_that_is_a_number_or_parts_is_read_as_text(
    chat_body: Any, scripted_server: Any, content: Any, text: str
) -> None:
    async def handler(request: web.Request) -> web.Response:
        body = chat_body("")
        body["choices"][0]["message"]["content"] = content
        return web.json_response(body)

    async with scripted_server(handler) as base:
        model = OpenAIModel("m", model="m", base_urls=[base], max_retries=0)
        try:
            assert (await model.complete(USER)).text == text
        finally:
            await model.aclose()


@pytest.mark.parametrize(
    ("message", "cause"),
    [
        ({"role": "assistant", "content": ""}, "empty content from"),
        ({"role": "assistant", "content": " \n"}, "empty content from"),
        ({"role": "assistant", "content": None}, "empty content (null) from"),
        ({"role": "assistant", "content": []}, "empty content from"),
        ({"role": "assistant"}, "response without choices[0].message.content from"),
        ("hello", "response without choices[0].message.content from"),
        ({"role": "assistant", "content": True},
         "response without choices[0].message.content as text (got bool)"),
        ({"role": "assistant", "content": {"text": "42"}},
         "response without choices[0].message.content as text (got dict)"),
    ],
)
async def test_a_missing_or_empty_content_is_reported_as_such(
    chat_body: Any, scripted_server: Any, message: Any, cause: str
) -> None:
    async def handler(request: web.Request) -> web.Response:
        body = chat_body("")
        body["choices"][0]["message"] = message
        return web.json_response(body)

    async with scripted_server(handler) as base:
        model = OpenAIModel("m", model="m", base_urls=[base], max_retries=0)
        try:
            with pytest.raises(ModelError) as info:
                await model.complete(USER)
        finally:
            await model.aclose()
    assert cause in str(info.value)
    assert model.statistics().failures == 1


async def test_a_failed_call_says_its_kind_by_type_and_cause() -> None:
    """The error a call fails with carries its kind (``cause``) and a subclass per family,
    so summaries and the studio count failures without reading messages (and the kind
    survives pickling, as errors cross from Ray workers)."""
    import pickle

    from populace.core import ModelError, ModelHTTPError, ModelTimeout, ModelUnreachable
    from populace.results import error_kind

    cases = [
        (ServerOptions(rate_500=1.0), ModelHTTPError, "HTTP 500"),
        (ServerOptions(rate_timeout=1.0, timeout_sleep=5.0), ModelTimeout, "timed out"),
    ]
    for options, kind, cause in cases:
        async with running_server(options) as url:
            model = OpenAIModel("m", model="dummy", base_urls=[url], max_retries=0, timeout=0.5,
                                max_backoff=0.0)
            try:
                with pytest.raises(kind) as caught:
                    await model.complete([{"role": "user", "content": "hi"}], seed=1)
            finally:
                await model.aclose()
        error = caught.value
        assert error.cause == cause and error_kind(error) == f"ModelError: {cause}"
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is kind and again.cause == cause and str(again) == str(error)
    model = OpenAIModel("m", model="dummy", base_urls=["http://127.0.0.1:9/v1"], max_retries=0,
                        timeout=1)
    try:
        with pytest.raises(ModelUnreachable) as unreachable:
            await model.complete([{"role": "user", "content": "hi"}])
    finally:
        await model.aclose()
    assert unreachable.value.cause == "cannot connect"
    assert isinstance(unreachable.value, ModelError)
    assert error_kind(ValueError("HTTP 500 in a message")) == "ValueError"  # no regex


async def test_a_slow_answer_of_a_computing_server_is_waited_for_not_sent_again() -> None:
    # serve-llm shows what it computes in /stats (injected hangs excluded): a request that
    # takes longer than the timeout is waited for while the server works on it.
    # (a timeout of 0.5 s: on a loaded machine a request took more than 0.2 s to reach
    # the server, which then showed itself idle)
    async with running_server(ServerOptions(latency=1.2)) as base:
        model = OpenAIModel("m", model="dummy", base_urls=[base], timeout=0.5, max_retries=0,
                            server="populace")
        try:
            answers = await asyncio.gather(*(model.complete(USER, seed=s) for s in range(3)))
        finally:
            await model.aclose()
        stats = await stats_of(base)
    assert all(a.retries == 0 for a in answers)
    assert stats["requests"] == 3 and model.chat.waited >= 3
    # a hung request (an injected timeout: not computed) is still given up
    async with running_server(ServerOptions(rate_timeout=1.0)) as base:
        model = OpenAIModel("m", model="dummy", base_urls=[base], timeout=0.1, max_retries=0,
                            server="populace")
        try:
            with pytest.raises(ModelError, match="the server idle"):
                await model.complete(USER)
        finally:
            await model.aclose()
