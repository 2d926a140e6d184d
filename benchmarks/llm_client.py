"""Requests/s and client CPU per request: Populace's OpenAIModel vs the official openai SDK.

A zero-latency ``serve-llm`` server runs in a subprocess (so that its CPU is not counted);
both clients then send the same chat-completion requests against it with the same number of
concurrent callers, alternating rounds to even out drift. Client CPU is this process's CPU
time (user + system) divided by requests.

    .venv/bin/python benchmarks/llm_client.py                # defaults: 4000 requests, 64 callers
    .venv/bin/python benchmarks/llm_client.py --requests 20000 --concurrency 256 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

MESSAGES = [
    {"role": "system", "content": "You are a player in a number guessing game."},
    {"role": "user", "content": "Pick an integer between 0 and 100; the winner is closest "
                                "to two thirds of the average. Reply with the number only."},
]


@dataclass
class Result:
    client: str
    requests: int
    wall_s: float
    cpu_s: float

    @property
    def rps(self) -> float:
        return self.requests / self.wall_s

    @property
    def cpu_us(self) -> float:
        return self.cpu_s / self.requests * 1e6


async def _drive(call: Callable[[int], Awaitable[str]], n: int, concurrency: int) -> None:
    """``concurrency`` callers sharing ``n`` requests; every answer must be non-empty."""
    counter = iter(range(n))

    async def caller() -> None:
        for i in counter:
            if not await call(i):
                raise RuntimeError("empty answer")

    await asyncio.gather(*(caller() for _ in range(concurrency)))


async def _measure(name: str, call: Callable[[int], Awaitable[str]], n: int,
                   concurrency: int) -> Result:
    await _drive(call, min(n, 200), concurrency)  # warm up connections
    cpu0, t0 = time.process_time(), time.perf_counter()
    await _drive(call, n, concurrency)
    return Result(name, n, time.perf_counter() - t0, time.process_time() - cpu0)


async def _populace(url: str, n: int, concurrency: int) -> Result:
    from populace.llm import OpenAIModel

    model = OpenAIModel("bench", model="dummy", base_urls=[url], max_concurrency=concurrency,
                        max_retries=0, timeout=30)

    async def call(i: int) -> str:
        return (await model.complete(MESSAGES, seed=i, temperature=1.0)).text

    try:
        return await _measure("populace OpenAIModel (aiohttp)", call, n, concurrency)
    finally:
        await model.aclose()


async def _sdk(url: str, n: int, concurrency: int) -> Result:
    import openai

    client = openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0, timeout=30)

    async def call(i: int) -> str:
        resp = await client.chat.completions.create(
            model="dummy", messages=MESSAGES, seed=i, temperature=1.0)  # type: ignore[arg-type]
        return resp.choices[0].message.content or ""

    try:
        return await _measure(f"openai SDK {openai.__version__} AsyncOpenAI", call, n,
                              concurrency)
    finally:
        await client.close()


def _raw_payload(i: int) -> bytes:
    return json.dumps({"model": "dummy", "messages": MESSAGES, "seed": i,
                       "temperature": 1.0}).encode()


async def _raw_httpx(url: str, n: int, concurrency: int) -> Result:
    """The bare transport the SDK sits on: one httpx.AsyncClient, no retries, no models."""
    import httpx

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    client = httpx.AsyncClient(base_url=url, limits=limits, timeout=30)

    async def call(i: int) -> str:
        resp = await client.post("/chat/completions", content=_raw_payload(i),
                                 headers={"content-type": "application/json"})
        return str(resp.json()["choices"][0]["message"]["content"])

    try:
        return await _measure(f"raw httpx {httpx.__version__}", call, n, concurrency)
    finally:
        await client.aclose()


async def _raw_aiohttp(url: str, n: int, concurrency: int) -> Result:
    """The bare transport OpenAIModel sits on: one aiohttp session, no pool, no retries."""
    import aiohttp

    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency))

    async def call(i: int) -> str:
        async with session.post(f"{url}/chat/completions", data=_raw_payload(i),
                                headers={"content-type": "application/json"}) as resp:
            body = json.loads(await resp.read())
        return str(body["choices"][0]["message"]["content"])

    try:
        return await _measure(f"raw aiohttp {aiohttp.__version__}", call, n, concurrency)
    finally:
        await session.close()


def _serve() -> None:
    """Subprocess mode: serve with zero latency, print the base URL, stop when stdin closes."""
    from populace.llm.offline import ServerOptions, running_server

    async def main() -> None:
        async with running_server(ServerOptions(latency=0.0)) as url:
            print(url, flush=True)
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, sys.stdin.read)

    asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4000, help="requests per round")
    parser.add_argument("--concurrency", type=int, default=64, help="concurrent callers")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per client, alternating")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        _serve()
        return

    server = subprocess.Popen([sys.executable, __file__, "--serve"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        if not url.startswith("http://"):
            raise SystemExit(f"server did not start (got {url!r})")
        results: dict[str, list[Result]] = {}
        for _ in range(args.rounds):
            for bench in (_populace, _sdk, _raw_httpx, _raw_aiohttp):
                r = asyncio.run(bench(url, args.requests, args.concurrency))
                results.setdefault(r.client, []).append(r)
    finally:
        if server.stdin is not None:
            server.stdin.close()
        server.wait(timeout=10)

    print(f"\n{args.requests} chat completions x {args.rounds} rounds, {args.concurrency} "
          f"concurrent callers, zero-latency server in a subprocess, "
          f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs\n")
    print(f"{'client':<40} {'req/s':>9} {'CPU µs/req':>11}")
    summary: dict[str, tuple[float, float]] = {}
    for name, rs in results.items():
        rps = statistics.median(r.rps for r in rs)
        cpu = statistics.median(r.cpu_us for r in rs)
        summary[name] = (rps, cpu)
        print(f"{name:<40} {rps:>9.0f} {cpu:>11.0f}")
    (ours_rps, ours_cpu), (sdk_rps, sdk_cpu) = list(summary.values())[:2]
    print(f"\nOpenAIModel vs SDK: {ours_rps / sdk_rps:.2f}x requests/s, "
          f"{sdk_cpu / ours_cpu:.2f}x less client CPU per request (medians)")


if __name__ == "__main__":
    main()
