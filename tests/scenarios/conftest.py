"""Fixtures of the game's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from game_helpers import Scripted, ScriptedServer


@pytest.fixture
async def scripted() -> AsyncIterator[Scripted]:
    """``config, server = scripted(config, answer)``: ``config`` with its models served by a
    loopback server answering ``answer(agent, round)``, which records every request.

    The run builds, uses and closes its real clients (``provider: openai``) as any run does;
    only the answers are the test's.
    """
    server = ScriptedServer()
    async with server.running():
        yield server.script
