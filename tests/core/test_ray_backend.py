"""The Ray backend on a real two-node Ray cluster started on this machine."""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from populace.core import (  # noqa: E402
    Agent,
    Msg,
    PerWorker,
    ServiceLost,
    SharedTimers,
    Simulation,
    WorkerLost,
)
from populace.core._ray import RayBackend  # noqa: E402
from populace.results import RunDirectory, read_table  # noqa: E402
from populace.scenarios.guess_number import RunConfig, play  # noqa: E402


@pytest.fixture(scope="module")
def cluster(ray_cluster: Cluster) -> Cluster:
    """The two-node cluster of tests/conftest.py."""
    return ray_cluster


def _timers() -> SharedTimers:
    return SharedTimers(asyncio.get_running_loop())


class Sleeper(Agent):
    __slots__ = ("timers",)

    def __init__(self, id: int, profile: Any = None, *, timers: SharedTimers) -> None:
        super().__init__(id, profile)
        self.timers = timers

    async def reply(self, msg: Msg) -> Msg:
        await self.timers.sleep(msg.metadata["delay"] if msg.metadata else 0.0)
        if msg.content == "fail":
            raise KeyError(f"agent {self.id} refuses")
        return Msg(self.id, ("got", msg.content), role="assistant")

    def pid(self) -> int:
        return os.getpid()


def game(backend: str, tmp: Any, **extra: Any) -> RunConfig:
    return RunConfig.model_validate({
        "name": f"g-{backend}", "seed": 5, "agents": 5000, "rounds": 2, "workers": 2,
        "backend": backend, "models": {"dummy": {"provider": "dummy", "latency": 0.05}},
        **extra,
    })


async def test_game_identical_on_local_and_ray(cluster: Cluster, tmp_path: Any) -> None:
    local = RunDirectory.create(tmp_path / "local")
    remote = RunDirectory.create(tmp_path / "ray")
    await play(game("local", tmp_path), local)
    summary = await play(game("ray", tmp_path), remote)
    assert summary["status"] == "completed"
    a, b = read_table(local.path), read_table(remote.path)
    assert a.num_rows == b.num_rows == 10_000
    for col in ("round", "agent_id", "number", "valid", "raw"):
        assert a.column(col).to_pylist() == b.column(col).to_pylist(), col


async def test_workers_spread_over_both_nodes(cluster: Cluster) -> None:
    async with Simulation(workers=2, backend="ray") as sim:
        assert isinstance(sim.backend, RayBackend)
        nodes = {info["node"] for info in sim.backend.worker_info()}
        assert len(nodes) == 2
        group = await sim.create(Sleeper, 10, init={"timers": PerWorker(_timers)})
        pids = await group.map(Sleeper.pid)
        assert len(set(pids)) == 2 and os.getpid() not in pids
        stats = sim.statistics()
        assert [w.agents for w in stats.workers] == [5, 5]


async def test_placeholder_crosses_workers_and_errors_keep_type(cluster: Cluster) -> None:
    async with Simulation(workers=2, backend="ray") as sim:
        group = await sim.create(Sleeper, 4, init={"timers": PerWorker(_timers)})
        first, last = group[0], group[3]
        assert first.worker != last.worker
        slow = first.reply(Msg("m", "hello", metadata={"delay": 0.3}))
        relay = last.reply(Msg("m", slow))  # sent while `slow` is still pending
        out = await relay
        assert out.content == ("got", Msg(0, ("got", "hello"), role="assistant"))
        # The value went worker to worker: the relay may finish before the centre has even
        # heard from the first worker. Its own result still arrives.
        assert (await slow) == Msg(0, ("got", "hello"), role="assistant")

        bad = first.reply(Msg("m", "fail"))
        with pytest.raises(KeyError, match="agent 0 refuses") as info:
            await bad
        assert any("agent 0" in note for note in info.value.__notes__)
        dependent = last.reply(Msg("m", bad))
        with pytest.raises(KeyError):
            await dependent

        # A group result as a dependency is resolved centrally, then forwarded.
        everyone = group.broadcast(Msg("m", "x", metadata={"delay": 0.1}))
        summary = await last.reply(Msg("m", everyone))
        assert [m.sender for m in summary.content[1]] == [0, 1, 2, 3]


