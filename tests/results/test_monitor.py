"""RunMonitor: what play() feeds it, what a snapshot holds, and how small it stays."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from populace.config import validate
from populace.core import ModelError, SimulationStats, WorkerStats
from populace.llm import Completion, EndpointStats, ModelStats
from populace.llm import _modelset as modelset_module
from populace.results import RunDirectory, RunMonitor, read_summary, read_table, run_snapshot
from populace.results._monitor import bin_edges, error_kind
from populace.scenarios.guess_number import RunConfig, play

LIMIT = 50_000  # bytes: the live page's update payload must stay under this


def config(**changes: Any) -> RunConfig:
    data: dict[str, Any] = {"name": "mon", "agents": 600, "rounds": 2, "workers": 2, "seed": 3,
                            "models": {"dummy": {"provider": "dummy", "latency": 0.0}}}
    data.update(changes)
    return validate(data, RunConfig, "test")


def size(snapshot: dict[str, Any]) -> int:
    return len(json.dumps(snapshot, allow_nan=False, separators=(",", ":")).encode())


# -- fed by a real run ---------------------------------------------------------------------------
async def test_play_feeds_the_monitor_and_the_snapshot_is_plain_json(tmp_path: Path) -> None:
    monitor = RunMonitor(run_id="r1")
    summary = await play(config(), RunDirectory.create(tmp_path / "r1"), monitor=monitor)
    snap = monitor.snapshot()
    json.dumps(snap, allow_nan=False)  # no NaN, no numpy types
    assert summary["status"] == "completed"
    assert (snap["status"], snap["finished"], snap["round"], snap["rounds_done"]) == \
        ("done", True, 2, 2)
    assert (snap["name"], snap["agents"], snap["n_workers"], snap["rounds_planned"]) == \
        ("mon", 600, 2, 2)
    assert snap["progress"] == {"round": 2, "done": 600, "failed": 0, "total": 600,
                                "fraction": 1.0}
    assert snap["states"] == {"idle": 0, "waiting": 0, "in_call": 0, "done": 600, "failed": 0}
    hist = snap["histogram"]
    assert (hist["valid"], hist["invalid"], sum(hist["counts"])) == (600, 0, 600)
    assert len(hist["counts"]) == 101 and hist["edges"] == [-0.5, 100.5]  # one bin per integer
    numbers = pq.read_table(tmp_path / "r1" / "parts" / "responses-r00002.parquet")
    expected, _ = np.histogram(numbers.column("number").to_numpy(), bins=bin_edges(0, 100))
    assert hist["counts"] == expected.tolist()
    assert hist["mean"] == pytest.approx(summary["rounds"][-1]["mean"], abs=1e-3)
    assert [r["round"] for r in snap["rounds"]] == [1, 2]
    assert snap["rounds"][0]["mean"] == pytest.approx(summary["rounds"][0]["mean"], abs=1e-3)
    assert snap["llm"]["requests"] == 1200 and snap["llm"]["failures"] == 0
    assert snap["llm"]["models"][0]["model"] == "dummy"
    assert snap["llm"]["latency_s"]["n"] == 1200
    assert [w["agents"] for w in snap["workers"]] == [300, 300]
    assert all(w["pid"] and w["calls_done"] >= 300 for w in snap["workers"])


async def test_the_histogram_fills_while_a_round_is_still_going() -> None:
    monitor = RunMonitor()
    cfg = config(agents=900, rounds=1, model=None,
                 models={"fast": {"provider": "dummy", "latency": 0.05},
                         "slow": {"provider": "dummy", "latency": 0.8}},
                 assign={"fast": "1/3", "slow": "2/3"})
    task = asyncio.ensure_future(play(cfg, None, monitor=monitor))
    seen: list[tuple[int, int, int]] = []
    while not task.done():
        await asyncio.sleep(0.05)
        s = monitor.snapshot()
        seen.append((s["progress"]["done"], s["histogram"]["valid"], s["states"]["in_call"]))
    await task
    partial = [x for x in seen if 0 < x[0] < 900]
    assert partial, seen
    assert all(done == valid for done, valid, _ in partial)  # every arrived answer is binned
    assert any(in_call == 600 for _, _, in_call in partial)  # the slow two thirds still calling


async def test_failed_answers_are_counted_by_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    class Flaky:
        def __init__(self, name: str, cfg: Any) -> None:
            self.name, self.calls = name, 0

        async def complete(self, messages: Sequence[Any], **kw: Any) -> Completion:
            self.calls += 1
            await asyncio.sleep(0)
            if kw["seed"] % 5 == 0:
                raise ModelError(f"model {self.name!r}: HTTP 503: overloaded from http://x/v1")
            if kw["seed"] % 5 == 1:
                raise ModelError(f"model {self.name!r}: timed out after 1 s from http://x/v1")
            return Completion("42", self.name, prompt_tokens=3, completion_tokens=1)

        def statistics(self) -> ModelStats:
            return ModelStats(self.name, self.calls, 0, 0, 0, 0)

        async def aclose(self) -> None:
            pass

    monkeypatch.setattr(modelset_module, "build_model", Flaky)
    monitor = RunMonitor()
    summary = await play(config(rounds=1), None, monitor=monitor)
    snap = monitor.snapshot()
    kinds = dict(snap["llm"]["errors"])
    failed = summary["rounds"][0]["n"] - summary["rounds"][0]["n_valid"]
    assert set(kinds) == {"ModelError: HTTP 503", "ModelError: timed out"}
    assert sum(kinds.values()) == failed == snap["progress"]["failed"] > 0
    assert snap["states"]["failed"] == failed
    assert snap["histogram"]["valid"] == 600 - failed


async def test_stop_abandons_the_round_keeps_finished_ones_and_can_resume(tmp_path: Path
                                                                            ) -> None:
    monitor = RunMonitor()
    cfg = config(rounds=4, models={"dummy": {"provider": "dummy", "latency": 0.3}})
    out = tmp_path / "stopped"
    task = asyncio.ensure_future(play(cfg, RunDirectory.create(out), monitor=monitor))
    for _ in range(500):  # until round 1 is written
        if monitor.snapshot()["rounds_done"] >= 1:
            break
        await asyncio.sleep(0.02)
    monitor.request_stop()
    assert monitor.snapshot()["status"] == "stopping"
    summary = await asyncio.wait_for(task, 10)
    assert summary["status"] == "stopped"
    snap = monitor.snapshot()
    assert snap["status"] == "stopped" and monitor.finished
    # The abandoned round's teardown is not shown as failed answers.
    assert snap["llm"]["errors"] == [] and snap["progress"]["failed"] == 0
    assert snap["states"]["in_call"] == 0
    on_disk = read_summary(out)
    assert on_disk["status"] == "stopped"
    done = len(on_disk["rounds"])
    assert 1 <= done < 4
    parts = sorted(p.name for p in (out / "parts").glob("responses-r*.parquet"))
    assert parts == [f"responses-r{r:05d}.parquet" for r in range(1, done + 1)]
    assert read_table(out).num_rows == 600 * done  # no half-written round
    # The stopped run continues from its checkpoint to the end.
    resumed = await play(cfg, RunDirectory(out), resume=True)
    assert resumed["status"] == "completed" and len(resumed["rounds"]) == 4


async def test_a_stop_before_the_first_round_plays_nothing(tmp_path: Path) -> None:
    monitor = RunMonitor()
    monitor.request_stop()
    summary = await play(config(), RunDirectory.create(tmp_path / "x"), monitor=monitor)
    assert summary["status"] == "stopped" and summary["rounds"] == []
    assert monitor.snapshot()["status"] == "stopped"


async def test_a_real_100k_agent_run_stays_far_below_the_payload_limit() -> None:
    monitor = RunMonitor()
    cfg = config(agents=100_000, rounds=1,
                 models={"dummy": {"provider": "dummy", "latency": 0.2}})
    task = asyncio.ensure_future(play(cfg, None, monitor=monitor))
    sizes = []
    while not task.done():
        await asyncio.sleep(0.1)
        sizes.append(size(monitor.snapshot()))
    await task
    sizes.append(size(monitor.snapshot()))
    assert max(sizes) < 5_000, sizes
    assert monitor.snapshot()["histogram"]["valid"] == 100_000


# -- a million agents, simulated -----------------------------------------------------------------
class FakeAnswers:
    """What the monitor uses of a PlaceholderSet, for a round of any size without agents."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.n_done = 0
        self.n_failed = 0
        self.listeners: list[Any] = []

    def __len__(self) -> int:
        return self.n

    def add_listener(self, fn: Any) -> None:
        self.listeners.append(fn)

    def deliver(self, values: Sequence[float], errors: Sequence[BaseException] = ()) -> None:
        self.n_done += len(values) + len(errors)
        self.n_failed += len(errors)
        for fn in self.listeners:
            fn(values, ())
            if errors:
                fn((), errors)


