"""The Ray backend on a real two-node Ray cluster started on this machine."""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from populace.core import (  # noqa: E402
    Agent,
    Msg,
    PerWorker,
    ServiceLost,
    SharedTimers,
    Simulation,
    WorkerLost,
    WorkerStats,
    _runtime,
)
from populace.core._ray import RayBackend  # noqa: E402
from populace.core._worker import WorkerGone  # noqa: E402
from populace.launch import RunFile, parse_run_file  # noqa: E402
from populace.results import RunDirectory, read_table  # noqa: E402
from populace.scenarios.guess_number import play  # noqa: E402


@pytest.fixture(scope="module")
def cluster(ray_cluster: str) -> str:
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

    def resource(self) -> tuple[int, int]:
        return os.getpid(), id(self.timers)


def game(backend: str, tmp: Any, **extra: Any) -> RunFile:
    # not game_helpers: this module's classes travel to Ray workers, which import it
    return parse_run_file({
        "scenario": "guess_number", "name": f"g-{backend}", "seed": 5, "agents": 5000,
        "rounds": 2, "workers": 2, "backend": backend,
        "models": {"dummy": {"provider": "dummy", "latency": 0.05}}, **extra,
    }, Path("run.yaml"))


async def test_game_identical_on_local_and_ray(cluster: str, tmp_path: Any) -> None:
    local = RunDirectory.create(tmp_path / "local")
    remote = RunDirectory.create(tmp_path / "ray")
    await play(game("local", tmp_path), local)
    summary = await play(game("ray", tmp_path), remote)
    assert summary["status"] == "completed"
    a, b = read_table(local.path), read_table(remote.path)
    assert a.num_rows == b.num_rows == 10_000
    for col in ("round", "agent_id", "number", "valid", "raw"):
        assert a.column(col).to_pylist() == b.column(col).to_pylist(), col


async def test_workers_spread_over_both_nodes(cluster: str) -> None:
    async with Simulation(workers=2, backend="ray") as sim:
        assert isinstance(sim.backend, RayBackend)
        nodes = {info["node"] for info in sim.backend.worker_info()}
        assert len(nodes) == 2
        group = await sim.create(Sleeper, 10, init={"timers": PerWorker(_timers)})
        pids = await group.map(Sleeper.pid)
        assert len(set(pids)) == 2 and os.getpid() not in pids
        stats = sim.statistics()
        assert [w.agents for w in stats.workers] == [5, 5]


async def test_agents_created_in_several_batches_share_one_resource_per_worker(
        cluster: str, monkeypatch: Any) -> None:
    """Each batch of a creation ships its own copy of the PerWorker spec to a remote
    worker; they still build one object per worker (one model client, one pool)."""
    monkeypatch.setattr(_runtime, "CREATE_CHUNK", 7)
    async with Simulation(workers=2, backend="ray") as sim:
        group = await sim.create(Sleeper, 60, init={"timers": PerWorker(_timers)})
        held = await group.map(Sleeper.resource)
    assert len(set(held)) == 2 and len({pid for pid, _ in held}) == 2


async def test_placeholder_crosses_workers_and_errors_keep_type(cluster: str) -> None:
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


async def test_an_argument_that_cannot_cross_to_a_worker_fails_its_call(
        cluster: str) -> None:
    import threading

    async with Simulation(workers=2, backend="ray") as sim:
        group = await sim.create(Sleeper, 4, init={"timers": PerWorker(_timers)})
        bad = group[0].reply(Msg("m", threading.Lock()))  # no pickle for a lock
        good = group[1].reply(Msg("m", "fine"))  # sent in the same tick: it still goes
        with pytest.raises(Exception, match="lock"):
            await asyncio.wait_for(bad, 30)
        assert (await asyncio.wait_for(good, 30)).content == ("got", "fine")


async def test_killed_worker_raises_worker_lost(cluster: str) -> None:
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


def _explode() -> None:
    raise RuntimeError("this reply cannot be rebuilt here")


