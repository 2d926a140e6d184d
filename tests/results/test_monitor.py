"""RunMonitor: what the launcher and play() feed it, what a snapshot holds, how small it stays."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pyarrow.compute as pc
import pytest

from game_helpers import game_file
from populace.core import ModelError, SimulationStats, WorkerStats
from populace.launch import RunFile, launch, load_run_file
from populace.llm import EndpointStats, ModelStats, OpenAIModel
from populace.llm.offline import ServerOptions, running_server
from populace.results import RunDirectory, RunMonitor, read_summary, read_table, run_snapshot
from populace.results._snapshot import (
    AUTO_BINS,
    MAX_BINS,
    MAX_METRICS,
    MAX_TEXT,
    MAX_WORKER_ROWS,
    RunSnapshot,
    bin_edges,
    error_kind,
)
from populace.scenarios.guess_number import play

LIMIT = 50_000  # bytes: the live page's update payload must stay under this
COINS = Path(__file__).resolve().parents[1] / "studio" / "coins.py"


def config(**changes: Any) -> RunFile:
    data: dict[str, Any] = {"name": "mon", "agents": 600, "rounds": 2, "workers": 2, "seed": 3,
                            "models": {"dummy": {"provider": "dummy", "latency": 0.0}}}
    data.update(changes)
    return game_file(data, "test")


def coins(tmp_path: Path, **settings: Any) -> Any:
    """The coin-flip scenario of the studio tests, as a run file with ``settings``."""
    text = (f"scenario: {COINS}:Coins\nagents: 400\nsteps: 3\nworkers: 2\nseed: 5\n"
            f"settings: {json.dumps(settings)}\n")
    (tmp_path / "coins.yaml").write_text(text)
    return load_run_file(tmp_path / "coins.yaml")


async def server_stats(base: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s, s.get(base.removesuffix("/v1") + "/stats") as r:
        return await r.json()


def size(snapshot: RunSnapshot) -> int:
    return len(json.dumps(snapshot.to_json(), allow_nan=False, separators=(",", ":")).encode())


# -- fed by a real run ---------------------------------------------------------------------------
async def test_a_scenario_shows_every_metric_and_distribution(tmp_path: Path) -> None:
    monitor = RunMonitor(run_id="c1")
    summary = await launch(coins(tmp_path, bias=0.3), RunDirectory.create(tmp_path / "c1"),
                           monitor=monitor)
    snap = monitor.snapshot()
    assert isinstance(snap, RunSnapshot)
    json.dumps(snap.to_json(), allow_nan=False)  # no NaN, no numpy types
    assert (snap.status, snap.finished, snap.step, snap.steps_done, snap.steps_planned) == \
        ("completed", True, 3, 3, 3)
    assert snap.series.steps == (1, 2, 3)
    assert list(snap.series.metrics) == ["share_heads", "total_heads", "leader", "wall_s"]
    for name in ("share_heads", "total_heads", "leader"):
        assert list(snap.series.metrics[name]) == [e[name] for e in summary["steps"]]
    heads = snap.distributions["heads_so_far"]
    declared = summary["steps"][-1]["distributions"]["heads_so_far"]
    assert (list(heads.counts), heads.n, heads.step) == (declared["counts"], 400, 3)
    assert list(heads.edges) == declared["edges"]
    # The live histogram of the last step's answers over the scenario's range: tails and
    # heads, in the first and the last of 50 bins over [0, 1].
    answers = snap.answers
    assert (answers.edges[0], answers.edges[-1], len(answers.counts)) == (0.0, 1.0, 50)
    heads = round(summary["steps"][-1]["share_heads"] * 400)
    assert (answers.counts[0], answers.counts[-1], sum(answers.counts)) == (400 - heads, heads,
                                                                             400)
    assert snap.progress.fraction == 1.0 and snap.states.done == 400


async def test_the_game_shows_what_it_showed_through_the_generic_fields(tmp_path: Path) -> None:
    monitor = RunMonitor(run_id="r1")
    summary = await play(config(), RunDirectory.create(tmp_path / "r1"), monitor=monitor)
    snap = monitor.snapshot()
    data = snap.to_json()
    json.dumps(data, allow_nan=False)
    assert summary["status"] == "completed"
    assert (data["status"], data["finished"], data["step"], data["steps_done"]) == \
        ("completed", True, 2, 2)
    assert (data["name"], data["agents"], data["n_workers"], data["steps_planned"]) == \
        ("mon", 600, 2, 2)
    assert data["progress"] == {"step": 2, "done": 600, "failed": 0, "total": 600,
                                "fraction": 1.0}
    assert data["states"] == {"idle": 0, "waiting": 0, "in_call": 0, "done": 600, "failed": 0}
    answers = data["answers"]
    assert (answers["n"], answers["missing"], sum(answers["counts"])) == (600, 0, 600)
    assert len(answers["counts"]) == 101 and answers["edges"][0] == -0.5  # one bin per integer
    table = read_table(tmp_path / "r1")
    numbers = table.filter(pc.equal(table.column("round"), 2)).column("number").to_numpy()
    expected, _ = np.histogram(numbers, bins=bin_edges(0, 100))
    assert answers["counts"] == expected.tolist()
    assert answers["mean"] == pytest.approx(summary["steps"][-1]["mean"], abs=1e-3)
    # Every scalar of the game's rounds is a metric series, in the game's order.
    series = data["series"]
    assert series["steps"] == [1, 2]
    assert list(series["metrics"]) == ["n", "n_valid", "mean", "median", "std", "target",
                                       "winner_number", "n_winners", "wall_s"]
    for name in ("mean", "target", "winner_number"):
        assert series["metrics"][name] == pytest.approx([r[name] for r in summary["steps"]],
                                                        rel=1e-5)
    assert data["llm"]["requests"] == 1200 and data["llm"]["failures"] == 0
    assert data["llm"]["models"][0]["model"] == "dummy"
    assert data["llm"]["latency_s"]["n"] == 1200
    assert [w["agents"] for w in data["workers"]] == [300, 300]
    assert all(w["pid"] and w["calls_done"] >= 300 for w in data["workers"])
    # Both workers live in this process: its memory, shown on each row, counted once.
    assert {w["pid"] for w in data["workers"]} == {os.getpid()}
    assert all(w["rss_mb"] > 10 and w["status"] == "alive" for w in data["workers"])
    [node] = data["nodes"]
    assert (node["workers"], node["processes"], node["agents"]) == (2, 1, 600)
    assert node["rss_mb"] == data["workers"][0]["rss_mb"]
    assert data["llm"]["workers_share_memory"] is True


async def test_the_histogram_fills_while_a_step_is_still_going() -> None:
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
        seen.append((s.progress.done, s.answers.n, s.states.in_call))
    await task
    partial = [x for x in seen if 0 < x[0] < 900]
    assert partial, seen
    assert all(done == valid for done, valid, _ in partial)  # every arrived answer is binned
    assert any(in_call == 600 for _, _, in_call in partial)  # the slow two thirds still calling


async def test_failed_answers_are_counted_by_kind() -> None:
    # A real client against a faulty server: the kinds come from real failures, not from
    # messages written to fit the monitor.
    options = ServerOptions(rate_500=0.2, rate_timeout=0.1, rate_malformed=0.1,
                            timeout_sleep=3.0, seed=11)
    async with running_server(options, shutdown_timeout=0.1) as base:
        model = {"provider": "openai", "model": "dummy", "base_urls": [base], "timeout": 0.5,
                 "max_retries": 0, "eject_after": 10_000}
        monitor = RunMonitor()
        summary = await play(config(agents=200, rounds=1, models={"flaky": model},
                                    game={"protocol": "two_call"}), None, monitor=monitor)
        served = await server_stats(base)
    snap = monitor.snapshot()
    kinds = dict(snap.llm.errors)
    failed = summary["steps"][0]["n"] - summary["steps"][0]["n_valid"]
    injected = served["injected"]
    assert set(injected) == {"500", "timeout", "malformed"}
    assert kinds == {"ModelError: HTTP 500": injected["500"],
                     "ModelError: timed out": injected["timeout"],
                     "ModelError: malformed JSON": injected["malformed"]}
    assert sum(kinds.values()) == failed == snap.progress.failed > 0
    assert snap.states.failed == failed
    assert snap.answers.n == 200 - failed
    # a valid answer may take a second (extraction) call: requests are what the server saw
    assert snap.llm.failures == failed and snap.llm.requests == served["requests"] > 200


async def test_stop_abandons_the_step_keeps_finished_ones_and_can_resume(tmp_path: Path
                                                                           ) -> None:
    monitor = RunMonitor()
    run_file = coins(tmp_path, delay=0.3)
    out = tmp_path / "stopped"
    task = asyncio.ensure_future(launch(run_file, RunDirectory.create(out), monitor=monitor))
    for _ in range(500):  # until step 1 is written
        if monitor.snapshot().steps_done >= 1:
            break
        await asyncio.sleep(0.02)
    monitor.request_stop()
    assert monitor.snapshot().status == "stopping"
    summary = await asyncio.wait_for(task, 10)
    assert summary["status"] == "stopped"
    snap = monitor.snapshot()
    assert snap.status == "stopped" and monitor.finished
    # The abandoned step's teardown is not shown as failed answers.
    assert snap.llm.errors == () and snap.progress.failed == 0
    assert snap.states.in_call == 0
    on_disk = read_summary(out)
    assert on_disk["status"] == "stopped"
    done = len(on_disk["steps"])
    assert 1 <= done < 3
    assert read_table(out, "flips").num_rows == 400 * done  # no half-written step
    # The stopped run continues from its checkpoint to the end.
    resumed = await launch(run_file, RunDirectory(out), resume=True)
    assert resumed["status"] == "completed" and len(resumed["steps"]) == 3


async def test_a_stop_before_the_first_step_plays_nothing(tmp_path: Path) -> None:
    monitor = RunMonitor()
    monitor.request_stop()
    summary = await launch(coins(tmp_path), RunDirectory.create(tmp_path / "x"),
                           monitor=monitor)
    assert summary["status"] == "stopped" and summary["steps"] == []
    assert monitor.snapshot().status == "stopped"


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
    assert monitor.snapshot().answers.n == 100_000


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
    # The worst case the caps allow: 256 workers, 3 models, 64 endpoints, 100 steps of more
    # metrics than are shown, more distributions and bins than are shown, 200 environment
    # keys, 40 error kinds.
    n, workers = 1_000_000, 256
    monitor = RunMonitor(run_id="big-run-with-a-long-name-20260101-000000")
    edges = np.linspace(0.0, 1.0, 1001).tolist()
    distribution = {"edges": edges, "counts": [n // 1000] * 1000, "n": n, "missing": 0,
                    "mean": 0.5}
    history = [{"step": t, **{f"metric_number_{k}": 1234.56789 * k for k in range(24)},
                "label": "x" * 100, "usage": {"m": {"calls": n}}, "wall_s": 41.5,
                "distributions": {f"dist_{k}": distribution for k in range(12)}}
               for t in range(1, 100)]
    monitor.run_started(name="million", agents=n, steps=100, workers=workers, backend="ray",
                        models=["qwen2-72b", "llama3-70b", "mixtral-8x22b"], run_dir="/x/" * 40,
                        history=history)
    for i in range(200):  # many environment keys: only the first MAX_ENV_KEYS are kept
        monitor.set_environment(f"market.price.{i}", {"mean": 1.5, "n": i})
    answers = FakeAnswers(n)
    monitor.step_started(100, answers, measure)  # type: ignore[arg-type]
    rng = np.random.default_rng(0)
    sizes = []
    for chunk in range(100):
        values = rng.integers(0, 101, n // 100).astype(float).tolist()
        errors = [ModelError(f"kind {chunk % 40}: HTTP {500 + chunk % 4}")] * 3
        answers.deliver(values[:-3], errors)
        monitor.step_progress(stats(workers, n, endpoints=64))
        monitor.refresh(stats(workers, n, endpoints=64), force=True)
        sizes.append(size(monitor.snapshot()))
    assert max(sizes) < LIMIT, max(sizes)
    snap = monitor.snapshot()
    assert snap.progress.done == n and snap.progress.failed == 300
    assert snap.answers.n == n - 300 == sum(snap.answers.counts)
    assert len(snap.workers) == MAX_WORKER_ROWS
    assert snap.workers_omitted == workers - MAX_WORKER_ROWS
    assert len(snap.series.steps) == 99 and len(snap.environment) == 40
    assert len(snap.series.metrics) == MAX_METRICS and "wall_s" in snap.series.metrics
    assert snap.series.omitted == 26 - MAX_METRICS  # 24 numbers and a text, + wall_s shown
    assert len(snap.distributions) == 8
    merged = snap.distributions["dist_0"]
    assert len(merged.counts) <= MAX_BINS and sum(merged.counts) == n
    assert (merged.edges[0], merged.edges[-1]) == (0.0, 1.0)
    assert snap.llm.requests == 3 * 50_000 * workers
    assert len(snap.llm.endpoints) == 32
    assert snap.llm.latency_s.p50 == pytest.approx(1.25, rel=0.05)


class CountedWorkers(tuple):  # type: ignore[type-arg]
    """Workers' statistics that count how often they are walked."""

    walks = 0

    def __iter__(self) -> Any:
        CountedWorkers.walks += 1
        return super().__iter__()


