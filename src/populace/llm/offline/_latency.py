"""The simulated thinking time of offline models (dummy, scripted)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from populace.core import SharedTimers, Signal


async def _no_wait() -> None:
    return None


class SimulatedLatency:
    """``await latency.wait()`` sleeps ``seconds`` without blocking the loop.

    Waits share one timer per millisecond bucket (:class:`~populace.core.SharedTimers`), so
    half a million agents waiting at once arm one timer. ``in_flight`` counts the waiters.
    ``wait`` hands back the timer's signal itself, not a coroutine around it: a million
    waiting agents hold a million fewer coroutine frames (issue 21).
    """

    __slots__ = ("_timers", "seconds")

    def __init__(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"latency must be >= 0, got {seconds}")
        self.seconds = seconds
        self._timers: SharedTimers | None = None

    @property
    def in_flight(self) -> int:
        """Calls waiting now (counted when asked: nothing is counted per call)."""
        return self._timers.waiting() if self._timers is not None else 0

    def wait(self, seconds: float | None = None) -> Awaitable[None]:
        """Wait ``seconds`` (default: the configured latency)."""
        signal = self.signal(self.seconds if seconds is None else seconds)
        return _no_wait() if signal is None else signal

    def signal(self, seconds: float) -> Signal | None:
        """The timer's signal for a wait of ``seconds``; None when there is nothing to wait
        (for callers that step the wait themselves, as the dummy model's calls do)."""
        if seconds <= 0:
            return None
        if self._timers is None:  # created in the loop of the worker that first waits
            self._timers = SharedTimers(asyncio.get_running_loop())
        return self._timers.sleep(seconds)

    def reset(self) -> None:
        self._timers = None
