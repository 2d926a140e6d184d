"""Recording LLM calls as JSON lines, and replaying a run from them with no model at all.

:class:`RecordingModel` wraps any client and appends one line per call to a JSONL file;
:class:`ReplayModel` answers from such files. A request is identified by
:func:`request_key`, a hash of everything that decides the answer: the client's name, the
messages, and the sampling arguments of the call. Seeds are derived from the run seed, so a
re-run with the same seed asks the same questions and gets the recorded answers.

One line per call, keys in this order (the answer fields come before the request, so that
loading parses only them)::

    {"key": "<32 hex>", "agent": 17, "model": "qwen", "text": "…", "prompt_tokens": 7,
     "completion_tokens": 12, "latency_s": 0.214, "endpoint": "http://gpu1:8000/v1",
     "retries": 0, "time": 1717171717.123,
     "request": {"max_tokens": null, "messages": [...], "response_format": null,
                 "seed": 42, "temperature": 0.7, "top_p": null}}

``agent`` is the id of the agent that made the call (:func:`populace.core.current_agent`
when the call began); a call made outside any agent's call has none. A failed call has
``"error": {"type": "ModelError", "message": "…"}`` in place of ``text``, the token counts,
``endpoint`` and ``retries``. Lines are ASCII (``\\u`` escapes), compact, and end in
``\\n``; a line without one was cut short by a crash and is ignored.

Beside ``NAME.jsonl``, ``NAME.agents`` indexes the lines that have an agent: one record per
line, two little-endian int64s, the agent's id and the line's byte offset in the JSONL file,
appended in the same flush right after the lines (so an index record never points at a line
not yet written). :func:`read_agent_calls` finds one agent's calls with it without reading
the log. A record cut short by a crash, or an offset past the end of the log, is ignored,
and the torn record is dropped before a resumed process appends.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from populace.core import ConfigError, ModelError, RecordingMiss, current_agent

from ._base import Completion, ModelClient, ModelStats, Request
from ._wrappers import Wrapper

# Bumped if the hashed form of a request ever changes: old recordings then miss, not lie.
_KEY_PREFIX = b"populace-request-v1\n"

_COMPACT = (",", ":")


def _canonical(request: Request) -> str:
    """The request as canonical JSON: sorted keys, no spaces, ASCII, numbers normalised."""
    messages, temperature, top_p, seed, max_tokens, response_format = request
    return json.dumps(
        {
            "max_tokens": None if max_tokens is None else int(max_tokens),
            "messages": list(messages),
            "response_format": response_format,
            "seed": None if seed is None else int(seed),
            "temperature": None if temperature is None else float(temperature),
            "top_p": None if top_p is None else float(top_p),
        },
        sort_keys=True, separators=_COMPACT, allow_nan=False,
    )


def _digest(model_name: str, canonical: str) -> bytes:
    h = hashlib.blake2b(_KEY_PREFIX, digest_size=16)
    h.update(json.dumps(model_name).encode("ascii"))
    h.update(b"\n")
    h.update(canonical.encode("ascii"))
    return h.digest()


def request_key(model_name: str, request: Request) -> str:
    """A 32-hex-digit hash of everything that determines an answer; the same in every process.

    ``model_name`` is the client's name (the key under ``models:`` in the run YAML). The
    request is taken as the caller made it: a default that the client fills in (an
    ``OpenAIConfig.temperature``) is not part of the key. ``1`` and ``1.0`` are the same
    temperature; message keys may come in any order.

    >>> request_key("qwen", Request([{"role": "user", "content": "Pick"}], temperature=0.7,
    ...                             seed=1))  # doctest: +ELLIPSIS
    '...'
    """
    return _digest(model_name, _canonical(request)).hex()


# -- recording -------------------------------------------------------------------------------
#: One record of a ``.agents`` index: which agent made the line at which byte offset.
_INDEX = np.dtype([("agent", "<i8"), ("offset", "<i8")])
_NO_AGENT = -1  # buffered for a line without one; such lines are not indexed


def _index_path(path: Path) -> Path:
    """The ``.agents`` index beside the JSONL recording ``path``."""
    return path.with_suffix(".agents")


class _Sink:
    """Lines buffered in memory and appended to one file at most every ``interval`` seconds,
    with their index records (see the module docstring).

    Kept apart from :class:`RecordingModel` so that a finaliser can flush it at interpreter
    exit without keeping the model alive.
    """

    __slots__ = ("_agents", "_buffer", "_fd", "_ifd", "_loop", "_timer", "failed", "interval",
                 "path", "written")

    def __init__(self, path: Path, interval: float) -> None:
        self.path = path
        self.interval = interval
        self.written = 0
        self.failed: OSError | None = None  # a write that failed in the timer callback
        self._buffer: list[str] = []
        self._agents: list[int] = []  # the agent of each buffered line, or _NO_AGENT
        self._fd = -1
        self._ifd = -1
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def open(self) -> None:
        if self._fd >= 0:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            # A line cut short by an earlier crash must not swallow the first new one.
            size = os.fstat(fd).st_size
            if size:
                os.lseek(fd, size - 1, os.SEEK_SET)
                if os.read(fd, 1) != b"\n":
                    os.write(fd, b"\n")  # O_APPEND: at the end, wherever the offset is
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def _open_index(self) -> int:
        """The index file, opened on the first line that has an agent."""
        if self._ifd < 0:
            fd = os.open(_index_path(self.path), os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                torn = os.fstat(fd).st_size % _INDEX.itemsize
                if torn:  # a record cut short by a crash: later ones must stay aligned
                    os.ftruncate(fd, os.fstat(fd).st_size - torn)
            except BaseException:
                os.close(fd)
                raise
            self._ifd = fd
        return self._ifd

    def add(self, line: str, agent: int | None = None) -> None:
        if self.failed is not None:
            raise self.failed
        self._buffer.append(line)
        self._agents.append(_NO_AGENT if agent is None else agent)
        if self.interval <= 0:
            self.flush()
        else:
            loop = asyncio.get_running_loop()
            if self._timer is None or self._loop is not loop:  # (a timer on a dead loop)
                if self._timer is not None:
                    self._timer.cancel()
                self._timer = loop.call_later(self.interval, self._tick)
                self._loop = loop

    def _tick(self) -> None:
        self._timer = None
        try:
            self.flush()
        except OSError as exc:  # surfaces at the next call, not in the loop's log
            self.failed = exc

    def flush(self) -> None:
        if not self._buffer:
            return
        lines, self._buffer = self._buffer, []
        agents, self._agents = self._agents, []
        self.open()
        at = os.fstat(self._fd).st_size  # where the first line lands (appending)
        data = memoryview("".join(lines).encode("ascii"))
        while data:  # one write(2) in practice; loop in case it is short
            data = data[os.write(self._fd, data):]
        self.written += len(lines)
        ids = np.array(agents, dtype=np.int64)
        tagged = ids != _NO_AGENT
        if tagged.any():
            sizes = np.fromiter(map(len, lines), dtype=np.int64, count=len(lines))
            records = np.empty(int(tagged.sum()), dtype=_INDEX)
            records["agent"] = ids[tagged]
            records["offset"] = (at + np.cumsum(sizes) - sizes)[tagged]
            index = memoryview(records.tobytes())
            fd = self._open_index()
            while index:
                index = index[os.write(fd, index):]

    def close(self) -> None:
        """Flush and close; a later :meth:`add` reopens the files."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        try:
            self.flush()
        finally:
            fd, self._fd = self._fd, -1
            ifd, self._ifd = self._ifd, -1
            if fd >= 0:
                os.close(fd)
            if ifd >= 0:
                os.close(ifd)