def test_snapshots_reuse_what_refresh_computed() -> None:
    # A snapshot must not redo per-worker or per-agent work: that is done once per refresh.
    # (Counted, not timed, so that a slow machine cannot fail it.)
    monitor = RunMonitor()
    monitor.run_started(name="x", agents=10, steps=1)
    big = stats(64, 1_000_000, 8)
    counted = dataclasses.replace(big, workers=CountedWorkers(big.workers))
    CountedWorkers.walks = 0
    monitor.refresh(counted, force=True)
    assert CountedWorkers.walks == 1
    first = monitor.snapshot()
    for _ in range(100):
        snap = monitor.snapshot()
        json.dumps(snap.to_json())
    assert CountedWorkers.walks == 1  # snapshots never walk the workers again
    # ... and hand out the rows refresh built rather than rebuilding them
    assert snap.workers is first.workers and snap.series is first.series
    assert snap.llm.models is first.llm.models and snap.llm.endpoints is first.llm.endpoints
    assert len(snap.workers) == MAX_WORKER_ROWS and snap.llm.requests == 3 * 50_000 * 64


# -- details -------------------------------------------------------------------------------------
@pytest.mark.parametrize(("options", "user", "kind"), [
    (ServerOptions(rate_500=1.0), "go", "ModelError: HTTP 500"),
    (ServerOptions(rate_429=1.0, retry_after=0.0), "go", "ModelError: HTTP 429"),
    (ServerOptions(rate_timeout=1.0, timeout_sleep=3.0), "go", "ModelError: timed out"),
    (ServerOptions(rate_malformed=1.0), "go", "ModelError: malformed JSON"),
    (ServerOptions(policy="echo"), "", "ModelError: empty content"),
    (ServerOptions(models=("other",)), "go", "ModelError: HTTP 404"),
])
async def test_error_kinds_of_real_client_failures(options: ServerOptions, user: str,
                                                   kind: str) -> None:
    async with running_server(options, shutdown_timeout=0.1) as base:
        model = OpenAIModel("q", model="dummy", base_urls=[base], timeout=0.3, max_retries=0)
        try:
            with pytest.raises(ModelError) as caught:
                await model.complete([{"role": "user", "content": user}])
        finally:
            await model.aclose()
    assert error_kind(caught.value) == kind


