"""preflight: one clear line before a run when a configured model cannot answer."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web

from populace.core import ConfigError
from populace.llm import DummyConfig, OpenAIConfig, Served, preflight
from populace.llm.offline import ServerOptions, running_server


def openai(urls: str | list[str], model: str = "dummy", **kw: Any) -> OpenAIConfig:
    return OpenAIConfig(provider="openai", model=model,
                        base_urls=[urls] if isinstance(urls, str) else urls, **kw)


async def problem(models: dict[str, Any], **kw: Any) -> str:
    with pytest.raises(ConfigError) as err:
        await preflight(models, **kw)
    message = str(err.value)
    assert "\n" not in message
    return message


@pytest.fixture
def silent_url() -> Iterator[str]:
    """A loopback base URL whose server accepts connections and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield f"http://127.0.0.1:{s.getsockname()[1]}/v1"


@asynccontextmanager
async def listing_server(models: list[str]) -> AsyncIterator[tuple[str, list[str | None]]]:
    """A server answering ``GET /v1/models`` with ``models``; yields its base URL and the
    ``Authorization`` header of every request it got."""
    seen: list[str | None] = []

    async def listing(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.json_response({"object": "list",
                                  "data": [{"id": m, "object": "model"} for m in models]})

    app = web.Application()
    app.router.add_get("/v1/models", listing)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}/v1", seen
    finally:
        await runner.cleanup()


async def test_reachable_servers_serving_the_model_pass(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POPULACE_TEST_KEY", "sekrit")
    async with listing_server(["a", "b"]) as (one, seen_one), \
            listing_server(["b"]) as (two, seen_two):
        models = {"dummy": DummyConfig(latency=0), "first": openai(one, "a"),
                  "second": openai([one, two], "b", api_key_env="POPULACE_TEST_KEY")}
        assert await preflight(models) == {"first": Served("openai"), "second": Served("openai")}
        # Every endpoint was asked, once per key: `one` without a key and with it.
        assert sorted(h or "" for h in seen_one) == ["", "Bearer sekrit"]
        assert seen_two == ["Bearer sekrit"]
        # The same servers, one model they do not serve: the answers were really read.
        message = await problem({**models, "third": openai(two, "a")})
        assert message.startswith(f"models.third: server at {two} does not serve model 'a'")
    assert await preflight({}) == {}


async def test_a_real_server_that_wants_the_key_gets_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POPULACE_TEST_KEY", "sekrit")
    async with running_server(ServerOptions(models=["b"], api_key="sekrit")) as base:
        # serve-llm says what it is: its spelling of structured output is vLLM's
        assert await preflight({"m": openai(base, "b", api_key_env="POPULACE_TEST_KEY")}) \
            == {"m": Served("populace")}
        assert "requires an API key" in await problem({"m": openai(base, "b")})


async def test_an_unreachable_base_url(dead_url: str) -> None:
    message = await problem({"d": DummyConfig(), "qwen": openai(dead_url)})
    assert message == f"models.qwen: cannot reach {dead_url} (connection refused)"


async def test_a_server_that_never_answers(silent_url: str) -> None:
    # The message is the timeout's (a check without one would wait for ever); how soon it
    # comes back on a busy machine is not a test's to say.
    message = await problem({"qwen": openai(silent_url)}, timeout=0.3)
    assert message == f"models.qwen: cannot reach {silent_url} (no answer within 0.3 s)"


async def test_a_model_the_server_does_not_serve() -> None:
    async with running_server(ServerOptions(models=["Qwen/Qwen2.5-7B", "llama3:latest"])) as base:
        message = await problem({"qwen": openai(base, "Qwen/Qwen2.5-7b")})
        assert message == (f"models.qwen: server at {base} does not serve model "
                           "'Qwen/Qwen2.5-7b' (it serves: Qwen/Qwen2.5-7B, llama3:latest)")
        await preflight({"llama": openai(base, "llama3")})  # Ollama's implicit ":latest"


async def test_a_missing_api_key_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POPULACE_TEST_KEY", raising=False)
    config = openai("http://127.0.0.1:9/v1", api_key_env="POPULACE_TEST_KEY")
    message = await problem({"qwen": config})
    assert message == ("models.qwen: environment variable POPULACE_TEST_KEY (api_key_env) "
                       "is not set or empty")
    monkeypatch.setenv("POPULACE_TEST_KEY", "")
    assert "POPULACE_TEST_KEY" in await problem({"qwen": config})


async def test_a_rejected_or_absent_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POPULACE_TEST_KEY", "wrong")
    async with running_server(ServerOptions(api_key="right")) as base:
        message = await problem({"qwen": openai(base, api_key_env="POPULACE_TEST_KEY")})
        assert message == (f"models.qwen: server at {base} rejected the API key from "
                           "POPULACE_TEST_KEY (HTTP 401)")
        message = await problem({"qwen": openai(base)})
        assert message.startswith(f"models.qwen: server at {base} requires an API key")


async def test_a_base_url_that_is_not_the_api_root(scripted_server: Any) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({})

    async with scripted_server(handler) as base:
        root = base.removesuffix("/v1")
        message = await problem({"qwen": openai(root)})
        assert message == (f"models.qwen: server at {root} answered HTTP 404 to GET /models; "
                           "is the base URL right (usually ending in /v1)?")


async def test_the_first_problem_is_reported_with_a_count_of_the_rest(
        dead_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POPULACE_TEST_KEY", raising=False)
    async with running_server() as base:
        message = await problem({
            "fine": openai(base),
            "wrong": openai([base, dead_url], "nope"),
            "keyless": openai(base, api_key_env="POPULACE_TEST_KEY"),
        })
    assert message == (f"models.wrong: server at {base} does not serve model 'nope' "
                       "(it serves: dummy) (+2 more)")