def measure(values: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    numbers = np.asarray(values, dtype=np.float64)
    return numbers, np.full(numbers.size, 1.25)


def stats(workers: int, agents: int, endpoints: int) -> SimulationStats:
    eps = tuple(EndpointStats(f"http://gpu{i:02d}.cluster.example:8000/v1", "up", 10_000, 12,
                              64, 9_000.0, 0) for i in range(endpoints))
    models = {name: ModelStats(name, 50_000, 10, 128, 9_000_000, 700_000, 5, eps)
              for name in ("qwen2-72b", "llama3-70b", "mixtral-8x22b")}
    return SimulationStats("ray", "running", agents, tuple(
        WorkerStats(i, agents // workers, 40_000, 30_000, 10, 0, (models,))
        for i in range(workers)), 0, 1, 0)


def test_a_million_agent_snapshot_stays_under_50_kb() -> None:
    n, workers = 1_000_000, 256
    monitor = RunMonitor(run_id="big-run-with-a-long-name-20260101-000000")
    monitor.run_started(name="million", agents=n, rounds=100, workers=workers, backend="ray",
                        models=["qwen2-72b", "llama3-70b", "mixtral-8x22b"], run_dir="/x/" * 40,
                        history=[{"round": r, "n": n, "n_valid": n - 3, "mean": 33.3333333,
                                  "median": 33.0, "std": 8.123456, "target": 22.2222,
                                  "winner_number": 22.0, "n_winners": 12345, "wall_s": 41.5,
                                  "usage": {"m": {"calls": n}}} for r in range(1, 100)])
    for i in range(200):  # many environment keys: only the first MAX_ENV_KEYS are kept
        monitor.set_environment(f"market.price.{i}", {"mean": 1.5, "n": i})
    answers = FakeAnswers(n)
    monitor.round_started(100, answers, measure)  # type: ignore[arg-type]
    rng = np.random.default_rng(0)
    sizes = []
    for chunk in range(100):
        values = rng.integers(0, 101, n // 100).astype(float).tolist()
        errors = [ModelError(f"kind {chunk % 40}: HTTP {500 + chunk % 4}")] * 3
        answers.deliver(values[:-3], errors)
        monitor.round_progress(stats(workers, n, endpoints=64))
        monitor.refresh(stats(workers, n, endpoints=64), force=True)
        snap = monitor.snapshot()
        sizes.append(size(snap))
    assert max(sizes) < LIMIT, max(sizes)
    snap = monitor.snapshot()
    assert snap["progress"]["done"] == n and snap["progress"]["failed"] == 300
    assert snap["histogram"]["valid"] == n - 300 == sum(snap["histogram"]["counts"])
    assert len(snap["workers"]) == 64 and snap["workers_omitted"] == workers - 64
    assert len(snap["rounds"]) == 99 and len(snap["environment"]) == 40
    assert snap["llm"]["requests"] == 3 * 50_000 * workers
    assert len(snap["llm"]["endpoints"]) == 32
    assert snap["llm"]["latency_s"]["p50"] == pytest.approx(1.25, rel=0.05)


def test_snapshots_are_cheap_to_take() -> None:
    monitor = RunMonitor()
    monitor.run_started(name="x", agents=10, rounds=1)
    monitor.refresh(stats(64, 1_000_000, 8), force=True)
    start = time.perf_counter()
    for _ in range(100):
        json.dumps(monitor.snapshot())
    assert (time.perf_counter() - start) / 100 < 0.01  # well under 10 ms each


# -- details -------------------------------------------------------------------------------------
def test_error_kinds_name_the_type_and_the_cause() -> None:
    assert error_kind(ModelError("model 'q': HTTP 429 rate limited: slow down")) == \
        "ModelError: HTTP 429"
    assert error_kind(ModelError("model 'q': timed out after 60 s from u")) == \
        "ModelError: timed out"
    assert error_kind(ValueError("boom")) == "ValueError"


def test_bins_are_one_per_integer_on_small_whole_ranges() -> None:
    assert len(bin_edges(0, 100)) == 102
    assert len(bin_edges(0, 1)) == 3
    assert len(bin_edges(0, 1000)) == 51  # too many integers: 50 bins
    assert len(bin_edges(0.0, 0.5)) == 51


def test_run_finished_keeps_the_first_ending() -> None:
    monitor = RunMonitor()
    monitor.run_finished("failed", "ModelError: no server")
    monitor.run_finished("completed")
    assert (monitor.status, monitor.error) == ("failed", "ModelError: no server")


async def test_a_finished_run_gives_the_same_view_from_disk(tmp_path: Path) -> None:
    monitor = RunMonitor()
    await play(config(), RunDirectory.create(tmp_path / "r"), monitor=monitor)
    live, disk = monitor.snapshot(), run_snapshot(tmp_path / "r")
    assert set(disk) == set(live)
    assert (disk["live"], live["live"]) == (False, True)
    for key in ("status", "name", "agents", "rounds_planned", "round", "rounds_done"):
        assert disk[key] == live[key], key
    assert disk["histogram"]["counts"] == live["histogram"]["counts"]
    assert disk["rounds"] == live["rounds"]


def test_a_restarted_run_is_shown_again() -> None:
    # The CLI restarts a run that lost a worker: the same monitor sees a second attempt.
    monitor = RunMonitor()
    monitor.run_started(name="x", agents=10, rounds=3)
    monitor.run_finished("failed", "WorkerLost: worker 1 died")
    monitor.run_started(name="x", agents=10, rounds=3, history=[{"round": 1, "mean": 5.0}])
    assert (monitor.status, monitor.error, monitor.finished) == ("starting", None, False)
    assert monitor.snapshot()["rounds"] == [{"round": 1, "mean": 5.0}]
    monitor.run_finished("completed")
    assert monitor.snapshot()["status"] == "done"
