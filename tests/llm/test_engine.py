"""The simulated inference engine behind ``serve-llm --engine``: its prefix cache, continuous
batching and time scale, and how the server and the CLI expose it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from cli_helpers import run_in_process
from populace.llm import ServerOptions, running_server
from populace.llm._engine import (
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
    ("max_batch", True), ("max_batch", 2.0), ("cache_blocks", -1), ("block_size", 0),
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


async def test_the_least_recently_used_prompt_is_evicted_at_capacity() -> None:
    async with Engine(EngineParams(time_scale=FAST, cache_blocks=8)) as engine:
        a, b, c = tokens(65, "a"), tokens(65, "b"), tokens(65, "c")  # 4 full blocks each
        cached = [(await run_one(engine, p)).cached_tokens for p in (a, b, a, c, a, b)]
        assert engine.stats()["cache_blocks_used"] == 8
    # c evicts b (least recently used), not a (used again after b)
    assert cached == [0, 0, 64, 0, 64, 0]


async def test_a_prompt_longer_than_the_cache_keeps_its_beginning() -> None:
    async with Engine(EngineParams(time_scale=FAST, cache_blocks=3)) as engine:
        await run_one(engine, tokens(100))
        assert (await run_one(engine, tokens(100))).cached_tokens == 48


async def test_no_cache_blocks_no_caching() -> None:
    async with Engine(EngineParams(time_scale=FAST, cache_blocks=0)) as engine:
        await run_one(engine, tokens(100))
        assert (await run_one(engine, tokens(100))).cached_tokens == 0


# -- batching ----------------------------------------------------------------------------------
async def test_a_batch_costs_far_less_than_its_requests_one_by_one() -> None:
    p = EngineParams(time_scale=FAST)
    prompts = [tokens(200, f"r{i}-") for i in range(64)]
    async with Engine(p) as alone:
        await run_one(alone, prompts[0], 50)
        one = alone.stats()["busy_s"]
    assert one == pytest.approx(200 / p.prefill_tokens_per_s
                                + 50 * (p.decode_step_s + p.decode_step_per_seq_s))
    async with Engine(p) as engine:
        await asyncio.gather(*(run_one(engine, q, 50) for q in prompts))
        stats = engine.stats()
    # all 64 arrive before the first iteration: one prefill of them all, 50 steps of 64
    assert stats["busy_s"] == pytest.approx(64 * 200 / p.prefill_tokens_per_s
                                            + 50 * (p.decode_step_s + 64 * p.decode_step_per_seq_s))
    assert stats["busy_s"] < 64 * one / 10
    assert (stats["iterations"], stats["mean_batch"], stats["decode_tokens"]) == (50, 64, 3200)
    assert stats["requests"] == stats["finished"] == 64


async def test_max_batch_holds_and_the_rest_wait_in_order() -> None:
    # time scale 100: the arrivals' real microseconds apart stay far below an iteration
    async with Engine(EngineParams(time_scale=100, max_batch=8)) as engine:
        done = await asyncio.gather(*(run_one(engine, tokens(20, f"q{i}-"), 10 + i)
                                      for i in range(20)))
        stats = engine.stats()
    assert stats["max_batch_seen"] == 8
    assert stats["max_waiting"] == 20
    assert all(r.queue_s == 0 for r in done[:8]) and all(r.queue_s > 0 for r in done[8:])
    queued = [r.queue_s for r in done]
    assert queued == sorted(queued)  # first come, first admitted
    assert stats["decode_tokens"] == sum(10 + i for i in range(20))


async def test_n_choices_are_prefilled_once_and_decoded_side_by_side() -> None:
    async with Engine(EngineParams(time_scale=FAST)) as engine:
        done = await engine.generate(tokens(100), [10, 20, 30, 40])
        stats = engine.stats()
    assert stats["prefill_tokens_computed"] == 100
    assert stats["max_batch_seen"] == 4
    assert (stats["iterations"], stats["decode_tokens"]) == (40, 100)
    assert done.completion_tokens == 100


async def test_a_request_arriving_mid_run_joins_the_batch() -> None:
    p = EngineParams(time_scale=1000, decode_step_s=0.1, decode_step_per_seq_s=0.0,
                     prefill_tokens_per_s=1e9)
    async with Engine(p) as engine:
        long = asyncio.ensure_future(run_one(engine, tokens(10, "long"), 5000))  # 0.5 s real
        await asyncio.sleep(0.02)
        short = await run_one(engine, tokens(10, "short"), 10)
        assert not long.done()  # the short one did not wait for the long one
        assert short.queue_s <= p.decode_step_s + 1e-9  # at most the iteration in progress
        assert short.latency_s == pytest.approx(short.queue_s + 10 * p.decode_step_s)
        await long
        stats = engine.stats()
    assert stats["max_batch_seen"] == 2
    assert (stats["iterations"], stats["decode_tokens"]) == (5000, 5010)
    assert stats["busy_s"] == pytest.approx(5000 * p.decode_step_s, rel=1e-6)


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
    assert done.latency_s == pytest.approx(
        300 / p.prefill_tokens_per_s + 25 * (p.decode_step_s + p.decode_step_per_seq_s),
        rel=1e-6)


async def test_real_time_is_simulated_time_over_the_time_scale() -> None:
    p = EngineParams(time_scale=1000, decode_step_s=0.1, decode_step_per_seq_s=0.0,
                     prefill_tokens_per_s=1e9, max_batch=1)
    loop = asyncio.get_running_loop()
    async with Engine(p) as engine:
        began = loop.time()
        await asyncio.gather(*(run_one(engine, tokens(5, f"s{i}"), 1000) for i in range(4)))
        real = loop.time() - began
        simulated = engine.stats()["busy_s"]
    assert simulated == pytest.approx(400, rel=1e-6)  # 4 × 1000 steps of 0.1 s, one by one
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
    assert engine["prefill_tokens_computed"] == 4 and engine["max_batch_seen"] == 3


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