async def test_error_kind_of_an_unreachable_server_and_of_other_errors() -> None:
    with socket.socket() as s:  # a port that nobody listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    model = OpenAIModel("q", model="dummy", base_urls=[f"http://127.0.0.1:{port}/v1"],
                        max_retries=0)
    try:
        with pytest.raises(ModelError) as caught:
            await model.complete([{"role": "user", "content": "go"}])
    finally:
        await model.aclose()
    assert error_kind(caught.value) == "ModelError: cannot connect"
    assert error_kind(ValueError("boom")) == "ValueError"


def test_bins_are_one_per_integer_on_whole_ranges_of_10_to_200() -> None:
    assert len(bin_edges(0, 100)) == 102
    assert len(bin_edges(1, 11)) == 12
    assert len(bin_edges(0, 1)) == 51  # a share, more often than a yes/no
    assert len(bin_edges(0, 1000)) == 51  # too many integers: 50 bins
    assert len(bin_edges(0.0, 0.5)) == 51
    assert len(bin_edges(0.0, 1.0, 20)) == 21


def test_run_finished_keeps_the_first_ending() -> None:
    monitor = RunMonitor()
    monitor.run_finished("failed", "ModelError: no server")
    monitor.run_finished("completed")
    assert (monitor.status, monitor.error) == ("failed", "ModelError: no server")


