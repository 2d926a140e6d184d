"""Batch jobs that finish (issue 28): a batch the server fails, expires (with a partial
output) or cancels keeps its answers, and ``populace run --resume`` sends only the missing
requests; a run may resubmit them itself, up to ``max_retries``; a kill between creating a
batch and journaling it never pays twice (the intent is journaled first, and the batch found
again by its metadata tag); 5xx lines are retried as plain mode retries them.

Real HTTP throughout: ``serve-llm``'s app (in a thread of this process, so that it outlives
the killed runs) with ``ServerOptions.batch_faults``, and ``populace run`` in a subprocess.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import forkserver
from cli_helpers import environment, populace
from populace.core import ModelBadResponse
from populace.llm import OpenAIConfig, build_model
from populace.llm.offline import ServerOptions, running_server
from populace.results import read_summary, read_table

GAME = {"level": "P2", "protocol": "two_call", "feedback": True}
AGENTS = 60


def options(*faults: str, **extra: Any) -> ServerOptions:
    return ServerOptions(**{"policy": "scripted", "models": ("scripted",),
                            "batch_latency": 0.2, "batch_faults": faults, **extra})


@contextmanager
def served(opts: ServerOptions) -> Iterator[str]:
    """serve-llm's app on a free port, in a thread; yields its base URL."""
    ready: queue.Queue[Any] = queue.Queue()
    box: dict[str, Any] = {}

    async def main() -> None:
        box["loop"], box["stop"] = asyncio.get_running_loop(), asyncio.Event()
        async with running_server(opts) as url:
            ready.put(url)
            await box["stop"].wait()

    thread = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
    thread.start()
    url = ready.get(timeout=30)
    try:
        yield url
    finally:
        box["loop"].call_soon_threadsafe(box["stop"].set)
        thread.join(timeout=30)


def stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url.removesuffix("/v1") + "/stats", timeout=10) as r:
        return json.loads(r.read())


def run_file(tmp_path: Path, url: str, *, max_retries: int = 0, name: str = "run") -> Path:
    model = {"provider": "openai", "model": "scripted", "base_urls": [url],
             "max_concurrency": 512, "max_retries": max_retries,
             "batch": {"mode": "api", "window": 0.2, "poll": 0.05}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(json.dumps({"name": name, "scenario": "guess_number", "seed": 42,
                                "agents": AGENTS, "rounds": 1, "workers": 1,
                                "models": {"llm": model}, "game": GAME}))
    return path


def journal(run_dir: Path, kind: str = "batch") -> list[dict[str, Any]]:
    path = run_dir / "llm_batches" / "journal.jsonl"
    if not path.exists():
        return []
    whole = path.read_text().rpartition("\n")[0]  # only whole lines
    return [line for line in map(json.loads, whole.splitlines()) if kind in line]


def responses(run_dir: Path, *, retries: bool = True) -> pa.Table:
    """The responses table without ``latency_s`` (wall time differs between any two runs)
    and, with ``retries=False``, without ``retries`` (a retried call's row says so)."""
    table = read_table(run_dir, "responses")
    drop = {"latency_s"} | (set() if retries else {"retries"})
    return table.select([c for c in table.column_names if c not in drop])


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory: pytest.TempPathFactory) -> pa.Table:
    """The rows of the run on a server whose batches all complete."""
    base = tmp_path_factory.mktemp("undisturbed")
    with served(options()) as url:
        done = populace("run", run_file(base, url), "--out", base / "out")
        assert done.returncode == 0, done.stderr
        assert stats(url)["batch_requests"] == AGENTS * 2
    rows = responses(base / "out")
    assert rows.num_rows == AGENTS and all(rows.column("valid").to_pylist())
    return rows


def one_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