def _expand(path: str | os.PathLike[str]) -> Path:
    text = os.fspath(path)
    if "{pid}" in text:
        text = text.replace("{pid}", str(os.getpid()))
    if "{host}" in text:
        text = text.replace("{host}", socket.gethostname())
    return Path(text)


class RecordingModel(Wrapper):
    """Wraps ``inner`` and appends every call, answered or failed, to the JSONL file ``path``.

    >>> model = RecordingModel(DummyModel(latency=0), "run/llm_calls/dummy-{pid}.jsonl")
    ... # doctest: +SKIP

    ``{pid}`` and ``{host}`` in ``path`` become the process id and host name when the model
    is built, so that workers in separate processes (Ray actors) write separate files; load
    them all with ``ReplayModel(directory, name)``. Parent directories are created; the file
    is opened at once, so a path that cannot be written fails where the model is built, as
    a :class:`~populace.core.ConfigError`.

    Lines are buffered and written together at most ``flush_interval`` seconds after the
    first of them (``0``: each line at once), with one ``write`` on a file opened for
    appending: a crash of the process loses the lines of the last interval at most, and a
    line cut short is skipped when loading. :meth:`aclose` writes what is buffered, and so
    does interpreter exit. Failures are recorded and re-raised unchanged; a cancelled call,
    or one abandoned when its client was closed (cause ``"closed"``), is not recorded.
    """

    def __init__(self, inner: ModelClient, path: str | os.PathLike[str], *,
                 flush_interval: float = 0.2) -> None:
        if flush_interval < 0:
            raise ValueError(f"flush_interval must be >= 0, got {flush_interval}")
        super().__init__(inner)
        self._sink = _Sink(_expand(path), flush_interval)
        try:
            self._sink.open()
        except OSError as exc:
            raise ConfigError(f"model {self.name!r}: cannot open the recording "
                              f"{self._sink.path}: {exc.strerror or exc}") from exc
        weakref.finalize(self, self._sink.close)
        self._calls = 0
        self._errors = 0

    def __repr__(self) -> str:
        return f"RecordingModel({self.inner!r}, {str(self._sink.path)!r})"

    @property
    def path(self) -> Path:
        """The file the lines go to."""
        return self._sink.path

    @property
    def calls(self) -> int:
        """Calls finished (answered or failed) through this wrapper."""
        return self._calls

    @property
    def errors(self) -> int:
        """Calls that failed (recorded with ``error``)."""
        return self._errors

    @property
    def written(self) -> int:
        """Lines written to the file so far (the rest are buffered)."""
        return self._sink.written

    async def send(self, request: Request) -> Completion:
        agent = current_agent()  # at entry: the agent's own step is running now
        # Serialised now: the caller may change its message list while the call runs.
        canonical = _canonical(request)
        key = _digest(self.name, canonical).hex()
        start = time.monotonic()
        try:
            c = await self.inner.send(request)
        except Exception as exc:
            if isinstance(exc, ModelError) and exc.cause == "closed":
                raise  # abandoned with its client, like a cancelled call
            self._calls += 1
            self._errors += 1
            head: dict[str, Any] = {
                "key": key, "agent": agent, "model": self.name,
                "error": {"type": type(exc).__name__, "message": str(exc)},
                "latency_s": round(time.monotonic() - start, 6),
                "time": round(time.time(), 3),
            }
            self._record(head, canonical, agent)
            raise
        self._calls += 1
        head = {
            "key": key, "agent": agent, "model": self.name, "text": c.text,
            "prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens,
            "latency_s": round(c.latency_s, 6), "endpoint": c.endpoint,
            "retries": c.retries, "time": round(time.time(), 3),
        }
        self._record(head, canonical, agent)
        return c

    def _record(self, head: dict[str, Any], request: str, agent: int | None) -> None:
        if agent is None:
            del head["agent"]
        line = f'{json.dumps(head, separators=_COMPACT)[:-1]},"request":{request}}}\n'
        try:
            self._sink.add(line, agent)
        except OSError as exc:
            raise ModelError(f"model {self.name!r}: cannot write the recording "
                             f"{self._sink.path}: {exc.strerror or exc}") from exc

    async def aclose(self) -> None:
        """Write buffered lines, close the file, then close the inner client. Idempotent."""
        try:
            self._sink.close()
        finally:
            await self.inner.aclose()