class Unloadable:
    """Pickles in the worker; unpickling it in the central process raises."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_explode, ())


class Sender(Agent):
    async def reply(self, msg: Msg) -> Any:
        if msg.content == "bad":
            return Unloadable()
        await asyncio.sleep(msg.metadata["delay"] if msg.metadata else 0.0)
        return self.id


async def test_a_poll_failing_unexpectedly_fails_the_workers_calls_naming_it(
        cluster: str, caplog: pytest.LogCaptureFixture) -> None:
    # Only a dead actor (RayActorError) used to end polling visibly; any other error killed
    # the poller silently and the worker's calls waited forever.
    async with Simulation(workers=2, backend="ray") as sim:
        group = await sim.create(Sender, 4)
        waiting = group.broadcast(Msg("m", "x", metadata={"delay": 2.0}))
        await asyncio.sleep(0.2)
        bad = group[0].reply(Msg("m", "bad"))  # worker 0 holds agents 0-1
        await asyncio.wait_for(asyncio.shield(_until_done(waiting)), timeout=30)
        with pytest.raises(WorkerLost, match=r"worker 0 \(pid \d+\) stopped reporting: ") as info:
            await bad
        assert "agents 0-1" in str(info.value)
        errors = waiting.exceptions()
        assert sorted(errors) == [0, 1]
        assert "stopped reporting" in str(errors[0])
        assert waiting.results()[2:] == [2, 3]  # worker 1 goes on
        assert "worker 0: polling its outcomes failed" in caplog.text


async def test_the_poller_reports_any_end_but_cancellation_as_the_workers_loss() -> None:
    class Poll:  # stands for actor.poll: one outcome per call
        def __init__(self, *outcomes: Any) -> None:
            self.outcomes = list(outcomes)

        async def remote(self) -> Any:
            outcome = self.outcomes.pop(0)
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome

    class Actor:
        poll = Poll(([], WorkerStats(0, 1, 0, 0, 0, 0)), ValueError("bad frame\ndetails"))

    backend = RayBackend()
    got: list[tuple[int, list[Any]]] = []
    backend._actors, backend._info = [Actor()], [{"pid": 42}]
    backend._stats = [WorkerStats(0, 0, 0, 0, 0, 0)]
    backend._deliver = lambda worker, updates: got.append((worker, updates))
    await backend._poll(0)
    assert got[0] == (0, [])
    [(worker, [gone])] = got[1:]
    assert worker == 0 and isinstance(gone, WorkerGone)
    assert str(gone.error) == "worker 0 (pid 42) stopped reporting: ValueError: bad frame"
    assert isinstance(gone.error.__cause__, ValueError)


async def test_stop_removes_every_actor(cluster: str) -> None:
    sim = Simulation(workers=2, backend="ray")
    await sim.start()
    group_name = sim.backend._group  # type: ignore[attr-defined]
    await sim.create(Sleeper, 4, init={"timers": PerWorker(_timers)})
    await sim.stop()
    await asyncio.sleep(0.5)
    alive = [a for a in ray.util.list_named_actors(all_namespaces=True)
             if a["name"].startswith(group_name)]
    assert alive == []


def test_numpy_ids_round_trip(cluster: str) -> None:
    # Selections produce numpy index arrays; they must travel to actors as plain data.
    async def main() -> list[Any]:
        async with Simulation(workers=2, backend="ray") as sim:
            group = await sim.create(Sleeper, 6, init={"timers": PerWorker(_timers)})
            picked = group.select(np.array([5, 0, 3]))
            return [m.sender for m in await picked.broadcast(Msg("m", "x"))]

    assert asyncio.run(main()) == [5, 0, 3]


async def test_colocated_groups_share_a_worker_process(cluster: str) -> None:
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

    def resource(self) -> tuple[int, int]:
        return os.getpid(), id(self.timers)

    async def fail(self) -> None:
        raise KeyError("no such thing")


async def test_a_placed_service_is_an_actor_called_by_name(cluster: str) -> None:
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
        await _gone(handle.info["pid"])  # ray.kill takes effect a moment later
        with pytest.raises(ServiceLost, match=r"Tally \(pid \d+\) died: "):
            await asyncio.wait_for(handle.call("add", 1), 30)
        kept = await sim.backend.place(Tally, 0)
        assert await kept.call("add", 1) == 1
    await _gone(kept.info["pid"])
    with pytest.raises(ServiceLost):  # the backend killed what it placed when it stopped
        await asyncio.wait_for(kept.call("add", 1), 30)


async def _gone(pid: int, timeout: float = 30.0) -> None:
    """Wait until process ``pid`` has exited (it runs on this machine: a local cluster)."""
    deadline = time.monotonic() + timeout
    while await asyncio.to_thread(Path(f"/proc/{pid}").exists):
        if time.monotonic() > deadline:
            pytest.fail(f"process {pid} still alive {timeout} s after it was killed")
        await asyncio.sleep(0.05)


def _cmdline(pid: int) -> str | None:
    path = Path(f"/proc/{pid}/cmdline")
    return path.read_bytes().decode(errors="replace") if path.exists() else None
