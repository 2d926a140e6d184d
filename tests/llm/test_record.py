"""RecordingModel and ReplayModel: the line format, replay without HTTP, crashes, merging."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from populace.core import ConfigError, ModelError
from populace.llm import ModelClient, OpenAIModel, RecordingModel, ReplayModel, Request, request_key
from populace.llm.offline import DummyModel, ServerOptions, running_server

USER = [{"role": "user", "content": "Pick a number between 0 and 100."}]


def ask(i: int) -> list[dict[str, str]]:
    return [{"role": "system", "content": "You play the guessing game. «Ünïcode» \"quoted\"\n"},
            {"role": "user", "content": f"Round 1. You are agent {i}."}]


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def requests_served(base: str) -> int:
    async with aiohttp.ClientSession() as s, s.get(base.removesuffix("/v1") + "/stats") as r:
        return int((await r.json())["requests"])


def key_of(model: str, messages: list[dict[str, str]], **kw: Any) -> str:
    return request_key(model, Request(messages, **kw))


async def test_record_over_http_then_replay_with_the_server_gone(tmp_path: Path) -> None:
    path = tmp_path / "calls" / "qwen.jsonl"
    fmt = {"type": "json_object"}
    async with running_server(ServerOptions(policy="reasoning")) as base:
        model = RecordingModel(
            OpenAIModel("qwen", model="dummy", base_urls=[base], max_retries=0), path)
        assert isinstance(model, ModelClient) and model.name == "qwen"
        answers = await asyncio.gather(*(
            model.complete(ask(i), seed=i, temperature=0.7, max_tokens=200) for i in range(40)))
        structured = await model.complete(USER, seed=1, response_format=fmt)
        wrong = RecordingModel(
            OpenAIModel("qwen", model="nope", base_urls=[base], max_retries=0), path)
        with pytest.raises(ModelError, match="404"):
            await wrong.complete(USER, seed=99)
        assert model.statistics() == model.inner.statistics()
        assert (model.calls, model.errors, wrong.calls, wrong.errors) == (41, 0, 1, 1)
        await model.aclose()
        await wrong.aclose()
        served = await requests_served(base)
    assert served == 41  # the 404 is refused before it counts as a completion

    records = lines_of(path)
    assert len(records) == 42
    first = records[0]
    assert list(first) == ["key", "model", "text", "prompt_tokens", "completion_tokens",
                           "latency_s", "endpoint", "retries", "time", "request"]
    assert first["model"] == "qwen" and first["endpoint"] == base and first["retries"] == 0
    assert abs(first["time"] - time.time()) < 60
    req = first["request"]
    assert set(req) == {"messages", "temperature", "top_p", "seed", "max_tokens",
                        "response_format"}
    assert first["key"] == key_of("qwen", req["messages"], temperature=0.7, seed=req["seed"],
                                  max_tokens=200)
    error = records[-1]
    assert error["error"]["type"] == "ModelHTTPError" and "404" in error["error"]["message"]
    assert "text" not in error and error["request"]["seed"] == 99
    assert path.read_bytes().isascii()

    # The server is gone: any HTTP attempt would fail.
    replay = ReplayModel(path, "qwen")
    assert isinstance(replay, ModelClient) and len(replay) == 41
    again = [await replay.complete(ask(i), seed=i, temperature=0.7, max_tokens=200)
             for i in range(40)]
    assert [c.text for c in again] == [c.text for c in answers]
    assert [(c.prompt_tokens, c.completion_tokens) for c in again] == [
        (c.prompt_tokens, c.completion_tokens) for c in answers]
    assert (await replay.complete(USER, seed=1, response_format=fmt)).text == structured.text
    with pytest.raises(ModelError) as err:  # recorded as failed: nothing to replay
        await replay.complete(USER, seed=99)
    message = str(err.value)
    assert "'qwen'" in message and "not in the recording" in message and "\n" not in message
    assert key_of("qwen", USER, seed=99)[:12] in message
    st = replay.statistics()
    assert (st.requests, st.failures, st.in_flight) == (42, 1, 0)
    assert (replay.hits, replay.misses) == (41, 1)
    assert st.prompt_tokens == sum(c.prompt_tokens for c in answers) + structured.prompt_tokens
    await replay.aclose()


def test_replay_answers_without_waiting_or_io(tmp_path: Path) -> None:
    async def record() -> str:
        model = RecordingModel(DummyModel("d", latency=0), tmp_path / "d.jsonl")
        text = (await model.complete(USER, seed=3)).text
        await model.aclose()
        return text

    text = asyncio.run(record())
    replay = ReplayModel(tmp_path / "d.jsonl", "d")
    coro = replay.complete(USER, seed=3)
    with pytest.raises(StopIteration) as done:  # finished at the first step: nothing awaited
        coro.send(None)
    c = done.value.value
    assert (c.text, c.model, c.latency_s, c.endpoint) == (text, "d", 0.0, None)


async def test_lines_reach_the_file_while_the_run_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    model = RecordingModel(DummyModel("d", latency=0), path, flush_interval=0.05)
    await model.complete(USER, seed=-1)
    assert model.written == 0  # buffered: no write per call
    await asyncio.gather(*(model.complete(USER, seed=i) for i in range(2000)))
    await asyncio.sleep(0.15)
    assert model.written == 2001 and len(lines_of(path)) == 2001
    await model.aclose()
    assert len({r["key"] for r in lines_of(path)}) == 2001

    eager = RecordingModel(DummyModel("d", latency=0), path, flush_interval=0)
    await eager.complete(USER, seed=-2)
    assert eager.written == 1 and len(lines_of(path)) == 2002
    await eager.aclose()


def test_buffered_lines_are_written_at_exit_without_aclose(tmp_path: Path) -> None:
    script = (
        "import asyncio, sys\n"
        "from populace.llm import RecordingModel\n"
        "from populace.llm.offline import DummyModel\n"
        "m = RecordingModel(DummyModel('d', latency=0), sys.argv[1], flush_interval=60)\n"
        "asyncio.run(m.complete([{'role': 'user', 'content': 'hi'}], seed=1))\n"
    )
    path = tmp_path / "d-{pid}.jsonl"
    subprocess.run([sys.executable, "-c", script, str(path)], check=True, timeout=60)
    (written,) = tmp_path.glob("d-*.jsonl")
    assert written.name != path.name and written.name[2:-6].isdigit()  # {pid} filled in
    assert len(lines_of(written)) == 1


async def test_a_line_cut_short_by_a_crash_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    model = RecordingModel(DummyModel("d", latency=0), path)
    texts = [(await model.complete(USER, seed=i)).text for i in range(3)]
    await model.aclose()
    whole = path.read_bytes()
    path.write_bytes(whole[: -len(whole.splitlines()[-1]) // 2])  # half of the last line
    replay = ReplayModel(path, "d")
    assert (len(replay), replay.skipped) == (2, 1)
    assert (await replay.complete(USER, seed=1)).text == texts[1]
    with pytest.raises(ModelError):
        await replay.complete(USER, seed=2)

    # Recording again into the same file starts on a fresh line.
    model = RecordingModel(DummyModel("d", latency=0), path)
    await model.complete(USER, seed=2)
    await model.aclose()
    replay = ReplayModel(path, "d")
    assert (len(replay), replay.skipped) == (3, 1)
    assert (await replay.complete(USER, seed=2)).text == texts[2]


async def test_recordings_of_several_workers_merge(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    for worker, seeds in enumerate([range(0, 5), range(5, 10)]):
        a = RecordingModel(DummyModel("a", latency=0), calls / f"a-{worker}.jsonl")
        b = RecordingModel(DummyModel("b", latency=0, low=1000, high=2000),
                           calls / f"b-{worker}.jsonl")
        for seed in seeds:
            await a.complete(USER, seed=seed)
            await b.complete(USER, seed=seed)
        await a.aclose()
        await b.aclose()
    (calls / "notes.txt").write_text("not a recording")

    replay = ReplayModel(calls, "a")
    assert len(replay) == 10 and len(replay.files) == 4
    texts = [(await replay.complete(USER, seed=s)).text for s in range(10)]
    assert all(0 <= int(t) <= 100 for t in texts)
    both = ReplayModel([calls / "b-0.jsonl", calls / "b-1.jsonl"], "b")
    assert len(both) == 10 and int((await both.complete(USER, seed=7)).text) >= 1000

    # A request recorded twice: the first answer (file order, then line order) wins.
    dup = tmp_path / "dup"
    dup.mkdir()
    key = key_of("a", USER, seed=1)
    for name, text in [("1.jsonl", "first"), ("2.jsonl", "second")]:
        record = {"key": key, "model": "a", "text": text, "prompt_tokens": 1,
                  "completion_tokens": 2, "latency_s": 0, "endpoint": None, "retries": 0,
                  "time": 0, "request": {}}
        (dup / name).write_text(json.dumps(record, separators=(",", ":")) + "\n")
    # Hand-written (spaced) lines take the general path, with the same rule.
    spaced = {"model": "a", "key": key_of("a", USER, seed=2), "text": "spaced"}
    second = dup / "2.jsonl"
    second.write_text(second.read_text() + "\n" + json.dumps(spaced) + "\n{broken\n")
    replay = ReplayModel(dup, "a")
    assert (len(replay), replay.skipped) == (2, 1)
    assert (await replay.complete(USER, seed=1)).text == "first"
    assert (await replay.complete(USER, seed=2)).text == "spaced"


def test_missing_recordings_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        ReplayModel(tmp_path / "nope", "a")
    with pytest.raises(ConfigError, match=r"no \*\.jsonl"):
        ReplayModel(tmp_path, "a")
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="cannot open the recording"):
        RecordingModel(DummyModel(latency=0), tmp_path / "file" / "x.jsonl")


def test_request_key_is_stable_across_processes() -> None:
    messages = ask(7)
    here = key_of("qwen", messages, temperature=0.7, seed=3, max_tokens=50,
                  response_format={"type": "json_object", "schema": {"b": 1, "a": 2}})
    script = (
        "import json, sys\n"
        "from populace.llm import Request, request_key\n"
        "messages = json.loads(sys.argv[1])\n"
        "print(request_key('qwen', Request(messages, temperature=0.7, top_p=None, seed=3,"
        " max_tokens=50, response_format={'schema': {'a': 2, 'b': 1}, 'type': 'json_object'})))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", script, json.dumps(messages)], env=env,
                         check=True, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == here
    assert len(here) == 32 and int(here, 16) >= 0


def test_request_key_depends_on_what_decides_the_answer() -> None:
    base = key_of("qwen", USER, temperature=0.7, seed=1)
    assert key_of("qwen", USER, temperature=0.7, seed=1) == base
    assert key_of("qwen", [dict(reversed(USER[0].items()))], temperature=0.7, seed=1) == base
    assert key_of("qwen", USER, temperature=1, seed=1) == key_of("qwen", USER, temperature=1.0,
                                                                seed=1)
    variants = [
        key_of("qwen", USER, temperature=0.7, seed=2),
        key_of("qwen", USER, temperature=0.8, seed=1),
        key_of("qwen", USER, temperature=None, seed=1),
        key_of("qwen", USER, temperature=0.7, seed=None),
        key_of("qwen", USER, temperature=0.7, seed=1, top_p=0.9),
        key_of("qwen", USER, temperature=0.7, seed=1, max_tokens=10),
        key_of("qwen", USER, temperature=0.7, seed=1, response_format={"type": "json_object"}),
        key_of("llama", USER, temperature=0.7, seed=1),
        key_of("qwen", [{"role": "user", "content": "Pick a number between 0 and 99."}],
               temperature=0.7, seed=1),
        key_of("qwen", [{"role": "system", "content": USER[0]["content"]}], temperature=0.7,
               seed=1),
        key_of("qwen", [*USER, *USER], temperature=0.7, seed=1),
    ]
    assert len({base, *variants}) == len(variants) + 1


@pytest.mark.slow
def test_loading_a_million_lines(tmp_path: Path) -> None:
    texts = ["Most players will not think many steps ahead, so I aim a little below the "
             f"crowd. The answer is {n}." for n in range(101)]
    prompt = "You are playing a game with many other players. " * 8
    for worker in range(4):
        with open(tmp_path / f"q-{worker}.jsonl", "w") as f:
            for i in range(250_000):
                seed = worker * 250_000 + i
                msgs = [{"role": "system", "content": prompt},
                        {"role": "user", "content": f"agent {seed}"}]
                key = key_of("q", msgs, temperature=0.7, seed=seed)
                head = {"key": key, "model": "q", "text": texts[seed % 101],
                        "prompt_tokens": 90, "completion_tokens": 20, "latency_s": 0.5,
                        "endpoint": "http://127.0.0.1:8000/v1", "retries": 0,
                        "time": 1.7e9, "request": {"messages": msgs, "seed": seed}}
                f.write(json.dumps(head, separators=(",", ":")) + "\n")
    start = time.perf_counter()
    replay = ReplayModel(tmp_path, "q")
    elapsed = time.perf_counter() - start
    print(f"loaded {len(replay):,} answers in {elapsed:.2f} s")
    assert len(replay) == 1_000_000  # the time printed is a reading, not a pass mark
