"""Dependency-triggered execution: placeholders inside messages and arguments."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from populace.core import Agent, Msg, Placeholder, PlaceholderSet, Simulation, gather


class Oops(Exception):
    pass


class Recorder(Agent):
    """Logs when each reply starts and ends; sleeps ``profile['delay']``; may fail."""

    def __init__(self, id: int, profile: Any = None, *, log: list[tuple[Any, ...]]) -> None:
        super().__init__(id, profile)
        self.log = log

    async def reply(self, msg: Msg) -> Any:
        loop = asyncio.get_running_loop()
        self.log.append(("start", self.id, loop.time(), msg))
        await asyncio.sleep(self.profile["delay"])
        if self.profile["fail"]:
            raise Oops(f"agent {self.id} failed")
        self.log.append(("end", self.id, loop.time()))
        return f"answer of {self.id}"


async def recorders(sim: Simulation, delays: list[float], fail: list[bool] | None = None
                    ) -> tuple[Any, list[tuple[Any, ...]]]:
    log: list[tuple[Any, ...]] = []
    profiles = {"delay": delays, "fail": fail or [False] * len(delays)}
    group = await sim.create(Recorder, len(delays), profiles=profiles, init={"log": log})
    return group, log


def events(log: list[tuple[Any, ...]]) -> list[tuple[str, int]]:
    return [(e[0], e[1]) for e in log]


async def test_dependent_runs_after_its_dependency_on_another_worker() -> None:
    async with Simulation(workers=2) as sim:
        group, log = await recorders(sim, [0.03, 0.0])
        a, b = group[0], group[1]
        assert a.worker != b.worker

        pa = a.reply(Msg("moderator", "go"))
        pb = b.reply(Msg("a", pa))
        await asyncio.sleep(0.01)
        # B is parked in its worker, waiting on A; it has not started.
        assert events(log) == [("start", 0)]
        stats = sim.statistics().workers
        assert stats[b.worker].waiting_on_dependencies == 1
        assert stats[a.worker].waiting_on_dependencies == 0

        assert await pb == "answer of 1"
        assert events(log) == [("start", 0), ("end", 0), ("start", 1), ("end", 1)]
        a_end, b_start = log[1][2], log[2][2]
        assert b_start >= a_end
        seen: Msg = log[2][3]
        assert seen.content == "answer of 0"  # the real value, not the placeholder
        assert seen.sender == "a"
        assert sim.statistics().workers[b.worker].waiting_on_dependencies == 0


async def test_placeholders_nested_in_lists_dicts_tuples_and_metadata() -> None:
    async with Simulation(workers=3) as sim:
        group, log = await recorders(sim, [0.005, 0.01, 0.0, 0.0])
        p0 = group[0].reply(Msg("m", "x"))
        p1 = group[1].reply(Msg("m", "y"))
        content = {"first": [p0, "plain"], "pair": (p1, 2), "deep": [{"again": p0}]}
        meta = {"origin": p1, "n": 3}
        p3 = group[3].reply(Msg("m", content, role="system", metadata=meta))
        assert await p3 == "answer of 3"
        msg: Msg = next(e[3] for e in log if e[:2] == ("start", 3))
        assert msg.content == {
            "first": ["answer of 0", "plain"],
            "pair": ("answer of 1", 2),
            "deep": [{"again": "answer of 0"}],
        }
        assert msg.metadata == {"origin": "answer of 1", "n": 3}
        assert msg.role == "system"
        # The caller's message is left as it was.
        assert isinstance(content["first"][0], Placeholder)


async def test_failed_dependency_fails_the_dependent_with_the_same_type() -> None:
    async with Simulation(workers=2) as sim:
        group, log = await recorders(sim, [0.005, 0.0], fail=[True, False])
        pa = group[0].reply(Msg("m", "go"))
        pb = group[1].reply(Msg("a", [pa]))
        with pytest.raises(Oops, match="agent 0 failed") as info:
            await pb
        assert any("agent 0" in note for note in info.value.__notes__)
        assert ("start", 1) not in events(log)  # B never ran
        # Consuming the dependent consumed the dependency's failure too: nothing unobserved.
        assert sim.statistics().unobserved_failures == 0
        assert all(w.in_flight == 0 for w in sim.statistics().workers)


async def test_already_failed_dependency_fails_the_dependent() -> None:
    async with Simulation(workers=2) as sim:
        group, log = await recorders(sim, [0.0, 0.0], fail=[True, False])
        pa = group[0].reply(Msg("m", "go"))
        with pytest.raises(Oops):
            await pa
        with pytest.raises(Oops):
            await group[1].reply(Msg("a", pa))
        assert ("start", 1) not in events(log)


async def test_placeholder_set_as_a_dependency_resolves_to_the_list() -> None:
    async with Simulation(workers=2) as sim:
        group, log = await recorders(sim, [0.01, 0.0, 0.005, 0.0])
        pset = group[:3].broadcast(Msg("m", "round 1"))
        assert isinstance(pset, PlaceholderSet)
        p3 = group[3].reply(Msg("m", {"answers": pset}))
        assert await p3 == "answer of 3"
        msg: Msg = next(e[3] for e in log if e[:2] == ("start", 3))
        assert msg.content == {"answers": ["answer of 0", "answer of 1", "answer of 2"]}
        ends = [e[2] for e in log if e[0] == "end" and e[1] < 3]
        start3 = next(e[2] for e in log if e[:2] == ("start", 3))
        assert start3 >= max(ends)


async def test_failed_member_of_a_set_dependency_fails_the_dependent() -> None:
    async with Simulation(workers=2) as sim:
        group, _ = await recorders(sim, [0.0, 0.0, 0.0], fail=[False, True, False])
        pset = group[:2].broadcast(Msg("m", "go"))
        with pytest.raises(Oops, match="agent 1 failed"):
            await group[2].reply(Msg("m", pset))


async def test_group_broadcast_waits_for_a_dependency() -> None:
    async with Simulation(workers=2) as sim:
        group, log = await recorders(sim, [0.01, 0.0, 0.0, 0.0, 0.0])
        pa = group[0].reply(Msg("m", "topic?"))
        rest = group[1:]
        answers = rest.broadcast(Msg("moderator", pa))
        await asyncio.sleep(0.003)
        assert sum(w.waiting_on_dependencies for w in sim.statistics().workers) == 4
        assert await answers == [f"answer of {i}" for i in range(1, 5)]
        contents = [e[3].content for e in log if e[0] == "start" and e[1] > 0]
        assert contents == ["answer of 0"] * 4


async def test_placeholders_in_call_arguments_are_resolved() -> None:
    async with Simulation(workers=2) as sim:
        group, _ = await recorders(sim, [0.005, 0.0])
        pa = group[0].reply(Msg("m", "x"))
        out = group[1].call(lambda agent, v, d: (agent.id, v, d), pa, {"k": [pa]})
        assert await out == (1, "answer of 0", {"k": ["answer of 0"]})
        mapped = group.map(lambda agent, v: f"{agent.id}<-{v}", pa)
        assert await mapped == ["0<-answer of 0", "1<-answer of 0"]


async def test_chain_of_dependencies_runs_in_order() -> None:
    async with Simulation(workers=3) as sim:
        group, log = await recorders(sim, [0.002, 0.002, 0.002])
        p0 = group[0].reply(Msg("m", "start"))
        p1 = group[1].reply(Msg("m", p0))
        p2 = group[2].reply(Msg("m", p1))
        assert await gather(p0, p1, p2) == ["answer of 0", "answer of 1", "answer of 2"]
        assert events(log) == [("start", 0), ("end", 0), ("start", 1), ("end", 1),
                               ("start", 2), ("end", 2)]
