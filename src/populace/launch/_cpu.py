"""The client's CPU per call, measured until it is steady (``populace estimate``, issue 28).

Past some concurrency a run's calls are bound by the client's event loop, not by the
server's latency (the survey with 512 calls in flight against a local server), and the
estimate is then the calls times the client's CPU per call ``κ``. The pilot's own ``κ`` is
no measure of it there: 50 agents spend 0.15-0.25 s of CPU on their 500 calls, so a
garbage collection or a busy neighbour is a third of it (0.27-0.49 ms between consecutive
pilots), and with 50 calls in flight instead of 512 each turn of the event loop carries
fewer answers (0.34-0.51 ms where the full run spent 0.34).

So when the CPU may decide the wall time (:func:`cpu_decides`), the client's CPU is
measured again in **waves**: pilots of :func:`wave_agents` agents (the calls one process
of the full run keeps in flight, at most a quarter of the run), one after another in this
process, at fixed limits, until (:func:`steady`) they have measured :data:`CPU_TARGET_S`
of CPU in all and at least two waves agree (relative standard error of their mean ``κ`` at
most :data:`CPU_RSE`), or the next wave would take the waves past their budget
(:data:`WAVE_SHARE` of the predicted run, at most :data:`WAVE_CAP_S`; the first wave always
runs), or :data:`MAX_WAVES` ran. Measured on the survey: waves of 512 agents spent
0.33-0.38 ms per call where the full runs of 2,000 and 20,000 agents in the same process
spent 0.34.

A wave also measures its **pace**: its steps' wall time per call (less its wait for a core,
below), at the full run's concurrency per process. Where the client's CPU decides, the
client is not busy all of a step: the step's start and end, and a server as busy as the
client, leave it idle part of the time. The estimate takes the larger of the wire's time
and the calls at the waves' pace. Where the wire decides, the pace of a wave is the wire's
time per call over the same concurrency, so it adds nothing. Measured on the plain survey
at 2,000 and 20,000 agents, twice each (docs/benchmarks.md): the CPU alone would have
predicted -15%, -9%, -10% and -12%, and the pace predicted +9%, +11%, +21% and +8%. A
wave has exactly as many agents as calls in flight, so its client sometimes waits on
every call at once, where the full run always has a caller ready: its pace errs long, as
the CPU alone errs short, and the run lands between the two.

A wave also measures how long the event loop's thread waited for a core
(``run_delay`` in ``/proc/thread-self/schedstat``: runnable, not running; 0 where Linux
does not count it): the server on the same machine, or any other process, held it. The
full run waits as much per call if the machine stays as busy, but it seldom does: on this
2-core machine, with ``serve-llm`` on the other core, consecutive estimates measured
0.002 and 0.34 ms per call (another tenant came and went), where ``κ`` stayed within
0.25-0.27 ms. So the wait goes into the high end of the printed range, not into the
estimate, which assumes that the client keeps a core to itself. Runs that are bound by
their latency (the education config) and runs with a batch model (a wave would last a
batch job's turnaround per call in a row) keep the pilot's ``κ``.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ._runfile import RunFile

#: CPU (s) the waves measure at least: a pause of tens of milliseconds is then a few percent.
CPU_TARGET_S = 1.0
#: The waves stop once the relative standard error of their mean CPU per call is below it.
CPU_RSE = 0.05
#: The waves measure the CPU when its term, by the pilot's ``κ``, is at least this share
#: of the wire's. The pilot's ``κ`` errs high (a cold process, its steps' fixed costs over
#: few calls, fewer calls in flight), so it says so before the CPU decides: the survey's
#: pilots put the CPU at 1.6-1.9× the wire, the education config's at 0.44-0.73× (a
#: latency-bound run: it keeps the pilot cheap).
CPU_MATTERS = 1.0
#: The waves take at most this share of the predicted run (and it bounds their agents)...
WAVE_SHARE = 0.25
#: ... and at most this many seconds (the first wave always runs).
WAVE_CAP_S = 60.0
#: Waves at most, whatever the budget.
MAX_WAVES = 8


@dataclass(frozen=True)
class Wave:
    """What one pilot's steps took of the client."""

    cpu_s: float  # the process time of its steps
    waited_s: float  # its event loop's thread runnable but not running
    calls: int
    wall_s: float  # the whole pilot's, start-up included
    step_s: float = 0.0  # its steps' wall time


