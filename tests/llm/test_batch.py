"""Batch mode (``batch:`` of an openai model) end to end: the game through /v1/batches gives
the rows of ordinary calls; kill -9 mid-batch then resume sends nothing twice; files mode
through ``populace run-batch``, read again on resume; per-request and whole-job failures;
and the preflight leaving files-mode models alone (docs/batch.md)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pyarrow as pa
import pytest

import forkserver
from cli_helpers import run_in_process
from game_helpers import game_file
from populace.core import ModelError, ModelHTTPError
from populace.llm import OpenAIConfig, build_model
from populace.llm.offline import ServerOptions, running_server
from populace.results import RunDirectory, read_summary, read_table
from populace.scenarios.guess_number import play

GAME = {"level": "P2", "protocol": "two_call", "feedback": True}
SCRIPTED = ServerOptions(policy="scripted", models=("scripted",), batch_latency=0.2)
API = {"mode": "api", "window": 0.2, "poll": 0.05}


def run_data(url: str, *, batch: dict[str, Any] | None, agents: int = 300, rounds: int = 2,
             workers: int = 2, name: str = "batched") -> dict[str, Any]:
    """The game (guess_number.yaml's, smaller) on one ``openai`` model named ``llm``."""
    model: dict[str, Any] = {"provider": "openai", "model": "scripted", "base_urls": [url],
                             "max_concurrency": 512, "max_retries": 0}
    if batch is not None:
        model["batch"] = batch
    return {"name": name, "scenario": "guess_number", "seed": 42, "agents": agents,
            "rounds": rounds, "workers": workers, "models": {"llm": model}, "game": GAME}


def files_batch(**extra: Any) -> dict[str, Any]:
    """files mode answered by ``populace run-batch`` (serve-llm's scripted answers)."""
    return {"mode": "files", "window": 0.2,
            "command": [sys.executable, "-m", "populace.cli", "run-batch", "-i", "{input}",
                        "-o", "{output}", "--model", "{model}", "--policy", "scripted"],
            **extra}


async def play_into(directory: Path, data: dict[str, Any]) -> Path:
    await play(game_file(data), RunDirectory.create(directory))
    return directory


def responses(run_dir: Path) -> pa.Table:
    """The responses table without ``latency_s`` (wall time: differs between any two runs),
    as benchmarks/same_responses.py compares them."""
    table = read_table(run_dir, "responses")
    return table.select([c for c in table.column_names if c != "latency_s"])


def assert_same_rows(a: Path, b: Path) -> None:
    left, right = read_table(a, "responses"), read_table(b, "responses")
    assert left.schema == right.schema
    assert left.num_rows == right.num_rows
    if not responses(a).equals(responses(b)):
        diff = [(x, y) for x, y in zip(responses(a).to_pylist(), responses(b).to_pylist(),
                                       strict=True) if x != y]
        raise AssertionError(f"{len(diff)} rows differ, first: {diff[0]}")


def journal(run_dir: Path, kind: str = "batch") -> list[dict[str, Any]]:
    """The journal's batch lines (``kind="intent"``: the intents journaled before each
    batch is created)."""
    path = run_dir / "llm_batches" / "journal.jsonl"
    if not path.exists():
        return []
    # Only whole lines: the run may be writing the last one while this reads it.
    whole = path.read_text().rpartition("\n")[0]
    lines = [json.loads(line) for line in whole.splitlines() if line.strip()]
    return [line for line in lines if kind in line]


def llm_counts(run_dir: Path) -> list[dict[str, int]]:
    """Each step's ``llm`` counts of the model ``llm`` in summary.json (but the client's
    estimate of reused prefixes, which is made per endpoint and not for batch jobs)."""
    return [{k: v for k, v in step["llm"]["llm"].items() if k != "prefix_tokens"}
            for step in read_summary(run_dir)["steps"]]


async def server_stats(base_url: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s, \
            s.get(base_url.removesuffix("/v1") + "/stats") as r:
        assert r.status == 200
        return dict(await r.json())


def blocking_stats(base_url: str) -> dict[str, Any]:
    with urllib.request.urlopen(base_url.removesuffix("/v1") + "/stats", timeout=10) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


# -- 1. the game through the Batch API gives the rows of ordinary calls ----------------------
@pytest.fixture(scope="module")
def api_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The game through /v1/batches, then the same run without ``batch:``, on one server;
    the server's /stats after each."""
    base = tmp_path_factory.mktemp("api")

    async def both() -> dict[str, Any]:
        async with running_server(SCRIPTED) as url:
            started = time.monotonic()
            await play_into(base / "batched", run_data(url, batch=API))
            wall = time.monotonic() - started
            after_batched = await server_stats(url)
            await play_into(base / "plain", run_data(url, batch=None, name="plain"))
            after_plain = await server_stats(url)
        return {"batched": base / "batched", "plain": base / "plain", "wall_s": wall,
                "stats": after_batched, "stats_after_plain": after_plain}

    return asyncio.run(both())


def test_the_game_through_batches_gives_the_rows_of_ordinary_calls(
        api_run: dict[str, Any]) -> None:
    batched, plain = api_run["batched"], api_run["plain"]
    assert read_summary(batched)["status"] == "completed"
    rows = read_table(batched, "responses")
    assert rows.num_rows == 300 * 2
    assert rows.column("error").null_count == rows.num_rows
    assert all(rows.column("valid").to_pylist())
    assert set(rows.column("calls").to_pylist()) == {2}  # P2's two calls: answer, extraction
    assert_same_rows(batched, plain)

    # Every call went out in a batch: none through the chat endpoint.
    stats = api_run["stats"]
    assert stats["batch_requests"] == 300 * 2 * 2
    assert stats["requests"] == 300 * 2 * 2
    assert stats["status"] == {}
    assert api_run["stats_after_plain"]["batch_requests"] == 300 * 2 * 2  # plain: no batch

    # The summary counts the batched calls as the plain run's calls.
    counts = llm_counts(batched)
    assert counts == llm_counts(plain)
    assert [c["requests"] for c in counts] == [300 * 2, 300 * 2]
    assert [c["failures"] for c in counts] == [0, 0]

    # One journal line per batch the server ran, naming every request it held.
    lines = journal(batched)
    batches = stats["batches"]
    assert sorted(line["batch"] for line in lines) == sorted(batches)
    assert len(lines) == len(batches) >= 2 * 2  # at least a job per call and round
    for line in lines:
        assert line["model"] == "llm"
        assert len(line["ids"]) == len(set(line["ids"])) == batches[line["batch"]]["total"]
        assert batches[line["batch"]]["status"] == "completed"
        assert batches[line["batch"]]["failed"] == 0
    assert sum(len(line["ids"]) for line in lines) == 300 * 2 * 2


# -- 2. kill -9 mid-batch, then resume: each request reaches the server once -----------------
def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR",
                                                             "RAY_ADDRESS")}
    env["NO_COLOR"] = "1"
    return env


