"""Batch jobs: serve-llm's /v1/files and /v1/batches, ``populace run-batch`` and the batch
file formats (the OpenAI Batch API's and vLLM run_batch's)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from cli_helpers import run_in_process
from populace.llm._batchfile import (
    BatchResult,
    parse_input,
    parse_output,
    read_input,
    read_output,
    write_input,
)
from populace.llm.offline import ServerOptions, running_server

FINAL = ("completed", "failed", "cancelled", "expired")
GAME = 'Pick a number from 0 to 100 and end with "The answer is N".'


def bodies(n: int, model: str = "dummy") -> list[tuple[str, dict[str, Any]]]:
    """``n`` chat requests; every other one without a seed (answered from the request's
    index on the server, so the order of answering matters too)."""
    out = []
    for i in range(n):
        body: dict[str, Any] = {"model": model, "messages": [
            {"role": "user", "content": f"{GAME} (question {i})"}]}
        if i % 2:
            body["seed"] = 100 + i
        out.append((f"req-{i}", body))
    return out


def input_bytes(tmp_path: Path, requests: list[tuple[str, dict[str, Any]]]) -> bytes:
    path = tmp_path / "in.jsonl"
    write_input(path, requests)
    return path.read_bytes()


def root(base: str) -> str:
    return base.removesuffix("/v1")


async def upload(s: aiohttp.ClientSession, base: str, data: bytes,
                 purpose: str = "batch") -> dict[str, Any]:
    form = aiohttp.FormData()
    form.add_field("purpose", purpose)
    form.add_field("file", data, filename="in.jsonl", content_type="application/jsonl")
    async with s.post(base + "/files", data=form) as r:
        assert r.status == 200, await r.text()
        return dict(await r.json())


async def create(s: aiohttp.ClientSession, base: str, file_id: str,
                 **extra: Any) -> tuple[int, dict[str, Any]]:
    body = {"input_file_id": file_id, "endpoint": "/v1/chat/completions",
            "completion_window": "24h", **extra}
    async with s.post(base + "/batches", json=body) as r:
        return r.status, await r.json()


async def get(s: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
    async with s.get(url) as r:
        raw = await r.read()
        return r.status, json.loads(raw) if r.content_type == "application/json" else raw


def ended(batch: dict[str, Any]) -> bool:
    return batch["status"] in FINAL


async def poll(s: aiohttp.ClientSession, base: str, batch_id: str,
               seen: list[dict[str, Any]] | None = None,
               until: Callable[[dict[str, Any]], bool] = ended) -> dict[str, Any]:
    """The batch once ``until`` holds for it (every state read goes to ``seen``)."""
    while True:
        status, batch = await get(s, f"{base}/batches/{batch_id}")
        assert status == 200
        if seen is not None:
            seen.append(batch)
        if until(batch):
            return dict(batch)
        await asyncio.sleep(0.01)


async def chat_answers(options: ServerOptions, requests: list[tuple[str, dict[str, Any]]]
                       ) -> list[tuple[int, dict[str, Any]]]:
    """What a fresh server's chat endpoint answers to ``requests`` sent one by one."""
    answers = []
    async with running_server(options) as base, aiohttp.ClientSession() as s:
        for _, body in requests:
            async with s.post(base + "/chat/completions", json=body) as r:
                answers.append((r.status, await r.json()))
    return answers


