"""Background generation: per-agent seeds and temperatures, cache resume, retries, the log."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from populace.core import ConfigError, ModelError, mix64
from populace.llm import ChatMessage, Completion, ModelStats
from populace.llm.offline import DummyModel
from populace.population import (
    BackgroundConfig,
    PopulationConfig,
    generate_backgrounds,
    sample_population,
)

FAST = BackgroundConfig(concurrency=8, retry_backoff=0.0)
_NAME = re.compile(r'"name": "(p\d+)"')


class Writer:
    """A test ModelClient: a deterministic 'background' made from the prompt and seed.

    ``block_after=k`` makes every call after the k-th hang (an interrupted run);
    ``fail`` names agents whose every call fails, ``flaky`` agents whose first call fails,
    ``empty`` agents answered with blank text.
    """

    def __init__(self, name: str = "writer", *, block_after: int | None = None,
                 fail: Sequence[str] = (), flaky: Sequence[str] = (),
                 empty: Sequence[str] = ()) -> None:
        self.name = name
        self.calls: list[dict[str, Any]] = []
        self.block_after = block_after
        self.blocked = asyncio.Event()
        self.fail, self.flaky, self.empty = set(fail), set(flaky), set(empty)
        self.in_flight = 0
        self.max_in_flight = 0

    async def complete(self, messages: Sequence[ChatMessage], *,
                       temperature: float | None = None, top_p: float | None = None,
                       seed: int | None = None, max_tokens: int | None = None,
                       response_format: dict[str, Any] | None = None) -> Completion:
        prompt = messages[-1]["content"]
        match = _NAME.search(prompt)
        who = match.group(1) if match else "?"
        self.calls.append({"who": who, "seed": seed, "temperature": temperature,
                           "max_tokens": max_tokens})
        if self.block_after is not None and len(self.calls) > self.block_after:
            self.blocked.set()
            await asyncio.Event().wait()
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.001)
        finally:
            self.in_flight -= 1
        if who in self.fail or (who in self.flaky and
                                sum(c["who"] == who for c in self.calls) == 1):
            raise ModelError(f"server error for {who}")
        if who in self.empty:
            return Completion("  ", self.name)
        digest = hashlib.sha256(prompt.encode()).hexdigest()[:8]
        return Completion(f"You are {who}, prompt {digest}, seed {seed}, t={temperature}.",
                          self.name)

    def statistics(self) -> ModelStats:
        return ModelStats(self.name, len(self.calls), 0, self.in_flight, 0, 0)

    async def aclose(self) -> None:
        pass

    def asked(self) -> list[str]:
        return [c["who"] for c in self.calls]


def profiles(n: int) -> pa.Table:
    levels = ["high school", "bachelor's degree", "doctorate"]
    return pa.table({
        "agent_id": pa.array(range(n), pa.int64()),
        "name": [f"p{i}" for i in range(n)],
        "education": [levels[i % 3] for i in range(n)],
        "group": pa.array([i % 2 for i in range(n)], pa.int32()),
    })


def cache_lines(directory: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in directory.glob("*.jsonl"))


def read_log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_every_agent_gets_a_background(tmp_path: Path) -> None:
    client = Writer()
    out = tmp_path / "run" / "backgrounds.parquet"
    result = await generate_backgrounds(profiles(50), client, FAST, tmp_path / "cache", out,
                                        progress=False, seed=3)
    assert (result.total, result.cached, result.generated, result.failed) == (50, 0, 50, 0)
    assert result.requests == 50 and sorted(client.asked()) == sorted(f"p{i}" for i in range(50))
    table = pq.read_table(out)
    assert table.equals(result.table)
    assert table.column_names == ["agent_id", "background", "seed", "temperature", "model",
                                  "error"]
    rows = table.to_pylist()
    assert [r["agent_id"] for r in rows] == list(range(50))
    for r in rows:
        assert r["background"].startswith(f"You are p{r['agent_id']},")
        assert r["error"] is None and r["model"] == "writer"
    assert result.log_path == tmp_path / "run" / "backgrounds-calls.jsonl"


async def test_prompt_carries_the_attributes_as_json(tmp_path: Path) -> None:
    seen: list[Sequence[ChatMessage]] = []

    class Spy(Writer):
        async def complete(self, messages: Sequence[ChatMessage], **kw: Any) -> Completion:
            seen.append(messages)
            return await super().complete(messages, **kw)

    await generate_backgrounds(profiles(3), Spy(), FAST, tmp_path / "c", tmp_path / "b.parquet",
                               progress=False)
    system, user = seen[0]
    assert system["role"] == "system" and user["role"] == "user"
    attributes = json.loads(user["content"].split("fixed:\n", 1)[1].split("\n\n", 1)[0])
    assert attributes in ({"name": f"p{i}", "education": e} for i, e in
                          enumerate(["high school", "bachelor's degree", "doctorate"]))
    assert "group" not in user["content"] and "agent_id" not in user["content"]


async def test_per_agent_seeds_and_temperatures_are_sent_and_logged(tmp_path: Path) -> None:
    client = Writer()
    result = await generate_backgrounds(profiles(200), client, FAST, tmp_path / "c",
                                        tmp_path / "b.parquet", progress=False, seed=11)
    sent = {c["who"]: (c["seed"], c["temperature"]) for c in client.calls}
    log = read_log(result.log_path)
    assert len(log) == 200
    logged = {f"p{e['agent_id']}": (e["seed"], e["temperature"]) for e in log}
    table = {f"p{r['agent_id']}": (r["seed"], r["temperature"]) for r in result.table.to_pylist()}
    assert sent == logged == table
    seeds = [s for s, _ in sent.values()]
    temperatures = [t for _, t in sent.values()]
    assert len(set(seeds)) == 200 and all(0 <= s < 2**31 for s in seeds)
    assert len(set(temperatures)) > 100 and all(0.7 <= t <= 1.0 for t in temperatures)
    assert {e["max_tokens"] for e in log} == {600}
    assert all(e["ok"] and e["attempt"] == 0 and e["messages"][1]["role"] == "user" for e in log)

    # Derived from the run seed and the agent id: the same again, different for another seed.
    again = Writer()
    await generate_backgrounds(profiles(200), again, FAST, tmp_path / "c2",
                               tmp_path / "b2.parquet", progress=False, seed=11)
    assert {c["who"]: (c["seed"], c["temperature"]) for c in again.calls} == sent
    other = Writer()
    await generate_backgrounds(profiles(200), other, FAST, tmp_path / "c3",
                               tmp_path / "b3.parquet", progress=False, seed=12)
    other_sent = {c["who"]: (c["seed"], c["temperature"]) for c in other.calls}
    assert sum(other_sent[k] != sent[k] for k in sent) == 200


async def test_fixed_temperature_and_no_seed(tmp_path: Path) -> None:
    client = Writer()
    config = BackgroundConfig(temperature=(0.4, 0.4), send_seed=False, max_tokens=None)
    result = await generate_backgrounds(profiles(20), client, config, tmp_path / "c",
                                        tmp_path / "b.parquet", progress=False)
    assert {(c["seed"], c["temperature"], c["max_tokens"]) for c in client.calls} == {
        (None, 0.4, None)}
    assert result.table.column("seed").null_count == 20


async def test_interrupted_run_resumes_without_asking_again(tmp_path: Path) -> None:
    cache, out = tmp_path / "cache", tmp_path / "backgrounds.parquet"
    first = Writer(block_after=100)
    task = asyncio.create_task(generate_backgrounds(profiles(200), first, FAST, cache, out,
                                                    progress=False, seed=5))
    await first.blocked.wait()
    await asyncio.sleep(0.05)  # let the calls that did not block finish
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not out.exists()
    done = cache_lines(cache)
    assert done == 100

    second = Writer()
    result = await generate_backgrounds(profiles(200), second, FAST, cache, out, progress=False,
                                        seed=5)
    assert len(second.calls) == 200 - done
    assert set(second.asked()).isdisjoint(first.asked()[:100])
    assert (result.cached, result.generated, result.failed) == (done, 200 - done, 0)
    assert result.table.column("background").null_count == 0

    # Identical to a run that was never interrupted; a third run asks nothing.
    fresh = await generate_backgrounds(profiles(200), Writer(), FAST, tmp_path / "other",
                                       tmp_path / "other.parquet", progress=False, seed=5)
    assert result.table.equals(fresh.table)
    third = Writer()
    again = await generate_backgrounds(profiles(200), third, FAST, cache, out, progress=False,
                                       seed=5)
    assert third.calls == [] and again.cached == 200 and again.table.equals(result.table)
    # The call log holds every request sent, the ones cut off by the interruption included.
    log = read_log(result.log_path)
    assert len(log) == len(first.calls) + len(second.calls)
    assert sum(e["ok"] for e in log) == 200
    assert sum(e.get("error") == "cancelled" for e in log) == len(first.calls) - 100 > 0


async def test_a_torn_cache_line_is_skipped(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    await generate_backgrounds(profiles(10), Writer(), FAST, cache, tmp_path / "b.parquet",
                               progress=False)
    (path,) = cache.glob("*.jsonl")
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])  # killed mid-write
    client = Writer()
    result = await generate_backgrounds(profiles(10), client, FAST, cache,
                                        tmp_path / "b.parquet", progress=False)
    assert len(client.calls) == 1 and result.cached == 9


async def test_cache_is_keyed_by_template_model_and_seed(tmp_path: Path) -> None:
    cache = tmp_path / "cache"

    async def asks(client: Writer, config: BackgroundConfig = FAST, seed: int = 0) -> int:
        await generate_backgrounds(profiles(10), client, config, cache, tmp_path / "b.parquet",
                                   progress=False, seed=seed)
        return len(client.calls)

    assert await asks(Writer()) == 10
    assert await asks(Writer()) == 0
    assert await asks(Writer("another-model")) == 10
    assert await asks(Writer(), FAST.model_copy(update={"words": 50})) == 10
    assert await asks(Writer(), FAST.model_copy(update={"system": "Be brief."})) == 10
    assert await asks(Writer(), seed=1) == 10
    assert await asks(Writer()) == 0


async def test_failures_are_retried_then_reported_per_agent(tmp_path: Path) -> None:
    client = Writer(fail=["p7"], flaky=["p9"], empty=["p4"])
    config = BackgroundConfig(retries=2, retry_backoff=0.0, concurrency=4)
    result = await generate_backgrounds(profiles(30), client, config, tmp_path / "c",
                                        tmp_path / "b.parquet", progress=False)
    asked = client.asked()
    assert asked.count("p7") == 3 and asked.count("p9") == 2 and asked.count("p4") == 3
    assert (result.generated, result.failed, result.requests) == (28, 2, 30 + 2 + 1 + 2)
    rows = {r["agent_id"]: r for r in result.table.to_pylist()}
    assert rows[7]["background"] is None
    assert rows[7]["error"] == "ModelError: server error for p7"
    assert rows[4]["error"] == "ValueError: the model answered with empty text"
    assert rows[9]["error"] is None and rows[9]["background"].startswith("You are p9")
    log = [e for e in read_log(result.log_path) if e["agent_id"] == 7]
    assert [(e["attempt"], e["ok"]) for e in log] == [(0, False), (1, False), (2, False)]
    assert len({(e["seed"], e["temperature"]) for e in log}) == 1

    # Failures are not cached: a rerun asks only for them.
    rerun = Writer(fail=["p7"])
    result = await generate_backgrounds(profiles(30), rerun, config, tmp_path / "c",
                                        tmp_path / "b.parquet", progress=False)
    assert sorted(set(rerun.asked())) == ["p4", "p7"] and result.failed == 1


async def test_concurrency_is_limited(tmp_path: Path) -> None:
    client = Writer()
    config = BackgroundConfig(concurrency=5)
    await generate_backgrounds(profiles(60), client, config, tmp_path / "c",
                               tmp_path / "b.parquet", progress=False)
    assert client.max_in_flight == 5


async def test_custom_template_and_render_errors(tmp_path: Path) -> None:
    client = Writer()
    config = BackgroundConfig(system="sys", template="Agent {{ agent_id }} ({{ name }}), "
                              "{{ attributes.education }}, {{ words }} words")
    await generate_backgrounds(profiles(2), client, config, tmp_path / "c",
                               tmp_path / "b.parquet", progress=False)
    assert client.asked() == ["?", "?"]  # the JSON is not in this prompt

    bad = Writer()
    with pytest.raises(ConfigError, match=r"^backgrounds\.template: cannot render for agent 0"):
        await generate_backgrounds(profiles(2), bad, BackgroundConfig(template="{{ nope }}"),
                                   tmp_path / "c", tmp_path / "b.parquet", progress=False)
    assert bad.calls == []
    with pytest.raises(ConfigError, match="agent_id"):
        await generate_backgrounds(pa.table({"x": [1]}), bad, FAST, tmp_path / "c",
                                   tmp_path / "b.parquet", progress=False)


async def test_with_the_dummy_model_and_a_sampled_population(tmp_path: Path) -> None:
    config = PopulationConfig.model_validate({
        "size": 40, "aspects": {"edu": {"template": "education"},
                                "age": {"distribution": "uniform", "low": 18, "high": 80,
                                        "round": 0}},
        "backgrounds": {"concurrency": 16}})
    table = sample_population(config, 2)
    result = await generate_backgrounds(table, DummyModel(latency=0), config, tmp_path / "c",
                                        tmp_path / "b.parquet", progress=True, seed=2)
    assert result.generated == 40
    for row in result.table.to_pylist():  # the dummy model answers a number from the seed
        assert row["background"] == str(mix64(row["seed"]) % 101)


async def test_against_the_openai_compatible_test_server(tmp_path: Path) -> None:
    llm = pytest.importorskip("populace.llm")
    if not hasattr(llm, "running_server") or not hasattr(llm, "OpenAIModel"):
        pytest.skip("no test server")
    import aiohttp

    n = 300
    cache, out = tmp_path / "cache", tmp_path / "b.parquet"
    config = BackgroundConfig(concurrency=16, retry_backoff=0.0)
    async with llm.running_server(llm.ServerOptions(latency=0.002)) as url:

        async def served() -> int:
            async with aiohttp.ClientSession() as s, s.get(url.removesuffix("/v1") +
                                                           "/stats") as r:
                return int((await r.json())["requests"])

        class Stopping:
            """Delegates to the real client; hangs after ``k`` answers (an interruption)."""

            def __init__(self, inner: Any, k: int) -> None:
                self.inner, self.name, self.k = inner, inner.name, k
                self.model = inner.model
                self.answered = 0
                self.stop = asyncio.Event()

            async def complete(self, messages: Any, **kw: Any) -> Completion:
                if self.answered >= self.k:
                    self.stop.set()
                    await asyncio.Event().wait()
                completion: Completion = await self.inner.complete(messages, **kw)
                self.answered += 1
                return completion

            def statistics(self) -> ModelStats:
                stats: ModelStats = self.inner.statistics()
                return stats

            async def aclose(self) -> None:
                await self.inner.aclose()

        first = Stopping(llm.OpenAIModel("m", model="dummy", base_urls=[url]), n // 2)
        task = asyncio.create_task(generate_backgrounds(profiles(n), first, config, cache, out,
                                                        progress=False, seed=9))
        await first.stop.wait()
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await first.aclose()
        done = cache_lines(cache)
        assert done >= n // 2
        before = await served()

        client = llm.OpenAIModel("m", model="dummy", base_urls=[url])
        result = await generate_backgrounds(profiles(n), client, config, cache, out,
                                            progress=False, seed=9)
        await client.aclose()
        assert await served() - before == n - done
        assert (result.cached, result.generated, result.failed) == (done, n - done, 0)
        # The server answers a number derived from the seed it received.
        for row in result.table.to_pylist():
            assert row["background"] == str(mix64(row["seed"]) % 101)
