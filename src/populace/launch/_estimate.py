"""What a run will cost before it starts: a pilot run, extrapolated (``populace estimate``).

The pilot plays the run file with a few agents (50) and one step (every step when the
scenario decides the steps), against the configured models, in a temporary directory, on
the local backend (so that this process's CPU time is all of its client's), after one
short request to each server (:func:`_warm_up`: a server's first request may load what
it needs, and the pilot's one wave of backgrounds would count that as every wave's). Each
step's summary entry counts the calls its models made (``llm``: requests, retries, tokens);
the pilot's counts per agent and step, times the full run's agents and steps, are the
predicted calls and tokens, and ``price_per_million`` makes them a cost.

Wall time is predicted for runs whose time goes to the models, from what the pilot
measures and the full run's limits and processes:

- **service time** ``s``: seconds per call on the wire. The pilot's clients run with fixed
  limits (``adaptive: false``): an adaptive limit starts at 8 and grows per round trip, so
  a pilot of 50 agents would queue in the client and count the queueing as service time
  (issue 28: predictions 2-9x too long). Where the pilot's agents still outnumber the
  limit, Little's law takes the queueing out (``latency × limit / callers``).
- **client CPU per call** ``κ``: the process time of the pilot's steps over their calls.
  Past some concurrency the calls are bound by the client's event loop, not by the
  server's latency (the survey at 512 in flight), and there the pilot's 50 agents are no
  measure of it (a few tenths of a second of CPU, at a tenth of the concurrency): when the
  pilot's CPU term is at least its wire term, ``κ`` is measured again in waves at the full
  run's concurrency until it is steady (≥ 1 s of CPU, two waves agreeing within 5%,
  within a quarter of the predicted run); the time the client waited for a core then
  (the server on the same machine, or any other process) widens the range's high end.
  The waves also measure their **pace** ``π``, their steps' wall time per call: the CPU's
  and the client's idle time between (a server as busy as the client, the steps' ends).
  See :mod:`populace.launch._cpu` and the estimate's ``cpu``.
- **limits** ``L``: ``max_concurrency`` × endpoints × workers (backgrounds: one client,
  ``backgrounds.concurrency`` at most).
- **client cores** ``P`` (:func:`client_cores`): the processes the calls are computed in,
  each with its one event loop: 1 on the local backend (every worker in this process),
  the workers on Ray (a process each; at most this machine's cores without ``address``).
  Backgrounds are written by one client in the launcher: ``P = 1``.

``C`` calls, each caller making ``chain`` of them in a row, take ``max(chain × s, C × s /
L)`` on the wire and ``C × κ / P`` on the CPU (:func:`wall_range`). The client computes
while it waits, so the estimate is the larger of the two, and of ``C × π / P`` where waves
measured the pace; the printed range goes from the wire
alone (the pilot's ``κ`` carries its steps' fixed costs, an overestimate) to their sum
(no overlap at all) plus the waves' wait for a core. Measured, the wire term slightly
overestimates too: the pilot's 50 callers start at once, and that burst is in its service
time (+10-20% on this machine).
An adaptive limit's slow start (8, 16, … up to ``L``, one round trip each) adds its lost
round trips once per client (:func:`ramp_s`).
Backgrounds and the steps are estimated separately (backgrounds first, then the steps).

**Batch mode** (a model's ``batch:``): a job's time does not grow with its requests the
way a wave of calls does (a batch server answers them all within its own turnaround), so
a step lasts what the pilot's step lasted, plus the client's CPU for the extra calls; the
backgrounds go out in jobs of ``backgrounds.concurrency`` requests, one after another,
each as long as the pilot's.

With archetype sampling (a model's ``sampling:``), the archetypes' calls grow with the
number of archetypes and workers, not the agents; only the audited agents' own calls grow
with the agents (see :func:`_archetypes`). The platform's own time per agent (seconds per
million agents for the dummy model; see docs/benchmarks.md) is not included. The measured
errors are in docs/benchmarks.md.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from populace.core import ConfigError, ModelError, backend_kind
from populace.llm import OpenAIConfig, build_model, preflight
from populace.results import RunDirectory

from ._cpu import (
    WAVE_CAP_S,
    WAVE_SHARE,
    ClientCpu,
    StepClock,
    Wave,
    combined,
    cpu_decides,
    measure,
    wave_agents,
)
from ._launcher import launch
from ._runfile import RunFile, parse_run_file

#: The pilot's size when none is given.
PILOT_AGENTS = 50


@dataclass(frozen=True)
class ModelEstimate:
    """One model's share of the full run."""

    model: str
    calls: int
    prompt_tokens: int
    completion_tokens: int
    cost: float | None  # with price_per_million
    latency_s: float | None  # the pilot's mean per call
    concurrency: int | None  # calls in flight at once (None: not bounded)
    wall_s: float | None  # the time these calls take in the full run
    #: with archetype sampling: the calls and tokens of asking every agent instead
    individual: dict[str, int] | None = None
    #: ``wall_s``'s range: the wire and the CPU overlapping fully, or not at all
    wall_range: tuple[float, float] | None = None


