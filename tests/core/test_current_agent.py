"""``current_agent()``: which agent's call is running, and so which agent made each LLM call.

Many agents on two workers interleave their calls to a model with random latency; every
line of the call log must name the agent whose message it carries, also for calls made
from a Task the agent started and after the agent awaited another agent's call.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from populace.core import Agent, AgentHandle, PerWorker, Signal, Simulation, current_agent
from populace.llm import RecordingModel, read_agent_calls
from populace.llm.offline import DummyModel

AGENTS = 200
CALLS = 3  # per agent: directly, from a Task of its own, after awaiting another agent


def recording(path: str) -> RecordingModel:
    # jitter: calls of different agents finish in another order than they started
    return RecordingModel(DummyModel(latency=0.02, jitter=1.0), path, flush_interval=0.05)


class Caller(Agent):
    __slots__ = ("model",)

    def __init__(self, id: int, profile: Any = None, *, model: RecordingModel) -> None:
        super().__init__(id, profile)
        self.model = model

    async def ask(self, n: int) -> str:
        msgs = [{"role": "user", "content": f"agent {self.id}, call {n}"}]
        answer = await self.model.complete(msgs, seed=self.id * 10 + n)
        return answer.text

    async def work(self, peer: AgentHandle | None) -> list[int | None]:
        seen = [current_agent()]
        await self.ask(0)
        seen.append(current_agent())

        async def in_task() -> int | None:
            await self.ask(1)
            return current_agent()

        seen.append(await asyncio.create_task(in_task()))
        if peer is not None:  # (handles do not travel to Ray workers)
            assert await peer.whoami() == peer.id  # its call ran (and nested) meanwhile
        seen.append(current_agent())
        await self.ask(2)
        return seen

    async def whoami(self) -> int | None:
        await asyncio.sleep(0)
        return current_agent()


def shared_signal() -> Signal:
    return Signal(asyncio.get_running_loop())


class Waiter(Agent):
    __slots__ = ("signal",)

    def __init__(self, id: int, profile: Any = None, *, signal: Signal) -> None:
        super().__init__(id, profile)
        self.signal = signal

    async def wait(self) -> int | None:
        await self.signal
        return current_agent()

    async def fire(self) -> tuple[int | None, int | None]:
        before = current_agent()
        await asyncio.sleep(0)
        self.signal.fire()  # the waiters' steps run now, inside this one
        return before, current_agent()


async def test_nested_steps_give_the_outer_agent_back() -> None:
    async with Simulation(workers=1) as sim:
        group = await sim.create(Waiter, 5, init={"signal": PerWorker(shared_signal)})
        waiting = group[1:].map(Waiter.wait)
        await asyncio.sleep(0.05)  # every waiter parked on the signal
        assert await group[0].fire() == (0, 0)
        assert await waiting == [1, 2, 3, 4]


def recordings(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.jsonl"))


def calls_in(directory: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in recordings(directory)
            for line in path.read_text().splitlines()]


async def check_tagging(sim: Simulation, directory: Path, *, peers: bool = True) -> None:
    pattern = str(directory / "calls-{pid}.jsonl")
    group = await sim.create(Caller, AGENTS, init={"model": PerWorker(recording, pattern)})
    # the next agent's call inside each agent's (and for one, on the other worker)
    others = [group[(i + 1) % AGENTS] if peers else None for i in range(AGENTS)]
    seen = await group.scatter(Caller.work, others)
    assert seen == [[i] * 4 for i in range(AGENTS)]
    assert await group[5].whoami() == 5
    assert current_agent() is None  # outside every agent's call


async def test_every_call_is_tagged_with_its_agent_on_two_workers(tmp_path: Path) -> None:
    async with Simulation(workers=2) as sim:
        await check_tagging(sim, tmp_path)
    lines = calls_in(tmp_path)
    assert len(lines) == AGENTS * CALLS
    for line in lines:
        content = line["request"]["messages"][0]["content"]
        assert content.startswith(f"agent {line['agent']}, "), line
        assert list(line)[:3] == ["key", "agent", "model"]
    for agent_id in (0, 17, AGENTS - 1):
        mine = read_agent_calls(tmp_path, agent_id)
        assert sorted(c["request"]["messages"][0]["content"] for c in mine) == [
            f"agent {agent_id}, call {n}" for n in range(CALLS)]


async def test_a_call_outside_any_agent_has_no_agent(tmp_path: Path) -> None:
    model = recording(str(tmp_path / "calls.jsonl"))
    await model.complete([{"role": "user", "content": "from the scenario"}], seed=1)
    await model.aclose()
    (line,) = calls_in(tmp_path)
    assert "agent" not in line
    assert not (tmp_path / "calls.agents").exists()  # nothing to index


async def test_synchronous_code_sees_no_agent() -> None:
    async with Simulation(workers=1) as sim:
        group = await sim.create(Caller, 2, init={"model": PerWorker(DummyModel, latency=0)})
        assert await group.map(lambda a: current_agent()) == [None, None]


async def test_tagging_on_ray(ray_cluster: Any, tmp_path: Path) -> None:
    async with Simulation(workers=2, backend="ray") as sim:
        await check_tagging(sim, tmp_path, peers=False)
    assert len(recordings(tmp_path)) == 2  # one per worker process
    lines = calls_in(tmp_path)
    assert len(lines) == AGENTS * CALLS
    assert all(ln["request"]["messages"][0]["content"].startswith(f"agent {ln['agent']}, ")
               for ln in lines)
    assert len(read_agent_calls(tmp_path, 3)) == CALLS