def same_answer(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return {k: v for k, v in a.items() if k != "created"} == \
        {k: v for k, v in b.items() if k != "created"}


# -- the Batch API ---------------------------------------------------------------------------
async def test_a_batch_is_answered_as_the_chat_endpoint_answers(tmp_path: Path) -> None:
    options = ServerOptions(policy="reasoning", seed=9, batch_latency=0.3)
    requests = bodies(6)
    data = input_bytes(tmp_path, requests)
    async with running_server(options) as base, aiohttp.ClientSession() as s:
        uploaded = await upload(s, base, data)
        assert uploaded["id"].startswith("file-") and uploaded["object"] == "file"
        assert (uploaded["bytes"], uploaded["filename"], uploaded["purpose"]) == (
            len(data), "in.jsonl", "batch")
        assert isinstance(uploaded["created_at"], int)
        assert await get(s, f"{base}/files/{uploaded['id']}") == (200, uploaded)
        assert await get(s, f"{base}/files/{uploaded['id']}/content") == (200, data)

        status, batch = await create(s, base, uploaded["id"], metadata={"run": "r1"})
        assert status == 200
        assert batch["id"].startswith("batch_") and batch["object"] == "batch"
        assert (batch["status"], batch["endpoint"], batch["input_file_id"],
                batch["completion_window"], batch["metadata"]) == (
            "validating", "/v1/chat/completions", uploaded["id"], "24h", {"run": "r1"})
        assert batch["request_counts"] == {"total": 0, "completed": 0, "failed": 0}
        assert batch["output_file_id"] is None and batch["error_file_id"] is None
        seen: list[dict[str, Any]] = []
        done = await poll(s, base, batch["id"], seen)
        assert done["status"] == "completed", done
        assert "in_progress" in [b["status"] for b in seen]
        assert done["request_counts"] == {"total": 6, "completed": 6, "failed": 0}
        assert done["error_file_id"] is None
        assert done["in_progress_at"] is not None and done["completed_at"] is not None
        status, raw = await get(s, f"{base}/files/{done['output_file_id']}/content")
        assert status == 200
        _, output_meta = await get(s, f"{base}/files/{done['output_file_id']}")
        assert output_meta["purpose"] == "batch_output"
        _, stats = await get(s, root(base) + "/stats")
        _, listed = await get(s, base + "/batches")

    lines = [json.loads(line) for line in raw.splitlines()]
    assert [line["custom_id"] for line in lines] == [c for c, _ in requests]
    for line in lines:
        assert set(line) == {"id", "custom_id", "response", "error"}
        assert line["id"].startswith("batch_req_") and line["error"] is None
        assert line["response"]["status_code"] == 200
        assert line["response"]["request_id"].startswith("req_")
        assert line["response"]["body"]["object"] == "chat.completion"
        assert line["response"]["body"]["usage"]["prompt_tokens"] > 0
    # each request counted once, as a batch request, none as an HTTP response
    assert (stats["requests"], stats["batch_requests"], stats["status"]) == (6, 6, {})
    assert stats["models"] == {"dummy": 6}
    assert stats["batches"] == {batch["id"]: {"status": "completed", "total": 6,
                                              "completed": 6, "failed": 0}}
    assert [b["id"] for b in listed["data"]] == [batch["id"]]

    expected = await chat_answers(options, requests)
    for line, (status, answer) in zip(lines, expected, strict=True):
        assert status == 200
        assert same_answer(line["response"]["body"], answer)
    results = parse_output(raw)
    assert results["req-1"] == BatchResult(
        expected[1][1]["choices"][0]["message"]["content"],
        expected[1][1]["usage"]["prompt_tokens"], expected[1][1]["usage"]["completion_tokens"],
        None)


async def test_the_openai_sdk_runs_a_batch(tmp_path: Path) -> None:
    requests = bodies(3, model="m")
    options = ServerOptions(models=["m"], policy="scripted", batch_latency=0.05)
    async with running_server(options) as base:
        client = openai.AsyncOpenAI(base_url=base, api_key="unused", max_retries=0)
        try:
            uploaded = await client.files.create(
                file=("in.jsonl", input_bytes(tmp_path, requests)), purpose="batch")
            batch = await client.batches.create(
                input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                completion_window="24h")
            while batch.status not in FINAL:
                await asyncio.sleep(0.01)
                batch = await client.batches.retrieve(batch.id)
            assert batch.status == "completed" and batch.request_counts is not None
            assert batch.request_counts.completed == 3 and batch.output_file_id is not None
            content = await client.files.content(batch.output_file_id)
            listed = await client.batches.list()
            assert [b.id for b in listed.data] == [batch.id]
            with pytest.raises(openai.NotFoundError):
                await client.batches.retrieve("batch_missing")
        finally:
            await client.close()
    expected = await chat_answers(options, requests)
    results = parse_output(content.content)
    assert [results[c].text for c, _ in requests] == [
        a["choices"][0]["message"]["content"] for _, a in expected]


async def test_cancel_stops_a_batch_and_keeps_what_was_answered(tmp_path: Path) -> None:
    requests = bodies(10)
    async with running_server(ServerOptions(batch_latency=2.0)) as base, \
            aiohttp.ClientSession() as s:
        uploaded = await upload(s, base, input_bytes(tmp_path, requests))
        _, batch = await create(s, base, uploaded["id"])
        await poll(s, base, batch["id"], until=lambda b: b["request_counts"]["completed"] >= 2)
        async with s.post(f"{base}/batches/{batch['id']}/cancel") as r:
            assert r.status == 200
            cancelling = await r.json()
        assert cancelling["status"] == "cancelling" and cancelling["cancelling_at"] is not None
        done = await poll(s, base, batch["id"])
        assert done["status"] == "cancelled" and done["cancelled_at"] is not None
        answered = done["request_counts"]["completed"]
        assert 2 <= answered < 10 and done["request_counts"]["total"] == 10
        _, raw = await get(s, f"{base}/files/{done['output_file_id']}/content")
        assert [json.loads(line)["custom_id"] for line in raw.splitlines()] == [
            c for c, _ in requests[:answered]]
        _, stats = await get(s, root(base) + "/stats")
        assert stats["batch_requests"] == answered
        assert stats["batches"][batch["id"]]["status"] == "cancelled"
        async with s.post(f"{base}/batches/{batch['id']}/cancel") as r:
            assert r.status == 409
            assert "cancelled" in (await r.json())["error"]["message"]


async def test_unknown_ids_and_bad_requests_are_openai_errors(tmp_path: Path) -> None:
    async with running_server(ServerOptions(api_key="k")) as base, \
            aiohttp.ClientSession() as s:
        for url in (f"{base}/files", f"{base}/batches", f"{base}/files/file-x"):
            async with s.get(url) as r:
                assert r.status == 401
                assert (await r.json())["error"]["code"] == "invalid_api_key"
    async with running_server() as base, aiohttp.ClientSession() as s:
        for method, url in (("GET", "/files/file-nope"), ("GET", "/files/file-nope/content"),
                            ("DELETE", "/files/file-nope"), ("GET", "/batches/batch_nope"),
                            ("POST", "/batches/batch_nope/cancel")):
            async with s.request(method, base + url) as r:
                assert r.status == 404, url
                error = (await r.json())["error"]
                assert "nope" in error["message"] and error["type"] == "invalid_request_error"
        status, body = await create(s, base, "file-nope")
        assert status == 404 and "file-nope" in body["error"]["message"]
        uploaded = await upload(s, base, input_bytes(tmp_path, bodies(1)), purpose="user_data")
        status, body = await create(s, base, uploaded["id"])
        assert status == 400 and "purpose" in body["error"]["message"]
        uploaded = await upload(s, base, input_bytes(tmp_path, bodies(1)))
        status, body = await create(s, base, uploaded["id"], endpoint="/v1/embeddings")
        assert status == 400 and body["error"]["param"] == "endpoint"
        status, body = await create(s, base, uploaded["id"], completion_window="1h")
        assert status == 400 and body["error"]["param"] == "completion_window"
        async with s.post(base + "/batches", json={"endpoint": "/v1/chat/completions"}) as r:
            assert r.status == 400
            assert (await r.json())["error"]["param"] == "input_file_id"
        async with s.post(base + "/files", json={"purpose": "batch"}) as r:
            assert r.status == 400
        async with s.delete(f"{base}/files/{uploaded['id']}") as r:
            assert (await r.json()) == {"id": uploaded["id"], "object": "file", "deleted": True}
        assert (await get(s, f"{base}/files/{uploaded['id']}"))[0] == 404


async def test_a_malformed_line_fails_the_batch_with_its_line(tmp_path: Path) -> None:
    good = json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
                       "body": {"model": "dummy", "messages": [{"role": "user",
                                                                "content": "hi"}]}})
    data = "\n".join([
        good,
        '{"custom_id": "b", "method": "POST", "url": "/v1/chat/com',  # cut short
        good.replace('"a"', '"c"').replace('"POST"', '"GET"'),
        good,  # "a" again
        good.replace('"a"', '"e"').replace("/v1/chat/completions", "/v1/embeddings"),
        good.replace('"a"', '"f"').replace('"messages"', '"prompt"'),
    ]).encode()
    async with running_server() as base, aiohttp.ClientSession() as s:
        uploaded = await upload(s, base, data)
        _, batch = await create(s, base, uploaded["id"])
        done = await poll(s, base, batch["id"])
        _, stats = await get(s, root(base) + "/stats")
    assert done["status"] == "failed" and done["failed_at"] is not None
    assert done["output_file_id"] is None and done["request_counts"]["total"] == 0
    errors = done["errors"]
    assert errors["object"] == "list"
    assert [(e["line"], e["code"]) for e in errors["data"]] == [
        (2, "invalid_json_line"), (3, "invalid_method"), (4, "duplicate_custom_id"),
        (5, "invalid_url"), (6, "invalid_body")]
    assert "line 1" in errors["data"][2]["message"]  # where "a" was first used
    assert stats["batch_requests"] == 0 and stats["requests"] == 0