@dataclass(frozen=True)
class Estimate:
    """The pilot and what it predicts for the full run."""

    agents: int
    steps: int
    pilot_agents: int
    pilot_steps: int
    pilot_wall_s: float
    models: tuple[ModelEstimate, ...]

    @property
    def calls(self) -> int:
        return sum(m.calls for m in self.all_models)

    @property
    def cost(self) -> float | None:
        costs = [m.cost for m in self.all_models if m.cost is not None]
        return round(sum(costs), 6) if costs else None

    #: Writing the population's backgrounds, before the first step (None: none to write).
    backgrounds: ModelEstimate | None = None
    #: The client's time per call the wall time counts, and how it was measured: the
    #: pilot's own steps, or waves at the full run's concurrency (see ``_cpu``).
    cpu: ClientCpu | None = None

    @property
    def wall_s(self) -> float | None:
        """The models' time: the backgrounds, then the steps, whose models are called in
        the same steps (the slowest one sets the pace)."""
        walls = [m.wall_s for m in self.models if m.wall_s is not None]
        first = self.backgrounds.wall_s if self.backgrounds is not None else None
        if not walls and first is None:
            return None
        return round((max(walls) if walls else 0.0) + (first or 0.0), 3)

    @property
    def wall_range(self) -> tuple[float, float] | None:
        """``wall_s``'s range (see the module docstring)."""
        ranges = [m.wall_range for m in self.models if m.wall_range is not None]
        first = self.backgrounds.wall_range if self.backgrounds is not None else None
        if not ranges and first is None:
            return None
        low, high = first or (0.0, 0.0)
        return (round(low + max((r[0] for r in ranges), default=0.0), 3),
                round(high + max((r[1] for r in ranges), default=0.0), 3))

    @property
    def all_models(self) -> tuple[ModelEstimate, ...]:
        return self.models + ((self.backgrounds,) if self.backgrounds is not None else ())

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(calls=self.calls, cost=self.cost, wall_s=self.wall_s,
                    wall_range=self.wall_range)
        return data