def read_agent_calls(directory: str | os.PathLike[str], agent_id: int, *,
                     limit: int = 50) -> list[dict[str, Any]]:
    """The last ``limit`` LLM calls agent ``agent_id`` made, oldest first, from the
    recordings in ``directory`` (a run's ``llm_calls/``), found through their indexes.

    Each call is its line as the module docstring describes it (``request`` holds the
    ``messages``). Reads the ``.agents`` indexes (16 bytes per call) and then only this
    agent's lines, so it costs milliseconds beside a log of gigabytes. Recordings without an
    index (made before it existed) are not searched; an index record that points past the
    end of its log, or at a line that is cut short or belongs to another agent, is skipped.

    >>> read_agent_calls("runs/demo/llm_calls", 17, limit=5)  # doctest: +SKIP
    [{'key': '…', 'agent': 17, 'model': 'qwen', 'text': '…', …, 'request': {…}}]
    """
    if limit < 1 or not -(2**63) <= agent_id < 2**63:
        return []
    found: list[tuple[float, int, int, dict[str, Any]]] = []
    for n, path in enumerate(sorted(Path(directory).glob("*.jsonl"))):
        try:
            records = _index_path(path).stat().st_size // _INDEX.itemsize  # (not a torn one)
            size = path.stat().st_size
            if not records:
                continue
            # mapped, not read: a tenth of the time (2 ms for 2M calls against 20)
            index = np.memmap(_index_path(path), dtype=_INDEX, mode="r", shape=(records,))
            offsets = np.array(index["offset"][index["agent"] == agent_id])
            del index
        except (OSError, ValueError):
            continue  # no index (yet), or it went meanwhile: nothing of this file is found
        offsets = offsets[(offsets >= 0) & (offsets < size)][-limit:]
        if not offsets.size:
            continue
        with open(path, "rb") as f:
            for offset in offsets.tolist():
                f.seek(offset)
                line = f.readline()
                if not line.endswith(b"\n"):
                    continue  # cut short by a crash
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(record, dict) or record.get("agent") != agent_id:
                    continue  # not this agent's line (the log was replaced since?)
                when = record.get("time")
                found.append((when if isinstance(when, int | float) else 0.0, n, offset,
                              record))
    found.sort(key=lambda item: item[:3])
    return [record for *_, record in found[-limit:]]


