"""The simulated thinking time of offline models (dummy, scripted)."""

from __future__ import annotations

import asyncio

from populace.core import SharedTimers


class SimulatedLatency:
    """``await latency.wait()`` sleeps ``seconds`` without blocking the loop.

    Waits share one timer per millisecond bucket (:class:`~populace.core.SharedTimers`), so
    half a million agents waiting at once arm one timer. ``in_flight`` counts the waiters.
    """

    __slots__ = ("_timers", "in_flight", "seconds")

    def __init__(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"latency must be >= 0, got {seconds}")
        self.seconds = seconds
        self.in_flight = 0
        self._timers: SharedTimers | None = None

    async def wait(self, seconds: float | None = None) -> None:
        """Wait ``seconds`` (default: the configured latency)."""
        if seconds is None:
            seconds = self.seconds
        if seconds <= 0:
            return
        if self._timers is None:  # created in the loop of the worker that first waits
            self._timers = SharedTimers(asyncio.get_running_loop())
        self.in_flight += 1
        try:
            await self._timers.sleep(seconds)
        finally:
            self.in_flight -= 1

    def reset(self) -> None:
        self._timers = None