def _latencies(run_dir: Path) -> dict[str, list[float]]:
    """Each model's call latencies in the pilot's recording."""
    out: dict[str, list[float]] = {}
    for path in sorted((run_dir / "llm_calls").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                call = json.loads(line)
            except ValueError:
                continue
            if "text" in call and isinstance(call.get("latency_s"), int | float):
                out.setdefault(str(call.get("model")), []).append(float(call["latency_s"]))
    return out


def _concurrency(config: Any, workers: int) -> int | None:
    if isinstance(config, OpenAIConfig):
        return config.max_concurrency * len(config.base_urls) * workers
    return None


def wall_range(calls: float, chain: float, service_s: float, limit: int | None,
               cpu_s: float, waited_s: float = 0.0) -> tuple[float, float, float]:
    """Seconds that ``calls`` calls take, each caller making ``chain`` of them in a row,
    ``service_s`` each on the wire, at most ``limit`` at once (None: unbounded), and
    ``cpu_s`` of the client's CPU each (and ``waited_s`` for a core, in the high end
    only): (low, estimate, high).

    >>> wall_range(4000, 2, 0.1, 128, 0.0002)  # the wire: 4000 × 0.1 / 128; CPU: 0.8
    (3.125, 3.125, 3.925)
    >>> wall_range(16_384, 10, 0.125, 512, 2**-11)  # bound by the CPU: 8 s, not 4
    (4.0, 8.0, 12.0)
    """
    wire = max(chain * service_s, calls * service_s / limit if limit else 0.0)
    cpu = calls * cpu_s
    return wire, max(wire, cpu), wire + cpu + calls * waited_s


def ramp_s(service_s: float, ceiling: int, start: int, calls: float) -> float:
    """Seconds an adaptive limit's slow start adds: from ``start`` it doubles each round
    trip (``service_s``) up to ``ceiling``; ``calls`` (per client and endpoint) at the
    full limit would have taken ``calls / ceiling`` round trips. 0 for a fixed limit
    (``start == ceiling``) or too few calls to reach it.

    >>> round(ramp_s(0.1, 64, 8, 10_000), 4)  # 8, 16, 32: 3 trips for 56 calls, not 56/64
    0.2125
    """
    trips = 0
    done = 0
    limit = start
    while limit < ceiling and done + limit < calls:
        done += limit
        limit = min(ceiling, limit * 2)
        trips += 1
    return max(0.0, (trips - done / ceiling) * service_s)


def _start(config: Any) -> int:
    """Where ``config``'s limit starts (see ``EndpointPool``)."""
    if not config.adaptive:
        return int(config.max_concurrency)
    return int(min(config.max_concurrency, max(config.min_concurrency, 8)))


def _requests(steps: list[dict[str, Any]]) -> int:
    """The requests the models of ``steps`` (summary entries) made."""
    return sum(c.get("requests", 0) for e in steps for c in e.get("llm", {}).values())


def _fixed_limits(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with every server's client at a fixed limit (see the module docstring)."""
    models = data.get("models")
    if not isinstance(models, dict):
        return data
    return {**data, "models": {
        name: {**m, "adaptive": False} if isinstance(m, dict) and m.get("provider") == "openai"
        else m for name, m in models.items()}}


def _in_process(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` on the local backend: the pilot's process time is then all of its client's
    CPU (on Ray, most of it would be the workers' processes, which this one cannot time)."""
    return {**{k: v for k, v in data.items() if k != "address"}, "backend": "local"}


def client_cores(backend: str, address: str | None, workers: int) -> int:
    """The cores a run's calls are computed on: one per worker where each worker is a
    process of its own (Ray), at most this machine's when they all run on it (no
    ``address``); 1 where the workers share this process and its event loop (local).

    >>> client_cores("local", None, 8), client_cores("ray", "auto", 8)
    (1, 8)
    """
    if backend_kind(backend).ship is None:
        return 1
    if address is not None:
        return workers
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(workers, cores or 1))


#: What a warm-up asks: the shortest answer a chat model gives.
_WARM_UP = ({"role": "user", "content": "Reply with OK."},)


async def _warm_up(models: Mapping[str, Any]) -> None:
    """One short request to every server of every model behind one, before the pilot: a
    server's first request may pay for what it loads on first use (serve-llm's scripted
    rules, a second and more; a chat template; a grammar), and the pilot's first wave
    would count that as service time, which its backgrounds' one wave then multiplies by
    the full run's waves (issue 28: a fresh serve-llm's wave took 1.17 s, 0.17 s once warm,
    and 2,000 agents were predicted 43.5 s, not 10). A warm-up that fails is left to the
    pilot to report."""
    asked: set[tuple[str, str]] = set()
    async with asyncio.TaskGroup() as group:
        for name, config in models.items():
            if not isinstance(config, OpenAIConfig) or (
                    config.batch is not None and config.batch.mode == "files"):
                continue  # vLLM's run_batch: no server
            for url in config.base_urls:
                if (url, config.model) not in asked:
                    asked.add((url, config.model))
                    group.create_task(_ask(name, config.model_copy(update={
                        "base_urls": [url], "batch": None, "max_retries": 0,
                        "adaptive": False, "coalesce": False})))


async def _ask(name: str, config: OpenAIConfig) -> None:
    client = build_model(name, config)
    try:
        await client.complete(_WARM_UP, max_tokens=1)
    except ModelError:
        pass
    finally:
        await client.aclose()


async def estimate(data: dict[str, Any], source: Path, overrides: dict[str, Any] | None = None,
                   *, pilot: int | None = None) -> Estimate:
    """Estimate the run of run file ``data`` (read from ``source``) with ``overrides``,
    from a pilot of ``pilot`` agents (at most the run's agents; default
    :data:`PILOT_AGENTS`, or all the agents of a smaller run)."""
    if pilot is not None and pilot < 1:
        raise ConfigError(f"--pilot {pilot}: a pilot needs at least 1 agent")
    full = parse_run_file(dict(data), source, overrides)
    o = full.options
    if pilot is not None and pilot > o.agents:
        raise ConfigError(f"--pilot {pilot}: more agents than the run has (expected at most "
                          f"{o.agents})")
    if not any(isinstance(c, OpenAIConfig) for c in o.models.values()):
        raise ConfigError(f"{source}: models: no model behind a server to estimate (only "
                          f"{', '.join(sorted({c.provider for c in o.models.values()}))}); "
                          "the dummy and scripted models cost nothing")
    pilot_agents = min(PILOT_AGENTS, o.agents) if pilot is None else pilot
    small: dict[str, Any] = {**(overrides or {})}
    if "steps" in full.scenario.options:
        small["steps"] = 1
    await preflight(dict(o.models))  # an unreachable server: its line now, not a warm-up's
    await _warm_up(o.models)
    pilot_file, summary, latencies, clock = await _play(data, source, small, pilot_agents)
    entries = summary["steps"]
    made = _requests(entries)
    cpu = ClientCpu(clock.cpu_s / made if made else 0.0, 0.0, round(clock.cpu_s, 3), made, 0)
    models, backgrounds = _predict(full, pilot_file, summary, latencies, cpu)
    guess = Estimate(o.agents, o.steps, pilot_agents, len(entries),
                     float(summary.get("wall_s", 0.0)), models, backgrounds, cpu)
    agents = wave_agents(o.agents, _limit(o.models, o.workers),
                         client_cores(o.backend, o.address, o.workers))
    if agents > pilot_agents and _cpu_may_decide(full, models):
        async def wave() -> Wave:
            started = time.perf_counter()
            _, played, _, timed = await _play(data, source, small, agents)
            return Wave(timed.cpu_s, timed.waited_s, _requests(played["steps"]),
                        time.perf_counter() - started,
                        sum(float(e.get("wall_s", 0.0)) for e in played["steps"]))

        cpu = combined(await measure(wave, min(WAVE_SHARE * (guess.wall_s or 0.0),
                                               WAVE_CAP_S)), agents)
        models, backgrounds = _predict(full, pilot_file, summary, latencies, cpu)
        guess = replace(guess, models=models, backgrounds=backgrounds, cpu=cpu)
    return guess


async def _play(data: dict[str, Any], source: Path, overrides: dict[str, Any],
                agents: int) -> tuple[RunFile, dict[str, Any], dict[str, list[float]],
                                      StepClock]:
    """A pilot of ``agents`` agents of run file ``data``, in this process, at fixed limits,
    in a temporary directory: its run file, summary, latencies and clock."""
    data = dict(data)
    population = data.get("population")
    if isinstance(population, dict) and population.get("size") is not None:
        data["population"] = {**population, "size": agents}  # it follows agents
    pilot_file = parse_run_file(_in_process(_fixed_limits(data)), source,
                                {**overrides, "agents": agents})
    clock = StepClock()
    with tempfile.TemporaryDirectory(prefix="populace-estimate-") as tmp:
        run_dir = RunDirectory.create(Path(tmp) / "pilot")
        # Its own cache: a pilot must not find the backgrounds an earlier pilot wrote.
        summary = await launch(pilot_file, run_dir, max_recoveries=0, observers=[clock],
                               cache=Path(tmp) / "cache")
        latencies = _latencies(run_dir.path)
    if summary.get("status") != "completed":
        raise ConfigError(f"{source}: the pilot run ended {summary.get('status')}: "
                          f"{summary.get('error') or 'see its messages'}")
    return pilot_file, summary, latencies, clock


def _limit(models: Mapping[str, Any], workers: int) -> int | None:
    """The most calls in flight of the run's servers' models (None: unbounded)."""
    limits = [_concurrency(c, workers) for c in models.values() if isinstance(c, OpenAIConfig)]
    return None if not limits or None in limits else max(x for x in limits if x is not None)


def _cpu_may_decide(full: RunFile, models: tuple[ModelEstimate, ...]) -> bool:
    """Whether the client's CPU may set the steps' time (:func:`cpu_decides`), in a run
    without a batch model (a wave would wait for a job per call in a row)."""
    if any(isinstance(c, OpenAIConfig) and c.batch is not None
           for c in full.options.models.values()):
        return False
    return any(cpu_decides(m.wall_range[0], m.wall_range[1] - m.wall_range[0])
               for m in models if m.wall_range is not None)


def _predict(full: RunFile, pilot_file: RunFile, summary: dict[str, Any],
             latencies: dict[str, list[float]],
             client: ClientCpu) -> tuple[tuple[ModelEstimate, ...], ModelEstimate | None]:
    """Each model's share of the full run, and the backgrounds', from the pilot's
    ``summary`` and ``latencies`` and the client's time per call."""
    o = full.options
    pilot_agents = pilot_file.options.agents
    entries = summary["steps"]
    pilot_steps = len(entries)
    scale = o.agents * o.steps / (pilot_agents * pilot_steps)
    cores = client_cores(o.backend, o.address, o.workers)
    share = client.per_call_s / cores  # the steps' calls' CPU, per core
    waited = client.waited_per_call_s / cores
    pilot_step_s = sum(float(e.get("wall_s", 0.0)) for e in entries) / max(1, pilot_steps)
    models = []
    for name, config in o.models.items():
        counted = [e.get("llm", {}).get(name, {}) for e in entries]
        requests = sum(c.get("requests", 0) for c in counted)
        if not requests and name not in latencies:
            continue
        totals = (requests, sum(c.get("prompt_tokens", 0) for c in counted),
                  sum(c.get("completion_tokens", 0) for c in counted))
        individual = None
        sampled = [e["sampling"][name] for e in entries if name in (e.get("sampling") or {})]
        if sampled and config.sampling is not None:
            calls, ptok, ctok, individual = _archetypes(
                full, pilot_file, sampled, totals, scale * pilot_steps / o.steps,
                o.steps / pilot_steps, config.sampling.by)
        else:
            calls, ptok, ctok = (x * scale for x in totals)
        prices = getattr(config, "price_per_million", None)
        cost = None if prices is None else round((ptok * prices[0] + ctok * prices[1]) / 1e6, 6)
        seen = latencies.get(name) or []
        latency = sum(seen) / len(seen) if seen else None
        limit = _concurrency(config, o.workers)
        wall = span = None
        if latency is not None:
            step = calls / o.steps
            if isinstance(config, OpenAIConfig) and config.batch is not None:
                # a job lasts what the pilot's did; only the client's CPU grows
                low, mid, high = wall_range(max(0.0, step - requests / pilot_steps), 1,
                                            pilot_step_s, None, share, waited)
                ramp = 0.0
            else:
                if limit is not None:  # the pilot's callers beyond its limit queued
                    callers = pilot_agents / pilot_file.options.workers
                    latency *= min(1.0, limit / o.workers / callers)
                # calls one agent makes in turn (archetypes: no longer per agent)
                chain = 1 if individual is not None else \
                    math.ceil(requests / (pilot_agents * pilot_steps))
                low, mid, high = wall_range(step, chain, latency, limit, share, waited)
                if client.pace_s is not None:  # the waves' pace: the CPU's and its idle
                    mid = max(mid, step * client.pace_s / cores)
                    high = max(high, mid)
                ramp = 0.0 if not isinstance(config, OpenAIConfig) or limit is None else \
                    ramp_s(latency, config.max_concurrency, _start(config),
                           step / limit * config.max_concurrency)
            wall = round(o.steps * mid + ramp, 3)
            span = (round(o.steps * low + ramp, 3), round(o.steps * high + ramp, 3))
        models.append(ModelEstimate(name, round(calls), round(ptok), round(ctok), cost,
                                    None if latency is None else round(latency, 6), limit,
                                    wall, individual, span))
    return tuple(models), _backgrounds(full, summary.get("backgrounds"), client)


def _archetypes(full: RunFile, pilot: RunFile, sampled: list[dict[str, Any]],
                totals: tuple[int, int, int], agents: float, steps: float,
                by: list[str]) -> tuple[float, float, float, dict[str, int]]:
    """An archetype-sampled model's calls and tokens in the full run: the audited agents'
    own (``audit_cost``) grow with the agents; the archetypes' samples with the number of
    archetypes (distinct values of ``by`` in the full population against the pilot's) and
    workers. Also what asking every agent would take (``individual``, per agent).
    ``agents``, ``steps``: the full run's over the pilot's."""
    audit = [sum(s.get("audit_cost", {}).get(k, 0) for s in sampled)
             for k in ("calls", "prompt_tokens", "completion_tokens")]
    kinds = _count_archetypes(full, by) / max(1, _count_archetypes(pilot, by))
    workers = full.options.workers / pilot.options.workers
    shared = [(t - a) * kinds * workers * steps + a * agents * steps
              for t, a in zip(totals, audit, strict=True)]
    individual = {k: round(sum(s.get("individual", {}).get(k, 0) for s in sampled) * agents
                           * steps) for k in ("calls", "prompt_tokens", "completion_tokens")}
    return shared[0], shared[1], shared[2], individual


def _count_archetypes(run_file: RunFile, by: list[str]) -> int:
    """Distinct values of the ``by`` columns in the run's population (1 without one)."""
    table = run_file.sample_population()
    if table is None or not set(by) <= set(table.column_names):
        return 1
    return table.group_by(by).aggregate([]).num_rows


def _backgrounds(full: RunFile, pilot: dict[str, Any] | None,
                 client: ClientCpu) -> ModelEstimate | None:
    """Backgrounds for every agent, at the pilot's calls and tokens per written one (as if
    none were cached yet: an upper bound), in waves of the writer's concurrency
    (``client``: the client's time per call)."""
    o = full.options
    if pilot is None or not pilot.get("generated") or o.population is None:
        return None
    per = o.agents / pilot["generated"]
    name = pilot["model"]
    config = o.models[name]
    prices = getattr(config, "price_per_million", None)
    ptok, ctok = pilot["prompt_tokens"] * per, pilot["completion_tokens"] * per
    cost = None if prices is None else round((ptok * prices[0] + ctok * prices[1]) / 1e6, 6)
    limit = o.population.backgrounds.concurrency
    chat = config if isinstance(config, OpenAIConfig) and config.batch is None else None
    if chat is not None:  # one client, in the launcher: not per worker
        limit = min(limit, chat.max_concurrency * len(chat.base_urls))
    # the pilot's time per wave: its service time (its limits were fixed)
    latency = pilot["wall_s"] / math.ceil(pilot["generated"] / limit)
    ramp = 0.0
    if isinstance(config, OpenAIConfig) and config.batch is not None:
        # jobs of `limit` requests, one after another
        low, mid, high = wall_range(o.agents, math.ceil(o.agents / limit), latency, None,
                                    client.per_call_s, client.waited_per_call_s)
    else:
        low, mid, high = wall_range(o.agents, 1, latency, limit, client.per_call_s,
                                    client.waited_per_call_s)
        if chat is not None:
            ramp = ramp_s(latency, chat.max_concurrency, _start(chat),
                          o.agents / len(chat.base_urls))
    return ModelEstimate(f"{name} (backgrounds)", round(pilot["sent"] * per), round(ptok),
                         round(ctok), cost, round(latency, 6), limit, round(mid + ramp, 3),
                         wall_range=(round(low + ramp, 3), round(high + ramp, 3)))