@dataclass(frozen=True)
class ClientCpu:
    """The client's time per call the estimate used, and how it was measured."""

    per_call_s: float  # CPU per call, κ
    waited_per_call_s: float  # waited for a core per call (waves only; else 0)
    measured_s: float  # CPU measured in all
    calls: int  # over these calls
    waves: int  # 0: the pilot's own steps
    wave_agents: int | None = None
    rse: float | None = None  # of the waves' mean κ (two waves or more)
    wall_s: float = 0.0  # the waves' time
    #: the waves' steps' wall time per call, less their wait for a core (waves only): the
    #: pace of one process at the full run's concurrency, its idle time included
    pace_s: float | None = None


def _waited() -> float:
    """Seconds this thread has been runnable but not running (0 where not counted)."""
    try:
        with open("/proc/thread-self/schedstat", encoding="ascii") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


class StepClock:
    """An observer of a pilot: the process time its steps took (the client's CPU) and the
    time its event loop waited for a core."""

    def __init__(self) -> None:
        self.cpu_s = 0.0
        self.waited_s = 0.0
        self._at = (0.0, 0.0)

    def run_started(self, run_file: RunFile, summary: dict[str, Any]) -> None: ...

    def step_started(self, t: int, steps: int) -> None:
        self._at = (time.process_time(), _waited())

    def step_progress(self, t: int, done: int, total: int) -> None: ...

    def step_finished(self, t: int, entry: dict[str, Any]) -> None:
        self.cpu_s += time.process_time() - self._at[0]
        self.waited_s += _waited() - self._at[1]

    def recovering(self, error: BaseException) -> None: ...

    def run_finished(self, summary: dict[str, Any]) -> None: ...


def wave_agents(agents: int, limit: int | None, cores: int) -> int:
    """A wave's agents: the calls one of the full run's ``cores`` client processes keeps
    in flight (``limit`` in all; one call per agent at a time), at most
    :data:`WAVE_SHARE` of the run's ``agents``.

    >>> wave_agents(20_000, 512, 1), wave_agents(2_000, 512, 1), wave_agents(20_000, 512, 4)
    (512, 500, 128)
    """
    flight = min(agents, limit) if limit is not None else agents
    return max(1, min(math.ceil(flight / cores), math.floor(agents * WAVE_SHARE)))


def cpu_decides(wire_s: float, cpu_s: float) -> bool:
    """Whether a CPU term of ``cpu_s`` may set the wall time against ``wire_s`` on the
    wire, given the pilot's ``κ`` (see :data:`CPU_MATTERS`).

    >>> cpu_decides(3.9, 7.4), cpu_decides(3.85, 2.8)  # the survey; the education config
    (True, False)
    """
    return cpu_s > 0 and cpu_s >= CPU_MATTERS * wire_s


def rse(waves: Sequence[Wave]) -> float | None:
    """The relative standard error of the waves' mean CPU per call (None under two).

    >>> round(rse([Wave(1.0, 0, 4000, 2), Wave(1.2, 0, 4000, 2)]), 4)  # 0.25, 0.3 ms
    0.0909
    """
    per_call = [w.cpu_s / w.calls for w in waves if w.calls]
    if len(per_call) < 2 or not statistics.fmean(per_call):
        return None
    return statistics.stdev(per_call) / statistics.fmean(per_call) / math.sqrt(len(per_call))


def steady(waves: Sequence[Wave]) -> bool:
    """Whether ``waves`` measured enough: :data:`CPU_TARGET_S` of CPU, and two waves or
    more whose mean ``κ`` has a relative standard error of at most :data:`CPU_RSE`."""
    spread = rse(waves)
    return sum(w.cpu_s for w in waves) >= CPU_TARGET_S and spread is not None and \
        spread <= CPU_RSE


async def measure(wave: Callable[[], Awaitable[Wave]], budget_s: float) -> list[Wave]:
    """Run ``wave`` until the waves are :func:`steady`, the next one would take them
    past ``budget_s`` (as long as the last one did) or :data:`MAX_WAVES` ran; at least
    once."""
    waves: list[Wave] = []
    spent = 0.0
    while True:
        waves.append(await wave())
        spent += waves[-1].wall_s
        if steady(waves) or len(waves) >= MAX_WAVES or spent + waves[-1].wall_s > budget_s:
            return waves


def combined(waves: Sequence[Wave], agents: int) -> ClientCpu:
    """The waves' CPU and wait per call: their totals over their calls."""
    calls = sum(w.calls for w in waves)
    cpu = sum(w.cpu_s for w in waves)
    waited = sum(w.waited_s for w in waves)
    return ClientCpu(cpu / calls if calls else 0.0, waited / calls if calls else 0.0,
                     round(cpu, 3), calls, len(waves), agents,
                     None if (spread := rse(waves)) is None else round(spread, 4),
                     round(sum(w.wall_s for w in waves), 3),
                     max(0.0, sum(w.step_s for w in waves) - waited) / calls if calls else None)
