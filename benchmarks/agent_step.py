"""What making the stepped agent current costs per driver step, side by side in one process.

    .venv/bin/python benchmarks/agent_step.py

Drives ``--agents`` coroutines that await one Signal (two steps each: start, wake), through
``populace.core._driver.Call`` as it is (a context variable set and reset around each send),
through the same step without it (as before ``current_agent`` existed), and through the
cheaper alternative that was weighed: a module global saved and restored around the send,
which Tasks started by the agent would not inherit. Best and median of ``--repeat``
interleaved runs, in ns per step.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from populace.core import Signal
from populace.core._driver import Call
from populace.core._placeholder import Driving


class _Sink:
    def _complete(self, slot: int, value: Any) -> None:
        pass

    def _failed(self, slot: int, error: BaseException) -> None:
        raise error


class Untagged(Call):
    """The step before ``current_agent``."""

    __slots__ = ()

    def step(self) -> None:
        Driving.depth += 1
        try:
            awaited = self.coro.send(None)
        except StopIteration as stop:
            self.sink._complete(self.slot, stop.value)
            return
        finally:
            Driving.depth -= 1
        awaited._park(self.step)


_now: int | None = None


class ModuleGlobal(Call):
    """The id in a module global, saved and restored: cheaper, not inherited by Tasks."""

    __slots__ = ()

    def step(self) -> None:
        global _now
        Driving.depth += 1
        before, _now = _now, self.agent
        try:
            awaited = self.coro.send(None)
        except StopIteration as stop:
            self.sink._complete(self.slot, stop.value)
            return
        finally:
            _now = before
            Driving.depth -= 1
        awaited._park(self.step)


async def _body(signal: Signal) -> int:
    await signal
    return 1


def ns_per_step(cls: type[Call], n: int, loop: asyncio.AbstractEventLoop) -> float:
    signal = Signal(loop)
    sink = _Sink()
    coros = [_body(signal) for _ in range(n)]
    t0 = time.perf_counter()
    for i, coro in enumerate(coros):
        cls(coro, sink, i, loop, i).step()
    signal.fire()
    return (time.perf_counter() - t0) / (2 * n) * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=41)
    args = parser.parse_args()
    loop = asyncio.new_event_loop()
    kinds: dict[str, type[Call]] = {"untagged": Untagged, "context variable (this tree)": Call,
                                    "module global": ModuleGlobal}
    times: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(args.repeat):
        for name, cls in kinds.items():
            times[name].append(ns_per_step(cls, args.agents, loop))
    base = statistics.median(times["untagged"])
    for name, values in times.items():
        med = statistics.median(values)
        print(f"{name:30s} best {min(values):6.0f} ns  median {med:6.0f} ns  "
              f"(+{med - base:.0f} ns)")
    loop.close()


if __name__ == "__main__":
    main()