async def test_injected_errors_fail_single_requests_of_a_batch(tmp_path: Path) -> None:
    options = ServerOptions(rate_500=0.3, rate_429=0.1, seed=4, batch_latency=0.05)
    requests = bodies(20)
    requests[7] = ("req-7", {**requests[7][1], "model": "gpt-nope"})
    async with running_server(options) as base, aiohttp.ClientSession() as s:
        uploaded = await upload(s, base, input_bytes(tmp_path, requests))
        _, batch = await create(s, base, uploaded["id"])
        done = await poll(s, base, batch["id"])
        _, good = await get(s, f"{base}/files/{done['output_file_id']}/content")
        _, bad = await get(s, f"{base}/files/{done['error_file_id']}/content")
        _, stats = await get(s, root(base) + "/stats")
    assert done["status"] == "completed"
    failed = [json.loads(line) for line in bad.splitlines()]
    answered = [json.loads(line) for line in good.splitlines()]
    counts = done["request_counts"]
    assert (counts["completed"], counts["failed"]) == (len(answered), len(failed))
    assert len(answered) + len(failed) == 20
    codes = {f["custom_id"]: f["response"]["status_code"] for f in failed}
    assert codes["req-7"] == 404 and 500 in codes.values()
    for f in failed:
        assert f["error"] is None and "message" in f["response"]["body"]["error"]
    assert stats["injected"].get("500", 0) == list(codes.values()).count(500)
    assert stats["batch_requests"] == 19  # the refused request is not answered

    # the same fates as the chat endpoint gives the same requests in the same order
    expected = await chat_answers(options, requests)
    assert codes == {c: status for (c, _), (status, _) in zip(requests, expected, strict=True)
                     if status != 200}
    results = parse_output(bad)
    assert results["req-7"].text is None
    assert results["req-7"].error is not None and results["req-7"].error.startswith(
        "HTTP 404: The model `gpt-nope` does not exist")
    five = next(c for c, code in codes.items() if code == 500)
    assert results[five] == BatchResult(
        None, 0, 0, "HTTP 500: Injected internal server error. (server_error)")


