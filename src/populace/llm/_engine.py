"""A simulated GPU inference engine: the timing behind ``populace serve-llm --engine``.

It charges the time an inference engine such as vLLM would spend on each request, without
any model, so that a client's waste of GPU time (prefixes not shared, small batches, queues)
can be measured on a CPU machine. The model, calibrated by default for an 8B model on one
A100 80GB (docs/engine.md says how):

* **Tokens.** :func:`chat_tokens` is a deterministic stand-in for a tokenizer and chat
  template: per message a role token, the words and punctuation marks of its text, an
  end-of-turn token; then the assistant token that asks for the answer.
* **Prefix cache.** Full blocks of ``block_size`` prompt tokens are hashed as a chain (each
  hash covers the block and everything before it), so a block is reused only when the whole
  prefix up to it matches. The cache holds ``cache_blocks`` blocks, least recently used
  evicted first. As vLLM does, at least the last prompt token is always computed: a request's
  cached tokens are the longest cached block-prefix of its first ``len - 1`` tokens.
* **Continuous batching.** Iterations run while sequences are in the batch. Each admits
  waiting requests in arrival order while the batch has room for all their choices (at most
  ``max_batch`` sequences; a request with more choices than that runs alone), charges their
  uncached prompt tokens at ``prefill_tokens_per_s`` (a request with ``n`` choices is
  prefilled once), then one decode step, ``decode_step_s + decode_step_per_seq_s *
  running``, in which every sequence gains a token; sequences that have all their tokens
  finish. Simulated time passes ``time_scale`` times faster than real time.

The loop does no per-token work: it knows the iteration at which each sequence finishes and
sleeps over the iterations until the next one, waking early when a request arrives that
could join the batch (it then joins at the end of the iteration in progress).

>>> async def demo():
...     async with Engine(EngineParams(time_scale=100)) as engine:
...         done = await engine.generate(chat_tokens([{"role": "user", "content": "Hi"}]), [5])
...         return done.cached_tokens, engine.stats()["decode_tokens"]
"""

from __future__ import annotations

import asyncio
import heapq
import math
import re
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ._replies import text_of

_TOKEN = re.compile(r"\w+|[^\w\s]")
END_OF_TURN = "<|eot|>"
GENERATION_PROMPT = "<|assistant|>"
_MOST_SECONDS = 3600.0  # of one prefill token or decode step: beyond is surely a mistake


def text_tokens(text: str) -> list[str]:
    """The stand-in tokens of ``text``: its words and its punctuation marks, in order."""
    return _TOKEN.findall(text)


def chat_tokens(messages: Iterable[Mapping[str, Any]]) -> list[str]:
    """The stand-in tokens of a chat prompt: ``<|role|>``, the text's tokens and ``<|eot|>``
    per message, then ``<|assistant|>`` (the generation prompt)."""
    tokens: list[str] = []
    for m in messages:
        tokens.append(f"<|{m.get('role')}|>")
        tokens += _TOKEN.findall(text_of(m.get("content")))
        tokens.append(END_OF_TURN)
    tokens.append(GENERATION_PROMPT)
    return tokens


