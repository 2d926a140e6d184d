"""A simulated GPU inference engine: the timing behind ``populace serve-llm --engine``.

It charges the time an inference engine such as vLLM would spend on each request, without
any model, so that a client's waste of GPU time (prefixes not shared, small batches, queues)
can be measured on a CPU machine. It follows vLLM V1's scheduler and KV cache manager
(docs/engine.md cites the files); the defaults are an 8B model on one A100 80GB,
:meth:`EngineParams.for_gpu` gives an H100:

* **Tokens.** :func:`chat_tokens` is a deterministic stand-in for a tokenizer and chat
  template: per message a role token, the words and punctuation marks of its text, an
  end-of-turn token; then the assistant token that asks for the answer.
* **Sequences.** A request with ``n`` choices is ``n`` sequences, queued one after the
  other, each with its own cache lookup: the first computes the prompt, the others find its
  full blocks but compute its last block again (a lookup stops one token short, since the
  last prompt token must be computed to sample from it).
* **KV cache** (:mod:`._kvcache`): ``cache_blocks`` blocks of ``block_size`` tokens hold the
  running sequences' KV, full prompt blocks shared between sequences by chained hash; a
  block no running sequence holds stays cached until it is needed, least recently freed
  first.
* **Iterations.** Each iteration first gives the running sequences their tokens (one per
  decoding sequence, the next chunk of a long prompt), then admits waiting sequences in
  order while fewer than ``max_batch`` run, the KV cache has their blocks and the
  iteration's ``max_batched_tokens`` are not spent (a prompt beyond them is computed in
  chunks over several iterations). When a decoding sequence needs a block and none is free,
  the newest running sequence is preempted: its blocks are freed and it waits again, first
  in line, to be computed anew (its cached prefix may still be found). An iteration costs
  ``prompt tokens / prefill_tokens_per_s`` plus, with decoding sequences, ``decode_step_s
  + decode_step_per_seq_s × sequences + decode_step_per_token_s × their context tokens``.
  The iteration that computes a prompt's last token gives its first answer token.
  Simulated time passes ``time_scale`` times faster than real time.

The loop does no per-token work: between events (a sequence finishing, the KV cache
running out, an arrival that could join) it charges the decode iterations in one sum, and
the blocks decoding sequences need by counting them per phase of the block size.

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
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from .._base import text_of
from ._kvcache import BlockPool

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
    """How fast and how large the simulated engine is; the defaults are an 8B model
    (Llama-3-8B, bf16) on one A100 80GB under vLLM's defaults, derived in docs/engine.md.

    ``prefill_tokens_per_s``: prompt tokens computed per second. A decode iteration costs
    ``decode_step_s`` (reading the weights), ``decode_step_per_seq_s`` per decoding sequence
    and ``decode_step_per_token_s`` per token of their context (attention reads its KV).
    ``max_batch``: most running sequences (vLLM's ``max_num_seqs``); ``max_batched_tokens``:
    most tokens one iteration computes (``max_num_batched_tokens``, at least ``max_batch``).
    ``cache_blocks``: the KV cache, in blocks of ``block_size`` tokens, for the running
    sequences and the cached prefixes together. ``prefix_caching``: False computes every
    prompt in full. ``time_scale``: simulated seconds per real second (100: a simulated
    GPU-hour in 36 s).

    >>> EngineParams(max_batch=64, time_scale=100).max_batch
    64
    >>> EngineParams.for_gpu("h100").max_batch
    1024
    """

    prefill_tokens_per_s: float = 10_000.0
    decode_step_s: float = 0.010
    decode_step_per_seq_s: float = 0.0001
    decode_step_per_token_s: float = 8e-8
    max_batch: int = 256
    max_batched_tokens: int = 2048
    cache_blocks: int = 27_000
    block_size: int = 16
    prefix_caching: bool = True
    time_scale: float = 1.0

    @classmethod
    def for_gpu(cls, gpu: str, **changes: Any) -> EngineParams:
        """The parameters of an 8B model on one ``"a100"`` (the defaults) or ``"h100"``,
        with ``changes`` applied."""
        try:
            preset = GPUS[gpu.lower()]
        except KeyError:
            raise ValueError(f"gpu must be one of {', '.join(GPUS)}, got {gpu!r}") from None
        return replace(preset, **changes)

    def __post_init__(self) -> None:
        if not _number(self.prefill_tokens_per_s) or not self.prefill_tokens_per_s > 0 \
                or math.isinf(self.prefill_tokens_per_s):
            raise ValueError(f"prefill_tokens_per_s must be a positive number of tokens per "
                             f"second, got {self.prefill_tokens_per_s!r}")
        for name in ("decode_step_s", "decode_step_per_seq_s", "decode_step_per_token_s"):
            value = getattr(self, name)
            if not _number(value) or not 0 <= value <= _MOST_SECONDS:
                raise ValueError(f"{name} must be from 0 to {_MOST_SECONDS:g} seconds, "
                                 f"got {value!r}")
        for name in ("max_batch", "max_batched_tokens", "cache_blocks", "block_size"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.max_batched_tokens < self.max_batch:  # as vLLM requires
            raise ValueError(f"max_batched_tokens must be at least max_batch "
                             f"({self.max_batch}), got {self.max_batched_tokens}")
        if type(self.prefix_caching) is not bool:
            raise ValueError(f"prefix_caching must be True or False, "
                             f"got {self.prefix_caching!r}")
        if not _number(self.time_scale) or not 0 < self.time_scale <= 1e9:
            raise ValueError(f"time_scale must be a number of simulated seconds per real "
                             f"second, above 0 and at most 1e9, got {self.time_scale!r}")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


#: An 8B model (Llama-3-8B, bf16) under vLLM's defaults, per GPU (docs/engine.md).
GPUS: dict[str, EngineParams] = {
    "a100": EngineParams(),
    "h100": EngineParams(prefill_tokens_per_s=30_000.0, decode_step_s=0.006,
                         decode_step_per_seq_s=0.000033, decode_step_per_token_s=4.9e-8,
                         max_batch=1024, max_batched_tokens=8192, cache_blocks=26_000),
}


@dataclass(frozen=True)
class EngineResult:
    """How the engine ran one request: token counts and simulated seconds (``queue_s`` from
    arrival to its first sequence's admission, ``latency_s`` from arrival to its last
    token). ``cached_tokens``: what its first sequence found in the cache when admitted."""

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


_WAITING, _PREFILL, _DECODE, _ENDING, _DONE = range(5)


class _Request:
    __slots__ = ("admitted", "arrived", "cached", "future", "hashes", "left", "lengths",
                 "prompt_len", "queued", "since", "state")

    def __init__(self, future: asyncio.Future[EngineResult], arrived: float,
                 hashes: list[int], prompt_len: int, lengths: list[int]) -> None:
        self.future = future
        self.arrived = arrived  # real (event loop) time
        self.since = 0.0  # simulated time of arrival, known once admitted
        self.queued = 0.0  # simulated seconds from arrival to admission
        self.admitted = False
        self.hashes = hashes
        self.prompt_len = prompt_len
        self.lengths = lengths
        self.cached = 0
        self.left = len(lengths)  # sequences not finished
        self.state = _WAITING  # _WAITING, _DECODE (running) or _DONE


class _Seq:
    """One sequence (a choice of a request): where it is and the KV blocks it holds."""

    __slots__ = ("base", "computed", "finish", "generated", "held", "length", "private",
                 "req", "seen", "state")

    def __init__(self, req: _Request, length: int) -> None:
        self.req = req
        self.length = max(1, length)  # an empty answer still samples its end token
        self.state = _WAITING
        self.generated = 0  # tokens sampled so far (kept across a preemption)
        self.computed = 0  # tokens whose KV is in place, while prefilling
        self.held: list[int] = []  # the cached blocks it holds a reference to
        self.private = 0  # its other blocks, while prefilling or ending
        self.seen = 0  # prompt blocks offered to the cache so far
        self.base = 0  # while decoding: its KV tokens at iteration i are base + i
        self.finish = 0  # the iteration count at which it has all its tokens

    @property
    def target(self) -> int:
        """The tokens to compute before it samples again: its prompt and what it said."""
        return self.req.prompt_len + self.generated


def _settle(future: asyncio.Future[bool], early: bool) -> None:
    if not future.done():
        future.set_result(early)


class Engine:
    """A simulated inference engine; owns the task that runs its iterations (started by the
    first :meth:`generate`, ended by :meth:`aclose` or leaving ``async with``)."""

    def __init__(self, params: EngineParams | None = None) -> None:
        self.params = p = params if params is not None else EngineParams()
        self._pool = BlockPool(p.cache_blocks)
        self._waiting: deque[_Seq] = deque()
        self._running: dict[_Seq, None] = {}  # in admission order: the last is preempted
        self._prefilling: dict[_Seq, None] = {}
        self._heap: list[tuple[int, int, _Seq]] = []  # (finish iteration, serial, seq)
        self._doomed: list[_Seq] = []  # running sequences of aborted requests
        # Decoding sequences, summed: how many, their ``base``s, how many per base phase.
        self._n_decode = 0
        self._base_sum = 0
        self._phase = [0] * p.block_size
        self._iteration = 0  # iterations run so far
        self._serial = 0
        self._task: asyncio.Task[None] | None = None
        self._waiter: asyncio.Future[bool] | None = None
        self._wake_on_arrival = False
        self._woken_at = 0.0
        self._closed = False
        self._prefill_s = self._decode_s = 0.0
        self._computed = self._cached = self._decoded = 0
        self._requests = self._finished = self._aborted = self._preempted = 0
        self._max_batch_seen = self._max_waiting = self._max_blocks_used = 0

    async def __aenter__(self) -> Engine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def generate(self, prompt_tokens: Sequence[str], completion_tokens: Sequence[int]
                       ) -> EngineResult:
        """Run one request: its prompt's tokens and the length of each choice's answer (an
        empty answer still takes a step, its end-of-sequence token). Returns when its last
        sequence finishes; cancelled, it leaves the queue or the batch. A request whose
        prompt and longest answer do not fit in the KV cache is a ValueError."""
        lengths = list(completion_tokens)
        if not lengths or not all(type(n) is int and n >= 0 for n in lengths):
            raise ValueError(f"completion_tokens must be one length >= 0 per choice, "
                             f"got {completion_tokens!r}")
        p = self.params
        blocks = -(-(len(prompt_tokens) + max(1, *lengths)) // p.block_size)
        if blocks > p.cache_blocks:
            raise ValueError(f"the prompt and its answer need {blocks} KV blocks, the engine "
                             f"has {p.cache_blocks}")
        if self._closed:
            raise RuntimeError("the engine is closed")
        loop = asyncio.get_running_loop()
        if self._task is None:
            self._task = loop.create_task(self._run(), name="populace-engine")
        elif self._task.done():
            raise RuntimeError("the engine's loop has stopped") from self._task.exception()
        hashes = block_hashes(prompt_tokens, p.block_size) if p.prefix_caching else []
        req = _Request(loop.create_future(), loop.time(), hashes, len(prompt_tokens), lengths)
        self._requests += 1
        self._waiting.extend(_Seq(req, n) for n in lengths)
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
        cached and decoded, requests, iterations, batch sizes, the queue, the KV cache
        (blocks in use, cached, evicted; preemptions) and the params."""
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
            "preempted": self._preempted,
            "iterations": self._iteration,
            "mean_batch": self._decoded / self._iteration if self._iteration else 0.0,
            "max_batch_seen": self._max_batch_seen,
            "running": len(self._running) - len(self._doomed),
            "waiting": len(self._waiting),
            "max_waiting": self._max_waiting,
            "kv_blocks_used": self._pool.capacity - self._pool.free,
            "max_kv_blocks_used": self._max_blocks_used,
            "cache_blocks_used": self._pool.cached,
            "cache_blocks_evicted": self._pool.evicted,
            "params": asdict(self.params),
        }

    async def aclose(self) -> None:
        """Stop the loop; requests still queued or running fail with RuntimeError."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])
        self._fail(RuntimeError("the engine was closed"))

    def _fail(self, error: Exception) -> None:
        for seq in [*self._waiting, *self._running]:
            if not seq.req.future.done():
                seq.req.future.set_exception(error)
        self._waiting.clear()
        self._running.clear()
        self._prefilling.clear()
        self._heap.clear()

    # -- the scheduler ------------------------------------------------------------------------
    def _wake(self, at: float) -> None:
        """End the loop's pause for an event at loop time ``at``."""
        if self._waiter is not None and not self._waiter.done():
            self._woken_at = at  # not when the loop runs again: that lags under load
            _settle(self._waiter, True)

    def _abort(self, req: _Request) -> None:
        if req.state == _DONE:
            return
        for seq in [s for s in self._waiting if s.req is req]:
            self._waiting.remove(seq)
            seq.state = _DONE
        # Running ones leave at the end of the iteration in progress: cut it short.
        self._doomed += [s for s in self._running if s.req is req]
        req.state = _DONE
        self._aborted += 1
        if self._doomed:
            self._wake(asyncio.get_running_loop().time())

    def _release(self, seq: _Seq) -> None:
        """Take ``seq`` out of the batch and free its blocks, at the current iteration."""
        del self._running[seq]
        self._prefilling.pop(seq, None)
        private = seq.private
        if seq.state == _DECODE:
            bs = self.params.block_size
            self._n_decode -= 1
            self._base_sum -= seq.base
            self._phase[seq.base % bs] -= 1
            kv = seq.base + self._iteration
            seq.generated = kv - seq.req.prompt_len + 1
            private = -(-kv // bs) - len(seq.held)
        self._pool.release(seq.held, private)
        seq.held, seq.private, seq.seen, seq.computed = [], 0, 0, 0

    def _preempt(self, seq: _Seq) -> None:
        """Send a running sequence back to the head of the queue, its KV freed."""
        self._release(seq)
        seq.state = _WAITING
        self._waiting.appendleft(seq)
        self._preempted += 1

    def _computed_to(self, seq: _Seq, tokens: int) -> None:
        """``seq`` has the KV of its first ``tokens`` tokens: offer its full prompt blocks
        to the cache (at allocation, as vLLM does, so that a sequence admitted next in the
        same iteration finds them)."""
        hashes = seq.req.hashes
        for k in range(seq.seen, min(tokens // self.params.block_size, len(hashes))):
            if self._pool.register(hashes[k]):
                seq.held.append(hashes[k])
                seq.private -= 1
        seq.seen = max(seq.seen, tokens // self.params.block_size)
        seq.computed = tokens

    def _sampled(self, seq: _Seq) -> None:
        """``seq`` computed its last pending token in the iteration now running: it samples a
        token, then decodes from the next iteration on or ends with this one."""
        seq.generated += 1
        self._decoded += 1
        self._prefilling.pop(seq, None)
        it = self._iteration + 1  # the iteration count once this one is over
        seq.finish = it + seq.length - seq.generated
        if seq.finish == it:
            seq.state = _ENDING
        else:
            seq.state = _DECODE
            seq.base = seq.target - 1 - it  # KV tokens at iteration i: base + i
            self._n_decode += 1
            self._base_sum += seq.base
            self._phase[seq.base % self.params.block_size] += 1
        self._serial += 1
        heapq.heappush(self._heap, (seq.finish, self._serial, seq))

    def _schedule(self, real: float, sim: float) -> tuple[int, int, int]:
        """Plan the iteration beginning at loop time ``real``, simulated time ``sim``: blocks
        for the decoding sequences (preempting the newest running ones if they do not fit),
        the next chunks of prompts being computed, then admissions. Returns the prompt
        tokens it computes, and the number and the ``base`` sum of the sequences it
        decodes."""
        p, pool = self.params, self._pool
        bs = p.block_size
        it = self._iteration
        preempted = False
        while True:
            need = self._phase[-it % bs]  # decoding sequences starting a block
            budget = p.max_batched_tokens - self._n_decode
            chunks: list[tuple[_Seq, int, int]] = []
            for seq in self._prefilling:
                if budget <= 0:
                    break
                n = min(seq.target - seq.computed, budget)
                blocks = -(-(seq.computed + n) // bs) - len(seq.held) - seq.private
                chunks.append((seq, n, blocks))
                need += blocks
                budget -= n
            if need <= pool.free:
                break
            self._preempt(next(reversed(self._running)))
            preempted = True  # vLLM admits nobody in an iteration that preempts
        decoding = (self._n_decode, self._base_sum)
        pool.take(need)
        computed = 0
        for seq, n, blocks in chunks:
            seq.private += blocks
            self._computed_to(seq, seq.computed + n)
            computed += n
            if seq.computed == seq.target:
                self._sampled(seq)
        while not preempted and self._waiting and budget > 0 \
                and len(self._running) < p.max_batch:
            seq = self._waiting[0]
            target = seq.target
            hashes = seq.req.hashes
            hit = pool.hits(hashes, (target - 1) // bs)
            cached = hit * bs
            n = min(target - cached, budget)
            blocks = -(-(cached + n) // bs) - hit
            if blocks + pool.idle(hashes[:hit]) > pool.free:
                break  # first come, first served: the rest wait too
            self._waiting.popleft()
            pool.share(hashes[:hit])
            pool.take(blocks)
            seq.held, seq.private, seq.seen, seq.computed = list(hashes[:hit]), blocks, hit, 0
            self._computed_to(seq, cached + n)
            self._cached += cached
            computed += n
            budget -= n
            req = seq.req
            if not req.admitted:
                req.admitted = True
                req.cached = cached
                # Simulated times from real ones near ``real``: a short difference times the
                # scale keeps its precision, unlike absolute loop times.
                req.since = min(sim, sim + (req.arrived - real) * p.time_scale)
                req.queued = sim - req.since
                req.state = _DECODE
            self._running[seq] = None
            if seq.computed == target:
                self._sampled(seq)
            else:
                seq.state = _PREFILL
                self._prefilling[seq] = None
        self._computed += computed
        self._max_batch_seen = max(self._max_batch_seen, len(self._running))
        self._max_blocks_used = max(self._max_blocks_used, pool.capacity - pool.free)
        return computed, *decoding

    def _safe_steps(self, steps: int) -> int:
        """Of the ``steps`` decode iterations from the current one (whose blocks
        :meth:`_schedule` took), how many run before a decoding sequence needs a block that
        is not free."""
        bs, phase, free = self.params.block_size, self._phase, self._pool.free
        it = self._iteration
        if self._n_decode * -(-(steps - 1) // bs) <= free:  # at most one block each per bs
            return steps
        need = 0
        for k in range(1, steps):
            need += phase[-(it + k) % bs]
            if need > free:
                return k
        return steps

    def _grow(self, steps: int) -> None:
        """Take the blocks the decoding sequences fill in iterations 1..steps-1 from now."""
        if steps < 2 or not self._n_decode:
            return
        bs, phase, it = self.params.block_size, self._phase, self._iteration
        need = 0
        for r in range(bs):  # sequences of phase r start a block when (i + r) % bs == 0
            if phase[r]:
                first = (-r - it - 1) % bs + 1  # the first such k >= 1
                if first < steps:
                    need += phase[r] * (1 + (steps - 1 - first) // bs)
        self._pool.take(need)

    def _finish(self, sim: float) -> None:
        """Retire the aborted sequences and those whose last token came in the iteration
        that ended at simulated time ``sim``."""
        for seq in self._doomed:
            if seq in self._running:
                self._release(seq)
            seq.state = _DONE
        self._doomed.clear()
        heap = self._heap
        while heap and heap[0][0] <= self._iteration:
            finish, _, seq = heapq.heappop(heap)
            if seq.state not in (_DECODE, _ENDING) or seq.finish != finish:
                continue  # preempted (a new entry follows) or aborted
            self._release(seq)
            seq.state = _DONE
            req = seq.req
            req.left -= 1
            if req.left == 0 and req.state != _DONE:
                req.state = _DONE
                self._finished += 1
                if not req.future.done():
                    req.future.set_result(EngineResult(
                        prompt_tokens=req.prompt_len, cached_tokens=req.cached,
                        completion_tokens=sum(req.lengths),
                        queue_s=req.queued, latency_s=sim - req.since))

    def _next_finish(self) -> int:
        heap = self._heap
        while heap:
            finish, _, seq = heap[0]
            if seq.state in (_DECODE, _ENDING) and seq.finish == finish:
                return finish
            heapq.heappop(heap)
        raise RuntimeError("running sequences but none to finish")  # a bug of ours

    async def _run(self) -> None:
        try:
            await self._iterate()
        except Exception as e:  # a bug: fail the requests rather than leave them waiting
            self._fail(RuntimeError(f"the engine failed: {e!r}"))
            raise

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

    async def _iterate(self) -> None:
        loop = asyncio.get_running_loop()
        p = self.params
        scale = p.time_scale
        # When the next iteration begins, in real time as planned and in simulated time: an
        # idle engine starts on the first request as it arrives.
        start = self._waiting[0].req.arrived if self._waiting else loop.time()
        start_sim = 0.0
        while True:
            if not self._running and not self._waiting:
                self._wake_on_arrival = True
                await self._pause(None)
                resumed = self._waiting[0].req.arrived if self._waiting else loop.time()
                start_sim += max(0.0, resumed - start) * scale  # idle time passes too
                start = resumed
                continue
            prefill, n, base_sum = self._schedule(start, start_sim)
            prefill_s = prefill / p.prefill_tokens_per_s
            # Iteration k (from 0) of the span costs first + grow * k: contexts grow by n.
            first = p.decode_step_s + p.decode_step_per_seq_s * n + p.decode_step_per_token_s \
                * (base_sum + n * (self._iteration + 1)) if n else 0.0
            grow = p.decode_step_per_token_s * n
            if prefill or self._prefilling:
                steps = 1  # admissions and chunks are planned one iteration at a time
            else:
                steps = self._safe_steps(self._next_finish() - self._iteration)
            end = start + (prefill_s + _span(first, grow, steps)) / scale
            # An arrival can join only at a boundary, and only if it would be admitted.
            self._wake_on_arrival = not self._waiting and \
                len(self._running) < p.max_batch
            if await self._pause(end):
                into = (self._woken_at - start) * scale - prefill_s
                steps = min(steps, _steps_within(into, first, grow) + 1)
                end = start + (prefill_s + _span(first, grow, steps)) / scale
                self._wake_on_arrival = False
                while await self._pause(end):  # another wake: this boundary stands
                    pass
            self._grow(steps)
            decode_s = _span(first, grow, steps)
            self._prefill_s += prefill_s
            self._decode_s += decode_s
            self._decoded += steps * n
            self._iteration += steps
            self._max_blocks_used = max(self._max_blocks_used,
                                        self._pool.capacity - self._pool.free)
            start, start_sim = end, start_sim + prefill_s + decode_s
            self._finish(start_sim)


def _span(first: float, grow: float, steps: int) -> float:
    """Seconds of ``steps`` iterations costing ``first``, ``first + grow``, ..."""
    return steps * first + grow * steps * (steps - 1) / 2


def _steps_within(seconds: float, first: float, grow: float) -> int:
    """How many whole iterations of :func:`_span` fit in ``seconds`` (>= 0)."""
    if seconds <= 0 or first <= 0:
        return 0
    if grow > 0:
        half = first - grow / 2  # solve grow/2 k^2 + half k = seconds
        k = int((-half + math.sqrt(half * half + 2 * grow * seconds)) / grow)
    else:
        k = int(seconds // first)
    while k > 0 and _span(first, grow, k) > seconds:
        k -= 1
    while _span(first, grow, k + 1) <= seconds:
        k += 1
    return k