@pytest.mark.parametrize("game", [False, True])
async def test_a_finished_run_gives_the_same_view_from_disk(tmp_path: Path, game: bool) -> None:
    monitor = RunMonitor()
    if game:
        await play(config(), RunDirectory.create(tmp_path / "r"), monitor=monitor)
    else:
        await launch(coins(tmp_path), RunDirectory.create(tmp_path / "r"), monitor=monitor)
    live, disk = monitor.snapshot().to_json(), run_snapshot(tmp_path / "r").to_json()
    assert set(disk) == set(live)
    assert (disk["live"], live["live"]) == (False, True)
    for key in ("status", "name", "agents", "steps_planned", "step", "steps_done",
                "series", "distributions"):
        assert disk[key] == live[key], key
    assert disk["tables"] == (["responses"] if game else ["flips"])


def test_a_restarted_run_is_shown_again() -> None:
    # The launcher restarts a run that lost a worker: the same monitor sees a second attempt.
    monitor = RunMonitor()
    monitor.run_started(name="x", agents=10, steps=3)
    monitor.run_finished("failed", "WorkerLost: worker 1 died")
    monitor.run_started(name="x", agents=10, steps=3, history=[{"step": 1, "mean": 5.0}])
    assert (monitor.status, monitor.error, monitor.finished) == ("starting", None, False)
    assert monitor.snapshot().series.metrics == {"mean": (5.0,)}
    monitor.run_finished("completed")
    assert monitor.snapshot().status == "completed"


