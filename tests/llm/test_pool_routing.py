"""Prefix-affinity routing with bounded load, and adaptive (AIMD) limits, of EndpointPool."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from populace.core import ModelError
from populace.llm import EndpointPool, MockTransport, OpenAIModel, Response
from populace.llm._openai import PrefixMemory, affinity_key

URLS = [f"http://gpu{i}:8000/v1" for i in range(4)]


async def test_a_key_always_prefers_the_same_endpoint() -> None:
    pool = EndpointPool(URLS, max_concurrency=8)
    for key in range(200):
        first = await pool.acquire(key)
        pool.release(first, ok=True)
        again = await pool.acquire(key)
        pool.release(again, ok=True)
        assert again.url == first.url
    # and keys spread over every endpoint (rendezvous hashing), about evenly
    homes = Counter()
    for key in range(4000):
        lease = await pool.acquire(key)
        homes[lease.url] += 1
        pool.release(lease, ok=True)
    assert set(homes) == set(URLS)
    assert max(homes.values()) < 1.2 * min(homes.values())


async def test_removing_an_endpoint_moves_only_its_keys() -> None:
    async def homes(urls: list[str]) -> dict[int, str]:
        pool = EndpointPool(urls, max_concurrency=8)
        out = {}
        for key in range(1000):
            lease = await pool.acquire(key)
            out[key] = lease.url
            pool.release(lease, ok=True)
        return out

    # endpoint salts come from positions: keep the first three in place, drop the last
    four, three = await homes(URLS), await homes(URLS[:3])
    moved = [k for k in four if four[k] != three[k]]
    assert moved and all(four[k] == URLS[3] for k in moved)


async def test_load_is_bounded_when_every_key_prefers_one_endpoint() -> None:
    # Identical prompts share one key: bounded load spreads them anyway.
    pool = EndpointPool(URLS, max_concurrency=100, balance=1.25)
    leases = [await pool.acquire(7) for _ in range(400)]
    per = Counter(lease.url for lease in leases)
    assert set(per) == set(URLS)
    assert max(per.values()) <= 1.25 * 400 / 4 + 1
    for lease in leases:
        pool.release(lease, ok=True)


async def test_a_full_preferred_endpoint_sends_the_call_elsewhere_not_into_a_queue() -> None:
    pool = EndpointPool(URLS[:2], max_concurrency=1)
    a = await pool.acquire(1)
    b = await pool.acquire(1)  # the same key, but its endpoint is busy
    assert {a.url, b.url} == set(URLS[:2])
    waiting = asyncio.ensure_future(pool.acquire(1))
    await asyncio.sleep(0)
    assert not waiting.done() and pool.waiting == 1
    pool.release(b, ok=True)
    c = await asyncio.wait_for(waiting, 1)
    assert c.url == b.url
    pool.release(a, ok=True)
    pool.release(c, ok=True)


def limits(pool: EndpointPool) -> list[int]:
    return [e.limit for e in pool.statistics()]


async def fill(pool: EndpointPool, n: int) -> list[Any]:
    return [await pool.acquire() for _ in range(n)]


async def test_adaptive_limit_slow_starts_then_halves_on_congestion() -> None:
    pool = EndpointPool(URLS[:1], max_concurrency=64, adaptive=True, min_concurrency=2)
    assert limits(pool) == [8]
    # one round trip at the full limit: every answer adds one (slow start doubles it)
    for expected in (16, 32, 64, 64):
        leases = await fill(pool, limits(pool)[0])
        for lease in leases:
            pool.release(lease, ok=True)
        assert limits(pool) == [expected]
    # a burst of 503s from one round trip halves it once, not once per failure
    leases = await fill(pool, 64)
    for lease in leases[:10]:
        pool.release(lease, ok=False, strike=False, congested=True)
    assert limits(pool) == [32]
    for lease in leases[10:]:
        pool.release(lease, ok=True)
    # past the first cut, growth is additive: one per round trip
    leases = await fill(pool, 32)
    for lease in leases:
        pool.release(lease, ok=True)
    assert limits(pool) == [33]
    # a 429 cuts a tenth
    leases = await fill(pool, 33)
    pool.release(leases[0], ok=False, strike=False, rate_limited=True)
    assert 29 <= limits(pool)[0] <= 30  # 33.x × 0.9
    for lease in leases[1:]:
        pool.release(lease, ok=True)
    # the floor holds
    for _ in range(10):
        lease = await pool.acquire()
        pool.release(lease, ok=False, strike=False, congested=True)
    assert limits(pool) == [2]


async def test_an_idle_client_does_not_grow_its_limit() -> None:
    pool = EndpointPool(URLS[:1], max_concurrency=64, adaptive=True)
    for _ in range(100):  # one call at a time: the limit of 8 is never used up
        pool.release(await pool.acquire(), ok=True)
    assert limits(pool) == [8]


async def test_a_declared_capacity_caps_the_limit() -> None:
    pool = EndpointPool(URLS[:2], max_concurrency=64, adaptive=True)
    pool.set_capacity(URLS[0], 4)
    assert limits(pool) == [4, 8]
    for _ in range(5):
        leases = await fill(pool, 8)
        for lease in leases:
            pool.release(lease, ok=True)
    assert limits(pool)[0] == 4
    fixed = EndpointPool(URLS[:1], max_concurrency=64)
    fixed.set_capacity(URLS[0], 10)
    assert limits(fixed) == [10]
    with pytest.raises(ValueError, match="not one of"):
        fixed.set_capacity("http://elsewhere/v1", 3)


def test_bad_pool_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="min_concurrency"):
        EndpointPool(URLS, max_concurrency=4, min_concurrency=5)
    with pytest.raises(ValueError, match="balance"):
        EndpointPool(URLS, balance=0.5)


# -- the client's side: keys, cached tokens, prefix estimates ---------------------------------
def test_affinity_key_is_the_leading_system_messages() -> None:
    rules = {"role": "system", "content": "Rules of the game."}
    ann = [rules, {"role": "system", "content": "You are Ann."}]
    bob = [rules, {"role": "system", "content": "You are Bob."}]
    turn = {"role": "user", "content": "Round 1"}
    later = {"role": "user", "content": "Round 2"}
    assert affinity_key([*ann, turn]) == affinity_key([*ann, {"role": "assistant",
                                                              "content": "40"}, later])
    assert affinity_key([*ann, turn]) != affinity_key([*bob, turn])
    assert affinity_key([{"role": "user", "content": "x" * 300}]) == \
        affinity_key([{"role": "user", "content": "x" * 256 + "y" * 44}])


def test_prefix_memory_counts_what_was_seen_before() -> None:
    memory = PrefixMemory()
    rules = "r" * 640
    assert memory.reused(rules + "a" * 640) == 0.0
    assert memory.reused(rules + "b" * 640) == pytest.approx(0.5)  # the rules' 10 blocks
    assert memory.reused(rules + "b" * 640) == pytest.approx(1.0)
    assert memory.reused("b" * 640 + rules) == 0.0  # the same blocks elsewhere: no prefix


async def test_the_client_reports_cached_and_prefix_tokens_and_routes_by_key() -> None:
    seen: list[str] = []

    def answer(url: str, body: dict[str, Any]) -> Response:
        seen.append(url)
        cached = 100 if len(seen) > 1 else 0
        return Response.json({
            "choices": [{"message": {"role": "assistant", "content": "42"}}],
            "usage": {"prompt_tokens": 200, "completion_tokens": 1,
                      "prompt_tokens_details": {"cached_tokens": cached}}})

    model = OpenAIModel("m", model="m", base_urls=URLS, transport=MockTransport(answer))
    rules = {"role": "system", "content": "The rules of the game, the same for all. " * 10}
    persona = {"role": "system", "content": "You are player 1."}
    first = await model.complete([rules, persona, {"role": "user", "content": "Round 1"}])
    second = await model.complete([rules, persona, {"role": "assistant", "content": "42"},
                                   {"role": "user", "content": "Round 2"}])
    assert len(set(seen)) == 1  # the same agent's calls meet its prefix on one server
    assert (first.cached_tokens, second.cached_tokens) == (0, 100)
    assert first.prefix_tokens == 0 and 100 < second.prefix_tokens < 200
    stats = model.statistics()
    assert stats.cached_tokens == 100 and stats.prefix_tokens == second.prefix_tokens
    assert [e.limit for e in stats.endpoints] == [8, 8, 8, 8]
    await model.aclose()


# -- coalescing -----------------------------------------------------------------------------
def numbered(n_field: bool = True) -> tuple[MockTransport, list[dict[str, Any]]]:
    """A server answering choice k as "answer k" (only one choice without ``n_field``)."""
    bodies: list[dict[str, Any]] = []

    def answer(url: str, body: dict[str, Any]) -> Response:
        bodies.append(body)
        n = body.get("n", 1) if n_field else 1
        return Response.json({
            "choices": [{"message": {"content": f"answer {k}"}} for k in range(n)],
            "usage": {"prompt_tokens": 50, "completion_tokens": 2 * n + 1}})

    return MockTransport(answer), bodies


async def test_identical_calls_of_one_moment_go_as_one_request_with_n() -> None:
    transport, bodies = numbered()
    model = OpenAIModel("m", model="m", base_urls=URLS[:1], coalesce=True,
                        transport=transport)
    same = [{"role": "user", "content": "Pick a number"}]
    other = [{"role": "user", "content": "Pick a letter"}]
    calls = [model.complete(same, seed=s, temperature=1.0) for s in range(5)]
    calls.append(model.complete(other, seed=9, temperature=1.0))
    answers = await asyncio.gather(*calls)
    assert [a.text for a in answers] == [f"answer {k}" for k in range(5)] + ["answer 0"]
    assert sorted(b.get("n", 1) for b in bodies) == [1, 5]
    grouped = next(b for b in bodies if b.get("n") == 5)
    assert grouped["seed"] == 0  # the first caller's
    # prompt tokens once (the server prefilled once), completion tokens shared out
    assert [a.prompt_tokens for a in answers[:5]] == [50, 0, 0, 0, 0]
    assert sum(a.completion_tokens for a in answers[:5]) == 11
    assert [a.coalesced for a in answers] == [False, True, True, True, True, False]
    stats = model.statistics()
    assert (stats.requests, stats.coalesced) == (6, 4)
    # different settings never share a request
    bodies.clear()
    await asyncio.gather(model.complete(same, temperature=1.0), model.complete(same))
    assert [b.get("n", 1) for b in bodies] == [1, 1]
    await model.aclose()


async def test_a_server_ignoring_n_gets_one_request_per_call() -> None:
    transport, bodies = numbered(n_field=False)
    model = OpenAIModel("m", model="m", base_urls=URLS[:1], coalesce=True,
                        transport=transport)
    same = [{"role": "user", "content": "Pick a number"}]
    answers = await asyncio.gather(*(model.complete(same, seed=s) for s in range(4)))
    assert [a.text for a in answers] == ["answer 0"] * 4 and len(bodies) == 4
    assert not any(a.coalesced for a in answers)
    bodies.clear()
    await asyncio.gather(*(model.complete(same, seed=s) for s in range(3)))
    assert [b.get("n", 1) for b in bodies] == [1, 1, 1]  # learnt: no more n
    await model.aclose()


async def test_a_failed_coalesced_request_fails_every_caller_once() -> None:
    def refuse(url: str, body: dict[str, Any]) -> Response:
        return Response.json({"error": {"message": "no"}}, status=400)

    model = OpenAIModel("m", model="m", base_urls=URLS[:1], coalesce=True,
                        transport=MockTransport(refuse))
    same = [{"role": "user", "content": "Pick"}]
    results = await asyncio.gather(*(model.complete(same) for _ in range(3)),
                                   return_exceptions=True)
    assert all("HTTP 400" in str(r) for r in results)
    stats = model.statistics()
    assert (stats.requests, stats.failures, stats.retries) == (3, 3, 0)
    await model.aclose()


async def test_timeouts_and_503s_halve_the_limit_and_429s_trim_it() -> None:
    from populace.llm import TransportError

    fates = iter(["timeout", "503", "429"])

    def answer(url: str, body: dict[str, Any]) -> Response:
        fate = next(fates)
        if fate == "timeout":
            raise TransportError("timed out after 1 s", cause="timed out")
        return Response.json({"error": {"message": fate}}, status=int(fate))

    model = OpenAIModel("m", model="m", base_urls=URLS[:1], max_retries=0,
                        max_concurrency=64, transport=MockTransport(answer))
    seen = []
    for _ in range(3):
        with pytest.raises(ModelError):
            await model.complete([{"role": "user", "content": "x"}])
        seen.append(model.statistics().endpoints[0].limit)
    assert seen == [4, 2, 1]  # 8 halved, halved, then 2 × 0.9 (floor 1)
    await model.aclose()


async def test_after_a_timeout_an_endpoint_is_given_twice_as_long() -> None:
    from populace.llm import TransportError

    fates = iter(["timeout", "timeout", "ok", "timeout", "timeout", "timeout", "ok"])

    def answer(url: str, body: dict[str, Any]) -> Response:
        if next(fates) == "timeout":
            raise TransportError("timed out after 10 s", cause="timed out")
        return Response.json({"choices": [{"message": {"content": "7"}}]})

    transport = MockTransport(answer)
    model = OpenAIModel("m", model="m", base_urls=URLS[:1], timeout=10, backoff=0,
                        max_retries=5, transport=transport)
    for _ in range(2):
        assert (await model.complete([{"role": "user", "content": "x"}])).text == "7"
    # the transport's own 10 s, then 20, 40, then capped at 80
    assert transport.timeouts == [None, 20, 40, 40, 80, 80, 80]
    await model.aclose()


# -- a slow answer from a server that is computing it is waited for --------------------------
def slow_server(busy: Any, seconds: float = 0.35) -> MockTransport:
    """Answers after ``seconds``; a GET (the client's look at the server) gets ``busy``."""
    async def answer(url: str, body: dict[str, Any] | None) -> Response:
        if body is None:
            return busy if isinstance(busy, Response) else Response.json(busy)
        await asyncio.sleep(seconds)
        return Response.json({"choices": [{"message": {"content": "7"}}]})

    return MockTransport(answer)


@pytest.mark.parametrize(("server", "busy"), [
    ("populace", {"computing": 2}),
    ("llamacpp", [{"id": 0, "is_processing": False}, {"id": 1, "is_processing": True}]),
    ("vllm", Response(200, b'# HELP x\nvllm:num_requests_running{model_name="m"} 3.0\n'
                      b'vllm:num_requests_waiting{model_name="m"} 0.0\n')),
])
async def test_a_request_the_server_is_computing_is_not_abandoned(server: str,
                                                                  busy: Any) -> None:
    transport = slow_server(busy)
    model = OpenAIModel("m", model="m", base_urls=URLS[:1], timeout=0.1, max_retries=0,
                        server=server, transport=transport)
    answer = await model.complete([{"role": "user", "content": "x"}])
    assert answer.text == "7" and answer.retries == 0
    assert len(transport.requests) == 1  # sent once, never again
    assert model.chat.waited >= 2
    await model.aclose()


async def test_a_server_that_queues_gets_fewer_requests() -> None:
    metrics = Response(200, b'vllm:num_requests_running{model_name="m"} 256.0\n'
                            b'vllm:num_requests_waiting{model_name="m"} 40.0\n')
    model = OpenAIModel("m", model="m", base_urls=URLS[:1], timeout=0.1, max_retries=0,
                        server="vllm", transport=slow_server(metrics, seconds=0.25))
    await model.complete([{"role": "user", "content": "x"}])
    assert model.statistics().endpoints[0].limit == 4  # 8 halved, once per round trip
    await model.aclose()


@pytest.mark.parametrize("busy", [{"computing": 0}, Response(404, b"")])
async def test_a_request_an_idle_server_holds_is_given_up(busy: Any) -> None:
    transport = slow_server(busy, seconds=30)
    model = OpenAIModel("m", model="m", base_urls=URLS[:1], timeout=0.1, max_retries=0,
                        server="populace", transport=transport)
    with pytest.raises(ModelError, match=r"timed out after 0\.1 s, the server idle"):
        await model.complete([{"role": "user", "content": "x"}])
    await model.aclose()