def cli(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "populace.cli", *map(str, args)]


def wait_until(what: str, ready: Any, proc: subprocess.Popen[Any], log: Path,
               timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := ready()):
        assert proc.poll() is None, f"exited before {what}: {log.read_text()[-2000:]}"
        assert time.monotonic() < deadline, f"no {what}: {log.read_text()[-2000:]}"
        time.sleep(0.02)
    return found


def stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)


@pytest.fixture
def slow_batches(tmp_path: Path) -> Iterator[str]:
    """``populace serve-llm`` in a subprocess whose batches take 4 s; yields its base URL."""
    log = tmp_path / "server.txt"
    with log.open("w") as stdout:
        server = forkserver.spawn(
            cli("serve-llm", "--port", "0", "--policy", "scripted", "--model", "scripted",
                "--batch-latency", "4"),
            stdout=stdout, stderr=subprocess.STDOUT, env=environment())
    try:
        def url() -> str | None:
            found = re.search(r"serving .* at (http://\S+/v1)", log.read_text())
            return found.group(1) if found else None

        yield wait_until("server", url, server, log)
    finally:
        stop(server)


def test_kill_9_mid_batch_then_resume_sends_each_request_once(
        tmp_path: Path, slow_batches: str) -> None:
    url = slow_batches
    batch = {"mode": "api", "window": 0.2, "poll": 0.1}
    path = tmp_path / "run.yaml"
    path.write_text(json.dumps(run_data(url, batch=batch, agents=1000, rounds=1)))
    out, log = tmp_path / "out", tmp_path / "run.txt"
    with log.open("w") as stdout:
        proc = forkserver.spawn(cli("run", path, "--out", out), stdout=stdout,
                                stderr=subprocess.STDOUT, env=environment())
    try:  # both workers' first batches exist (4 s each): kill the run inside them
        wait_until("two journaled batches", lambda: len(journal(out)) >= 2, proc, log,
                   timeout=40)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        stop(proc)
    killed = journal(out)
    assert len(killed) == 2, killed
    assert sum(len(line["ids"]) for line in killed) == 1000  # every agent's first call
    in_progress = blocking_stats(url)
    assert all(b["status"] != "completed" for b in in_progress["batches"].values()), \
        "the batches ended before the kill: nothing was interrupted"

    done = forkserver.run(cli("run", "--resume", out), capture_output=True, text=True,
                          env=environment(), timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    stats = blocking_stats(url)
    # The killed run's batches were fetched, not sent again; the extraction calls once.
    assert stats["batch_requests"] == 1000 * 2
    assert stats["requests"] == 1000 * 2
    resumed = journal(out)
    assert resumed[:2] == killed
    assert sorted(line["batch"] for line in resumed) == sorted(stats["batches"])
    assert sum(len(line["ids"]) for line in resumed) == 1000 * 2
    assert read_summary(out)["status"] == "completed"
    assert llm_counts(out)[0]["failures"] == 0

    whole = forkserver.run(cli("run", path, "--out", tmp_path / "whole"), capture_output=True,
                           text=True, env=environment(), timeout=60)
    assert whole.returncode == 0, whole.stderr
    assert blocking_stats(url)["batch_requests"] == 2 * 1000 * 2
    assert_same_rows(out, tmp_path / "whole")
    assert read_table(out, "responses").num_rows == 1000


# -- 3. files mode: run-batch's outputs, read again instead of computed ----------------------
FAILING = [sys.executable, "-c", "import sys; sys.exit(3)"]


def test_files_mode_gives_the_rows_of_the_batch_api(
        tmp_path: Path, api_run: dict[str, Any], dead_url: str) -> None:
    files = tmp_path / "files"
    asyncio.run(play_into(files, run_data(dead_url, batch=files_batch(), name="files")))
    assert read_summary(files)["status"] == "completed"
    assert_same_rows(files, api_run["batched"])
    assert llm_counts(files) == llm_counts(api_run["batched"])
    work = files / "llm_batches"
    inputs = sorted(p.name for p in work.glob("llm-*.jsonl") if not p.name.endswith(
        ".out.jsonl"))
    outputs = sorted(p.name for p in work.glob("llm-*.out.jsonl"))
    assert inputs and [n.replace(".jsonl", ".out.jsonl") for n in inputs] == outputs
    assert not list(work.glob("*.tmp"))
    assert not (work / "journal.jsonl").exists()  # the journal is the Batch API's


def messages(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f'Pick a number from 0 to 100 and end with '
                                        f'"The answer is N". (player {i})'}]