async def test_killed_worker_raises_worker_lost(cluster: Cluster) -> None:
    async with Simulation(workers=2, backend="ray") as sim:
        group = await sim.create(Sleeper, 100, init={"timers": PerWorker(_timers)})
        pending = group.broadcast(Msg("m", "x", metadata={"delay": 3.0}))
        await asyncio.sleep(0.5)
        victim = sim.backend.worker_info()[1]["pid"]
        os.kill(victim, signal.SIGKILL)
        await asyncio.wait_for(asyncio.shield(_until_done(pending)), timeout=30)
        errors = pending.exceptions()
        assert sorted(errors) == list(range(50, 100))  # worker 1 held agents 50-99
        err = errors[50]
        assert isinstance(err, WorkerLost)
        assert "worker 1" in str(err) and "50-99" in str(err)
        values = pending.results()
        assert all(isinstance(v, Msg) for v in values[:50])


async def _until_done(pset: Any) -> None:
    while not pset.done():  # noqa: ASYNC110 - a pending set offers nothing to await
        await asyncio.sleep(0.05)


async def test_stop_removes_every_actor(cluster: Cluster) -> None:
    sim = Simulation(workers=2, backend="ray")
    await sim.start()
    group_name = sim.backend._group  # type: ignore[attr-defined]
    await sim.create(Sleeper, 4, init={"timers": PerWorker(_timers)})
    await sim.stop()
    await asyncio.sleep(0.5)
    alive = [a for a in ray.util.list_named_actors(all_namespaces=True)
             if a["name"].startswith(group_name)]
    assert alive == []


def test_numpy_ids_round_trip(cluster: Cluster) -> None:
    # Selections produce numpy index arrays; they must travel to actors as plain data.
    async def main() -> list[Any]:
        async with Simulation(workers=2, backend="ray") as sim:
            group = await sim.create(Sleeper, 6, init={"timers": PerWorker(_timers)})
            picked = group.select(np.array([5, 0, 3]))
            return [m.sender for m in await picked.broadcast(Msg("m", "x"))]

    assert asyncio.run(main()) == [5, 0, 3]


async def test_colocated_groups_share_a_worker_process(cluster: Cluster) -> None:
    labels = np.arange(40) % 4
    async with Simulation(workers=2, backend="ray") as sim:
        group = await sim.create(Sleeper, 40, colocate=labels,
                                 init={"timers": PerWorker(_timers)})
        pids = np.array(await group.map(Sleeper.pid))
        for g in range(4):
            assert len(set(pids[labels == g])) == 1
        assert len(set(pids)) == 2
        answers = await group.broadcast(Msg("m", "x"))
        assert [m.sender for m in answers] == list(range(40))


class Tally:
    """A service to place: state, a sync and an async method, a failing one."""

    def __init__(self, start: int) -> None:
        self.value = start

    async def add(self, n: int) -> int:
        self.value += n
        return self.value

    def pid(self) -> int:
        return os.getpid()

    async def fail(self) -> None:
        raise KeyError("no such thing")


async def test_a_placed_service_is_an_actor_called_by_name(cluster: Cluster) -> None:
    async with Simulation(workers=2, backend="ray") as sim:
        handle = await sim.backend.place(Tally, 5)
        assert set(handle.info) == set(sim.backend.worker_info()[0]) == {"pid", "node"}
        # Near the driver by preference (soft affinity: a busy node passes it on).
        assert handle.info["node"] in {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        assert await handle.call("add", 2) == 7
        assert await handle.call("pid") == handle.info["pid"] != os.getpid()
        assert await pickle.loads(pickle.dumps(handle)).call("add", 1) == 8  # one service
        with pytest.raises(KeyError, match="no such thing"):
            await handle.call("fail")
        title = _cmdline(handle.info["pid"])  # Ray titles the process after the class,
        assert title is None or "Tally" in title  # so it can be found (and killed)
        ray.kill(handle.actor)
        with pytest.raises(ServiceLost, match=r"Tally \(pid \d+\) died: "):
            await asyncio.wait_for(handle.call("add", 1), 30)
        kept = await sim.backend.place(Tally, 0)
        assert await kept.call("add", 1) == 1
    with pytest.raises(ServiceLost):  # the backend killed what it placed when it stopped
        await asyncio.wait_for(kept.call("add", 1), 30)


def _cmdline(pid: int) -> str | None:
    path = Path(f"/proc/{pid}/cmdline")
    return path.read_bytes().decode(errors="replace") if path.exists() else None
