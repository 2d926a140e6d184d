"""The call log's index of calls by agent: written with the lines, read by seeking, robust
to crashes and to a resumed process appending; replay ignores the ``agent`` field."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from populace.core import ModelError
from populace.core._driver import _in_task
from populace.llm import ModelClient, RecordingModel, ReplayModel, Request, read_agent_calls
from populace.llm._record import _INDEX
from populace.llm.offline import DummyModel


@contextmanager
def as_agent(agent_id: int | None) -> Iterator[None]:
    """Make ``agent_id`` current, as it is in a Task the agent started."""
    token = _in_task.set(agent_id)
    try:
        yield
    finally:
        _in_task.reset(token)


def prompt(agent_id: int, n: int) -> list[dict[str, str]]:
    return [{"role": "system", "content": "You play the game."},
            {"role": "user", "content": f"agent {agent_id}, call {n}"}]


async def record(path: Path, calls: list[tuple[int | None, int]], *,
                 flush_interval: float = 0.0) -> None:
    model = RecordingModel(DummyModel(latency=0), path, flush_interval=flush_interval)
    for agent_id, n in calls:
        with as_agent(agent_id):
            await model.complete(prompt(agent_id or 0, n), seed=n)
    await model.aclose()


def index_of(path: Path) -> np.ndarray:
    return np.fromfile(path.with_suffix(".agents"), dtype=_INDEX)


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def contents(calls: list[dict[str, Any]]) -> list[str]:
    return [c["request"]["messages"][-1]["content"] for c in calls]


async def test_the_index_points_at_each_tagged_line(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    # buffered: several lines in one flush, so the offsets within a flush are exercised
    await record(path, [(3, 0), (4, 0), (None, 9), (3, 1), (12, 0), (3, 2)],
                 flush_interval=60)
    index = index_of(path)
    assert index["agent"].tolist() == [3, 4, 3, 12, 3]  # the untagged line is not indexed
    data = path.read_bytes()
    for agent_id, offset in index.tolist():
        line = json.loads(data[offset:data.index(b"\n", offset)])
        assert line["agent"] == agent_id
        assert list(line)[:3] == ["key", "agent", "model"]
    calls = read_agent_calls(tmp_path, 3)
    assert contents(calls) == ["agent 3, call 0", "agent 3, call 1", "agent 3, call 2"]
    assert all(c["agent"] == 3 and c["text"] and "latency_s" in c for c in calls)
    assert contents(read_agent_calls(tmp_path, 3, limit=2)) == ["agent 3, call 1",
                                                                "agent 3, call 2"]
    assert read_agent_calls(tmp_path, 5) == []
    assert read_agent_calls(tmp_path, 2**70) == []  # no such id can be in an int64 index


async def test_a_failed_call_is_indexed_with_its_error(tmp_path: Path) -> None:
    class Broken(ModelClient):
        name = "broken"

        async def send(self, request: Request) -> Any:
            raise ModelError("the server said no")

    model = RecordingModel(Broken(), tmp_path / "b.jsonl", flush_interval=0)
    with as_agent(8):
        try:
            await model.complete(prompt(8, 0))
        except ModelError:
            pass
    await model.aclose()
    (call,) = read_agent_calls(tmp_path, 8)
    assert call["error"] == {"type": "ModelError", "message": "the server said no"}


async def test_a_torn_record_and_offsets_past_the_end_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    await record(path, [(1, 0), (2, 0), (1, 1)])
    index = path.with_suffix(".agents")
    past = np.array([(1, path.stat().st_size + 100)], dtype=_INDEX).tobytes()
    torn = np.array([(1, 0)], dtype=_INDEX).tobytes()[:11]
    append(index, past + torn)  # a record past the end, then one cut short by a crash
    assert contents(read_agent_calls(tmp_path, 1)) == ["agent 1, call 0", "agent 1, call 1"]
    # A line cut short (the crash hit the log, too) is skipped where its record points.
    os.truncate(path, path.stat().st_size - 7)
    assert contents(read_agent_calls(tmp_path, 1)) == ["agent 1, call 0"]
    # A resumed process appends: the torn record is dropped first, so the new records line
    # up, and the new line starts after the torn one.
    await record(path, [(1, 2), (2, 1)])
    assert index.stat().st_size % _INDEX.itemsize == 0
    assert contents(read_agent_calls(tmp_path, 1)) == ["agent 1, call 0", "agent 1, call 2"]
    assert contents(read_agent_calls(tmp_path, 2)) == ["agent 2, call 0", "agent 2, call 1"]


async def test_calls_of_several_files_come_oldest_first(tmp_path: Path) -> None:
    await record(tmp_path / "b-worker.jsonl", [(5, 0)])
    await asyncio.sleep(0.01)  # lines carry the time to the millisecond
    await record(tmp_path / "a-worker.jsonl", [(5, 1), (6, 0)])  # later, in a file sorted first
    await record(tmp_path / "c-old.jsonl", [])  # no line with an agent: no index at all
    assert not (tmp_path / "c-old.agents").exists()
    assert contents(read_agent_calls(tmp_path, 5)) == ["agent 5, call 0", "agent 5, call 1"]


async def test_an_index_of_another_log_is_not_believed(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    await record(path, [(1, 0), (2, 0)])
    index = index_of(path)
    index["agent"] = index["agent"][::-1]  # now each record names the other agent
    index.tofile(path.with_suffix(".agents"))
    assert read_agent_calls(tmp_path, 1) == []


async def test_replay_ignores_the_agent_and_reads_old_lines(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    await record(path, [(i, 0) for i in range(5)])
    old = tmp_path / "old.jsonl"  # a recording made before lines had an agent
    await record(old, [(None, 1)])
    replay = ReplayModel(tmp_path, "dummy")
    assert len(replay) == 6 and replay.skipped == 0
    live = DummyModel(latency=0)
    for agent_id, n in [*((i, 0) for i in range(5)), (0, 1)]:
        req = Request(prompt(agent_id, n), seed=n)
        assert (await replay.send(req)).text == (await live.send(req)).text
    assert replay.hits == 6 and replay.misses == 0


async def test_replay_skips_a_line_torn_inside_its_agent(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    await record(path, [(123456, 0)])
    line = path.read_bytes()
    cut = line.index(b'"agent":') + len(b'"agent":123')
    path.write_bytes(line + line[:cut])  # a second copy, cut short inside the agent's id
    replay = ReplayModel(path, "dummy")
    assert len(replay) == 1 and replay.skipped == 1
    os.remove(path)
