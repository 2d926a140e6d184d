"""Calls sent as batch jobs: the OpenAI Batch API, or vLLM's offline ``run_batch`` files.

A model with ``batch:`` in its config answers ``complete`` like any other, but the calls a
step makes at about the same time (none new for ``window`` seconds) go out together as one
job. Identical requests in a job are sent once; their answer goes to every caller.

- **api** (OpenAI-compatible ``/v1/files`` + ``/v1/batches``): the input is uploaded and a
  batch created; it is polled every ``poll`` seconds until done, and its output downloaded.
  Each batch's id and request ids are appended to ``llm_batches/journal.jsonl`` in the run
  directory as soon as it exists, so a run killed while a batch is in progress resumes it:
  the resumed run's requests (the same ones: seeds come from the run seed) are matched to
  the journaled batch by their id and fetched from it, not sent again.
- **files** (``vllm run-batch``): the input is written to ``llm_batches/BATCH.jsonl``, the
  ``command`` (default vLLM's ``run_batch``) writes ``BATCH.out.jsonl``; an output already
  there (a resumed run) is read instead of computed again.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

from populace.core import ModelBadResponse, ModelError, ModelHTTPError

from ._base import Completion, ModelClient, Request
from ._batchfile import read_output, write_input
from ._openai import OpenAIModel
from ._record import request_key

#: vLLM's offline batch runner; ``{input}``, ``{output}`` and ``{model}`` are filled in.
VLLM_RUN_BATCH = ("python", "-m", "vllm.entrypoints.openai.run_batch", "-i", "{input}",
                  "-o", "{output}", "--model", "{model}")
_DONE = frozenset({"completed", "failed", "expired", "cancelled"})


class BatchModel(ModelClient):
    """A :class:`~populace.llm.ModelClient` that sends calls as batch jobs (see the module
    docstring); ``chat`` is the model's ordinary client, whose request bodies and first base
    URL it uses."""

    def __init__(self, chat: OpenAIModel, base_url: str, *, api_key: str | None = None,
                 mode: str = "api", window: float = 1.0, poll: float = 2.0,
                 max_requests: int = 50_000, completion_window: str = "24h",
                 command: Sequence[str] = VLLM_RUN_BATCH, work_dir: Path | None = None
                 ) -> None:
        self.name = chat.name
        self.chat = chat
        self.base_url = base_url.rstrip("/")
        self.mode = mode
        self.window = window
        self.poll = poll
        self.max_requests = max_requests
        self.completion_window = completion_window
        self.command = tuple(command)
        self.work_dir = work_dir
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._pending: dict[str, tuple[dict[str, Any], list[asyncio.Future[Completion]]]] = {}
        self._last = 0.0
        self._collector: asyncio.Task[None] | None = None
        self._jobs: set[asyncio.Task[None]] = set()
        self._session: aiohttp.ClientSession | None = None
        #: Batches sent (or, on resume, found again) by this client.
        self.batches: list[str] = []

    # -- the ModelClient interface -----------------------------------------------------------
    async def send(self, request: Request) -> Completion:
        body = self.chat.body(request)
        key = request_key(self.name, request)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Completion] = loop.create_future()
        self._pending.setdefault(key, (body, []))[1].append(future)
        self._last = loop.time()
        if self._collector is None or self._collector.done():
            self._collector = loop.create_task(self._collect())
        return await future

    async def aclose(self) -> None:
        for task in [self._collector, *self._jobs]:
            if task is not None and not task.done():
                task.cancel()
        closed = ModelBadResponse(f"model {self.name!r}: closed with the call still in a batch",
                                  cause="closed")
        for _, futures in self._pending.values():  # nobody waits for ever on a closed client
            for f in futures:
                if not f.done():
                    f.set_exception(closed)
        self._pending = {}
        session, self._session = self._session, None
        if session is not None:
            await session.close()
        await self.chat.aclose()

    # -- batching ----------------------------------------------------------------------------
    async def _collect(self) -> None:
        """Wait until no call came for ``window`` seconds (or enough came), then send."""
        loop = asyncio.get_running_loop()
        while self._pending:
            quiet = loop.time() - self._last
            if quiet < self.window and len(self._pending) < self.max_requests:
                await asyncio.sleep(self.window - quiet)
                continue
            taken, self._pending = self._pending, {}
            keys = list(taken)
            for start in range(0, len(keys), self.max_requests):  # no job over the limit
                part = {k: taken[k] for k in keys[start:start + self.max_requests]}
                job = loop.create_task(self._send(part))
                self._jobs.add(job)
                job.add_done_callback(self._jobs.discard)

    async def _send(self, taken: dict[str, Any]) -> None:
        started = time.monotonic()
        try:
            if self.mode == "files":
                answers = await self._run_files(taken)
            else:
                answers = await self._run_api(taken)
        except BaseException as e:  # the whole job failed (or was closed): callers hear why
            error = e if isinstance(e, ModelError) else ModelBadResponse(
                f"model {self.name!r}: batch job failed: {type(e).__name__}: {e}",
                cause="batch failed")
            for _, futures in taken.values():
                for f in futures:
                    if not f.done():
                        f.set_exception(error)
            if not isinstance(e, Exception):
                raise  # cancelled: stop here too
            return
        latency = time.monotonic() - started
        for key, (_, futures) in taken.items():
            text, ptok, ctok, problem = answers.get(key, (None, 0, 0, "no answer in the output"))
            for f in futures:
                if f.done():
                    continue
                if text is None:
                    f.set_exception(_error(self.name, key, problem))
                else:
                    f.set_result(Completion(text, self.name, ptok, ctok, latency,
                                            self.base_url))

    # -- files (vLLM run_batch) --------------------------------------------------------------
    async def _run_files(self, taken: dict[str, Any]) -> dict[str, Any]:
        work = self._work()
        digest = hashlib.sha256("\n".join(sorted(taken)).encode()).hexdigest()[:16]
        source = work / f"{self.name}-{digest}.jsonl"
        target = work / f"{self.name}-{digest}.out.jsonl"
        if not target.exists():  # a resumed run finds the output of its interrupted attempt
            write_input(source, [(key, body) for key, (body, _) in taken.items()])
            partial = target.with_suffix(".tmp")
            args = [a.format(input=source, output=partial, model=self.chat.model)
                    for a in self.command]
            process = await asyncio.create_subprocess_exec(
                *args, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
            _, err = await process.communicate()
            if process.returncode != 0:
                last = err.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
                raise ModelBadResponse(f"model {self.name!r}: {args[0]} exited with "
                                       f"{process.returncode}: {last[0][:300]}",
                                       cause="batch failed")
            os.replace(partial, target)
        self.batches.append(target.name)
        return read_output(target)

    # -- the Batch API -----------------------------------------------------------------------
    def _work(self) -> Path:
        work = self.work_dir or Path(".populace-cache") / "llm_batches"
        work.mkdir(parents=True, exist_ok=True)
        return work

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(headers=self._headers,
                                                  timeout=aiohttp.ClientTimeout(total=600))
        return self._session

    async def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        url = f"{self.base_url}{path}"
        async with self._open().request(method, url, **kwargs) as resp:
            raw = await resp.read()
            if resp.status != 200:
                raise ModelHTTPError(f"model {self.name!r}: {method} {url}: HTTP {resp.status}: "
                                     f"{raw[:300].decode(errors='replace')}",
                                     cause=f"HTTP {resp.status}")
        try:
            data = json.loads(raw)
        except ValueError:
            raise ModelBadResponse(f"model {self.name!r}: {url} sent no JSON",
                                   cause="malformed JSON") from None
        if not isinstance(data, dict):
            raise ModelBadResponse(f"model {self.name!r}: {url} sent no object",
                                   cause="malformed JSON")
        return data

    def _journal(self) -> Path | None:
        return None if self.work_dir is None else self.work_dir / "journal.jsonl"

    def _journaled(self) -> dict[str, str]:
        """request id → the batch that holds it, from the journal."""
        path = self._journal()
        if path is None or not path.exists():
            return {}
        found: dict[str, str] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # cut short by a crash: that batch is sent again
            for key in entry.get("ids", ()):
                found.setdefault(key, entry["batch"])
        return found

    def _note(self, batch: str, keys: list[str]) -> None:
        path = self._journal()
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"batch": batch, "model": self.name, "ids": keys}) + "\n"
        with open(path, "a", encoding="utf-8") as f:  # one write: lines do not interleave
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    async def _run_api(self, taken: dict[str, Any]) -> dict[str, Any]:
        known = self._journaled()
        resumed: dict[str, list[str]] = {}
        fresh = []
        for key in taken:
            if key in known:
                resumed.setdefault(known[key], []).append(key)
            else:
                fresh.append(key)
        batches = list(resumed)
        if fresh:
            batches.append(await self._create(fresh, taken))
        answers: dict[str, Any] = {}
        for done in await asyncio.gather(*(self._wait(b) for b in batches)):
            answers.update(done)
        return answers

    async def _create(self, keys: list[str], taken: dict[str, Any]) -> str:
        work = self._work()
        digest = hashlib.sha256("".join(keys).encode()).hexdigest()[:16]
        source = work / f"{self.name}-{digest}.jsonl"
        write_input(source, [(key, taken[key][0]) for key in keys])
        form = aiohttp.FormData()
        form.add_field("purpose", "batch")
        form.add_field("file", source.read_bytes(), filename=source.name,
                       content_type="application/jsonl")
        uploaded = await self._json("POST", "/files", data=form)
        batch = await self._json("POST", "/batches", json={
            "input_file_id": uploaded["id"], "endpoint": "/v1/chat/completions",
            "completion_window": self.completion_window,
            "metadata": {"populace_model": self.name}})
        self._note(batch["id"], keys)
        return str(batch["id"])

    async def _wait(self, batch_id: str) -> dict[str, Any]:
        self.batches.append(batch_id)
        while True:
            batch = await self._json("GET", f"/batches/{batch_id}")
            if batch.get("status") in _DONE:
                break
            await asyncio.sleep(self.poll)
        if batch.get("status") != "completed" or not (batch.get("output_file_id")
                                                      or batch.get("error_file_id")):
            errors = (batch.get("errors") or {}).get("data") or [{}]
            why = errors[0].get("message") if isinstance(errors[0], dict) else None
            raise ModelBadResponse(f"model {self.name!r}: batch {batch_id} ended "
                                   f"{batch.get('status')}{f': {why}' if why else ''}",
                                   cause=f"batch {batch.get('status')}")
        answers: dict[str, Any] = {}
        for field in ("output_file_id", "error_file_id"):  # answers, then failed requests
            if not batch.get(field):
                continue
            url = f"{self.base_url}/files/{batch[field]}/content"
            async with self._open().get(url) as resp:
                raw = await resp.read()
                if resp.status != 200:
                    raise ModelHTTPError(f"model {self.name!r}: GET {url}: HTTP {resp.status}",
                                         cause=f"HTTP {resp.status}")
            target = self._work() / f"{batch_id}.{field.split('_')[0]}.jsonl"
            target.write_bytes(raw)
            answers.update(read_output(target))
        return answers


def _error(model: str, key: str, problem: Any) -> ModelError:
    text = str(problem or "no answer")
    status = next((int(w) for w in text.replace(":", " ").split() if w.isdigit()
                   and 400 <= int(w) < 600), None)
    message = f"model {model!r}: request {key[:12]} in a batch: {text[:300]}"
    if status is not None:
        return ModelHTTPError(message, cause=f"HTTP {status}")
    return ModelBadResponse(message, cause="batch answer")