def assert_each_request_once(url: str) -> None:
    """The server answered the run's 2 calls per agent, each once (a request sent again
    would count twice), and every batch's requests add up to them."""
    s = stats(url)
    assert s["batch_answered_again"] == 0, s
    assert s["batch_requests"] == s["requests"] == AGENTS * 2, s
    assert sum(b["completed"] for b in s["batches"].values()) == AGENTS * 2, s["batches"]


# -- a dead batch: its answers kept, --resume sends only the missing -------------------------
@pytest.mark.parametrize(("fault", "answered", "said"), [
    ("expired:0.5", 30, "expired (24h window) with 30 of 60 answered (kept)"),
    ("cancelled:0.5", 30, "was cancelled with 30 of 60 answered (kept)"),
    ("failed:0", 0, "failed (the batch failed (injected)) with 0 of 60 answered (kept)"),
])
def test_resume_finishes_a_dead_batch_sending_only_the_missing_requests(
        tmp_path: Path, undisturbed: pa.Table, fault: str, answered: int, said: str) -> None:
    with served(options(fault)) as url:
        path, out = run_file(tmp_path, url), tmp_path / "out"
        first = populace("run", path, "--out", out)
        assert first.returncode == 1, first.stdout
        line = one_line(first.stderr)
        assert f"batch {fault.split(':')[0]}" in line, line  # the failure's kind
        assert said in line, line
        assert f"the job stops: --resume sends only the {60 - answered} missing" in line, line
        assert f"continue with: populace run --resume {out}" in line, line
        dead = stats(url)
        assert dead["batch_requests"] == answered
        assert [b["status"] for b in dead["batches"].values()] == [fault.split(":")[0]]

        again = populace("run", "--resume", out)
        assert again.returncode == 0, again.stderr
        assert "Traceback" not in again.stderr
        assert_each_request_once(url)
        statuses = [b["status"] for b in stats(url)["batches"].values()]
        # the dead batch, one batch of the missing answers, one of the extractions
        assert statuses == [fault.split(":")[0], "completed", "completed"], statuses
        assert [b["total"] for b in stats(url)["batches"].values()][1:] == [
            60 - answered, 60]
    assert read_summary(out)["status"] == "completed"
    assert responses(out).equals(undisturbed)
    # The journal names the resubmitted requests' new batch after the dead one.
    lines = journal(out)
    assert len(lines) == 3 and len(lines[1]["ids"]) == 60 - answered
    assert set(lines[1]["ids"]) <= set(lines[0]["ids"])


def test_a_run_resubmits_the_missing_requests_itself_up_to_max_retries(
        tmp_path: Path, undisturbed: pa.Table) -> None:
    with served(options("expired:0.5", "expired:0.5")) as url:
        out = tmp_path / "out"
        done = populace("run", run_file(tmp_path, url, max_retries=2), "--out", out)
        assert done.returncode == 0, done.stderr
        assert_each_request_once(url)
        s = stats(url)["batches"]
        assert [(b["status"], b["total"], b["completed"]) for b in s.values()] == [
            ("expired", 60, 30), ("expired", 30, 15), ("completed", 15, 15),
            ("completed", 60, 60)]
    assert responses(out, retries=False).equals(undisturbed.drop_columns(["retries"]))
    # The resubmissions count as retries in the rows and summary, as plain mode's do.
    assert sum(read_table(out, "responses").column("retries").to_pylist()) == 30 + 15
    llm = read_summary(out)["steps"][0]["llm"]["llm"]
    assert (llm["requests"], llm["failures"], llm["retries"]) == (120, 0, 30 + 15)


def test_a_cancelled_batch_is_not_resubmitted_by_the_run_that_saw_it_cancelled(
        tmp_path: Path) -> None:
    with served(options("cancelled:0.5")) as url:
        out = tmp_path / "out"
        done = populace("run", run_file(tmp_path, url, max_retries=3), "--out", out)
        assert done.returncode == 1
        assert "was cancelled with 30 of 60 answered (kept)" in one_line(done.stderr)
        assert len(stats(url)["batches"]) == 1  # a cancel means stop


