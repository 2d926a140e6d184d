"""Helpers for the LLM tests: loopback servers, scripted apps, a port nobody listens on."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest
from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _chat_body(content: str, *, model: str = "m") -> dict[str, Any]:
    """A minimal valid chat-completion response."""
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }


@asynccontextmanager
async def _scripted_server(handler: Handler) -> AsyncIterator[str]:
    """Serve ``handler`` at ``POST /v1/chat/completions`` on 127.0.0.1; yields the base URL."""
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}/v1"
    finally:
        await runner.cleanup()


@pytest.fixture
def dead_url() -> str:
    """A loopback base URL on a port that refuses connections."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.fixture
def chat_body() -> Callable[..., dict[str, Any]]:
    """``chat_body(content)``: a minimal valid chat-completion response."""
    return _chat_body


@pytest.fixture
def scripted_server() -> Callable[[Handler], AbstractAsyncContextManager[str]]:
    """``async with scripted_server(handler) as base_url``: a one-route loopback server."""
    return _scripted_server
