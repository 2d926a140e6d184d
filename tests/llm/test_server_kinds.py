"""A new kind of server is one ``ServerKind`` and one registration (issue 30): the preflight
detects it, the client spells constraints and probes busyness its way, and a run file's
``server:`` and the game's ``protocol: auto`` take it with no other change. The kind here
is made up: ``owned_by: toy-inc``, choices as ``allowed``, regexes as ``pattern``, busyness
in ``/busy``, slots in ``/capacity``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from pydantic import ValidationError

from populace.llm import (
    BusyProbe,
    MockTransport,
    OpenAIConfig,
    OpenAIModel,
    Response,
    Served,
    ServerKind,
    preflight,
    register_server_kind,
    server_kind,
    server_kind_names,
    unregister_server_kind,
)


def _busy(content: bytes) -> tuple[bool, bool]:
    data = json.loads(content)
    return data["running"] > 0, data["queued"] > 0


TOY = ServerKind(
    "toy", owned_by=("toy-inc",),
    choice=lambda body, choices: body.update(allowed=choices),
    regex=lambda body, pattern: body.update(pattern=pattern),
    busy=BusyProbe("/busy", _busy), slots_path="/capacity")


@pytest.fixture
def toy() -> Iterator[ServerKind]:
    register_server_kind(TOY)
    try:
        yield TOY
    finally:
        unregister_server_kind("toy")


def openai(url: str, **kw: Any) -> OpenAIConfig:
    return OpenAIConfig(provider="openai", model="m", base_urls=[url], **kw)


class ToyServer:
    """A loopback toy server: lists ``m`` as owned by ``toy-inc``, declares 3 slots, is never
    busy, answers every chat with ``42`` and keeps the bodies in ``seen``."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "m", "owned_by": "toy-inc"}]})

    async def _capacity(self, request: web.Request) -> web.Response:
        return web.json_response({"total_slots": 3})

    async def _chat(self, request: web.Request) -> web.Response:
        self.seen.append(await request.json())
        return web.json_response({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "42"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}})

    @asynccontextmanager
    async def serve(self) -> AsyncIterator[str]:
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/capacity", self._capacity)
        app.router.add_post("/v1/chat/completions", self._chat)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await runner.setup()
        try:
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            host, port = runner.addresses[0][:2]
            yield f"http://{host}:{port}/v1"
        finally:
            await runner.cleanup()


def test_a_registered_kind_is_known_by_name_and_says_what_it_takes(toy: ServerKind) -> None:
    assert server_kind_names() == ("auto", "openai", "vllm", "sglang", "llamacpp",
                                   "populace", "toy")
    assert server_kind("toy") is toy
    assert [toy.supports(f) for f in ("choice", "regex", "busy", "batch")] == [
        True, True, True, False]
    assert openai("http://gpu:8000/v1", server="toy").server == "toy"  # a run file's server:


async def test_the_preflight_detects_it_by_owned_by_and_reads_its_slots(
        toy: ServerKind) -> None:
    async with ToyServer().serve() as url:
        assert await preflight({"llm": openai(url)}) == {"llm": Served("toy", 3)}
    unregister_server_kind("toy")  # the same server, the kind unknown: OpenAI's, no slots
    async with ToyServer().serve() as url:
        assert await preflight({"llm": openai(url)}) == {"llm": Served("openai", None)}


async def test_the_client_spells_constraints_its_way(toy: ServerKind) -> None:
    transport = MockTransport(lambda url, body: Response.json(
        {"choices": [{"message": {"content": "7"}}]}))
    model = OpenAIModel("m", model="m", base_urls="http://toy:8000/v1", server="toy",
                        transport=transport)
    ask = [{"role": "user", "content": "Pick"}]
    await model.complete(ask, response_format={"type": "choice", "choice": [1, 2]})
    await model.complete(ask, response_format={"type": "regex", "regex": "[0-9]+"})
    await model.complete(ask, response_format={"type": "json_object"})
    bodies = [body for _, body, _ in transport.requests]
    assert bodies[0]["allowed"] == ["1", "2"]
    assert bodies[1]["pattern"] == "[0-9]+"
    assert bodies[2]["response_format"] == {"type": "json_object"}  # no json_schema: as given
    assert not any("prompt_cache_key" in b or "structured_outputs" in b for b in bodies)
    await model.aclose()


