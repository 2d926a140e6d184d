"""The tests' virtual-time event loop (tests/virtual_time.py) sleeps without sleeping."""

from __future__ import annotations

import asyncio
import time

import virtual_time


def test_an_hour_of_timers_passes_at_once_and_in_order() -> None:
    async def main() -> tuple[list[str], float]:
        woke: list[str] = []

        async def sleeper(name: str, seconds: float) -> None:
            await asyncio.sleep(seconds)
            woke.append(name)

        await asyncio.gather(sleeper("hour", 3600), sleeper("minute", 60), sleeper("now", 0))
        return woke, asyncio.get_running_loop().time()

    started = time.perf_counter()
    woke, now = virtual_time.run(main())
    assert woke == ["now", "minute", "hour"] and now == 3600
    assert time.perf_counter() - started < 30  # not an hour (a hang, not a speed, check)
