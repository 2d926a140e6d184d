"""WorkerStats measures the worker's own process: its pid, CPU time and resident memory."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from populace.core import Agent, Simulation, WorkerStats
from populace.core._worker import RSS_MAX_AGE

PAGE = os.sysconf("SC_PAGE_SIZE")
HAS_PROC = Path("/proc/self/statm").exists()


class Burner(Agent):
    """Keeps its process's CPU busy for ``seconds`` (no awaiting)."""

    def burn(self, seconds: float) -> int:
        end, n = time.process_time() + seconds, 0
        while time.process_time() < end:
            n += 1
        return os.getpid()


def rss_now() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * PAGE


def spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_old_constructors_still_work_and_measure_nothing() -> None:
    stats = WorkerStats(0, 1, 0, 0, 0, 0)
    assert (stats.pid, stats.cpu_s, stats.measured_at, stats.rss_bytes) == (None,) * 4


async def test_statistics_measure_this_process_when_taken() -> None:
    async with Simulation(workers=2) as sim:
        await sim.create(Burner, 4)
        before_cpu, before_t = time.process_time(), time.monotonic()
        workers = sim.statistics().workers
        after_cpu, after_t = time.process_time(), time.monotonic()
    assert [w.pid for w in workers] == [os.getpid(), os.getpid()]  # one process, locally
    for w in workers:
        assert w.cpu_s is not None and w.measured_at is not None
        assert before_cpu <= w.cpu_s <= after_cpu
        assert before_t <= w.measured_at <= after_t
    if HAS_PROC:
        rss = workers[0].rss_bytes
        assert rss is not None and abs(rss - rss_now()) < 64 * 2**20, (rss, rss_now())


async def test_cpu_seconds_grow_with_load_not_with_waiting() -> None:
    async with Simulation(workers=1) as sim:
        group = await sim.create(Burner, 2)
        a = sim.statistics().workers[0]
        await group.map(Burner.burn, 0.3)  # two agents, 0.3 s of CPU each
        b = sim.statistics().workers[0]
        await asyncio.sleep(0.3)  # idle: the clock moves, the CPU time hardly
        c = sim.statistics().workers[0]
    assert a.cpu_s is not None and b.cpu_s is not None and c.cpu_s is not None
    assert b.cpu_s - a.cpu_s >= 0.55
    assert c.cpu_s - b.cpu_s < 0.15
    assert c.measured_at is not None and b.measured_at is not None
    assert c.measured_at - b.measured_at >= 0.29


@pytest.mark.skipif(not HAS_PROC, reason="resident memory is read from /proc")
async def test_resident_memory_follows_the_process() -> None:
    async with Simulation(workers=1) as sim:
        await sim.create(Burner, 1)
        await asyncio.sleep(RSS_MAX_AGE)
        t = time.monotonic()
        first = sim.statistics().workers[0].rss_bytes
        block = np.ones(64 * 2**20 // 8)  # 64 MB, every page written
        again = sim.statistics().workers[0].rss_bytes
        quick = time.monotonic() - t < RSS_MAX_AGE
        await asyncio.sleep(RSS_MAX_AGE)
        grown = sim.statistics().workers[0].rss_bytes
        del block
    assert first is not None and grown is not None
    if quick:  # reused: every worker and every poll asks; /proc is read 5 times a second
        assert again == first
    assert grown - first >= 60 * 2**20, (first, grown)


def test_reading_the_process_is_cheap(monkeypatch: pytest.MonkeyPatch) -> None:
    """/proc is read at most once per RSS_MAX_AGE, however often a sample is taken (so a
    sample costs a few µs; that speed is a benchmark's to measure, not a test's)."""
    from populace.core import _worker

    reads: list[float] = []
    now = [1000.0]
    monkeypatch.setattr(_worker, "_rss", (-1, 0.0, None))
    monkeypatch.setattr(_worker, "_read_rss", lambda: reads.append(now[0]) or 4096 * len(reads))
    monkeypatch.setattr(_worker, "time", SimpleNamespace(
        monotonic=lambda: now[0], process_time=time.process_time))
    samples = [_worker._process_sample() for _ in range(10_000)]
    assert reads == [1000.0] and {s[3] for s in samples} == {4096}
    assert {(s[0], s[2]) for s in samples} == {(os.getpid(), 1000.0)}
    now[0] += RSS_MAX_AGE / 2
    assert _worker._process_sample()[3] == 4096 and len(reads) == 1  # still fresh
    now[0] += RSS_MAX_AGE / 2
    assert _worker._process_sample()[3] == 8192 and reads == [1000.0, now[0]]  # aged: read


# -- on Ray: each worker's statistics come from its actor's process ---------------------------
async def test_on_ray_the_actors_measure_themselves(ray_cluster: Any) -> None:
    from populace.results import RunMonitor

    monitor = RunMonitor(interval=0.0)
    monitor.run_started(name="burn", agents=4, steps=1, workers=2, backend="ray")
    async with Simulation(workers=2, backend="ray") as sim:
        group = await sim.create(Burner, 4)
        monitor.simulation_started(sim)
        actors = [w["pid"] for w in sim.backend.worker_info()]  # type: ignore[attr-defined]
        assert len(set(actors)) == 2 and os.getpid() not in actors
        pids = set(await group.map(Burner.burn, 0.05))
        assert pids == set(actors)
        cpu: list[list[float | None]] = []
        for _ in range(4):  # each actor busy for ~0.6 s; samples taken meanwhile
            burning = asyncio.ensure_future(group.map(Burner.burn, 0.3))
            while not burning.done():
                await asyncio.sleep(0.1)
                monitor.refresh(sim.statistics(), force=True)
                cpu.append([w.cpu_pct for w in monitor.snapshot().workers])
            await burning
        await asyncio.sleep(0.6)  # a poll returns within 0.5 s, with fresh statistics
        stats = sim.statistics().workers
        monitor.refresh(sim.statistics(), force=True)
        snap = monitor.snapshot()
    assert [w.pid for w in stats] == actors  # not the driver's
    assert all(w.rss_bytes and w.rss_bytes > 10 * 2**20 for w in stats)
    assert all(w.cpu_s and w.cpu_s > 0.5 for w in stats)
    rows = snap.workers
    assert [w.pid for w in rows] == actors and all(w.rss_mb and w.rss_mb > 10 for w in rows)
    assert {w.status for w in rows} == {"alive"}
    busy = [c for c in cpu if None not in c]
    # Both actors measured busy at once (how busy depends on the machine's load: 12% on a
    # loaded 2-core machine, so no threshold beyond "clearly working").
    assert busy and max(min(c) for c in busy) > 2, cpu  # type: ignore[type-var]
    assert not snap.llm.workers_share_memory
    # two nodes of one worker each, their totals those of their worker
    assert sorted(n.workers for n in snap.nodes) == [1, 1] == [n.processes for n in snap.nodes]
    assert {n.node for n in snap.nodes} == {w.node for w in rows}
    assert sum(n.agents for n in snap.nodes) == 4
    assert sum(n.rss_mb or 0 for n in snap.nodes) == pytest.approx(
        sum(w.rss_mb or 0 for w in rows), abs=0.2)