@dataclass(frozen=True)
class EngineParams:
    """How fast the simulated engine is; the defaults are an 8B model (Llama-3-8B, bf16) on
    one A100 80GB under vLLM, derived in docs/engine.md.

    ``prefill_tokens_per_s``: prompt tokens computed per second. ``decode_step_s``: one
    decode iteration at batch size 1; ``decode_step_per_seq_s``: what each running sequence
    adds to it. ``max_batch``: most sequences in the batch (vLLM's ``max_num_seqs``); more
    wait in a FIFO queue. ``cache_blocks``: prefix-cache capacity in blocks of
    ``block_size`` tokens (0: no caching). ``time_scale``: simulated seconds per real second
    (100: a simulated GPU-hour in 36 s).

    >>> EngineParams(max_batch=64, time_scale=100).max_batch
    64
    """

    prefill_tokens_per_s: float = 10_000.0
    decode_step_s: float = 0.010
    decode_step_per_seq_s: float = 0.0002
    max_batch: int = 256
    cache_blocks: int = 27_000
    block_size: int = 16
    time_scale: float = 1.0

    def __post_init__(self) -> None:
        if not _number(self.prefill_tokens_per_s) or not self.prefill_tokens_per_s > 0 \
                or math.isinf(self.prefill_tokens_per_s):
            raise ValueError(f"prefill_tokens_per_s must be a positive number of tokens per "
                             f"second, got {self.prefill_tokens_per_s!r}")
        for name in ("decode_step_s", "decode_step_per_seq_s"):
            value = getattr(self, name)
            if not _number(value) or not 0 <= value <= _MOST_SECONDS:
                raise ValueError(f"{name} must be from 0 to {_MOST_SECONDS:g} seconds, "
                                 f"got {value!r}")
        for name, least in (("max_batch", 1), ("cache_blocks", 0), ("block_size", 1)):
            value = getattr(self, name)
            if type(value) is not int or value < least:
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
        if not _number(self.time_scale) or not 0 < self.time_scale <= 1e9:
            raise ValueError(f"time_scale must be a number of simulated seconds per real "
                             f"second, above 0 and at most 1e9, got {self.time_scale!r}")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class EngineResult:
    """How the engine ran one request: token counts and simulated seconds (``queue_s`` from
    arrival to admission into the batch, ``latency_s`` from arrival to its last token)."""

    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    queue_s: float
    latency_s: float


def block_hashes(tokens: Sequence[str], block_size: int) -> list[int]:
    """The chained hashes of the full blocks of ``tokens``: the *i*-th covers blocks 0..i."""
    hashes: list[int] = []
    chain = 0
    for start in range(0, len(tokens) - block_size + 1, block_size):
        chain = hash((chain, *tokens[start:start + block_size]))
        hashes.append(chain)
    return hashes


class _PrefixCache:
    """Block hashes in least-recently-used order, at most ``capacity`` of them."""

    __slots__ = ("_blocks", "capacity")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def hits(self, hashes: Sequence[int], most: int) -> int:
        """How many of the first ``most`` blocks are cached, counting from the first."""
        found = 0
        for h in hashes[:most]:
            if h not in self._blocks:
                break
            found += 1
        return found

    def touch(self, hashes: Sequence[int]) -> None:
        """Insert or refresh a prompt's blocks, evicting the least recently used beyond
        capacity. Refreshed last to first so that a prefix outlives its tails."""
        if not self.capacity:
            return
        blocks = self._blocks
        for h in reversed(hashes):
            if h in blocks:
                blocks.move_to_end(h)
            else:
                blocks[h] = None
        while len(blocks) > self.capacity:
            blocks.popitem(last=False)


_WAITING, _RUNNING, _DONE = range(3)


class _Request:
    __slots__ = ("arrived", "cached", "future", "hashes", "left", "lengths", "prompt_len",
                 "queued", "since", "state")

    def __init__(self, future: asyncio.Future[EngineResult], arrived: float,
                 hashes: list[int], prompt_len: int, lengths: list[int]) -> None:
        self.future = future
        self.arrived = arrived  # real (event loop) time
        self.since = 0.0  # simulated time of arrival, known once admitted
        self.queued = 0.0  # simulated seconds from arrival to admission
        self.hashes = hashes
        self.prompt_len = prompt_len
        self.lengths = lengths
        self.cached = 0
        self.left = 0  # sequences still decoding
        self.state = _WAITING


def _settle(future: asyncio.Future[bool], early: bool) -> None:
    if not future.done():
        future.set_result(early)