def files_model(work: Path, url: str, command: list[str]) -> Any:
    config = OpenAIConfig(provider="openai", model="scripted", base_urls=[url],
                          batch={"mode": "files", "window": 0.05, "command": command})
    return build_model("llm", config, work_dir=work)


async def ask(model: Any, n: int = 20) -> list[Any]:
    try:
        return await asyncio.gather(*(model.complete(messages(i), seed=100 + i)
                                      for i in range(n)), return_exceptions=True)
    finally:
        await model.aclose()


async def test_files_mode_reads_existing_outputs_instead_of_running_the_command(
        tmp_path: Path, dead_url: str) -> None:
    work = tmp_path / "llm_batches"
    first = await ask(files_model(work, dead_url, files_batch()["command"]))
    assert all(not isinstance(a, BaseException) for a in first), first
    assert all("The answer is" in a.text for a in first)
    outputs = sorted(work.glob("*.out.jsonl"))
    assert len(outputs) == 1
    written = outputs[0].read_bytes()

    # A resumed run: the command would fail, but the output of the first attempt is there.
    model = files_model(work, dead_url, FAILING)
    again = await ask(model)
    assert all(not isinstance(a, BaseException) for a in again), again
    assert [a.text for a in again] == [a.text for a in first]
    assert [(a.prompt_tokens, a.completion_tokens) for a in again] == [
        (a.prompt_tokens, a.completion_tokens) for a in first]
    assert model.inner.batches == [outputs[0].name]  # type: ignore[attr-defined]
    assert outputs[0].read_bytes() == written


async def test_a_failing_command_without_output_fails_every_call_naming_its_status(
        tmp_path: Path, dead_url: str) -> None:
    work = tmp_path / "llm_batches"
    model = files_model(work, dead_url, FAILING)
    answers = await ask(model, 5)
    assert all(isinstance(a, ModelError) for a in answers), answers
    message = str(answers[0])
    assert "\n" not in message
    assert "exited with 3" in message and "'llm'" in message, message
    assert model.statistics().failures == 5
    assert not list(work.glob("*.out.jsonl"))


# -- the job's size: identical requests once, at most max_requests a job --------------------
def api_model(url: str, work: Path, **batch: Any) -> Any:
    config = OpenAIConfig(provider="openai", model="scripted", base_urls=[url],
                          batch={"mode": "api", "window": 0.05, "poll": 0.02, **batch})
    return build_model("llm", config, work_dir=work)


