"""Shared by the game's tests: a small run file, a run into a directory, a scripted server.

``ScriptedServer`` answers what the test says over the OpenAI-compatible HTTP API and records
every request, so tests can check what each participant was told; the ``scripted`` fixture
(tests/scenarios/conftest.py) points a config's models at it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from aiohttp import web

from populace.core import ModelError, derive_seed, seed_for
from populace.launch import RunFile, parse_run_file
from populace.llm import ChatMessage
from populace.results import RunDirectory
from populace.scenarios.guess_number import play


def game_file(data: dict[str, Any], source: str | Path = "run.yaml") -> RunFile:
    """The game's run file of mapping ``data`` (``scenario: guess_number`` unless it says),
    checked as ``populace run`` checks it; ``source`` names it in messages."""
    return parse_run_file({"scenario": "guess_number", **data}, Path(source))


def game_data(run_file: RunFile) -> dict[str, Any]:
    """``run_file`` as a mapping again (as the run's ``config.yaml`` writes it), to change."""
    return run_file.resolved()


def make_config(**changes: Any) -> RunFile:
    """200 agents, 3 rounds on 2 workers, dummy model at 10 ms; ``game`` merged key by key."""
    data: dict[str, Any] = {
        "name": "test", "seed": 7, "agents": 200, "rounds": 3, "workers": 2,
        "models": {"dummy": {"provider": "dummy", "latency": 0.01}},
    }
    game = changes.pop("game", {})
    data.update(changes)
    data["game"] = game
    return game_file(data)


async def run_into(tmp_path: Path, config: RunFile, name: str = "run") -> Path:
    rd = RunDirectory.create(tmp_path / name)
    await play(config, rd)
    return rd.path



class ScriptedServer:
    """An OpenAI-compatible loopback server answering ``answer(agent_id, round)``; it records
    every request, keyed the same way.

    Participants pass ``seed=seed_for(derive_seed(run seed, round), agent id)``; inverting that
    tells the server who is asking. ``prompts`` holds the last message (the round prompt),
    ``conversations`` every message sent. A :class:`~populace.core.ModelError` raised by
    ``answer`` becomes an HTTP 400 carrying its message, which the client does not retry.
    Usage counts characters: the prompt's last message, and the answer.
    """

    def __init__(self) -> None:
        self.url = ""
        self.prompts: dict[tuple[int, int], str] = {}
        self.conversations: dict[tuple[int, int], list[ChatMessage]] = {}
        self._who: dict[int, tuple[int, int]] = {}
        self._answer: Callable[[int, int], str] = lambda agent, round_no: "0"

    def script(self, config: RunFile, answer: Callable[[int, int], str]
               ) -> tuple[RunFile, ScriptedServer]:
        """Answer ``config``'s participants with ``answer``; returns ``config`` with every model
        served here (one call each: the direct protocol, as for the dummy model), and this
        server."""
        o = config.options
        self._who = {seed_for(derive_seed(o.seed, r), i): (i, r)
                     for i in range(o.agents) for r in range(1, o.steps + 1)}
        self._answer = answer
        data = game_data(config)
        data["models"] = {name: {"provider": "openai", "model": "scripted",
                                 "base_urls": [self.url], "max_retries": 0}
                          for name in o.models}
        if data["game"]["protocol"] == "auto":
            data["game"]["protocol"] = "direct"
        return game_file(data, config.path), self

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        messages = body["messages"]
        agent, round_no = self._who[body["seed"]]
        # The round prompt: first in the shared-first layout, last in persona-first.
        shared_first = messages[-1]["content"] == "It is your turn: choose your number."
        self.prompts[agent, round_no] = messages[0 if shared_first else -1]["content"]
        self.conversations[agent, round_no] = [dict(m) for m in messages]
        try:
            text = self._answer(agent, round_no)
        except ModelError as e:
            return web.json_response({"error": {"message": str(e), "type": "test"}},
                                     status=400)
        return web.json_response({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "scripted",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": len(messages[-1]["content"]),
                      "completion_tokens": len(text)}})

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "scripted"}]})

    @asynccontextmanager
    async def running(self) -> AsyncIterator[ScriptedServer]:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            host, port = runner.addresses[0][:2]
            self.url = f"http://{host}:{port}/v1"
            yield self
        finally:
            await runner.cleanup()


#: The ``scripted`` fixture: ``config, server = scripted(config, answer)``.
Scripted = Callable[[RunFile, Callable[[int, int], str]], tuple[RunFile, ScriptedServer]]


def result_message(entry: dict[str, Any]) -> str:
    """What the moderator tells everyone after a round with a winner (summary.json entry)."""
    return (f"Round {entry['round']} is over. The target was {entry['target']:.2f} and the "
            f"winning number was {entry['winner_number']:g}.")