class Engine:
    """A simulated inference engine; owns the task that runs its iterations (started by the
    first :meth:`generate`, ended by :meth:`aclose` or leaving ``async with``)."""

    def __init__(self, params: EngineParams | None = None) -> None:
        self.params = params if params is not None else EngineParams()
        self._cache = _PrefixCache(self.params.cache_blocks)
        self._waiting: deque[_Request] = deque()
        self._heap: list[tuple[int, int, _Request]] = []  # (finish iteration, serial, req)
        self._running = 0  # sequences in the batch
        self._iteration = 0  # iterations run so far
        self._serial = 0
        self._task: asyncio.Task[None] | None = None
        self._waiter: asyncio.Future[bool] | None = None
        self._wake_on_arrival = False
        self._woken_at = 0.0
        self._closed = False
        self._prefill_s = self._decode_s = 0.0
        self._computed = self._cached = self._decoded = 0
        self._requests = self._finished = self._aborted = 0
        self._max_batch_seen = self._max_waiting = 0

    async def __aenter__(self) -> Engine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def generate(self, prompt_tokens: Sequence[str], completion_tokens: Sequence[int]
                       ) -> EngineResult:
        """Run one request: its prompt's tokens and the length of each choice's answer (an
        empty answer still takes a step, its end-of-sequence token). Returns when its last
        sequence finishes; cancelled, it leaves the queue or the batch."""
        lengths = list(completion_tokens)
        if not lengths or not all(type(n) is int and n >= 0 for n in lengths):
            raise ValueError(f"completion_tokens must be one length >= 0 per choice, "
                             f"got {completion_tokens!r}")
        if self._closed:
            raise RuntimeError("the engine is closed")
        loop = asyncio.get_running_loop()
        if self._task is None:
            self._task = loop.create_task(self._run(), name="populace-engine")
        elif self._task.done():
            raise RuntimeError("the engine's loop has stopped") from self._task.exception()
        req = _Request(loop.create_future(), loop.time(),
                       block_hashes(prompt_tokens, self.params.block_size), len(prompt_tokens),
                       lengths)
        self._requests += 1
        self._waiting.append(req)
        self._max_waiting = max(self._max_waiting, len(self._waiting))
        if self._wake_on_arrival:
            self._wake(req.arrived)
        try:
            return await req.future
        except asyncio.CancelledError:
            self._abort(req)
            raise

    def stats(self) -> dict[str, Any]:
        """Counters so far: simulated busy seconds (``prefill_s + decode_s``), tokens computed,
        cached and decoded, requests, iterations, batch sizes, the queue, and the params."""
        return {
            "busy_s": self._prefill_s + self._decode_s,
            "prefill_s": self._prefill_s,
            "decode_s": self._decode_s,
            "prefill_tokens_computed": self._computed,
            "prefill_tokens_cached": self._cached,
            "decode_tokens": self._decoded,
            "requests": self._requests,
            "finished": self._finished,
            "aborted": self._aborted,
            "iterations": self._iteration,
            "mean_batch": self._decoded / self._iteration if self._iteration else 0.0,
            "max_batch_seen": self._max_batch_seen,
            "running": self._running,
            "waiting": len(self._waiting),
            "max_waiting": self._max_waiting,
            "cache_blocks_used": len(self._cache),
            "params": asdict(self.params),
        }

    async def aclose(self) -> None:
        """Stop the loop; requests still queued or running fail with RuntimeError."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])
        for req in [*self._waiting, *(entry[2] for entry in self._heap)]:
            if not req.future.done():
                req.future.set_exception(RuntimeError("the engine was closed"))
        self._waiting.clear()
        self._heap.clear()
        self._running = 0

    # -- the loop ----------------------------------------------------------------------------
    def _wake(self, at: float) -> None:
        """End the loop's pause for an event at loop time ``at``."""
        if self._waiter is not None and not self._waiter.done():
            self._woken_at = at  # not when the loop runs again: that lags under load
            _settle(self._waiter, True)

    def _abort(self, req: _Request) -> None:
        if req.state == _WAITING:
            self._waiting.remove(req)
        elif req.state == _RUNNING:
            self._running -= req.left  # its heap entries are skipped when they come up
            req.left = 0
            self._wake(asyncio.get_running_loop().time())  # smaller from the next iteration
        else:
            return
        req.state = _DONE
        self._aborted += 1

    async def _pause(self, until: float | None) -> bool:
        """Sleep until loop time ``until`` (None: until woken); True if woken earlier."""
        loop = asyncio.get_running_loop()
        self._waiter = waiter = loop.create_future()
        timer = loop.call_at(until, _settle, waiter, False) if until is not None else None
        try:
            return await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    def _admit(self, real: float, sim: float) -> int:
        """Move waiting requests into the batch at the iteration beginning at loop time
        ``real``, simulated time ``sim``; the prompt tokens they have to compute."""
        p, computed = self.params, 0
        while self._waiting:
            req = self._waiting[0]
            n = len(req.lengths)
            if self._running and self._running + n > p.max_batch:
                break
            self._waiting.popleft()
            hit = self._cache.hits(req.hashes, max(0, (req.prompt_len - 1) // p.block_size))
            req.cached = hit * p.block_size
            self._cache.touch(req.hashes)
            computed += req.prompt_len - req.cached
            self._cached += req.cached
            # Simulated times from real ones near ``real``: a short difference times the
            # scale keeps its precision, unlike absolute loop times.
            req.since = min(sim, sim + (req.arrived - real) * p.time_scale)
            req.queued = sim - req.since
            req.state, req.left = _RUNNING, n
            for length in req.lengths:
                self._serial += 1
                heapq.heappush(self._heap, (self._iteration + max(1, length), self._serial, req))
            self._running += n
        self._computed += computed
        return computed

    def _finish(self, sim: float) -> None:
        """Retire the sequences whose last token came in the iteration that ended at
        simulated time ``sim``."""
        heap = self._heap
        while heap and heap[0][0] <= self._iteration:
            req = heapq.heappop(heap)[2]
            if req.state != _RUNNING:
                continue
            req.left -= 1
            self._running -= 1
            if req.left == 0:
                req.state = _DONE
                self._finished += 1
                if not req.future.done():
                    req.future.set_result(EngineResult(
                        prompt_tokens=req.prompt_len, cached_tokens=req.cached,
                        completion_tokens=sum(req.lengths),
                        queue_s=req.queued, latency_s=sim - req.since))

    async def _run(self) -> None:
        try:
            await self._iterate()
        except Exception as e:  # a bug: fail the requests rather than leave them waiting
            for req in [*self._waiting, *(entry[2] for entry in self._heap)]:
                if not req.future.done():
                    req.future.set_exception(RuntimeError(f"the engine failed: {e!r}"))
            raise

    async def _iterate(self) -> None:
        loop = asyncio.get_running_loop()
        p = self.params
        scale = p.time_scale
        # When the next iteration begins, in real time as planned and in simulated time: an
        # idle engine starts on the first request as it arrives.
        start = self._waiting[0].arrived if self._waiting else loop.time()
        start_sim = 0.0
        while True:
            if not self._running and not self._waiting:
                self._heap.clear()  # only aborted sequences were left
                self._wake_on_arrival = True
                await self._pause(None)
                resumed = self._waiting[0].arrived if self._waiting else loop.time()
                start_sim += max(0.0, resumed - start) * scale  # idle time passes too
                start = resumed
                continue
            prefill_s = self._admit(start, start_sim) / p.prefill_tokens_per_s
            running = self._running
            while self._heap[0][2].state != _RUNNING:
                heapq.heappop(self._heap)
            self._max_batch_seen = max(self._max_batch_seen, running)
            step_s = p.decode_step_s + p.decode_step_per_seq_s * running
            steps = self._heap[0][0] - self._iteration  # until a sequence finishes
            end = start + (prefill_s + steps * step_s) / scale
            # An arrival can join only at a boundary, and only if it would be admitted.
            self._wake_on_arrival = not self._waiting and running < p.max_batch
            if await self._pause(end):
                into = (self._woken_at - start) * scale - prefill_s
                reached = int(into // step_s) + 1 if step_s > 0 and into > 0 else 1
                steps = min(steps, reached)  # the iteration in progress ends, then admission
                end = start + (prefill_s + steps * step_s) / scale
                self._wake_on_arrival = False
                while await self._pause(end):  # an abort: the batch still runs to ``end``
                    pass
            self._prefill_s += prefill_s
            self._decode_s += steps * step_s
            self._decoded += steps * running
            self._iteration += steps
            start, start_sim = end, start_sim + prefill_s + steps * step_s
            self._finish(start_sim)
