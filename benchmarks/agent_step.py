"""What making the stepped agent current costs per driver step, side by side in one process.

    .venv/bin/python benchmarks/agent_step.py

Drives ``--agents`` coroutines that await one Signal (two steps each: start, wake), through
``populace.core._driver.Call`` as it is (the running call noted in ``Driving.call``,
saved and restored around each send; Tasks get the agent from a task factory), and through
the step before issue 21 (a depth counter and a context variable set and reset around each
send). Best and median of ``--repeat`` interleaved runs, in ns per step.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from contextvars import ContextVar
from typing import Any

from populace.core import Signal
from populace.core._driver import Call
from populace.core._placeholder import Driving


class _Sink:
    def _complete(self, slot: int, value: Any) -> None:
        pass

    def _failed(self, slot: int, error: BaseException) -> None:
        raise error


class _Depth:
    depth = 0


_var: ContextVar[int | None] = ContextVar("agent_step_bench", default=None)


class ContextVariable(Call):
    """The step before issue 21: a depth counter and a context variable per send."""

    __slots__ = ()

    def step(self) -> None:
        outer = Driving.call  # today's Signal needs it to be driven
        Driving.call = self
        _Depth.depth += 1
        token = _var.set(self.agent)
        try:
            awaited = self.coro.send(None)
        except StopIteration as stop:
            self.sink._complete(self.slot, stop.value)
            return
        finally:
            _var.reset(token)
            _Depth.depth -= 1
            Driving.call = outer
        awaited._park(self)

    __call__ = step


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
    kinds: dict[str, type[Call]] = {"running call (this tree)": Call,
                                    "context variable (before)": ContextVariable}
    times: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(args.repeat):
        for name, cls in kinds.items():
            times[name].append(ns_per_step(cls, args.agents, loop))
    base = statistics.median(times["running call (this tree)"])
    for name, values in times.items():
        med = statistics.median(values)
        print(f"{name:30s} best {min(values):6.0f} ns  median {med:6.0f} ns  "
              f"(+{med - base:.0f} ns)")
    loop.close()


if __name__ == "__main__":
    main()
