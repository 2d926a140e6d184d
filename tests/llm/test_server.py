"""populace serve-llm's server over real loopback HTTP: shapes, policies, error injection."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import openai
import pytest

from populace.core import mix64
from populace.llm.offline import DummyModel, ServerOptions, create_app, running_server, serve
from populace.llm.offline._scripted import scripted_rules

USER = [{"role": "user", "content": "Pick a number between 0 and 100."}]


async def post(session: aiohttp.ClientSession, url: str, body: dict[str, object],
               **kw: object) -> tuple[int, dict[str, str], bytes]:
    async with session.post(url, json=body, **kw) as r:  # type: ignore[arg-type]
        return r.status, dict(r.headers), await r.read()


async def chat(session: aiohttp.ClientSession, base: str, **extra: object) -> Any:
    status, _, raw = await post(session, base + "/chat/completions",
                                {"model": "dummy", "messages": USER, **extra})
    assert status == 200, raw
    return json.loads(raw)


async def test_chat_completion_has_the_openai_shape() -> None:
    async with running_server() as base, aiohttp.ClientSession() as s:
        assert base.startswith("http://127.0.0.1:") and base.endswith("/v1")
        data = await chat(s, base, seed=7)
        assert data["object"] == "chat.completion"
        assert data["model"] == "dummy"
        assert isinstance(data["id"], str) and data["id"].startswith("chatcmpl-")
        assert isinstance(data["created"], int)
        (choice,) = data["choices"]
        assert choice["index"] == 0 and choice["finish_reason"] == "stop"
        assert choice["message"]["role"] == "assistant"
        assert choice["message"]["content"] == str(mix64(7) % 101)
        usage = data["usage"]
        assert usage["prompt_tokens"] == 7  # whitespace words of the prompt
        assert usage["completion_tokens"] == 1
        assert usage["total_tokens"] == 8


async def test_models_health_stats_and_legacy_completions() -> None:
    async with running_server(ServerOptions(models=["a", "b"])) as base, \
            aiohttp.ClientSession() as s:
        root = base.removesuffix("/v1")
        async with s.get(base + "/models") as r:
            models = await r.json()
        assert models["object"] == "list"
        assert [m["id"] for m in models["data"]] == ["a", "b"]
        async with s.get(root + "/health") as r:
            assert r.status == 200
        status, _, raw = await post(s, base + "/completions",
                                    {"model": "b", "prompt": "Pick one", "seed": 3})
        data = json.loads(raw)
        assert status == 200 and data["object"] == "text_completion"
        assert data["choices"][0]["text"] == str(mix64(3) % 101)
        async with s.get(root + "/stats") as r:
            stats = await r.json()
        assert stats["requests"] == 1 and stats["status"] == {"200": 1}
        assert stats["models"] == {"b": 1} and stats["in_flight"] == 0


async def test_answers_are_reproducible_and_match_the_dummy_model() -> None:
    opts = ServerOptions(low=10, high=20)
    dummy = DummyModel(latency=0, low=10, high=20)
    async with running_server(opts) as base, aiohttp.ClientSession() as s:
        for seed in (1, 2, 99):
            a = await chat(s, base, seed=seed)
            b = await chat(s, base, seed=seed)
            expected = (await dummy.complete(USER, seed=seed)).text
            assert a["choices"][0]["message"]["content"] == expected
            assert b["choices"][0]["message"]["content"] == expected
    # Without a request seed the numbers come from the server seed and request order.
    runs = []
    for _ in range(2):
        async with running_server(ServerOptions(seed=5)) as base, aiohttp.ClientSession() as s:
            runs.append([(await chat(s, base))["choices"][0]["message"]["content"]
                         for _ in range(5)])
    assert runs[0] == runs[1]


async def test_policies_extraction_json_and_max_tokens() -> None:
    async with running_server(ServerOptions(policy="reasoning")) as base, \
            aiohttp.ClientSession() as s:
        text = (await chat(s, base, seed=4))["choices"][0]["message"]["content"]
        assert text.endswith(f"The answer is {mix64(4) % 101}.") and len(text.split()) > 5

        ask = ('Extract the number chosen in the reply below. Answer exactly '
               '"The answer is N".\nReply: I would go with 17 this time, not 40 or 0. '
               'Final: 23.')
        status, _, raw = await post(s, base + "/chat/completions", {
            "model": "dummy", "messages": [{"role": "user", "content": ask}]})
        assert status == 200
        assert json.loads(raw)["choices"][0]["message"]["content"] == "The answer is 23"
        reasoned = "Two thirds of the mean is low. The answer is 31."
        ask = f'Extract the number; reply "The answer is N".\n{reasoned}'
        _, _, raw = await post(s, base + "/chat/completions", {
            "model": "dummy", "messages": [{"role": "user", "content": ask}]})
        assert json.loads(raw)["choices"][0]["message"]["content"] == "The answer is 31"
        game = 'Pick a number from 0 to 100 and end with "The answer is N".'
        _, _, raw = await post(s, base + "/chat/completions", {
            "model": "dummy", "seed": 4, "messages": [{"role": "user", "content": game}]})
        assert json.loads(raw)["choices"][0]["message"]["content"].endswith(
            f"The answer is {mix64(4) % 101}.")

        schema = {"type": "json_schema", "json_schema": {"name": "guess", "schema": {
            "type": "object", "properties": {"reasoning": {"type": "string"},
                                             "number": {"type": "integer"}}}}}
        data = await chat(s, base, seed=4, response_format=schema)
        obj = json.loads(data["choices"][0]["message"]["content"])
        assert obj["number"] == mix64(4) % 101 and isinstance(obj["reasoning"], str)

        data = await chat(s, base, seed=4, max_tokens=3)
        choice = data["choices"][0]
        assert choice["finish_reason"] == "length"
        assert len(choice["message"]["content"].split()) == 3
    async with running_server(ServerOptions(policy="echo")) as base, \
            aiohttp.ClientSession() as s:
        data = await chat(s, base)
        assert data["choices"][0]["message"]["content"] == USER[0]["content"]


async def test_request_errors_are_openai_style() -> None:
    async with running_server(ServerOptions(api_key="sekrit")) as base, \
            aiohttp.ClientSession() as s:
        url = base + "/chat/completions"
        status, _, raw = await post(s, url, {"model": "dummy", "messages": USER})
        assert status == 401 and json.loads(raw)["error"]["code"] == "invalid_api_key"
        auth = {"Authorization": "Bearer sekrit"}
        status, _, raw = await post(s, url, {"model": "nope", "messages": USER}, headers=auth)
        err = json.loads(raw)["error"]
        assert status == 404 and err["code"] == "model_not_found" and "nope" in err["message"]
        assert err["type"] == "invalid_request_error" and err["param"] == "model"
        async with s.post(url, data=b"{not json", headers=auth) as r:
            assert r.status == 400
            assert "error" in await r.json()
        status, _, _ = await post(s, url, {"model": "dummy", "messages": []}, headers=auth)
        assert status == 400
        status, _, _ = await post(s, url, {"model": "dummy", "messages": USER}, headers=auth)
        assert status == 200


async def test_error_injection_is_deterministic_and_shaped() -> None:
    opts = ServerOptions(rate_500=0.2, rate_429=0.2, rate_malformed=0.2, retry_after=2, seed=3)
    outcomes = []
    for _ in range(2):
        seen: list[str] = []
        async with running_server(opts) as base, aiohttp.ClientSession() as s:
            for _ in range(60):
                status, headers, raw = await post(s, base + "/chat/completions",
                                                  {"model": "dummy", "messages": USER})
                if status == 429:
                    assert headers["Retry-After"] == "2"
                    assert json.loads(raw)["error"]["type"] == "rate_limit_error"
                if status == 500:
                    assert json.loads(raw)["error"]["type"] == "server_error"
                if status == 200:
                    try:
                        json.loads(raw)
                        seen.append("ok")
                    except ValueError:
                        seen.append("malformed")
                else:
                    seen.append(str(status))
            async with s.get(base.removesuffix("/v1") + "/stats") as r:
                stats = await r.json()
        assert stats["injected"].get("500", 0) == seen.count("500")
        assert stats["injected"].get("malformed", 0) == seen.count("malformed")
        outcomes.append(seen)
    assert outcomes[0] == outcomes[1]
    assert {"ok", "malformed", "500", "429"} <= set(outcomes[0])


async def test_injected_timeout_outlasts_the_client() -> None:
    async with running_server(ServerOptions(rate_timeout=1.0)) as base, \
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=0.2)) as s:
        with pytest.raises(TimeoutError):
            await post(s, base + "/chat/completions", {"model": "dummy", "messages": USER})


async def test_latency_is_applied() -> None:
    async with running_server(ServerOptions(latency=(0.05, 0.1))) as base, \
            aiohttp.ClientSession() as s:
        t0 = time.monotonic()
        await chat(s, base)
        # At least the range's low end (a timer never fires early); no upper bound: how
        # long a busy machine adds is for a benchmark, not a test.
        assert time.monotonic() - t0 >= 0.05


def test_options_are_validated() -> None:
    assert ServerOptions(models=["x"]).models == ("x",)
    for bad in ({"rate_500": 0.7, "rate_429": 0.6}, {"latency": (2.0, 1.0)}, {"latency": -1},
                {"policy": "smart"}, {"low": 5, "high": 1}, {"models": []}):
        with pytest.raises(ValueError):
            ServerOptions(**bad)  # type: ignore[arg-type]
    assert create_app().router is not None


def test_a_scripted_server_has_its_rules_before_the_first_request() -> None:
    """Loaded by the first request, they held that request's whole wave for a second or
    more (issue 28: a pilot's backgrounds against a fresh serve-llm took 1.17 s, not 0.17)."""
    scripted_rules.cache_clear()
    create_app(ServerOptions(policy="scripted"))
    assert scripted_rules.cache_info().currsize == 1


async def test_the_official_openai_sdk_works_unchanged() -> None:
    async with running_server(ServerOptions(models=["dummy", "other"], policy="reasoning")) \
            as base:
        client = openai.AsyncOpenAI(base_url=base, api_key="unused", max_retries=0)
        try:
            resp = await client.chat.completions.create(
                model="dummy", messages=[{"role": "user", "content": "Pick a number."}],
                temperature=0.7, max_tokens=64, seed=11)
            assert resp.choices[0].message.content.endswith(f"The answer is {mix64(11) % 101}.")
            assert resp.choices[0].finish_reason == "stop"
            assert resp.usage is not None and resp.usage.prompt_tokens == 3
            models = await client.models.list()
            assert [m.id for m in models.data] == ["dummy", "other"]
            legacy = await client.completions.create(model="other", prompt="Pick", seed=11)
            assert legacy.choices[0].text.endswith(f"The answer is {mix64(11) % 101}.")
            with pytest.raises(openai.NotFoundError):
                await client.chat.completions.create(
                    model="missing", messages=[{"role": "user", "content": "hi"}])
        finally:
            await client.close()


async def test_serve_runs_until_cancelled() -> None:
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    server = asyncio.create_task(serve("127.0.0.1", 0, ServerOptions(), ready=ready.set_result))
    try:
        base = await asyncio.wait_for(ready, 5)
        async with aiohttp.ClientSession() as s, s.get(base.removesuffix("/v1") + "/health") as r:
            assert r.status == 200
    finally:
        server.cancel()
        with pytest.raises(asyncio.CancelledError):
            await server
