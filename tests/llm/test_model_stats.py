"""ModelStats count what a client really did: requests, failures, retries, tokens, in flight.

Every test makes real calls (the fake server over HTTP, or the offline models) and checks the
counters against what those calls did, and where there is a server, against its own ``/stats``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from populace.core import ModelError
from populace.llm import OpenAIModel, traffic
from populace.llm.offline import DummyModel, ScriptedModel, ServerOptions, running_server


def chat(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": text}]


async def server_stats(base: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s, s.get(base.removesuffix("/v1") + "/stats") as r:
        return await r.json()


async def test_successful_requests_count_requests_and_echoed_tokens() -> None:
    prompts = ["one", "one two", "one two three", "one two three four"]
    async with running_server(ServerOptions(policy="echo")) as base:
        model = OpenAIModel("m", model="dummy", base_urls=[base])
        try:
            replies = await asyncio.gather(*(model.complete(chat(p)) for p in prompts))
        finally:
            await model.aclose()
        served = await server_stats(base)
    assert [r.text for r in replies] == prompts
    st = model.statistics()
    assert (st.requests, st.failures, st.retries, st.in_flight) == (4, 0, 0, 0)
    # echo: the completion is the user message; the prompt adds the 2-word system message
    assert st.completion_tokens == 1 + 2 + 3 + 4
    assert st.prompt_tokens == 4 * 2 + (1 + 2 + 3 + 4)
    assert served["requests"] == 4
    (ep,) = st.endpoints
    assert (ep.url, ep.requests, ep.failures, ep.in_flight) == (base, 4, 0, 0)


async def test_in_flight_counts_pending_calls_and_returns_to_zero() -> None:
    async with running_server(ServerOptions(latency=0.3)) as base:
        model = OpenAIModel("m", model="dummy", base_urls=[base])
        try:
            calls = [asyncio.ensure_future(model.complete(chat("go"), seed=i)) for i in range(5)]
            await asyncio.sleep(0)  # each call starts and counts itself before its first await
            assert model.statistics().in_flight == 5
            await asyncio.gather(*calls)
            assert model.statistics().in_flight == 0
            assert model.statistics().endpoints[0].in_flight == 0
        finally:
            await model.aclose()


async def test_a_call_that_always_fails_counts_its_retries_and_one_failure() -> None:
    async with running_server(ServerOptions(rate_500=1.0)) as base:
        model = OpenAIModel("m", model="dummy", base_urls=[base], max_retries=2, backoff=0.0,
                            eject_after=100)
        try:
            with pytest.raises(ModelError, match="HTTP 500"):
                await model.complete(chat("go"))
        finally:
            await model.aclose()
        served = await server_stats(base)
    st = model.statistics()
    assert (st.requests, st.retries, st.failures, st.in_flight) == (1, 2, 1, 0)
    assert (st.prompt_tokens, st.completion_tokens) == (0, 0)  # nothing was answered
    assert served["requests"] == 3 and served["injected"] == {"500": 3}
    assert st.endpoints[0].failures == 3  # the pool counts every failed attempt


async def test_counters_agree_with_the_server_under_intermittent_errors() -> None:
    options = ServerOptions(rate_500=0.4, seed=7)
    async with running_server(options) as base:
        model = OpenAIModel("m", model="dummy", base_urls=[base], max_retries=1, backoff=0.0,
                            eject_after=1000)
        try:
            results = await asyncio.gather(*(model.complete(chat("go"), seed=i)
                                             for i in range(40)), return_exceptions=True)
        finally:
            await model.aclose()
        served = await server_stats(base)
    failed = sum(isinstance(r, ModelError) for r in results)
    st = model.statistics()
    assert st.requests == 40 and st.in_flight == 0
    assert st.failures == failed
    assert 0 < st.retries and 0 < failed < 40  # seed 7 gives both retries and failures
    # every HTTP request the server saw was a first attempt or a retry; every 500 led to a
    # retry or, on the last attempt, to a failure
    assert served["requests"] == st.requests + st.retries
    assert served["injected"]["500"] == st.retries + st.failures
    assert st.completion_tokens == 40 - failed  # one word ("42") per answer
    assert traffic([[st]])["m"]["sent"] == served["requests"]


async def test_rate_limits_are_retries_not_failures() -> None:
    options = ServerOptions(rate_429=0.5, retry_after=0.0, seed=3)
    async with running_server(options) as base:
        model = OpenAIModel("m", model="dummy", base_urls=[base], max_retries=20, backoff=0.0)
        try:
            await asyncio.gather(*(model.complete(chat("go"), seed=i) for i in range(10)))
        finally:
            await model.aclose()
        served = await server_stats(base)
    st = model.statistics()
    assert (st.requests, st.failures, st.in_flight) == (10, 0, 0)
    assert st.retries == served["injected"]["429"] > 0
    assert st.endpoints[0].state == "up"


async def test_dummy_counts_requests_and_waiters() -> None:
    model = DummyModel(latency=0.2)
    calls = [asyncio.ensure_future(model.complete([], seed=i)) for i in range(6)]
    await asyncio.sleep(0)
    st = model.statistics()
    assert (st.requests, st.in_flight) == (6, 6)
    await asyncio.gather(*calls)
    st = model.statistics()
    assert (st.model, st.requests, st.failures, st.retries, st.in_flight) == ("dummy", 6, 0, 0, 0)
    assert (st.prompt_tokens, st.completion_tokens) == (0, 0)  # the dummy counts no tokens
    assert st.endpoints == ()
    await model.aclose()


async def test_scripted_counts_the_words_it_read_and_wrote() -> None:
    model = ScriptedModel(latency=0.0)
    messages = chat("Guess a number between 0 and 100. Reply with your guess.")
    replies = [await model.complete(messages, seed=i) for i in range(3)]
    st = model.statistics()
    assert (st.requests, st.failures, st.retries, st.in_flight) == (3, 0, 0, 0)
    assert st.prompt_tokens == 3 * (2 + 11)
    assert st.completion_tokens == sum(len(r.text.split()) for r in replies) > 0
    assert st.completion_tokens == sum(r.completion_tokens for r in replies)
    await model.aclose()


def test_openai_statistics_list_every_endpoint_before_any_call() -> None:
    model = OpenAIModel("q", model="m", base_urls=["http://127.0.0.1:9/v1",
                                                    "http://127.0.0.1:10/v1/"])
    stats = model.statistics()
    assert [e.url for e in stats.endpoints] == ["http://127.0.0.1:9/v1", "http://127.0.0.1:10/v1"]
    assert all(e.state == "up" and e.requests == 0 for e in stats.endpoints)
    assert stats.endpoints == model.endpoint_statistics()


async def test_statistics_split_requests_over_endpoints() -> None:
    async with running_server() as a, running_server() as b:
        model = OpenAIModel("m", model="dummy", base_urls=[a, b])
        try:
            await asyncio.gather(*(model.complete(chat("go"), seed=i) for i in range(10)))
        finally:
            await model.aclose()
        served = [(await server_stats(a))["requests"], (await server_stats(b))["requests"]]
    eps = model.statistics().endpoints
    assert [e.url for e in eps] == [a, b]
    assert [e.requests for e in eps] == served
    assert sum(served) == 10