def test_metrics_are_every_scalar_of_an_entry() -> None:
    monitor = RunMonitor()
    monitor.run_started(name="x", agents=10, steps=3)
    monitor.step_finished({"step": 1, "share": np.float64(0.25), "count": np.int64(3),
                            "ok": True, "when": "2024-03-02" + "x" * 100, "gone": float("nan"),
                            "nested": {"a": 1}, "listed": [1, 2]})
    monitor.step_finished({"round": 2, "share": 0.5, "extra": 7})  # older runs of the game
    snap = monitor.snapshot()
    assert snap.series.steps == (1, 2) and snap.step == 2 and snap.steps_done == 2
    assert snap.series.metrics == {"share": (0.25, 0.5), "count": (3, None),
                                   "ok": (True, None),
                                   "when": ("2024-03-02" + "x" * (MAX_TEXT - 10), None),
                                   "gone": (None, None), "extra": (None, 7)}
    json.dumps(snap.to_json(), allow_nan=False)


def test_without_a_range_the_live_histogram_follows_the_answers() -> None:
    monitor = RunMonitor()
    monitor.run_started(name="x", agents=10_000, steps=1)  # no answer_range: any numbers
    answers = FakeAnswers(10_000)
    monitor.step_started(1, answers, measure)  # type: ignore[arg-type]
    rng = np.random.default_rng(1)
    batches = [rng.integers(0, 10, 1000), rng.normal(50, 5, 3000), rng.normal(-400, 50, 3000),
               rng.uniform(1e4, 2e4, 3000)]
    for batch in batches:
        answers.deliver(batch.astype(float).tolist())
        monitor.step_progress()
        h = monitor.snapshot().answers
        assert len(h.counts) == AUTO_BINS and len(h.edges) == AUTO_BINS + 1
    everything = np.concatenate(batches).astype(float)
    assert h.n == 10_000 == sum(h.counts)
    # Widening merged bins exactly: the counts are those of one histogram over the end edges.
    assert list(h.counts) == np.histogram(everything, bins=np.asarray(h.edges))[0].tolist()
    assert h.edges[0] <= everything.min() and h.edges[-1] >= everything.max()
    monitor.step_started(2, FakeAnswers(5), measure)  # type: ignore[arg-type]
    assert monitor.snapshot().answers.counts == ()  # a new step starts a new range


