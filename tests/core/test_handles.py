"""AgentHandle: method calls, misuse messages, per-call options; AgentGroup indexing."""

from __future__ import annotations

import asyncio

import pytest

from populace.core import (
    Agent,
    AgentGroup,
    AgentHandle,
    CallTimeout,
    Msg,
    PopulaceError,
    Simulation,
    SimulationClosed,
)


class Greeter(Agent):
    greeting_count = 3  # a non-callable class attribute

    async def reply(self, msg: Msg) -> str:
        if msg.content == "slow":
            await asyncio.sleep(0.5)
        return f"{self.id}: {msg.content}"

    async def greet(self, name: str, punctuation: str = "!") -> str:
        return f"hello {name}{punctuation} from {self.id}"

    def shout(self, word: str) -> str:
        return word.upper()

    def _secret(self) -> str:  # pragma: no cover - must not be reachable
        return "secret"


async def greeters(sim: Simulation, n: int = 2) -> AgentGroup:
    return await sim.create(Greeter, n)


async def test_reply_returns_the_agents_answer() -> None:
    async with Simulation(workers=2) as sim:
        group = await greeters(sim)
        h = group[1]
        assert isinstance(h, AgentHandle)
        assert h.id == 1
        assert await h.reply(Msg("me", "hi")) == "1: hi"


async def test_remote_spelling_raises_type_error_showing_the_right_one() -> None:
    async with Simulation() as sim:
        h = (await greeters(sim))[0]
        with pytest.raises(TypeError, match=r"write handle\.reply\(\.\.\.\) instead of "
                                            r"handle\.reply\.remote\(\.\.\.\)"):
            h.reply.remote(Msg("me", "hi"))
        with pytest.raises(TypeError, match=r"handle\.greet\(\.\.\.\)"):
            h.greet.remote("bob")
        assert sim.statistics().pending_calls == 0  # nothing was submitted


async def test_awaiting_a_handle_raises_type_error() -> None:
    async with Simulation() as sim:
        h = (await greeters(sim))[0]
        with pytest.raises(TypeError, match=r"await handle\.reply\(msg\)"):
            await h


async def test_custom_methods_are_callable_through_the_handle() -> None:
    async with Simulation(workers=2) as sim:
        group = await greeters(sim)
        assert await group[1].greet("bob") == "hello bob! from 1"
        assert await group[0].greet("ann", "?") == "hello ann? from 0"
        assert await group[0].shout("hey") == "HEY"  # a sync method
        state = await group[0].get_state()  # inherited methods too
        assert state == {"memory": []}


async def test_unknown_private_and_non_callable_names_raise_attribute_error() -> None:
    async with Simulation() as sim:
        h = (await greeters(sim))[0]
        with pytest.raises(AttributeError, match="Greeter agents have no method 'wave'"):
            _ = h.wave
        with pytest.raises(AttributeError, match="_secret"):
            _ = h._secret
        with pytest.raises(AttributeError, match="greeting_count"):
            _ = h.greeting_count
        assert not hasattr(h, "nope")


async def test_observe_stores_the_message_in_memory() -> None:
    async with Simulation() as sim:
        h = (await greeters(sim))[0]
        assert await h.observe(Msg("x", "one")) is None
        await h.observe(Msg("x", "two"))
        contents = await h.call(lambda agent: [m.content for m in agent.memory])
        assert contents == ["one", "two"]


async def test_call_runs_sync_and_async_functions_on_the_agent() -> None:
    async def add_async(agent: Agent, k: int) -> int:
        await asyncio.sleep(0)
        return agent.id + k

    async with Simulation(workers=2) as sim:
        group = await greeters(sim, 3)
        assert await group[2].call(lambda agent, k: agent.id * k, 5) == 10
        assert await group[2].call(add_async, 5) == 7


async def test_options_timeout_fails_slow_calls_with_call_timeout() -> None:
    async with Simulation() as sim:
        h = (await greeters(sim))[0]
        quick = h.options(timeout=0.05)
        assert isinstance(quick, AgentHandle) and quick is not h
        assert await quick.reply(Msg("me", "fast")) == "0: fast"

        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(CallTimeout, match=r"within 0\.05 s") as info:
            await quick.reply(Msg("me", "slow"))
        assert loop.time() - t0 >= 0.04  # no upper bound: the error is the timeout's
        assert isinstance(info.value, TimeoutError)
        assert isinstance(info.value, PopulaceError)
        assert sim.statistics().pending_calls == 0

        # The original handle keeps no deadline.
        untimed = h.reply(Msg("me", "slow"))
        await asyncio.sleep(0.08)
        assert not untimed.done()
    assert isinstance(untimed.exception(), SimulationClosed)


async def test_options_rejects_non_positive_timeouts() -> None:
    async with Simulation() as sim:
        h = (await greeters(sim))[0]
        with pytest.raises(ValueError, match="timeout must be positive"):
            h.options(timeout=0)
        with pytest.raises(ValueError):
            h.options(timeout=-1.0)


async def test_handles_know_their_worker() -> None:
    async with Simulation(workers=2) as sim:
        group = await greeters(sim, 4)
        assert [h.worker for h in group] == [0, 0, 1, 1]
        assert [h.id for h in group] == [0, 1, 2, 3]
        assert sim.handle(3).worker == 1
        assert "#3 on worker 1" in repr(sim.handle(3))
        with pytest.raises(IndexError, match="no agent with id 4"):
            sim.handle(4)
        with pytest.raises(IndexError):
            sim.handle(-1)


async def test_group_negative_index_and_iteration() -> None:
    async with Simulation(workers=3) as sim:
        group = await greeters(sim, 5)
        assert group[-1].id == 4
        assert len(group) == 5
        assert list(group.ids) == [0, 1, 2, 3, 4]
        assert "5 Greeter agents" in repr(group)