async def test_identical_requests_in_a_job_are_sent_once(tmp_path: Path) -> None:
    async with running_server(SCRIPTED) as url:
        model = api_model(url, tmp_path / "w")
        try:
            answers = await asyncio.gather(
                *(model.complete(messages(i % 4), seed=100 + i % 4) for i in range(10)))
        finally:
            await model.aclose()
        stats = await server_stats(url)
    assert stats["batch_requests"] == 4
    assert [b["total"] for b in stats["batches"].values()] == [4]
    assert [a.text for a in answers] == [answers[i % 4].text for i in range(10)]
    assert (model.statistics().requests, model.statistics().failures) == (10, 0)


async def test_no_job_holds_more_than_max_requests(tmp_path: Path) -> None:
    async with running_server(SCRIPTED) as url:
        model = api_model(url, tmp_path / "w", max_requests=100)
        answers = await ask(model, 250)
        stats = await server_stats(url)
    assert all(not isinstance(a, BaseException) for a in answers)
    assert stats["batch_requests"] == 250
    assert max(b["total"] for b in stats["batches"].values()) <= 100  # got one job of 250


# -- 4. failed requests in a batch fail their own calls --------------------------------------
FAILING_SERVER = ServerOptions(policy="scripted", models=("scripted",), batch_latency=0.05,
                               rate_500=1.0)


async def test_http_500_lines_fail_their_calls_as_model_http_errors(tmp_path: Path) -> None:
    async with running_server(FAILING_SERVER) as url:
        answers = await ask(api_model(url, tmp_path / "w"), 6)
        stats = await server_stats(url)
    assert all(isinstance(a, ModelHTTPError) for a in answers), answers
    assert {a.cause for a in answers} == {"HTTP 500"}
    assert all("\n" not in str(a) for a in answers)
    # Retried as plain mode retries a 500 (max_retries 4): 5 batches of the 6 requests.
    assert {a.attempts for a in answers} == {5}
    assert all(str(a).endswith("(after 5 attempts)") for a in answers), answers[0]
    assert stats["batch_requests"] == 6 * 5
    assert [(b["total"], b["failed"]) for b in stats["batches"].values()] == [(6, 6)] * 5

    # In a game, the failed rows say so; the other model's rows are answered.
    async with running_server(FAILING_SERVER) as url:
        data = run_data(url, batch={"mode": "api", "window": 0.05, "poll": 0.02}, agents=40,
                        rounds=1)
        data["models"]["dummy"] = {"provider": "dummy", "latency": 0.0}
        data["assign"] = {"llm": "1/2", "dummy": "1/2"}
        await play_into(tmp_path / "mixed", data)
    rows = read_table(tmp_path / "mixed", "responses").to_pylist()
    failed = [r for r in rows if r["model"] == "llm"]
    assert len(failed) == 20
    for r in failed:
        assert r["valid"] is False
        assert r["error"].startswith("ModelHTTPError: "), r["error"]
        assert "HTTP 500" in r["error"] and "\n" not in r["error"]
    assert all(r["error"] is None for r in rows if r["model"] == "dummy")


async def test_a_run_whose_every_answer_fails_ends_failed_with_one_line(
        tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    async with running_server(FAILING_SERVER) as url:
        path.write_text(json.dumps(run_data(
            url, batch={"mode": "api", "window": 0.05, "poll": 0.02}, agents=30, rounds=1)))
        proc = await asyncio.create_subprocess_exec(
            *cli("run", path, "--out", tmp_path / "out"), env=environment(),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout=60)
    err = stderr.decode()
    assert proc.returncode not in (0, None), stdout.decode()
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "all 30 answers failed" in lines[0] and "HTTP 500" in lines[0], lines[0]
    assert read_summary(tmp_path / "out")["status"] == "failed"


# -- 5. the preflight leaves files-mode models alone -----------------------------------------
def test_a_files_mode_model_runs_without_a_server(
        tmp_path: Path, dead_url: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(json.dumps(run_data(dead_url, batch=files_batch(), agents=20, rounds=1)))
    code, _, err = run_in_process(capsys, monkeypatch, "run", path, "--out", tmp_path / "out")
    assert code == 0, err
    assert read_summary(tmp_path / "out")["status"] == "completed"
    rows = read_table(tmp_path / "out", "responses")
    assert rows.num_rows == 20 and all(rows.column("valid").to_pylist())

    # The same model in api mode needs its server: the preflight says so before the run.
    path.write_text(json.dumps(run_data(dead_url, batch=API, agents=20, rounds=1)))
    code, _, err = run_in_process(capsys, monkeypatch, "run", path, "--out", tmp_path / "api")
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert "models.llm" in err and dead_url in err, err
    assert not (tmp_path / "api").exists()