# -- workers and nodes ---------------------------------------------------------------------------
class FakeSim:
    """What simulation_started reads of a Simulation: where each worker runs, its stats."""

    def __init__(self, places: Sequence[tuple[int, str]], stats: SimulationStats) -> None:
        self.backend = self
        self.n_workers = len(places)
        self._places = places
        self._stats = stats

    def worker_info(self) -> list[dict[str, Any]]:
        return [{"pid": pid, "node": node} for pid, node in self._places]

    def statistics(self) -> SimulationStats:
        return self._stats


def measured(places: Sequence[tuple[int, str]], cpu_s: Sequence[float], at: float,
             agents: int = 100, rss_mb: float = 200.0) -> SimulationStats:
    """Statistics as worker processes measured them: worker i in process places[i]."""
    return SimulationStats("ray", "running", agents * len(places), tuple(
        WorkerStats(i, agents, 10 + i, 5, 0, 0, pid=pid, cpu_s=cpu_s[i], measured_at=at,
                    rss_bytes=int((rss_mb + i) * 2**20))
        for i, (pid, _node) in enumerate(places)), 0, 0, 0)


PLACES = [(101, "node-a"), (102, "node-a"), (201, "node-b"), (202, "node-b")]


def started(places: Sequence[tuple[int, str]], stats: SimulationStats) -> RunMonitor:
    monitor = RunMonitor(interval=0.0)
    monitor.run_started(name="x", agents=stats.agents, steps=3, workers=len(places),
                        backend="ray")
    monitor.simulation_started(FakeSim(places, stats))  # type: ignore[arg-type]
    return monitor


def test_cpu_share_comes_from_two_samples_of_each_process() -> None:
    monitor = started(PLACES, measured(PLACES, [10.0, 20.0, 30.0, 40.0], at=1000.0))
    assert [w.cpu_pct for w in monitor.snapshot().workers] == [None] * 4  # one sample: no rate
    # 2 s later: 2, 1, 0.5 and 0 CPU seconds more
    monitor.refresh(measured(PLACES, [12.0, 21.0, 30.5, 40.0], at=1002.0), force=True)
    snap = monitor.snapshot()
    assert [w.cpu_pct for w in snap.workers] == [100.0, 50.0, 25.0, 0.0]
    # The same report again (a Ray poll not yet back), or one a moment later: the last share.
    monitor.refresh(measured(PLACES, [12.0, 21.0, 30.5, 40.0], at=1002.0), force=True)
    monitor.refresh(measured(PLACES, [12.1, 21.0, 30.5, 40.0], at=1002.1), force=True)
    assert [w.cpu_pct for w in monitor.snapshot().workers] == [100.0, 50.0, 25.0, 0.0]
    monitor.refresh(measured(PLACES, [13.0, 21.1, 30.5, 40.0], at=1003.0), force=True)
    assert [w.cpu_pct for w in monitor.snapshot().workers] == [100.0, 10.0, 0.0, 0.0]
    assert [w.pid for w in snap.workers] == [101, 102, 201, 202]
    assert [w.rss_mb for w in snap.workers] == [200.0, 201.0, 202.0, 203.0]


