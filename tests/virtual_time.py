"""An event loop whose clock moves only when it would wait: timers fire in order, at once,
whatever the machine is doing (for tests about simulated time; no real sleeping).

The loop asks its selector to wait until the next timer; this selector, finding no I/O
ready, moves the clock forward by that wait instead of sleeping. A loop with nothing to do
and no timer (a wait without end) waits for real I/O, as any loop.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _Selector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[Any]:
        if timeout is None:
            return super().select(None)
        ready = super().select(0)
        if not ready:
            self.now += max(0.0, timeout)
        return ready


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop on virtual time, from 0."""

    def __init__(self) -> None:
        self._virtual = _Selector()
        super().__init__(self._virtual)

    def time(self) -> float:
        return self._virtual.now


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on a :class:`VirtualTimeLoop`."""
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(main)
