"""Calls sent as batch jobs: the OpenAI Batch API, or vLLM's offline ``run_batch`` files.

A model with ``batch:`` in its config answers ``complete`` like any other, but the calls a
step makes at about the same time (none new for ``window`` seconds) go out together as one
job. Identical requests in a job are sent once; their answer goes to every caller.

- **api** (OpenAI-compatible ``/v1/files`` + ``/v1/batches``): the input is uploaded and a
  batch created; it is polled every ``poll`` seconds until done, and its output downloaded.
  Before the batch is created, the intent (a random tag and the request ids) is appended
  to ``llm_batches/journal.jsonl`` in the run directory, and the tag goes in the batch's
  metadata (``populace_tag``); once created, the batch's id follows. A run killed while a
  batch is in progress resumes it: the resumed run's requests (the same ones: seeds come
  from the run seed) are matched to the newest journaled batch holding them and fetched
  from it, not sent again; an intent without its batch's id (killed between creating and
  journaling) is looked for in ``GET /batches`` by its tag.
- Both: a line that failed with a status plain mode retries (5xx, 429, 408) is sent again
  in a new job, up to ``max_retries`` more times (the model's). A batch that ends
  ``failed``, ``expired`` or ``cancelled`` keeps the answers its output holds; the requests
  it did not answer are sent again, up to ``max_retries`` times (never those of a batch this
  run saw cancelled). When they cannot be, the job's calls fail in one line and the run
  stops; ``populace run --resume`` sends only the missing requests.
- **files** (``vllm run-batch``): the input is written to ``llm_batches/BATCH.jsonl``, the
  ``command`` (default vLLM's ``run_batch``) writes ``BATCH.out.jsonl``; an output already
  there (a resumed run) is read instead of computed again.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:  # aiohttp loads when a batch is sent: a run of offline models never
    import aiohttp  # pays its import (~0.1 s of every start)

from populace.core import ModelBadResponse, ModelError, ModelHTTPError, ModelUnreachable

from ._base import Completion, ModelClient, Request
from ._batchfile import BatchResult, read_output, write_input
from ._openai import OpenAIModel
from ._record import request_key

log = logging.getLogger(__name__)

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
                 command: Sequence[str] = VLLM_RUN_BATCH, work_dir: Path | None = None,
                 max_retries: int | None = None) -> None:
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
        #: more times a request is sent when its line failed with a status plain mode
        #: retries, or its batch ended without answering it (default: the chat client's)
        self.max_retries = chat.retrying.max_retries if max_retries is None else max_retries
        self._tags: set[str] = set()  # the intents this client journaled
        self._located: dict[str, str | None] = {}  # orphan intents looked for: tag → batch
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
            answers, sent, lost = await self._finish(taken)
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
            result = answers.get(key)
            for f in futures:
                if f.done():
                    continue
                if lost is not None:  # the job stops whole: resume finishes it
                    f.set_exception(lost)
                elif result is None or result.error is not None or result.text is None:
                    problem = result.error if result is not None else None
                    if result is not None and result.error is None:
                        problem = "the answer has no text"
                    f.set_exception(_error(self.name, key, problem, sent.get(key, 0)))
                else:
                    answer = Completion(result.text, self.name, result.prompt_tokens,
                                        result.completion_tokens, latency, self.base_url)
                    answer.retries = max(0, sent.get(key, 0) - 1)
                    f.set_result(answer)

    async def _finish(self, taken: dict[str, Any]
                      ) -> tuple[dict[str, BatchResult], dict[str, int], ModelError | None]:
        """Every request of a job answered, or failed for good: ``(results by key, times each
        was sent by this run, the job's error or None)``.

        A line that failed with a status plain mode retries (5xx, 429, 408) is sent again in
        a new batch, and so is a request whose batch ended (``failed``, ``expired``,
        ``cancelled``) without answering it, each up to ``max_retries`` more times; the
        answers a dead batch holds are kept. A batch cancelled under this run is never
        resubmitted by it (a cancel means stop), but a resumed run resubmits its missing
        requests. When a dead batch's requests cannot be sent again, the job's error says
        so in one line and every call of the job fails with it: the run stops (rather than
        writing rows with holes), and ``populace run --resume`` takes the kept answers from
        the journaled batches and sends only the missing requests."""
        results: dict[str, BatchResult] = {}
        sent = dict.fromkeys(taken, 0)
        dead: dict[str, _Lost] = {}
        todo, first = list(taken), True
        while todo:
            gone: dict[str, _Lost]
            if self.mode == "files":
                got, fresh, gone = await self._run_files(todo, taken), set(todo), {}
            else:
                got, fresh, gone = await self._run_api(todo, taken, journaled=first)
            first = False
            for key in fresh:
                sent[key] += 1
            again = []
            for key in todo:
                result = got.get(key)
                if result is not None and (result.error is None
                                           or not _retryable(result.error)):
                    results[key] = result
                elif key in gone:
                    why = gone[key]
                    if (why.status == "cancelled" and sent[key]) or \
                            sent[key] > self.max_retries:
                        dead[key] = why
                    else:
                        again.append(key)
                elif sent[key] <= self.max_retries:  # a 5xx line, or no line at all
                    again.append(key)
                elif result is not None:
                    results[key] = result
            if dead:
                break
            todo = again
        if not dead:
            return results, sent, None
        answered = sum(1 for r in results.values() if r.error is None and r.text is not None)
        why = next(iter(dead.values()))
        missing = len(taken) - answered
        tried = max(sent[k] for k in dead)
        return results, sent, ModelBadResponse(
            f"model {self.name!r}: batch {why.batch} {why.said(self.completion_window)} with "
            f"{answered:,} of {len(taken):,} answered (kept)"
            f"{f', sent {tried} times' if tried > 1 else ''}; the job stops: --resume sends "
            f"only the {missing:,} missing", cause=f"batch {why.status}")

    # -- files (vLLM run_batch) --------------------------------------------------------------
    async def _run_files(self, keys: list[str], taken: dict[str, Any]
                         ) -> dict[str, BatchResult]:
        work = self._work()
        digest = hashlib.sha256("\n".join(sorted(keys)).encode()).hexdigest()[:16]
        source = work / f"{self.name}-{digest}.jsonl"
        target = work / f"{self.name}-{digest}.out.jsonl"
        if not target.exists():  # a resumed run finds the output of its interrupted attempt
            write_input(source, [(key, taken[key][0]) for key in keys])
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
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(headers=self._headers,
                                                  timeout=aiohttp.ClientTimeout(total=600))
        return self._session

    async def _request(self, method: str, url: str, *,
                       form: Callable[[], aiohttp.FormData] | None = None,
                       body: dict[str, Any] | None = None,
                       again: Callable[[], Awaitable[bytes | None]] | None = None) -> bytes:
        """One call of the files and batches API: its body. A transient failure (a 5xx, 429
        or 408, a lost connection, a timeout) is tried again up to ``max_retries`` times, as
        plain mode tries a chat request again; before each new attempt ``again`` may give
        the answer instead (a batch created by an attempt whose answer was lost)."""
        import aiohttp

        attempt = 0
        while True:
            try:
                async with self._open().request(
                        method, url, data=form() if form is not None else None,
                        json=body) as resp:
                    raw = await resp.read()
                if resp.status == 200:
                    return raw
                text = " ".join(raw[:300].decode(errors="replace").split())
                error: ModelError = ModelHTTPError(
                    f"model {self.name!r}: {method} {url}: HTTP {resp.status}: {text}",
                    cause=f"HTTP {resp.status}")
                transient = resp.status >= 500 or resp.status in _RETRIED
            except (aiohttp.ClientError, TimeoutError) as e:
                error = ModelUnreachable(f"model {self.name!r}: {method} {url}: "
                                         f"{type(e).__name__}: {e}", cause="unreachable")
                transient = True
            if not transient or attempt >= self.max_retries:
                if attempt:
                    error.args = (f"{error} (after {attempt + 1} attempts)",)
                    error.attempts = attempt + 1
                raise error
            attempt += 1
            await asyncio.sleep(min(8.0, 0.25 * 2 ** attempt))
            if again is not None and (found := await again()) is not None:
                return found

    async def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        url = f"{self.base_url}{path}"
        raw = await self._request(method, url, **kwargs)
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

    def _entries(self) -> list[dict[str, Any]]:
        """The journal's whole lines, oldest first."""
        path = self._journal()
        if path is None or not path.exists():
            return []
        entries = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # cut short by a crash: that batch is sent again
            if isinstance(entry, dict) and isinstance(entry.get("ids"), list):
                entries.append(entry)
        return entries

    async def _journaled(self, keys: list[str]) -> dict[str, str]:
        """request id → the batch that last held it, from the journal, for ``keys``. An
        intent without its batch line (a run killed between creating the batch and
        journaling it) is looked for among the server's batches by its tag, and journaled
        when found; not found, its requests were never sent."""
        wanted = set(keys)
        entries = self._entries()
        placed = {e["tag"] for e in entries if "batch" in e and "tag" in e}
        orphans = {e["intent"]: e for e in entries
                   if "intent" in e and e["intent"] not in placed and e["intent"] not in
                   self._tags and e.get("model") == self.name and wanted.intersection(e["ids"])}
        orphans = {t: e for t, e in orphans.items() if t not in self._located}
        if orphans:
            self._located.update(await self._locate(orphans))
            for tag, batch in self._located.items():
                if tag in orphans and batch is not None:
                    self._note({"batch": batch, "tag": tag, "model": self.name,
                                "ids": orphans[tag]["ids"]})
        found: dict[str, str] = {}
        for entry in entries:  # the newest batch holding a request is the one to read
            if "batch" in entry:
                batch = entry["batch"]
            elif entry.get("intent") not in placed:
                batch = self._located.get(entry.get("intent", ""))
            else:
                continue  # its batch line follows
            if batch is None:
                continue
            for key in entry["ids"]:
                if key in wanted:
                    found[key] = str(batch)
        return found

    async def _locate(self, intents: dict[str, dict[str, Any]]) -> dict[str, str | None]:
        """The batches made for ``intents`` (tag → intent line), found by their metadata
        tag in ``GET /batches`` (newest first, back to an hour before the oldest intent);
        None for a tag no batch has."""
        located: dict[str, str | None] = dict.fromkeys(intents)
        since = min(float(e.get("time", 0)) for e in intents.values()) - 3600
        after: str | None = None
        while any(v is None for v in located.values()):
            query = "?limit=100" + (f"&after={after}" if after else "")
            try:
                page = await self._json("GET", f"/batches{query}")
            except ModelHTTPError as e:
                if e.status not in (404, 405, 501):
                    raise
                # A server that cannot list its batches (some OpenAI-compatible ones): the
                # batch cannot be found, and a resume that failed on it would fail for ever.
                log.warning("model %r: the server cannot list its batches (%s): the requests "
                            "of %d interrupted batch creation(s) are sent again", self.name,
                            e.cause, len(intents))
                break
            data = [b for b in page.get("data") or () if isinstance(b, dict)]
            for batch in data:
                tag = (batch.get("metadata") or {}).get("populace_tag")
                if tag in located and located[tag] is None:
                    located[tag] = str(batch["id"])
            oldest = min((b.get("created_at") or 0 for b in data), default=0)
            if not data or not page.get("has_more") or oldest < since:
                break
            after = str(data[-1]["id"])
        return located

    def _note(self, entry: dict[str, Any]) -> None:
        path = self._journal()
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(entry) + "\n"
        with open(path, "a", encoding="utf-8") as f:  # one write: lines do not interleave
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    async def _run_api(self, keys: list[str], taken: dict[str, Any], *, journaled: bool
                       ) -> tuple[dict[str, BatchResult], set[str], dict[str, _Lost]]:
        """One round: ``keys`` read from the batches the journal holds them in (with
        ``journaled``), the others sent in a new batch. Returns the results by key, the
        keys sent, and the keys a batch ended without answering, with why."""
        known = await self._journaled(keys) if journaled else {}
        resumed: dict[str, list[str]] = {}
        fresh = []
        for key in keys:
            if key in known:
                resumed.setdefault(known[key], []).append(key)
            else:
                fresh.append(key)
        batches = list(resumed.items())
        if fresh:
            batches.append((await self._create(fresh, taken), fresh))
        results: dict[str, BatchResult] = {}
        gone: dict[str, _Lost] = {}
        for (_, held), (status, got) in zip(
                batches, await asyncio.gather(*(self._wait(b) for b, _ in batches)),
                strict=True):
            # only the requests read from this batch: another one's older line (a 500
            # line in a batch a request was since resubmitted from) must not win
            results.update((k, got[k]) for k in held if k in got and not _unrun(got[k]))
            missing = [k for k in held if k not in results]
            if status.status != "completed":
                gone.update(dict.fromkeys(missing, status))
        return results, set(fresh), gone

    async def _create(self, keys: list[str], taken: dict[str, Any]) -> str:
        """Upload ``keys``'s requests and create their batch. The intent (a tag and the
        request ids) is journaled first and the tag goes in the batch's metadata, so a run
        killed before the batch's id is journaled finds the batch again on resume."""
        work = self._work()
        tag = uuid.uuid4().hex
        self._tags.add(tag)
        self._note({"intent": tag, "model": self.name, "ids": keys, "time": time.time()})
        source = work / f"{self.name}-{tag[:16]}.jsonl"
        write_input(source, [(key, taken[key][0]) for key in keys])
        data = source.read_bytes()

        def form() -> aiohttp.FormData:  # a form is sent once: one per attempt
            import aiohttp

            made = aiohttp.FormData()
            made.add_field("purpose", "batch")
            made.add_field("file", data, filename=source.name,
                           content_type="application/jsonl")
            return made

        async def created() -> bytes | None:
            """The batch an attempt made though its answer was lost, found by its tag."""
            found = (await self._locate({tag: {"time": time.time()}}))[tag]
            return None if found is None else json.dumps({"id": found}).encode()

        uploaded = await self._json("POST", "/files", form=form)
        batch = await self._json("POST", "/batches", again=created, body={
            "input_file_id": uploaded["id"], "endpoint": "/v1/chat/completions",
            "completion_window": self.completion_window,
            "metadata": {"populace_model": self.name, "populace_tag": tag}})
        self._note({"batch": batch["id"], "tag": tag, "model": self.name, "ids": keys})
        return str(batch["id"])

    async def _wait(self, batch_id: str) -> tuple[_Lost, dict[str, BatchResult]]:
        """Poll a batch until it ends; its end, and every result its output and error files
        hold (a failed, expired or cancelled batch keeps the answers it made)."""
        self.batches.append(batch_id)
        while True:
            try:
                batch = await self._json("GET", f"/batches/{batch_id}")
            except ModelHTTPError as e:
                if e.status == 404:  # journaled against another server: send again
                    return _Lost(batch_id, "not found", "the server has no such batch"), {}
                raise
            if batch.get("status") in _DONE:
                break
            await asyncio.sleep(self.poll)
        errors = (batch.get("errors") or {}).get("data") or [{}]
        why = errors[0].get("message") if isinstance(errors[0], dict) else None
        end = _Lost(batch_id, str(batch.get("status")), why if isinstance(why, str) else None)
        answers: dict[str, BatchResult] = {}
        for field in ("output_file_id", "error_file_id"):  # answers, then failed requests
            if not batch.get(field):
                continue
            raw = await self._request("GET", f"{self.base_url}/files/{batch[field]}/content")
            target = self._work() / f"{batch_id}.{field.split('_')[0]}.jsonl"
            target.write_bytes(raw)
            answers.update(read_output(target))
        return end, answers


class _Lost(NamedTuple):
    """How a batch ended: its id, status and the server's reason."""

    batch: str
    status: str
    why: str | None = None

    def said(self, window: str) -> str:
        """``expired (24h window)``, ``was cancelled``, ``failed (the server's reason)``…"""
        verb = {"expired": f"expired ({window} window)", "cancelled": "was cancelled",
                "failed": "failed", "not found": "is not on the server"
                }.get(self.status, self.status)
        return f"{verb} ({' '.join(self.why.split())[:80]})" if self.why else verb


#: Statuses of a batch line that plain mode retries.
_RETRIED = frozenset({408, 429})


def _status(problem: str | None) -> int | None:
    """The HTTP status a failed line's problem starts with (``HTTP 500: …``), if any."""
    head = (problem or "").partition(":")[0]
    code = head.removeprefix("HTTP ").strip()
    return int(code) if head.startswith("HTTP ") and code.isdigit() else None


def _retryable(problem: str | None) -> bool:
    status = _status(problem)
    if status is not None:
        return status >= 500 or status in _RETRIED
    return (problem or "").endswith("(request_timeout)")  # OpenAI's: the model call timed out


def _unrun(result: BatchResult) -> bool:
    """A line of OpenAI's error file for a request its batch never ran (``batch_expired``,
    ``batch_cancelled``): no answer, as if the line were not there."""
    return result.error is not None and result.error.endswith(("(batch_expired)",
                                                              "(batch_cancelled)"))


def _error(model: str, key: str, problem: Any, attempts: int = 1) -> ModelError:
    text = " ".join(str(problem or "no answer in the output").split())
    status = next((int(w) for w in text.replace(":", " ").split() if w.isdigit()
                   and 400 <= int(w) < 600), None)
    tries = f" (after {attempts} attempts)" if attempts > 1 else ""
    message = f"model {model!r}: request {key[:12]} in a batch: {text[:300]}{tries}"
    if status is not None:
        return ModelHTTPError(message, cause=f"HTTP {status}", attempts=max(1, attempts))
    return ModelBadResponse(message, cause="batch answer", attempts=max(1, attempts))