def test_node_totals_add_up_and_a_shared_process_counts_once() -> None:
    monitor = started(PLACES, measured(PLACES, [0.0] * 4, at=0.0))
    monitor.refresh(measured(PLACES, [1.0, 0.5, 0.5, 0.25], at=1.0), force=True)
    snap = monitor.snapshot()
    a, b = snap.nodes
    assert (a.node, a.workers, a.processes, a.agents, a.in_flight) == ("node-a", 2, 2, 200, 11)
    assert (a.cpu_pct, a.rss_mb) == (150.0, 401.0)
    assert (b.node, b.workers, b.processes, b.agents, b.in_flight) == ("node-b", 2, 2, 200, 15)
    assert (b.cpu_pct, b.rss_mb) == (75.0, 405.0)
    assert not snap.llm.workers_share_memory
    # The local backend: every worker in one process, which shows once in the totals.
    here = [(7, "host")] * 3
    monitor = started(here, measured(here, [5.0] * 3, at=0.0))
    monitor.refresh(measured(here, [5.5] * 3, at=1.0), force=True)
    snap = monitor.snapshot()
    assert [w.cpu_pct for w in snap.workers] == [50.0] * 3
    [node] = snap.nodes
    assert (node.workers, node.processes, node.agents, node.cpu_pct, node.rss_mb) == \
        (3, 1, 300, 50.0, 200.0)
    assert snap.llm.workers_share_memory


def test_a_lost_worker_shows_as_lost_then_its_attempt_as_recovered() -> None:
    monitor = started(PLACES, measured(PLACES, [0.0] * 4, at=0.0))
    monitor.refresh(measured(PLACES, [1.0] * 4, at=1.0), force=True)
    assert {w.status for w in monitor.snapshot().workers} == {"alive"}
    error = "WorkerLost: worker 2 (pid 201) died: its node is gone; it held agents 200…299"
    monitor.run_finished("failed", error)  # what the launcher does first
    monitor.workers_lost(error)
    snap = monitor.snapshot()
    assert [(w.index, w.status) for w in snap.workers] == [
        (2, "lost"), (0, "alive"), (1, "alive"), (3, "alive")]  # the lost one first
    lost = snap.workers[0]
    assert (lost.in_flight, lost.cpu_pct, lost.rss_mb) == (0, None, None)
    assert snap.nodes[1].processes == 2 and snap.nodes[1].rss_mb == 203.0  # only the living
    assert size(snap) < LIMIT
    # The launcher resumes: a new attempt, new worker processes.
    again = [(pid + 1000, node) for pid, node in PLACES]
    monitor.run_started(name="x", agents=400, steps=3, workers=4, backend="ray")
    assert monitor.snapshot().workers[0].status == "lost"  # until the new workers are up
    monitor.simulation_started(FakeSim(again, measured(again, [0.0] * 4, at=5.0)))  # type: ignore[arg-type]
    snap = monitor.snapshot()
    assert [(w.index, w.pid, w.status) for w in snap.workers] == [
        (i, pid, "recovered") for i, (pid, _) in enumerate(again)]
    # A loss that names no worker: every worker is lost.
    monitor.workers_lost(RuntimeError("the cluster went away"))
    assert {w.status for w in monitor.snapshot().workers} == {"lost"}


