"""Garbage-collector settings for processes that host very many long-lived objects.

CPython's cyclic collector runs a young-generation pass every 700 allocations and a full
pass that walks every tracked object (every agent) when enough survive. A step creates a
few short-lived objects per agent, so with default thresholds half of a step's CPU went to
collections that free nothing (measured: 100k agents, 1.1 s → 0.7 s CPU per step). Raising
the thresholds keeps the collector working, just far less often. A young generation of a
million allocations outlives most of a step's short-lived objects (a call's reply, its
answer), so they are freed by reference counting before any pass looks at them: at 200,000
agents a step's collections took 0.5 s at 50,000 and 0.05 s at 1,000,000 (issue 21); a pass
over a million young objects pauses the loop for about 40 ms.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

YOUNG_THRESHOLD = 1_000_000
OLD_THRESHOLD = 1_000


def tune_gc() -> Callable[[], None]:
    """Raise collection thresholds for a simulation; returns a function restoring them."""
    old = gc.get_threshold()
    gc.set_threshold(max(old[0], YOUNG_THRESHOLD), old[1], max(old[2], OLD_THRESHOLD))

    def restore() -> None:
        gc.set_threshold(*old)

    return restore
