"""Simulation: creation and placement, profiles, resources, lifecycle, errors, map."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from populace.core import (
    Agent,
    CallTimeout,
    LocalBackend,
    Memory,
    Msg,
    PerWorker,
    PopulaceError,
    Simulation,
    SimulationClosed,
    UnobservedFailureWarning,
    WorkerLost,
    gather,
    make_backend,
    wait,
)
from populace.core._worker import WorkerGone


class Oops(Exception):
    pass


class Plain(Agent):
    async def reply(self, msg: Msg) -> Any:
        if msg.content == "fail":
            raise Oops(f"from {self.id}")
        if msg.content == "slow":
            await asyncio.sleep(1.0)
        return self.id


def agents_per_worker(sim: Simulation) -> list[int]:
    return [w.agents for w in sim.statistics().workers]


# -- placement -------------------------------------------------------------------------------


async def test_create_spreads_agents_evenly() -> None:
    async with Simulation(workers=3) as sim:
        group = await sim.create(Plain, 10)
        assert len(group) == 10
        assert sorted(agents_per_worker(sim)) == [3, 3, 4]
        assert sim.n_agents == 10
        assert sim.statistics().agents == 10
        # Every member lives where its handle says, with the right id.
        ids = await group.map(lambda agent: agent.id)
        assert ids == list(range(10))
        assert [h.worker for h in group].count(0) == agents_per_worker(sim)[0]


async def test_small_creates_stay_balanced() -> None:
    async with Simulation(workers=3) as sim:
        groups = []
        for k in range(7):
            groups.append(await sim.create(Plain, 1))
            counts = agents_per_worker(sim)
            assert sum(counts) == k + 1
            assert max(counts) - min(counts) <= 1, counts
        assert agents_per_worker(sim) == [3, 2, 2]
        more = await sim.create(Plain, 2)  # the two lighter workers get one each
        assert agents_per_worker(sim) == [3, 3, 3]
        assert sorted(h.worker for h in more) == [1, 2]
        assert [g[0].id for g in groups] == list(range(7))
        assert list(more.ids) == [7, 8]
        assert await more.broadcast(Msg("m", "hi")) == [7, 8]


async def test_uneven_creates_stay_balanced() -> None:
    async with Simulation(workers=4) as sim:
        for n in (5, 3, 6, 1, 7):
            await sim.create(Plain, n)
            counts = agents_per_worker(sim)
            assert max(counts) - min(counts) <= 1, counts
        assert sum(agents_per_worker(sim)) == 22


async def test_create_validates_its_arguments() -> None:
    async with Simulation() as sim:
        with pytest.raises(TypeError, match="Agent subclass"):
            await sim.create(dict, 1)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="n must be >= 0"):
            await sim.create(Plain, -1)
        with pytest.raises(TypeError, match="unexpected init arguments: colour"):
            await sim.create(Plain, 1, init={"colour": "red"})


async def test_simulation_validates_worker_count() -> None:
    with pytest.raises(ValueError, match="workers must be >= 1"):
        Simulation(workers=0)


def test_a_seed_is_refused_with_where_seeds_come_from() -> None:
    # The simulation draws nothing at random: a seed given here would be kept and never used.
    with pytest.raises(TypeError, match=r"takes no seed.*derive_seed"):
        Simulation(workers=2, seed=5)


# -- profiles --------------------------------------------------------------------------------


async def test_profiles_as_a_mapping_of_columns() -> None:
    async with Simulation(workers=2) as sim:
        profiles = {"name": ["ann", "bob", "cy"], "age": np.array([30, 41, 52])}
        group = await sim.create(Plain, 3, profiles=profiles)
        rows = await group.map(lambda agent: dict(agent.profile))
        assert rows == [
            {"name": "ann", "age": 30},
            {"name": "bob", "age": 41},
            {"name": "cy", "age": 52},
        ]
        assert all(type(r["age"]) is int for r in rows)  # numpy values become Python values


async def test_profiles_as_an_arrow_table() -> None:
    table = pa.table({"name": ["ann", "bob", "cy", "di"], "score": [0.5, 1.5, 2.5, 3.5]})
    async with Simulation(workers=3) as sim:
        group = await sim.create(Plain, 4, profiles=table)
        names = await group.map(lambda agent: agent.profile["name"])
        scores = await group.map(lambda agent: agent.profile["score"])
        assert names == ["ann", "bob", "cy", "di"]
        assert scores == [0.5, 1.5, 2.5, 3.5]
        assert await group[3].call(lambda agent: sorted(agent.profile)) == ["name", "score"]


async def test_agents_without_profiles_get_an_empty_one() -> None:
    async with Simulation() as sim:
        group = await sim.create(Plain, 1)
        assert await group[0].call(lambda agent: dict(agent.profile)) == {}


async def test_profile_columns_must_match_n() -> None:
    async with Simulation() as sim:
        with pytest.raises(ValueError, match="column 'age' has 2 values, expected 3"):
            await sim.create(Plain, 3, profiles={"name": ["a", "b", "c"], "age": [1, 2]})
        with pytest.raises(ValueError, match="expected 3"):
            await sim.create(Plain, 3, profiles=pa.table({"x": [1, 2, 3, 4]}))
        with pytest.raises(TypeError, match="mapping of columns or an Arrow table"):
            await sim.create(Plain, 1, profiles=[{"x": 1}])
        assert sim.n_agents == 0  # nothing half-created


# -- per-worker resources --------------------------------------------------------------------


class Resource:
    built: list[Resource] = []

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.closed = False
        Resource.built.append(self)

    def close(self) -> None:
        self.closed = True


class UsesResource(Agent):
    def __init__(self, id: int, profile: Any = None, *, res: Resource, label: str) -> None:
        super().__init__(id, profile)
        self.res = res
        self.label = label


async def test_per_worker_resource_is_built_once_per_worker() -> None:
    Resource.built = []
    spec = PerWorker(Resource, "shared")
    async with Simulation(workers=3) as sim:
        group = await sim.create(UsesResource, 9, init={"res": spec, "label": "x"})
        assert len(Resource.built) == 3
        # Each agent holds its own worker's object; the three workers hold different ones.
        seen = await group.map(lambda agent: (id(agent.res), agent.res.tag, agent.label))
        by_worker: dict[int, set[int]] = {}
        for h, (obj, tag, label) in zip(group, seen, strict=True):
            by_worker.setdefault(h.worker, set()).add(obj)
            assert (tag, label) == ("shared", "x")
        assert all(len(objs) == 1 for objs in by_worker.values())
        assert len(set.union(*by_worker.values())) == 3

        # A later create() with the same spec reuses the objects already built.
        await sim.create(UsesResource, 3, init={"res": spec, "label": "y"})
        assert len(Resource.built) == 3
        # A different spec builds anew.
        await sim.create(UsesResource, 1, init={"res": PerWorker(Resource, "other"),
                                                "label": "z"})
        assert len(Resource.built) == 4
        assert not any(r.closed for r in Resource.built)
    assert all(r.closed for r in Resource.built)  # released at stop


# -- lifecycle -------------------------------------------------------------------------------


def test_run_is_a_sync_wrapper() -> None:
    sim = Simulation(workers=2)

    async def main(s: Simulation) -> list[int]:
        assert s is sim
        assert s.statistics().state == "running"
        group = await s.create(Plain, 4)
        return await group.broadcast(Msg("m", "hi"))

    assert sim.run(main) == [0, 1, 2, 3]
    assert sim.statistics().state == "stopped"


def test_run_propagates_errors_from_main() -> None:
    async def main(s: Simulation) -> None:
        raise Oops("in main")

    sim = Simulation()
    with pytest.raises(Oops, match="in main"):
        sim.run(main)
    assert sim.statistics().state == "stopped"


async def test_calls_after_stop_raise_runtime_error() -> None:
    sim = await Simulation(workers=2).start()
    group = await sim.create(Plain, 2)
    h = group[0]
    await sim.stop()
    await sim.stop()  # idempotent
    with pytest.raises(RuntimeError, match="simulation is stopped"):
        h.reply(Msg("m", "hi"))
    with pytest.raises(RuntimeError, match="simulation is stopped"):
        group.broadcast(Msg("m", "hi"))
    with pytest.raises(RuntimeError, match="simulation is stopped"):
        await sim.create(Plain, 1)
    with pytest.raises(RuntimeError, match="cannot start"):
        await sim.start()


async def test_calls_before_start_raise_runtime_error() -> None:
    sim = Simulation()
    with pytest.raises(RuntimeError, match="simulation is new"):
        await sim.create(Plain, 1)
    await sim.stop()  # stopping a never-started simulation is fine
    assert sim.statistics().state == "stopped"


async def test_pending_calls_fail_with_simulation_closed_at_stop() -> None:
    sim = await Simulation(workers=2).start()
    group = await sim.create(Plain, 3)
    single = group[0].reply(Msg("m", "slow"))
    pset = group.broadcast(Msg("m", "slow"))
    await asyncio.sleep(0.005)
    stats = sim.statistics()
    assert (stats.pending_calls, stats.pending_groups) == (1, 1)
    assert sum(w.in_flight for w in stats.workers) == 4
    await sim.stop()  # pending calls are not reported as unobserved failures
    assert isinstance(single.exception(), SimulationClosed)
    assert isinstance(single.exception(), PopulaceError)
    assert all(isinstance(e, SimulationClosed) for e in pset.results())
    assert sim.statistics().pending_calls == 0


async def test_calls_finishing_after_stop_are_ignored_quietly() -> None:
    loop = asyncio.get_running_loop()
    problems: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: problems.append(context))

    class Late(Agent):
        async def reply(self, msg: Msg) -> int:
            await asyncio.sleep(0.01)
            if self.id % 2:
                raise Oops("after stop")
            return self.id

    sim = await Simulation(workers=2).start()
    group = await sim.create(Late, 4)
    pset = group.broadcast(Msg("m", "x"))
    single = group[1].reply(Msg("m", "x"))
    await asyncio.sleep(0.002)
    await sim.stop()
    await asyncio.sleep(0.03)  # the agents finish (or fail) after the stop
    assert problems == []
    assert all(isinstance(e, SimulationClosed) for e in pset.results())
    assert isinstance(single.exception(), SimulationClosed)


async def test_a_reply_after_its_timeout_is_dropped_quietly() -> None:
    # Placeholders are set once; a late reply must not try to set a timed-out one again.
    loop = asyncio.get_running_loop()
    problems: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: problems.append(context))

    class Late(Agent):
        async def reply(self, msg: Msg) -> int:
            await asyncio.sleep(0.02)
            return self.id

    async with Simulation() as sim:
        group = await sim.create(Late, 1)
        p = group[0].options(timeout=0.005).reply(Msg("m", "x"))
        with pytest.raises(CallTimeout):
            await p
        await asyncio.sleep(0.04)  # the reply arrives after the deadline
        assert problems == []
        assert sim.statistics().pending_calls == 0


async def test_outcomes_from_a_lost_worker_arriving_late_are_dropped() -> None:
    loop = asyncio.get_running_loop()
    problems: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: problems.append(context))

    class Timed(Agent):
        async def reply(self, msg: Msg) -> int:
            await asyncio.sleep(0.005 if self.id < 2 else 0.02)  # worker 0's finish first
            return self.id

    async with Simulation(workers=2) as sim:
        group = await sim.create(Timed, 4)
        assert [h.worker for h in group] == [0, 0, 1, 1]
        pset = group.broadcast(Msg("m", "x"))
        single = group[0].reply(Msg("m", "x"))
        sim._deliver(0, [WorkerGone(WorkerLost("worker 0 died"))])
        assert isinstance(single.exception(), WorkerLost)
        await asyncio.sleep(0.01)  # worker 0 reports anyway (a real lost one cannot)
        assert not pset.done()
        await wait([pset])
        assert problems == []
        values = pset.results()
        assert [type(v) for v in values[:2]] == [WorkerLost, WorkerLost]
        assert values[2:] == [2, 3]


async def test_statistics_snapshot() -> None:
    async with Simulation(workers=2) as sim:
        group = await sim.create(Plain, 4)
        await group.broadcast(Msg("m", "hi"))
        stats = sim.statistics()
        assert stats.backend == "local"
        assert stats.state == "running"
        assert stats.agents == 4
        assert [w.index for w in stats.workers] == [0, 1]
        assert [(w.calls_started, w.calls_done, w.calls_failed) for w in stats.workers] == [
            (2, 2, 0), (2, 2, 0)]
        assert (stats.pending_calls, stats.pending_groups, stats.unobserved_failures) == (0, 0, 0)
        with pytest.raises(AttributeError):
            stats.agents = 3  # type: ignore[misc]


# -- selecting members -----------------------------------------------------------------------


async def test_select_by_indices_keeps_the_given_order() -> None:
    async with Simulation(workers=3) as sim:
        group = await sim.create(Plain, 6)
        sub = group.select([5, 0, 3])
        assert list(sub.ids) == [5, 0, 3]
        assert await sub.broadcast(Msg("m", "hi")) == [5, 0, 3]
        assert [h.id for h in sub] == [5, 0, 3]
        assert sub.name == "Plain.select"
        assert group.select([1, 2], name="pair").name == "pair"


async def test_failures_of_a_selection_are_keyed_by_member_position() -> None:
    async with Simulation(workers=3) as sim:
        group = await sim.create(Plain, 6)
        sub = group.select([5, 0, 3])
        pset = sub.broadcast(Msg("m", "fail"))
        await wait([pset])
        errors = pset.exceptions()
        assert sorted(errors) == [0, 1, 2]
        assert all(type(k) is int for k in errors)
        assert [str(errors[i]) for i in range(3)] == ["from 5", "from 0", "from 3"]
        assert errors[0].__notes__ == ["raised by agent 5 in reply()"]


async def test_select_by_boolean_mask() -> None:
    async with Simulation(workers=2) as sim:
        group = await sim.create(Plain, 5)
        mask = np.array([True, False, True, False, True])
        sub = group.select(mask)
        assert list(sub.ids) == [0, 2, 4]
        assert await sub.broadcast(Msg("m", "hi")) == [0, 2, 4]
        assert len(group.select([False] * 5)) == 0
        with pytest.raises(ValueError, match="mask has shape"):
            group.select([True, False])


async def test_slicing_a_group() -> None:
    async with Simulation(workers=2) as sim:
        group = await sim.create(Plain, 6)
        middle = group[1:4]
        assert list(middle.ids) == [1, 2, 3]
        assert await middle.broadcast(Msg("m", "hi")) == [1, 2, 3]
        assert await group[::2].broadcast(Msg("m", "hi")) == [0, 2, 4]
        assert await group[::-1].broadcast(Msg("m", "hi")) == [5, 4, 3, 2, 1, 0]
        assert middle[0].id == 1
        assert await middle[1:].broadcast(Msg("m", "hi")) == [2, 3]


async def test_groups_spanning_several_creates() -> None:
    async with Simulation(workers=2) as sim:
        first = await sim.create(Plain, 3)
        second = await sim.create(Plain, 3)
        assert list(second.ids) == [3, 4, 5]
        everyone = first.select([0, 1, 2])
        assert await everyone.broadcast(Msg("m", "hi")) == [0, 1, 2]
        assert await sim.handle(4).reply(Msg("m", "hi")) == 4


# -- map -------------------------------------------------------------------------------------


async def test_map_with_a_sync_function_returns_values_directly() -> None:
    def describe(agent: Agent, prefix: str) -> str:
        return f"{prefix}{agent.id}"

    async with Simulation(workers=2) as sim:
        group = await sim.create(Plain, 3)
        pset = group.map(describe, "agent-")
        assert await pset == ["agent-0", "agent-1", "agent-2"]
        assert await group.map(Plain.reply, Msg("m", "hi")) == [0, 1, 2]


async def test_map_with_an_async_function() -> None:
    async def twice(agent: Agent) -> int:
        await asyncio.sleep(0)
        return agent.id * 2

    async with Simulation(workers=2) as sim:
        group = await sim.create(Plain, 3)
        assert await group.map(twice) == [0, 2, 4]


async def test_map_needs_a_callable() -> None:
    async with Simulation() as sim:
        group = await sim.create(Plain, 1)
        with pytest.raises(TypeError, match="map\\(\\) needs a callable"):
            group.map("reply")  # type: ignore[arg-type]


async def test_group_observe_reaches_every_member() -> None:
    async with Simulation(workers=2) as sim:
        group = await sim.create(Plain, 3)
        assert await group.observe(Msg("m", "news")) == [None, None, None]
        lasts = await group.map(lambda agent: agent.memory.last().content)
        assert lasts == ["news"] * 3


# -- errors ----------------------------------------------------------------------------------


async def test_agent_error_reraises_with_its_type_and_a_note_naming_the_agent() -> None:
    async with Simulation(workers=2) as sim:
        group = await sim.create(Plain, 4)
        with pytest.raises(Oops, match="from 3") as info:
            await group[3].reply(Msg("m", "fail"))
        assert type(info.value) is Oops
        assert not isinstance(info.value, PopulaceError)
        assert info.value.__notes__ == ["raised by agent 3 in reply()"]


async def test_group_member_errors_carry_notes_naming_each_agent() -> None:
    def fail_on_even(agent: Agent) -> int:
        if agent.id % 2 == 0:
            raise LookupError(f"even {agent.id}")
        return agent.id

    async with Simulation(workers=2) as sim:
        group = await sim.create(Plain, 4)
        everyone = group.broadcast(Msg("m", "fail"))
        await wait([everyone])
        errors = everyone.exceptions()
        assert sorted(errors) == [0, 1, 2, 3]
        assert errors[2].__notes__ == ["raised by agent 2 in reply()"]

        pset = group.map(fail_on_even)
        with pytest.raises(LookupError, match="even 0") as info:
            await pset
        note = info.value.__notes__[0]
        assert "agent 0" in note and "fail_on_even" in note
        assert pset.results()[1::2] == [1, 3]


async def test_unconsumed_failure_is_reported_at_stop() -> None:
    sim = await Simulation(workers=2).start()
    group = await sim.create(Plain, 2)
    p = group[1].reply(Msg("m", "fail"))
    await wait([p])
    assert sim.statistics().unobserved_failures == 1
    with pytest.warns(UnobservedFailureWarning, match=r"1 agent call\(s\).*agent 1 reply\(\)"
                                                      r": Oops: from 1"):
        await sim.stop()


async def test_unconsumed_timeout_is_reported_at_stop() -> None:
    sim = await Simulation().start()
    group = await sim.create(Plain, 1)
    p = group[0].options(timeout=0.005).reply(Msg("m", "slow"))
    await wait([p])
    with pytest.warns(UnobservedFailureWarning, match="CallTimeout"):
        await sim.stop()


@pytest.mark.parametrize("consume", ["await", "exception", "result", "gather"])
async def test_consumed_failure_is_not_reported(consume: str) -> None:
    sim = await Simulation(workers=2).start()
    group = await sim.create(Plain, 2)
    p = group[0].reply(Msg("m", "fail"))
    await wait([p])
    if consume == "await":
        with pytest.raises(Oops):
            await p
    elif consume == "exception":
        assert isinstance(p.exception(), Oops)
    elif consume == "result":
        with pytest.raises(Oops):
            p.result()
    else:
        assert isinstance((await gather(p, return_exceptions=True))[0], Oops)
    assert sim.statistics().unobserved_failures == 0
    await sim.stop()  # warnings are errors here: a report would fail the test


async def test_in_flight_never_goes_negative_after_a_dependency_failure() -> None:
    async with Simulation(workers=2) as sim:
        group = await sim.create(Plain, 4)
        bad = group[0].reply(Msg("m", "fail"))
        dependent = group[3].reply(Msg("m", bad))
        dependents = group[2:].broadcast(Msg("m", [bad]))
        with pytest.raises(Oops):
            await dependent
        with pytest.raises(Oops):
            await dependents
        for w in sim.statistics().workers:
            assert w.in_flight == 0
            assert w.calls_started == w.calls_done + w.calls_failed


# -- backends and small parts ----------------------------------------------------------------


async def test_make_backend() -> None:
    local = make_backend("local")
    assert type(local) is LocalBackend and (local.name, local.remote) == ("local", False)
    assert make_backend(local) is local
    # What it makes is a working backend (a runtime-checkable protocol only checks names):
    # the runtime starts it, runs agents on it, reads it and stops it.
    async with Simulation(workers=3, backend=local) as sim:
        group = await sim.create(Plain, 3)
        assert await group.broadcast(Msg("m", "hi")) == [0, 1, 2]
        assert local.n_workers == 3
        assert [w.calls_done for w in local.statistics()] == [1, 1, 1]
        assert [info["pid"] for info in local.worker_info()] == [os.getpid()] * 3
    assert local.n_workers == 0  # stopped with the simulation
    with pytest.raises(ValueError, match="unknown backend 'nope'"):
        make_backend("nope")
    with pytest.raises(TypeError, match="no options"):
        make_backend("local", address="x")


async def test_simulation_accepts_a_backend_instance() -> None:
    backend = LocalBackend()
    async with Simulation(workers=2, backend=backend) as sim:
        assert sim.backend is backend
        group = await sim.create(Plain, 2)
        assert backend.n_workers == 2
        assert backend.worker(1).agent(0).id == 1
        assert await group.broadcast(Msg("m", "hi")) == [0, 1]


async def test_base_agent_and_memory() -> None:
    agent = Agent(7)
    assert agent.profile == {}
    with pytest.raises(NotImplementedError, match="does not implement reply"):
        await agent.reply(Msg("m", "x"))
    for i in range(40):
        agent.observe(Msg("m", i))
    assert len(agent.memory) == Agent.memory_size == 32
    assert agent.memory.last() == Msg("m", 39)
    state = agent.get_state()
    fresh = Agent(8)
    fresh.set_state(state)
    assert [m.content for m in fresh.memory] == list(range(8, 40))

    m = Memory(maxlen=2)
    m.set_state([Msg("x", i) for i in range(5)])
    assert [x.content for x in m] == [3, 4]
    with pytest.raises(ValueError, match="maxlen must be >= 1"):
        Memory(maxlen=0)