def test_a_lost_worker_is_shown_even_beyond_the_rows_shown() -> None:
    places = [(1000 + i, f"node-{i // 8}") for i in range(40)]
    monitor = started(places, measured(places, [0.0] * 40, at=0.0))
    monitor.workers_lost(f"worker 37 (pid {places[37][0]}) died")
    snap = monitor.snapshot()
    assert len(snap.workers) == MAX_WORKER_ROWS and snap.workers_omitted == 40 - MAX_WORKER_ROWS
    assert (snap.workers[0].index, snap.workers[0].status) == (37, "lost")
    assert [n.workers for n in snap.nodes] == [8] * 5  # totals over every worker
    assert sum(n.agents for n in snap.nodes) == 4000


def test_the_workers_of_a_snapshot_stay_small() -> None:
    # Two workers of 500,000 agents on Ray (the size the studio benchmark checks): a few
    # hundred bytes of the whole update.
    places = [(123456, "f" * 16), (123457, "e" * 16)]
    monitor = started(places, measured(places, [100.0, 100.0], at=0.0, agents=500_000))
    monitor.refresh(measured(places, [123.4, 125.6], at=30.0, agents=500_000), force=True)
    data = monitor.snapshot().to_json()
    part = json.dumps({k: data[k] for k in ("workers", "workers_omitted", "nodes")},
                      separators=(",", ":"))
    assert len(part) < 700, part
    assert [w["cpu_pct"] for w in data["workers"]] == [78.0, 85.3]


def test_the_worker_history_covers_the_whole_run_in_240_samples() -> None:
    from populace.results._monitor import HISTORY_POINTS, _History

    history = _History()
    for t in range(2000):  # a sample a second for 2,000 s, two processes
        history.add(float(t), {("n", 1): (50.0, 100.0 + t), ("n", 2): (None, None)},
                    {("n", 1): {0, 1}, ("n", 2): {2}})
    data = history.to_json()
    assert len(data["t"]) < HISTORY_POINTS and data["t"][0] == 0.0 and data["t"][-1] > 1800
    first, second = data["processes"]
    assert first["workers"] == [0, 1] and second["workers"] == [2]
    assert len(first["cpu_pct"]) == len(first["rss_mb"]) == len(data["t"])
    assert first["rss_mb"][-1] == 100.0 + data["t"][-1]


def test_live_choices_count_what_a_measure_categorises() -> None:
    class Measure:
        def __call__(self, values: Any) -> tuple[np.ndarray, np.ndarray]:
            return np.ones(len(values)), np.full(len(values), np.nan)

        def categories(self, values: Any) -> tuple[np.ndarray, np.ndarray]:
            q = np.array([i % 2 for i in range(len(values))])
            return q, np.array(values) % 3

    monitor = RunMonitor()
    monitor.run_started(name="x", agents=6)
    monitor._reset_step(1, 6)
    monitor._measure = Measure()
    monitor._answers = dataclasses.make_dataclass("Answers", ["n_done", "n_failed"])(
        6, 0)  # type: ignore[assignment]
    monitor._arrived([0, 1, 2, 3, 4, 5], [])
    monitor._drain()
    # question 0: values 0, 2, 4 → options 0, 2, 1; question 1: 1, 3, 5 → 1, 0, 2
    assert monitor.snapshot().to_json()["choices"] == {"0": [1, 1, 1], "1": [1, 1, 1]}
    monitor._reset_step(2, 6)
    assert monitor.snapshot().choices == {}


def test_a_run_read_from_disk_shows_the_model_traffic_its_steps_report(tmp_path: Path
                                                                        ) -> None:
    steps = [{"step": t, "llm": {"a": {"requests": 10 * t, "prompt_tokens": 100, "retries": 1},
                                 "b": {"requests": 1, "failures": 1}}} for t in (1, 2)]
    (tmp_path / "summary.json").write_text(json.dumps({"status": "completed", "steps": steps}))
    llm = run_snapshot(tmp_path).llm
    assert (llm.requests, llm.failures, llm.prompt_tokens, llm.retries) == (32, 2, 200, 2)
    assert [(m.model, m.requests) for m in llm.models] == [("a", 30), ("b", 2)]