# -- a kill between creating the batch and journaling it --------------------------------------
def wait_until(what: str, ready: Any, proc: subprocess.Popen[Any], timeout: float = 40
               ) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := ready()):
        assert proc.poll() is None, f"exited before {what}"
        assert time.monotonic() < deadline, f"no {what}"
        time.sleep(0.02)
    return found


def test_kill_9_between_creating_a_batch_and_journaling_it_never_pays_twice(
        tmp_path: Path, undisturbed: pa.Table) -> None:
    # The server creates (and runs) the first batch but answers its id 60 s later.
    with served(options("hold:60")) as url:
        path, out = run_file(tmp_path, url), tmp_path / "out"
        proc = forkserver.spawn([sys.executable, "-m", "populace.cli", "run", path, "--out",
                                 out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env=environment())
        try:
            wait_until("the batch", lambda: stats(url)["batches"], proc)
            wait_until("the batch's answers", lambda: stats(url)["batch_requests"] == 60,
                       proc)
            assert journal(out, "intent") and not journal(out), "not between create and journal"
            os.kill(proc.pid, signal.SIGKILL)
            assert proc.wait(timeout=30) == -signal.SIGKILL
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
        intent = journal(out, "intent")[0]
        first = next(iter(stats(url)["batches"]))

        done = populace("run", "--resume", out)
        assert done.returncode == 0, done.stderr
        assert_each_request_once(url)
        assert len(stats(url)["batches"]) == 2  # the found batch, then the extractions
    assert responses(out).equals(undisturbed)
    # The batch was found by its tag and journaled before it was read.
    found = journal(out)[0]
    assert (found["batch"], found["tag"], found["ids"]) == (first, intent["intent"],
                                                             intent["ids"])


def batch_lines(n: int) -> Any:
    return lambda out: len(journal(out)) >= n


def answered(url: str, n: int) -> Any:
    return lambda out: stats(url)["batch_requests"] >= n


# Moments to kill a run at, on a server whose batches take 2 s: the server's faults, the
# run's max_retries, and when to kill (given the run directory).
MOMENTS = {
    # inside the first batch (the answers), its id journaled
    "mid-batch": ((), 0, lambda url: batch_lines(1)),
    # the first batch answered, the run reading its output or starting the extractions
    "between-batches": ((), 0, lambda url: answered(url, 60)),
    # inside the second batch (the extractions)
    "mid-second-batch": ((), 0, lambda url: batch_lines(2)),
    # inside the batch resubmitting what an expired batch did not answer
    "mid-resubmission": (("expired:0.5",), 1, lambda url: batch_lines(2)),
}


@pytest.mark.parametrize("moment", list(MOMENTS))
def test_kill_9_at_any_moment_then_resume_answers_each_request_once(
        tmp_path: Path, undisturbed: pa.Table, moment: str) -> None:
    faults, retries, when = MOMENTS[moment]
    with served(options(*faults, batch_latency=2.0)) as url:
        path, out = run_file(tmp_path, url, max_retries=retries), tmp_path / "out"
        proc = forkserver.spawn([sys.executable, "-m", "populace.cli", "run", path, "--out",
                                 out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env=environment())
        try:
            ready = when(url)
            wait_until(moment, lambda: ready(out), proc)
            os.kill(proc.pid, signal.SIGKILL)
            assert proc.wait(timeout=30) == -signal.SIGKILL
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
        assert read_summary_or_none(out) != "completed", "the run ended before the kill"
        done = populace("run", "--resume", out)
        assert done.returncode == 0, done.stderr
        assert_each_request_once(url)
    assert read_summary(out)["status"] == "completed"
    assert responses(out, retries=False).equals(undisturbed.drop_columns(["retries"]))


def read_summary_or_none(out: Path) -> str | None:
    try:
        return str(read_summary(out).get("status"))
    except (OSError, ValueError):
        return None


async def test_an_intent_whose_batch_was_never_created_is_sent(tmp_path: Path) -> None:
    """Killed after journaling the intent but before the batch existed: the server has no
    batch with its tag, so the requests go out (once)."""
    work = tmp_path / "llm_batches"
    messages = [[{"role": "user", "content": f"Pick a number (player {i})"}] for i in range(3)]

    async def ask(url: str) -> list[Any]:
        config = OpenAIConfig(provider="openai", model="scripted", base_urls=[url],
                              batch={"mode": "api", "window": 0.05, "poll": 0.02})
        model = build_model("llm", config, work_dir=work)
        try:
            return await asyncio.gather(*(model.complete(m, seed=7) for m in messages))
        finally:
            await model.aclose()

    async with running_server(options()) as url:
        first = await ask(url)
    # As if killed before the batch was created: only the intent is journaled.
    path = work / "journal.jsonl"
    path.write_text("".join(line + "\n" for line in path.read_text().splitlines()
                            if "intent" in json.loads(line)))
    async with running_server(options()) as url:  # another server: no batch has the tag
        again = await ask(url)
        s = await asyncio.to_thread(stats, url)
    assert [a.text for a in again] == [a.text for a in first]
    assert s["batch_requests"] == 3 and len(s["batches"]) == 1
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert ["intent" in line for line in lines] == [True, True, False]


def test_a_lost_answer_to_creating_a_batch_is_found_again_not_paid_twice(
        tmp_path: Path, undisturbed: pa.Table) -> None:
    """POST /v1/batches answers 502 after creating the batch: the client, about to try
    again, finds the batch by its tag instead of creating a second one."""
    with served(options("drop")) as url:
        out = tmp_path / "out"
        done = populace("run", run_file(tmp_path, url, max_retries=2), "--out", out)
        assert done.returncode == 0, done.stderr
        assert_each_request_once(url)
        assert len(stats(url)["batches"]) == 2
    assert responses(out).equals(undisturbed)


async def test_transient_errors_of_the_batches_api_are_retried(tmp_path: Path) -> None:
    """The files and batches API down for a moment (connections refused) is retried as
    plain mode retries a chat request; after max_retries the job fails in one line."""
    config = OpenAIConfig(provider="openai", model="scripted", base_urls=["http://x/v1"],
                          max_retries=1, batch={"mode": "api", "window": 0.05, "poll": 0.02})
    model = build_model("llm", config.model_copy(update={"base_urls": [
        "http://127.0.0.1:9/v1"]}), work_dir=tmp_path / "w")
    try:
        answers = await asyncio.gather(model.complete([{"role": "user", "content": "Hi"}],
                                                      seed=1), return_exceptions=True)
    finally:
        await model.aclose()
    message = str(answers[0])
    assert "POST http://127.0.0.1:9/v1/files" in message and "(after 2 attempts)" in message
    assert "\n" not in message


async def test_a_server_that_cannot_list_batches_gets_an_orphan_intent_sent(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Without GET /v1/batches (some OpenAI-compatible servers) an interrupted create cannot
    be found: its requests are sent, with a warning, rather than fail every resume."""
    from aiohttp import web

    from populace.llm.offline import create_app

    work = tmp_path / "llm_batches"
    messages = [[{"role": "user", "content": f"Pick a number (player {i})"}] for i in range(2)]

    @web.middleware
    async def no_listing(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.method == "GET" and request.path == "/v1/batches":
            return web.json_response({"error": {"message": "Not Found"}}, status=404)
        return await handler(request)

    async def ask(url: str) -> list[Any]:
        config = OpenAIConfig(provider="openai", model="scripted", base_urls=[url],
                              batch={"mode": "api", "window": 0.05, "poll": 0.02})
        model = build_model("llm", config, work_dir=work)
        try:
            return await asyncio.gather(*(model.complete(m, seed=7) for m in messages))
        finally:
            await model.aclose()

    async with running_server(options()) as url:
        first = await ask(url)
    path = work / "journal.jsonl"  # killed before the batch line: only the intent is left
    path.write_text("".join(line + "\n" for line in path.read_text().splitlines()
                            if "intent" in json.loads(line)))
    app = create_app(options())
    app.middlewares.append(no_listing)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        again = await ask(f"http://127.0.0.1:{port}/v1")
    finally:
        await runner.cleanup()
    assert [a.text for a in again] == [a.text for a in first]
    assert "cannot list its batches (HTTP 404)" in caplog.text


async def test_a_resumed_request_is_read_from_its_newest_batch_only(tmp_path: Path) -> None:
    """Request A failed 500 in batch X (beside B, answered) and was answered in batch Y: a
    resumed run asking A and B reads A from Y and B from X, and sends nothing (X's 500
    line for A must not count)."""
    from populace.llm.offline._server import _fate

    opts = options(rate_500=0.5, seed=8)
    assert [_fate(opts, i) for i in range(3)] == ["500", "ok", "ok"]  # X: A 500, B; Y: A
    work = tmp_path / "llm_batches"
    asked = [[{"role": "user", "content": f"Pick a number (player {c})"}] for c in "AB"]

    async def ask(url: str) -> list[Any]:
        config = OpenAIConfig(provider="openai", model="scripted", base_urls=[url],
                              max_retries=1,
                              batch={"mode": "api", "window": 0.05, "poll": 0.02})
        model = build_model("llm", config, work_dir=work)
        try:
            return await asyncio.gather(*(model.complete(m, seed=7) for m in asked))
        finally:
            await model.aclose()

    async with running_server(opts) as url:
        first = await ask(url)
        before = await asyncio.to_thread(stats, url)
        assert [b["total"] for b in before["batches"].values()] == [2, 1]
        again = await ask(url)  # as a resumed run would: the same requests
        after = await asyncio.to_thread(stats, url)
    assert [a.text for a in again] == [a.text for a in first]
    assert after["batch_requests"] == before["batch_requests"] == 3
    assert len(after["batches"]) == 2


@pytest.mark.parametrize(("fault", "code"), [("expired:0.5", "batch_expired"),
                                             ("cancelled:0.5", "batch_cancelled")])
async def test_a_dead_batch_files_its_unrun_requests_as_openai_does(
        tmp_path: Path, fault: str, code: str) -> None:
    """The answered half in the output file; a ``batch_expired`` / ``batch_cancelled`` line
    (response null) in the error file for each request never run."""
    import aiohttp

    from populace.llm._batchfile import write_input

    source = tmp_path / "in.jsonl"
    write_input(source, [(f"r{i}", {"model": "scripted", "messages": [
        {"role": "user", "content": f"Pick (player {i})"}]}) for i in range(4)])
    async with running_server(options(fault)) as url, aiohttp.ClientSession() as s:
        form = aiohttp.FormData()
        form.add_field("purpose", "batch")
        form.add_field("file", source.read_bytes(), filename="in.jsonl")
        async with s.post(f"{url}/files", data=form) as r:
            file_id = (await r.json())["id"]
        async with s.post(f"{url}/batches", json={
                "input_file_id": file_id, "endpoint": "/v1/chat/completions",
                "completion_window": "24h"}) as r:
            batch = await r.json()
        while batch["status"] not in ("expired", "cancelled"):
            await asyncio.sleep(0.05)
            async with s.get(f"{url}/batches/{batch['id']}") as r:
                batch = await r.json()
        files = {}
        for field in ("output_file_id", "error_file_id"):
            async with s.get(f"{url}/files/{batch[field]}/content") as r:
                files[field] = [json.loads(line) for line in (await r.text()).splitlines()]
    assert [line["custom_id"] for line in files["output_file_id"]] == ["r0", "r1"]
    assert [(line["custom_id"], line["response"], line["error"]["code"])
            for line in files["error_file_id"]] == [("r2", None, code), ("r3", None, code)]
    assert batch["request_counts"] == {"total": 4, "completed": 2, "failed": 0}


def test_bad_batch_faults_are_refused() -> None:
    for bad in ("expired", "expired:2", "late:1", "hold:-1", "drop:1", 3):
        with pytest.raises(ValueError, match="batch_faults"):
            options(bad)  # type: ignore[arg-type]
    assert options("ok", "hold:5", "failed:0.25", "drop").batch_faults == (
        "ok", "hold:5", "failed:0.25", "drop")


# -- 5xx lines are retried as plain mode retries them -----------------------------------------
def test_5xx_lines_are_retried_and_the_run_gets_every_answer(
        tmp_path: Path, undisturbed: pa.Table) -> None:
    with served(options(rate_500=0.1)) as url:
        out = tmp_path / "out"
        done = populace("run", run_file(tmp_path, url, max_retries=4), "--out", out)
        assert done.returncode == 0, done.stderr
        s = stats(url)
    failed = sum(b["failed"] for b in s["batches"].values())
    assert failed > 0, "no 500 line: nothing was retried"
    assert s["batch_requests"] == AGENTS * 2 + failed  # each 500 line sent once more
    assert responses(out, retries=False).equals(undisturbed.drop_columns(["retries"]))
    assert sum(read_table(out, "responses").column("retries").to_pylist()) == failed
    llm = read_summary(out)["steps"][0]["llm"]["llm"]
    assert (llm["failures"], llm["retries"]) == (0, failed)


def test_files_mode_runs_the_5xx_lines_again(
        tmp_path: Path, undisturbed: pa.Table, dead_url: str) -> None:
    """vLLM's run_batch files mode: the 500 lines of an output go out again in a new input
    file (``populace run-batch --error-500``: lines 20, 48 and 53 of 60 fail)."""
    out = tmp_path / "out"
    path = run_file(tmp_path, dead_url, max_retries=4)
    data = json.loads(path.read_text())
    data["models"]["llm"]["batch"] = {
        "mode": "files", "window": 0.2,
        "command": [sys.executable, "-m", "populace.cli", "run-batch", "-i", "{input}",
                    "-o", "{output}", "--model", "{model}", "--policy", "scripted",
                    "--error-500", "0.1"]}
    path.write_text(json.dumps(data))
    done = populace("run", path, "--out", out)
    assert done.returncode == 0, done.stderr
    assert responses(out, retries=False).equals(undisturbed.drop_columns(["retries"]))
    assert sum(read_table(out, "responses").column("retries").to_pylist()) >= 3
    outputs = sorted((out / "llm_batches").glob("*.out.jsonl"))
    sizes = sorted(len(p.read_text().splitlines()) for p in outputs)
    assert 3 in sizes and 60 in sizes, sizes  # the 3 failed lines' own file


async def test_a_dead_batch_fails_its_calls_in_one_line(tmp_path: Path) -> None:
    config = OpenAIConfig(provider="openai", model="scripted", base_urls=["http://x/v1"],
                          max_retries=0, batch={"mode": "api", "window": 0.05, "poll": 0.02})
    async with running_server(options("expired:0.5")) as url:
        model = build_model("llm", config.model_copy(update={"base_urls": [url]}),
                            work_dir=tmp_path / "w")
        try:
            answers = await asyncio.gather(
                *(model.complete([{"role": "user", "content": f"Pick (player {i})"}], seed=i)
                  for i in range(4)), return_exceptions=True)
        finally:
            await model.aclose()
    assert all(isinstance(a, ModelBadResponse) for a in answers), answers
    assert {a.cause for a in answers} == {"batch expired"}  # type: ignore[union-attr]
    assert len({str(a) for a in answers}) == 1 and "\n" not in str(answers[0])
    assert "expired (24h window) with 2 of 4 answered (kept); the job stops: --resume sends " \
        "only the 2 missing" in str(answers[0]), answers[0]