async def test_closing_the_server_cancels_running_batches(tmp_path: Path) -> None:
    async with running_server(ServerOptions(batch_latency=600)) as base, \
            aiohttp.ClientSession() as s:
        uploaded = await upload(s, base, input_bytes(tmp_path, bodies(3)))
        _, batch = await create(s, base, uploaded["id"])
        await poll(s, base, batch["id"], until=lambda b: b["status"] == "in_progress")
        (task,) = [t for t in asyncio.all_tasks() if t.get_name() == batch["id"]]
        assert not task.done()
    assert task.cancelled()


def test_batch_latency_is_validated() -> None:
    assert ServerOptions().batch_latency == 0.5
    with pytest.raises(ValueError, match="batch_latency"):
        ServerOptions(batch_latency=-1)


# -- populace run-batch ----------------------------------------------------------------------
def test_run_batch_writes_vllm_output_with_serve_llm_answers(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    requests = bodies(4, model="m")
    requests.append(("other", {**requests[0][1], "model": "not-served"}))
    source, target = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_input(source, requests)
    code, out, err = run_in_process(capsys, monkeypatch, "run-batch", "-i", source, "-o",
                                    target, "--policy", "scripted", "--model", "m",
                                    "--seed", "3")
    assert code == 0, err
    assert "5 requests: 4 answered, 1 failed" in out and str(target) in out
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    assert [line["custom_id"] for line in lines] == [c for c, _ in requests]
    for line in lines:
        assert set(line) == {"id", "custom_id", "response", "error"}
        assert line["id"].startswith("vllm-")
        assert line["response"]["request_id"].startswith("vllm-batch-")
    refused = lines[-1]
    assert refused["response"]["status_code"] == 404 and refused["response"]["body"] is None
    assert refused["error"]["error"]["code"] == 404
    assert "not-served" in refused["error"]["error"]["message"]

    expected = asyncio.run(chat_answers(ServerOptions(models=["m"], policy="scripted", seed=3),
                                        requests))
    for line, (status, answer) in zip(lines[:-1], expected, strict=False):
        assert status == 200 and line["error"] is None
        assert same_answer(line["response"]["body"], answer)
    results = read_output(target)
    assert results["req-2"].text == expected[2][1]["choices"][0]["message"]["content"]
    assert results["other"].error is not None and results["other"].error.startswith("HTTP 404")


def test_run_batch_refuses_a_bad_input_file_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "in.jsonl"
    write_input(source, bodies(2))
    source.write_text(source.read_text() + '{"custom_id": "x", "method": "POST"}\n')
    code, _, err = run_in_process(capsys, monkeypatch, "run-batch", "-i", source,
                                  "-o", tmp_path / "out.jsonl")
    assert code == 2
    assert err.strip() == f"error: {source}: line 3 has no url"
    assert not (tmp_path / "out.jsonl").exists()
    code, _, err = run_in_process(capsys, monkeypatch, "run-batch", "-i", tmp_path / "none",
                                  "-o", tmp_path / "out.jsonl")
    assert code == 2 and "no such file" in err


# -- the file formats ------------------------------------------------------------------------
# One line as vLLM's run_batch writes it (pydantic's model_dump_json of BatchRequestOutput:
# every field, nulls included), a failed request as recent vLLM writes it (the
# ErrorResponse in error, the body null), as older vLLM wrote it (a flat error object), and
# a request that raised (a plain message, status 400).
VLLM_OUTPUT = "\n".join(json.dumps(line) for line in [
    {"id": "vllm-5f0c2a9e41d84b0f8a1c6e7d3b2a9f10", "custom_id": "agent-1",
     "response": {"status_code": 200, "request_id": "vllm-batch-0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a",
                  "body": {"id": "chatcmpl-a1b2c3d4e5f60718293a4b5c6d7e8f90",
                           "object": "chat.completion", "created": 1718000000,
                           "model": "Qwen/Qwen2.5-0.5B-Instruct",
                           "choices": [{"index": 0, "message": {
                               "role": "assistant", "reasoning_content": None,
                               "content": "I guess 33. The answer is 33.", "tool_calls": []},
                               "logprobs": None, "finish_reason": "stop",
                               "stop_reason": None}],
                           "usage": {"prompt_tokens": 41, "total_tokens": 52,
                                     "completion_tokens": 11, "prompt_tokens_details": None},
                           "prompt_logprobs": None}},
     "error": None},
    {"id": "vllm-77aa", "custom_id": "agent-2",
     "response": {"status_code": 404, "request_id": "vllm-batch-88bb", "body": None},
     "error": {"error": {"message": "The model `gpt-4o` does not exist.",
                         "type": "NotFoundError", "param": None, "code": 404}}},
    {"id": "vllm-99cc", "custom_id": "agent-3",
     "response": {"status_code": 400, "request_id": "vllm-batch-aadd", "body": None},
     "error": {"object": "error", "message": "max_tokens must be at least 1, got 0.",
               "type": "BadRequestError", "param": None, "code": 400}},
    {"id": "vllm-bbee", "custom_id": "agent-4",
     "response": {"status_code": 400, "request_id": "vllm-batch-ccff", "body": None},
     "error": "Request must not be sent in stream mode"},
]) + "\n"

# The OpenAI Batch API's output and error files: a success, a request answered with an
# HTTP error (the error in the body), one that expired before it ran (no response at all).
OPENAI_OUTPUT = "\n".join(json.dumps(line) for line in [
    {"id": "batch_req_123", "custom_id": "q1",
     "response": {"status_code": 200, "request_id": "req_abc",
                  "body": {"id": "chatcmpl-xyz", "object": "chat.completion",
                           "created": 1711652795, "model": "gpt-4o-mini",
                           "choices": [{"index": 0, "message": {"role": "assistant",
                                                                "content": "Hello.",
                                                                "refusal": None},
                                        "logprobs": None, "finish_reason": "stop"}],
                           "usage": {"prompt_tokens": 22, "completion_tokens": 2,
                                     "total_tokens": 24},
                           "system_fingerprint": "fp_3ba"}},
     "error": None},
    {"id": "batch_req_456", "custom_id": "q2",
     "response": {"status_code": 429, "request_id": "req_def",
                  "body": {"error": {"message": "Rate limit reached\nfor gpt-4o-mini.",
                                     "type": "requests", "param": None,
                                     "code": "rate_limit_exceeded"}}},
     "error": None},
    {"id": "batch_req_789", "custom_id": "q3", "response": None,
     "error": {"code": "batch_expired",
               "message": "This request could not be executed before the completion "
                          "window expired."}},
]) + "\n"


def test_read_output_reads_vllm_run_batch_files(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_text(VLLM_OUTPUT)
    assert read_output(path) == {
        "agent-1": BatchResult("I guess 33. The answer is 33.", 41, 11, None),
        "agent-2": BatchResult(None, 0, 0,
                               "HTTP 404: The model `gpt-4o` does not exist. (NotFoundError)"),
        "agent-3": BatchResult(
            None, 0, 0, "HTTP 400: max_tokens must be at least 1, got 0. (BadRequestError)"),
        "agent-4": BatchResult(None, 0, 0, "HTTP 400: Request must not be sent in stream mode"),
    }


def test_read_output_reads_openai_batch_files(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_text(OPENAI_OUTPUT)
    assert read_output(path) == {
        "q1": BatchResult("Hello.", 22, 2, None),
        "q2": BatchResult(None, 0, 0,
                          "HTTP 429: Rate limit reached for gpt-4o-mini. (rate_limit_exceeded)"),
        "q3": BatchResult(None, 0, 0, "This request could not be executed before the "
                                      "completion window expired. (batch_expired)"),
    }


@pytest.mark.parametrize(("bad", "says"), [
    ('{"custom_id": "z", "response": {"status_code": 200', "line 2: not valid JSON"),
    ('{"id": "x", "response": null, "error": "boom"}', "line 2: no custom_id"),
    (OPENAI_OUTPUT.splitlines()[0], "line 2: custom_id 'q1' appears twice"),
    ('{"custom_id": "z", "response": {"status_code": 200, "body": {}}, "error": null}',
     "line 2 (z): the response body has no choices"),
    ('{"custom_id": "z", "response": null, "error": null}',
     "line 2 (z): neither a response nor an error"),
])
def test_read_output_names_the_file_and_line_of_a_bad_line(tmp_path: Path, bad: str,
                                                           says: str) -> None:
    path = tmp_path / "out.jsonl"
    path.write_text(OPENAI_OUTPUT.splitlines()[0] + "\n" + bad + "\n")
    with pytest.raises(ValueError) as caught:
        read_output(path)
    message = str(caught.value)
    assert message.startswith(f"{path}, {says}") and "\n" not in message


def test_write_input_writes_the_batch_input_format(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "seed": 3}
    write_input(path, [("a", body), ("b", {**body, "seed": 4})])
    lines = path.read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": body},
        {"custom_id": "b", "method": "POST", "url": "/v1/chat/completions",
         "body": {**body, "seed": 4}}]
    assert path.read_text().endswith("}\n")
    assert read_input(path) == [("a", body), ("b", {**body, "seed": 4})]
    for bad in ([("a", body), ("a", body)], [("", body)], [("a", [1])]):
        with pytest.raises(ValueError):
            write_input(tmp_path / "bad.jsonl", bad)  # type: ignore[arg-type]
    assert not (tmp_path / "bad.jsonl").exists()
    requests, problems = parse_input(b"\n\n")
    assert requests == [] and [p.code for p in problems] == ["empty_file"]