async def test_a_slow_answer_is_waited_for_while_its_probe_says_busy(toy: ServerKind) -> None:
    looked: list[str] = []

    async def answer(url: str, body: dict[str, Any] | None) -> Response:
        if body is None:  # the client's look at the server
            looked.append(url)
            return Response.json({"running": 1, "queued": 0})
        await asyncio.sleep(0.35)
        return Response.json({"choices": [{"message": {"content": "7"}}]})

    transport = MockTransport(answer)
    model = OpenAIModel("m", model="m", base_urls="http://toy:8000/v1", timeout=0.1,
                        max_retries=0, server="toy", transport=transport)
    assert (await model.complete([{"role": "user", "content": "x"}])).text == "7"
    assert len(transport.requests) == 1  # sent once, never again
    assert looked and set(looked) == {"http://toy:8000/busy"}
    assert model.chat.waited >= 2
    await model.aclose()


def test_a_run_file_on_it_takes_the_games_constrained_call(
        tmp_path: Path, toy: ServerKind) -> None:
    # protocol: auto asks run.supports(model, "choice"): the toy kind holds choices, so P1
    # is one constrained call, spelt the toy's way.
    from populace.launch import launch, load_run_file
    from populace.results import RunDirectory, read_summary, read_table

    server = ToyServer()

    async def run() -> Path:
        async with server.serve() as url:
            path = tmp_path / "toy.yaml"
            path.write_text(yaml.safe_dump({
                "name": "toy", "scenario": "guess_number", "seed": 3, "agents": 4,
                "rounds": 1, "workers": 1, "game": {"protocol": "auto"},
                "models": {"llm": {"provider": "openai", "model": "m", "base_urls": [url],
                                   "timeout": 10}}}))
            out = RunDirectory.create(tmp_path / "out")
            await launch(load_run_file(path), out)
            return out.path

    path = asyncio.run(run())
    assert read_summary(path)["servers"] == {"llm": {"server": "toy", "slots": 3}}
    assert len(server.seen) == 4
    assert all(body["allowed"] == [str(i) for i in range(101)] and body["max_tokens"] == 8
               for body in server.seen)
    assert read_table(path).column("number").to_pylist() == [42.0] * 4


def test_unknown_kinds_and_features_are_clear_errors() -> None:
    with pytest.raises(ValueError, match=r"unknown server kind 'toy'; expected 'auto', "
                       r"'openai', 'vllm', 'sglang', 'llamacpp' or 'populace'"):
        server_kind("toy")
    with pytest.raises(ValueError, match="unknown server kind 'toy'"):
        OpenAIModel("m", model="m", base_urls="http://toy:8000/v1", server="toy")
    with pytest.raises(ValidationError, match=r"server\n  Input should be 'auto', 'openai', "
                       r"'vllm', 'sglang', 'llamacpp' or 'populace'"):
        openai("http://gpu:8000/v1", server="toy")
    with pytest.raises(ValueError, match=r"unknown server feature 'json'; expected one of "
                       r"choice, regex, busy, batch"):
        server_kind("vllm").supports("json")


@pytest.mark.parametrize(("server", "takes"), [
    ("auto", set()), ("openai", {"batch"}), ("vllm", {"choice", "regex", "busy"}),
    ("sglang", {"choice", "regex"}), ("llamacpp", {"choice", "busy"}),
    ("populace", {"choice", "regex", "busy", "batch"}),
])
def test_what_each_built_in_kind_takes(server: str, takes: set[str]) -> None:
    kind = server_kind(server)
    assert {f for f in ("choice", "regex", "busy", "batch") if kind.supports(f)} == takes