# -- replay ----------------------------------------------------------------------------------
_HEAD = b'{"key":"'
_MODEL_AT = len(_HEAD) + 32  # where the key's closing quote is in a line we wrote
_AGENT_FIELD = b'","agent":'  # there, in a line made by an agent: '","agent":17,"model":'
_MODEL_FIELD = b',"model":'
_TEXT_FIELD = b'"text":'
_TIME_FIELD = b',"time":'


def _recording_files(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
                     ) -> list[Path]:
    items = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
    files: list[Path] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            found = sorted(p.glob("*.jsonl"))
            if not found:
                raise ConfigError(f"replay: no *.jsonl recordings in {p}")
            files.extend(found)
        elif p.is_file():
            files.append(p)
        else:
            raise ConfigError(f"replay: recording {p} does not exist")
    if not files:
        raise ConfigError("replay: no recording given")
    return files


class _Loader:
    """Collects the recorded answers of one model (first answer per key wins).

    An answer is kept as the raw bytes of its ``"text":…,"completion_tokens":N`` fields and
    parsed only when it is asked for: a replay asks for each once, while loading sees every
    line of every worker, so parsing there would dominate (measured: ~3x slower loads).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.model_field = _MODEL_FIELD + json.dumps(name).encode("ascii") + b","
        self.answers: dict[bytes, bytes] = {}
        self.skipped = 0

    def load(self, path: Path) -> None:
        answers = self.answers
        model_field = self.model_field
        with open(path, "rb") as f:
            for line in f:
                # Our own layout: decide from fixed positions (after the agent, if any).
                if line.startswith(_AGENT_FIELD, _MODEL_AT):
                    at = line.find(b",", _MODEL_AT + len(_AGENT_FIELD))
                else:
                    at = _MODEL_AT + 1 if line.startswith(b'"', _MODEL_AT) else -1
                if not (at > 0 and line.startswith(_HEAD) and line.startswith(_MODEL_FIELD, at)):
                    if line.strip():
                        self._general(line)
                    continue
                if not line.startswith(model_field, at):
                    continue  # another model's call
                text_at = at + len(model_field)
                if not line.startswith(_TEXT_FIELD, text_at):
                    continue  # a failed call: nothing to answer with
                # A quote inside a JSON string is escaped, so the first ',"time":' is the
                # field itself, never part of the text (the answer is what comes before it:
                # text, tokens, latency, endpoint, retries).
                cut = line.find(_TIME_FIELD, text_at)
                if cut < 0 or not line.endswith(b"}\n"):
                    self.skipped += 1  # cut short by a crash
                    continue
                try:
                    digest = bytes.fromhex(line[len(_HEAD):_MODEL_AT].decode("ascii"))
                except ValueError:
                    self.skipped += 1
                    continue
                if digest not in answers:
                    answers[digest] = line[text_at:cut]

    def _general(self, line: bytes) -> None:
        """A line in another layout (written by hand, or by a later version)."""
        try:
            record = json.loads(line)
            digest = bytes.fromhex(record["key"])
        except (ValueError, KeyError, TypeError):
            self.skipped += 1
            return
        text = record.get("text")
        if (record.get("model") != self.name or type(text) is not str or "error" in record
                or digest in self.answers):
            return
        answer = {"text": text, "prompt_tokens": record.get("prompt_tokens", 0),
                  "completion_tokens": record.get("completion_tokens", 0),
                  "retries": record.get("retries", 0)}
        self.answers[digest] = json.dumps(answer, separators=_COMPACT)[1:-1].encode("ascii")


class ReplayModel(ModelClient):
    """Answers from recordings made by :class:`RecordingModel`, with no I/O and no waiting.

    >>> model = ReplayModel("runs/2024-06-01/llm_calls", "qwen")  # doctest: +SKIP

    ``paths``: a JSONL file, a directory (its ``*.jsonl`` files, in name order), or a list
    of either. Only answered calls of the model called ``name`` are kept; when a request
    was recorded more than once, the first answer (in file, then line order) wins. Lines cut
    short by a crash, or otherwise unreadable, are skipped and counted in :attr:`skipped`.
    A request that is not in the recording raises :class:`~populace.core.ModelError`.
    Replayed completions carry text and token counts; ``latency_s`` is 0, ``endpoint`` None.
    """

    def __init__(self, paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
                 name: str) -> None:
        self.name = name
        self.files = tuple(_recording_files(paths))
        loader = _Loader(name)
        for path in self.files:
            loader.load(path)
        self._answers = loader.answers
        self.skipped = loader.skipped
        self._hits = 0
        self._misses = 0
        self._prompt_tokens = 0
        self._completion_tokens = 0

    def __repr__(self) -> str:
        return f"ReplayModel({self.name!r}, {len(self._answers)} answers)"

    def __len__(self) -> int:
        """Answers loaded."""
        return len(self._answers)

    @property
    def hits(self) -> int:
        return self._hits

    @property
    def misses(self) -> int:
        return self._misses

    async def send(self, request: Request) -> Completion:
        canonical = _canonical(request)
        digest = _digest(self.name, canonical)
        found = self._answers.get(digest)
        if found is None:
            self._misses += 1
            raise RecordingMiss(
                f"model {self.name!r}: request {digest.hex()[:12]} is not in the recording "
                f"({len(self._answers)} answers from {len(self.files)} file"
                f"{'s' if len(self.files) != 1 else ''}); was the run made with other "
                "prompts, seeds or settings?"
            )
        try:
            answer = json.loads(b"{" + found + b"}")
            text = answer["text"]
            pt, ct = answer["prompt_tokens"], answer["completion_tokens"]
            if type(text) is not str:
                raise ValueError("text is not a string")
        except (ValueError, KeyError) as exc:
            self._misses += 1
            raise RecordingMiss(f"model {self.name!r}: the recorded answer to request "
                             f"{digest.hex()[:12]} is unreadable ({exc})") from None
        pt = pt if type(pt) is int and pt >= 0 else 0
        ct = ct if type(ct) is int and ct >= 0 else 0
        retries = answer.get("retries", 0)  # so a replayed row tells the same story
        retries = retries if type(retries) is int and retries >= 0 else 0
        self._hits += 1
        self._prompt_tokens += pt
        self._completion_tokens += ct
        return Completion(text, self.name, pt, ct, retries=retries)

    def statistics(self) -> ModelStats:
        return ModelStats(self.name, self._hits + self._misses, self._misses, 0,
                          self._prompt_tokens, self._completion_tokens,
                          replayed=self._hits + self._misses)

    async def aclose(self) -> None:
        """Nothing to release; the answers stay loaded."""
