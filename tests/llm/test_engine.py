"""The simulated inference engine behind ``serve-llm --engine``: its prefix cache, continuous
batching and time scale, and how the server and the CLI expose it."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

import aiohttp
import pytest

import virtual_time
from cli_helpers import run_in_process
from populace.llm.offline import ServerOptions, running_server
from populace.llm.offline._engine import (
    Engine,
    EngineParams,
    EngineResult,
    block_hashes,
    chat_tokens,
    text_tokens,
)

FAST = 1e6  # simulated seconds per real second: a run of simulated minutes takes milliseconds


def tokens(n: int, tag: str = "t") -> list[str]:
    return [f"{tag}{i}" for i in range(n)]


async def run_one(engine: Engine, prompt: list[str], length: int = 1) -> EngineResult:
    return await engine.generate(prompt, [length])


# -- tokens ------------------------------------------------------------------------------------
def test_chat_tokens_are_roles_words_and_punctuation() -> None:
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "Hi, there!"}]}]
    assert chat_tokens(messages) == [
        "<|system|>", "Be", "brief", ".", "<|eot|>",
        "<|user|>", "Hi", ",", "there", "!", "<|eot|>", "<|assistant|>"]
    assert text_tokens("The answer is 42.") == ["The", "answer", "is", "42", "."]


def test_block_hashes_chain_the_prefix() -> None:
    a, b = tokens(40), tokens(16, "x") + tokens(40)[16:]
    assert len(block_hashes(a, 16)) == 2  # the 8 tokens after 32 are no full block
    assert block_hashes(a, 16)[1] != block_hashes(b, 16)[1]  # same block, other prefix


@pytest.mark.parametrize(("field", "value"), [
    ("prefill_tokens_per_s", 0), ("prefill_tokens_per_s", float("inf")),
    ("decode_step_s", -1.0), ("decode_step_per_seq_s", float("nan")), ("max_batch", 0),
    ("max_batch", True), ("max_batch", 2.0), ("cache_blocks", 0), ("block_size", 0),
    ("max_batched_tokens", 100), ("decode_step_per_token_s", -1.0), ("prefix_caching", 1),
    ("time_scale", 0), ("time_scale", float("inf"))])
def test_bad_params_are_one_clear_value_error(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=f"^{field} must be"):
        EngineParams(**{field: value})


# -- prefix cache ------------------------------------------------------------------------------
async def test_the_same_prompt_again_is_cached_but_its_last_token() -> None:
    async with Engine(EngineParams(time_scale=FAST)) as engine:
        assert (await run_one(engine, tokens(100))).cached_tokens == 0
        assert (await run_one(engine, tokens(100))).cached_tokens == 96
        # 96 tokens: the last one is computed again, so its block is not a hit (as vLLM does)
        assert (await run_one(engine, tokens(96, "u"))).cached_tokens == 0
        assert (await run_one(engine, tokens(96, "u"))).cached_tokens == 80
        stats = engine.stats()
    assert stats["prefill_tokens_cached"] == 96 + 80
    assert stats["prefill_tokens_computed"] == 100 + 4 + 96 + 16


async def test_a_shared_prefix_is_cached_by_whole_blocks() -> None:
    async with Engine(EngineParams(time_scale=FAST)) as engine:
        await run_one(engine, tokens(60))
        other = tokens(40) + tokens(20, "other")
        assert (await run_one(engine, other)).cached_tokens == 32
        # the second block alone matches, but not the prefix before it: no hit
        changed_start = ["x", *tokens(60)[1:]]
        assert (await run_one(engine, changed_start)).cached_tokens == 0


async def test_the_least_recently_freed_prompt_is_evicted_at_capacity() -> None:
    # 10 blocks; a 65-token prompt holds 5 while it runs (4 full, 1 partial), then frees
    # them: the partial block first, then the full ones last to first.
    async with Engine(EngineParams(time_scale=FAST, cache_blocks=10)) as engine:
        a, b, c = tokens(65, "a"), tokens(65, "b"), tokens(65, "c")
        cached = [(await run_one(engine, q)).cached_tokens for q in (a, b, a, c, a, b)]
        stats = engine.stats()
    # c takes b's blocks (freed before a's second run), the last b takes c's
    assert cached == [0, 0, 64, 0, 64, 0]
    assert (stats["cache_blocks_evicted"], stats["cache_blocks_used"]) == (8, 8)


async def test_blocks_held_by_a_running_sequence_are_never_evicted() -> None:
    # 12 blocks. x (65 tokens, 40 answer tokens) runs from iteration 0 to 39; y runs in
    # iteration 0; z waits (5 blocks, 2 free), then takes the 2 never used and the oldest
    # free ones: y's partial block, y's blocks 4 and 3. x's growth to 7 blocks (at 80 and
    # 96 tokens of KV) takes y's blocks 2 and 1. x's own prompt blocks are never touched.
    async with Engine(EngineParams(time_scale=FAST, cache_blocks=12)) as engine:
        x, y, z = tokens(65, "x"), tokens(65, "y"), tokens(65, "z")
        await asyncio.gather(run_one(engine, x, 40), run_one(engine, y), run_one(engine, z))
        assert engine.stats()["cache_blocks_evicted"] == 4
        again = [(await run_one(engine, q)).cached_tokens for q in (x, z, y)]
    assert again == [64, 64, 0]


async def test_without_prefix_caching_every_prompt_is_computed() -> None:
    async with Engine(EngineParams(time_scale=FAST, prefix_caching=False)) as engine:
        await run_one(engine, tokens(100))
        assert (await run_one(engine, tokens(100))).cached_tokens == 0
        assert engine.stats()["prefill_tokens_computed"] == 200


async def test_a_request_larger_than_the_kv_cache_is_a_value_error() -> None:
    async with Engine(EngineParams(time_scale=FAST, cache_blocks=3)) as engine:
        with pytest.raises(ValueError, match="need 7 KV blocks, the engine has 3"):
            await run_one(engine, tokens(100))


# -- n choices ---------------------------------------------------------------------------------
async def test_n_choices_are_sequences_that_each_compute_the_last_block() -> None:
    # vLLM V1 runs n=4 as four requests: the first computes the prompt, the others find its
    # full blocks within their first len - 1 tokens and compute the rest again.
    p = EngineParams(time_scale=FAST, decode_step_per_token_s=0.0)
    async with Engine(p) as engine:
        done = await engine.generate(tokens(100), [10, 20, 30, 40])
        stats = engine.stats()
    assert (stats["prefill_tokens_computed"], stats["prefill_tokens_cached"]) == (
        100 + 3 * 4, 3 * 96)
    assert done.cached_tokens == 0  # the first sequence's lookup
    # iteration 0 computes the prompts and samples each first token; 1..39 decode the rest
    assert (stats["iterations"], stats["decode_tokens"], stats["max_batch_seen"]) == (
        40, 100, 4)
    decode = 39 * p.decode_step_s + p.decode_step_per_seq_s * (9 + 19 + 29 + 39)
    assert stats["busy_s"] == pytest.approx(112 / p.prefill_tokens_per_s + decode)
    async with Engine(p) as engine:  # a whole number of blocks: the last one is recomputed
        await engine.generate(tokens(96), [1, 1, 1, 1])
        assert engine.stats()["prefill_tokens_computed"] == 96 + 3 * 16


# -- batching ----------------------------------------------------------------------------------
async def test_a_batch_costs_far_less_than_its_requests_one_by_one() -> None:
    p = EngineParams(time_scale=FAST, max_batched_tokens=16_384, decode_step_per_token_s=0.0)
    prompts = [tokens(200, f"r{i}-") for i in range(64)]
    async with Engine(p) as alone:
        await run_one(alone, prompts[0], 50)
        one = alone.stats()["busy_s"]
    assert one == pytest.approx(200 / p.prefill_tokens_per_s
                                + 49 * (p.decode_step_s + p.decode_step_per_seq_s))
    async with Engine(p) as engine:
        await asyncio.gather(*(run_one(engine, q, 50) for q in prompts))
        stats = engine.stats()
    # all 64 arrive before the first iteration: one prefill of them all, 49 steps of 64
    assert stats["busy_s"] == pytest.approx(64 * 200 / p.prefill_tokens_per_s
                                            + 49 * (p.decode_step_s + 64 * p.decode_step_per_seq_s))
    assert stats["busy_s"] < 64 * one / 10
    assert (stats["iterations"], stats["decode_tokens"]) == (50, 3200)
    assert stats["requests"] == stats["finished"] == 64


def test_max_batch_holds_and_the_rest_wait_in_order() -> None:
    # On virtual time the 20 arrive at one instant: on real time a busy machine could
    # deschedule the client between two arrivals for longer than an iteration (a flake).
    async def main() -> tuple[list[EngineResult], dict[str, Any]]:
        async with Engine(EngineParams(time_scale=100, max_batch=8)) as engine:
            done = await asyncio.gather(*(run_one(engine, tokens(20, f"q{i}-"), 10 + i)
                                          for i in range(20)))
            return done, engine.stats()

    done, stats = virtual_time.run(main())
    assert stats["max_batch_seen"] == 8
    assert stats["max_waiting"] == 20
    assert all(r.queue_s == 0 for r in done[:8]) and all(r.queue_s > 0 for r in done[8:])
    queued = [r.queue_s for r in done]
    assert queued == sorted(queued)  # first come, first admitted
    assert stats["decode_tokens"] == sum(10 + i for i in range(20))


async def test_a_long_prompt_is_computed_in_chunks_after_the_decoding_tokens() -> None:
    # 64 tokens an iteration. Iteration 0: a's 10 prompt tokens, then 54 of b's 200; 1 and
    # 2: a's decode token, then 63 of b's; 3: a's token and b's last 20, b's only token.
    p = EngineParams(time_scale=FAST, max_batch=8, max_batched_tokens=64,
                     decode_step_per_token_s=0.0)
    step = p.decode_step_s + p.decode_step_per_seq_s  # a alone decoding
    async with Engine(p) as engine:
        a, b = await asyncio.gather(run_one(engine, tokens(10, "a"), 100),
                                    run_one(engine, tokens(200, "b"), 1))
        stats = engine.stats()
    assert b.latency_s == pytest.approx(210 / p.prefill_tokens_per_s + 3 * step)
    assert a.latency_s == pytest.approx(210 / p.prefill_tokens_per_s + 99 * step)
    assert (stats["iterations"], stats["prefill_tokens_computed"]) == (100, 210)
    async with Engine(replace(p, max_batched_tokens=2048)) as engine:  # all in iteration 0
        a, b = await asyncio.gather(run_one(engine, tokens(10, "a"), 100),
                                    run_one(engine, tokens(200, "b"), 1))
    assert b.latency_s == pytest.approx(210 / p.prefill_tokens_per_s)


async def test_decode_steps_grow_with_the_context_they_read() -> None:
    # step j (1..10) of a 160-token prompt reads 160 + j tokens of KV
    p = EngineParams(time_scale=FAST, decode_step_per_seq_s=0.0, decode_step_per_token_s=1e-4)
    for prompt, context in ((160, 160 * 10 + 55), (16, 16 * 10 + 55)):
        async with Engine(p) as engine:
            await run_one(engine, tokens(prompt), 11)
            busy = engine.stats()["busy_s"]
        assert busy == pytest.approx(prompt / p.prefill_tokens_per_s
                                     + 10 * p.decode_step_s + 1e-4 * context)


async def test_a_full_kv_cache_preempts_the_newest_sequence_which_is_computed_again() -> None:
    # 6 blocks; a and b (16-token prompts, 40 answer tokens) hold 1 block each, 2 from
    # iteration 1 (16 tokens of KV), 3 from iteration 17: 6. At iteration 33 both need a
    # fourth: b, the newest, is preempted after 33 tokens and waits; a ends after
    # iteration 39; b comes back at 40, finds its prompt block cached, computes the other
    # 16 + 33 - 16 = 33 tokens, samples its 34th and decodes 6 more (iterations 41..46).
    p = EngineParams(time_scale=FAST, cache_blocks=6, decode_step_per_token_s=0.0)
    async with Engine(p) as engine:
        a, b = await asyncio.gather(run_one(engine, tokens(16, "a"), 40),
                                    run_one(engine, tokens(16, "b"), 40))
        stats = engine.stats()
    assert stats["preempted"] == 1
    assert (stats["prefill_tokens_computed"], stats["prefill_tokens_cached"]) == (
        16 + 16 + 33, 16)
    assert (stats["iterations"], stats["decode_tokens"]) == (47, 80)
    assert stats["max_kv_blocks_used"] == 6
    one, two = (p.decode_step_s + n * p.decode_step_per_seq_s for n in (1, 2))
    assert a.latency_s == pytest.approx(32 / p.prefill_tokens_per_s + 32 * two + 7 * one)
    assert b.latency_s == pytest.approx(65 / p.prefill_tokens_per_s + 32 * two + 13 * one)
    assert stats["busy_s"] == pytest.approx(b.latency_s)


async def test_a_request_arriving_mid_run_joins_the_batch() -> None:
    p = EngineParams(time_scale=1000, decode_step_s=0.1, decode_step_per_seq_s=0.0,
                     decode_step_per_token_s=0.0, prefill_tokens_per_s=1e9)
    async with Engine(p) as engine:
        long = asyncio.ensure_future(run_one(engine, tokens(10, "long"), 5000))  # 0.5 s real
        await asyncio.sleep(0.02)
        short = await run_one(engine, tokens(10, "short"), 10)
        assert not long.done()  # the short one did not wait for the long one
        assert short.queue_s <= p.decode_step_s + 1e-9  # at most the iteration in progress
        # its prompt is computed in an iteration that decodes the long one, then 9 steps
        assert short.latency_s == pytest.approx(short.queue_s + 10 * p.decode_step_s)
        await long
        stats = engine.stats()
    assert stats["max_batch_seen"] == 2
    assert (stats["iterations"], stats["decode_tokens"]) == (5000, 5010)
    assert stats["busy_s"] == pytest.approx(4999 * p.decode_step_s, rel=1e-6)


async def test_a_cancelled_request_leaves_the_queue_and_the_batch() -> None:
    p = EngineParams(time_scale=1000, decode_step_s=0.1, decode_step_per_seq_s=0.0,
                     max_batch=1)
    async with Engine(p) as engine:
        running = asyncio.ensure_future(run_one(engine, tokens(10, "a"), 100_000))
        waiting = asyncio.ensure_future(run_one(engine, tokens(10, "b"), 10))
        await asyncio.sleep(0.02)
        assert (engine.stats()["running"], engine.stats()["waiting"]) == (1, 1)
        waiting.cancel()
        running.cancel()
        await asyncio.gather(running, waiting, return_exceptions=True)
        await asyncio.sleep(0)
        stats = engine.stats()
        assert (stats["running"], stats["waiting"], stats["aborted"]) == (0, 0, 2)
        assert stats["iterations"] < 100_000
        after = await run_one(engine, tokens(10, "c"), 3)  # the engine carries on
    assert after.queue_s <= p.decode_step_s + 1e-9  # at most the iteration still in progress


async def test_closing_the_engine_fails_what_it_still_runs() -> None:
    engine = Engine(EngineParams())
    pending = asyncio.ensure_future(run_one(engine, tokens(10), 1000))  # 10 s, real time
    await asyncio.sleep(0.01)
    await engine.aclose()
    with pytest.raises(RuntimeError, match="the engine was closed"):
        await pending
    with pytest.raises(RuntimeError, match="the engine is closed"):
        await run_one(engine, tokens(10))


# -- time scale --------------------------------------------------------------------------------
async def test_a_request_alone_takes_its_prefill_and_its_steps() -> None:
    p = EngineParams(time_scale=FAST)
    async with Engine(p) as engine:
        done = await run_one(engine, tokens(300), 25)
    assert done.queue_s == 0
    # the prefill samples the first token; step j of 24 reads 300 + j tokens of KV
    assert done.latency_s == pytest.approx(
        300 / p.prefill_tokens_per_s + 24 * (p.decode_step_s + p.decode_step_per_seq_s)
        + p.decode_step_per_token_s * (24 * 300 + 24 * 25 / 2), rel=1e-6)


async def test_real_time_is_simulated_time_over_the_time_scale() -> None:
    p = EngineParams(time_scale=1000, decode_step_s=0.1, decode_step_per_seq_s=0.0,
                     decode_step_per_token_s=0.0, prefill_tokens_per_s=1e9, max_batch=1)
    loop = asyncio.get_running_loop()
    async with Engine(p) as engine:
        began = loop.time()
        await asyncio.gather(*(run_one(engine, tokens(5, f"s{i}"), 1000) for i in range(4)))
        real = loop.time() - began
        simulated = engine.stats()["busy_s"]
    assert simulated == pytest.approx(399.6, rel=1e-6)  # 4 × 999 steps of 0.1 s, one by one
    assert 0.95 * simulated / 1000 <= real <= 2 * simulated / 1000 + 0.5  # loose on purpose


# -- serve-llm ---------------------------------------------------------------------------------
LONG = [{"role": "system", "content": "You play a guessing game with many other players; "
         "each of you picks a whole number, and whoever is closest to two thirds of the "
         "average wins the round."},
        {"role": "user", "content": "Pick a number between 0 and 100."}]


async def chat(s: aiohttp.ClientSession, base: str, **extra: Any) -> tuple[int, Any]:
    async with s.post(base + "/chat/completions",
                      json={"model": "dummy", "messages": LONG, **extra}) as r:
        return r.status, json.loads(await r.read())


async def test_serve_llm_with_an_engine_reports_cached_tokens() -> None:
    options = ServerOptions(policy="reasoning", engine=EngineParams(time_scale=FAST))
    async with running_server(options) as base, aiohttp.ClientSession() as s:
        root = base.removesuffix("/v1")
        first_status, first = await chat(s, base, seed=3)
        second_status, second = await chat(s, base, seed=3)
        async with s.get(root + "/stats") as r:
            stats = await r.json()
        async with s.get(root + "/props") as r:
            props_status, props = r.status, await r.json()
    assert first_status == second_status == 200
    assert first["choices"] == second["choices"]  # the answer does not depend on the engine
    prompt = len(chat_tokens(LONG))
    answer = len(text_tokens(first["choices"][0]["message"]["content"]))
    assert first["usage"] == {"prompt_tokens": prompt, "completion_tokens": answer,
                              "total_tokens": prompt + answer,
                              "prompt_tokens_details": {"cached_tokens": 0}}
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached == (prompt - 1) // 16 * 16 > 0
    engine = stats["engine"]
    assert engine["requests"] == engine["finished"] == 2
    assert engine["prefill_tokens_cached"] == cached
    assert engine["decode_tokens"] == 2 * answer
    assert engine["params"]["max_batch"] == 256
    assert props_status == 200 and props["total_slots"] == 256


async def test_legacy_completions_and_n_run_on_the_engine_too() -> None:
    options = ServerOptions(engine=EngineParams(time_scale=FAST))
    async with running_server(options) as base, aiohttp.ClientSession() as s:
        async with s.post(base + "/completions",
                          json={"model": "dummy", "prompt": "Say a number.", "n": 3}) as r:
            data = await r.json()
        async with s.get(base.removesuffix("/v1") + "/stats") as r:
            engine = (await r.json())["engine"]
    assert data["usage"]["prompt_tokens"] == 4  # raw text: Say, a, number, .
    # three sequences, each computing the prompt: no full block to share
    assert engine["prefill_tokens_computed"] == 12 and engine["max_batch_seen"] == 3


async def test_without_an_engine_no_props_and_no_cached_tokens() -> None:
    async with running_server() as base, aiohttp.ClientSession() as s:
        _, data = await chat(s, base)
        async with s.get(base.removesuffix("/v1") + "/props") as r:
            assert r.status == 404
        async with s.get(base.removesuffix("/v1") + "/stats") as r:
            assert "engine" not in await r.json()
    assert "prompt_tokens_details" not in data["usage"]


async def test_max_running_answers_429_above_the_limit_only() -> None:
    options = ServerOptions(latency=30.0, max_running=2, retry_after=7)
    async with running_server(options) as base, aiohttp.ClientSession() as s:
        root = base.removesuffix("/v1")
        held = [asyncio.ensure_future(chat(s, base)) for _ in range(2)]
        for _ in range(500):  # until both are in flight
            async with s.get(root + "/stats") as r:
                if (await r.json())["in_flight"] == 2:
                    break
            await asyncio.sleep(0.01)
        over = []
        for _ in range(3):
            async with s.post(base + "/chat/completions",
                              json={"model": "dummy", "messages": LONG}) as r:
                over.append((r.status, r.headers.get("Retry-After"),
                             (await r.json())["error"]["type"]))
        async with s.get(root + "/stats") as r:
            stats = await r.json()
        for task in held:
            task.cancel()
        await asyncio.gather(*held, return_exceptions=True)
    assert over == [(429, "7", "rate_limit_error")] * 3
    assert stats["injected"] == {"over_limit": 3}
    assert stats["requests"] == 2  # the refused ones are not requests


async def test_max_running_refuses_nothing_at_or_below_the_limit() -> None:
    options = ServerOptions(latency=0.05, max_running=3)
    async with running_server(options) as base, aiohttp.ClientSession() as s:
        statuses = [status for status, _ in
                    await asyncio.gather(*(chat(s, base) for _ in range(3)))]
        statuses += [(await chat(s, base))[0] for _ in range(3)]
    assert statuses == [200] * 6


def test_max_running_is_validated() -> None:
    with pytest.raises(ValueError, match="max_running must be an integer >= 1"):
        ServerOptions(max_running=0)


# -- the command -------------------------------------------------------------------------------
@pytest.mark.parametrize(("args", "message"), [
    (["--engine", "--max-batch", "0"], "serve-llm: --max-batch must be an integer >= 1, got 0"),
    (["--engine", "--time-scale", "-1"], "serve-llm: --time-scale must be a number of "),
    (["--max-batch", "4"], "serve-llm: --max-batch needs --engine"),
    (["--max-running", "0"], "serve-llm: --max-running must be an integer >= 1, got 0")])
def test_bad_engine_flags_are_one_line_and_exit_2(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        args: list[str], message: str) -> None:
    code, _, stderr = run_in_process(capsys, monkeypatch, "serve-llm", *args)
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1, stderr
    assert lines[0].removeprefix("error: ").startswith(message)
