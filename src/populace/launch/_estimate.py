"""What a run will cost before it starts: a pilot run, extrapolated (``populace estimate``).

The pilot plays the run file with a few agents (50) and one step (every step when the
scenario decides the steps), against the configured models, in a temporary directory. Each
step's summary entry counts the calls its models made (``llm``: requests, retries, tokens);
the pilot's counts per agent and step, times the full run's agents and steps, are the
predicted calls and tokens, and ``price_per_million`` makes them a cost.

Wall time is predicted for runs whose time goes to the models: a step lasts as long as an
agent's calls in sequence (``calls`` per agent per step) take, once per wave of agents that
the clients let in flight at once (``max_concurrency`` × endpoints × workers; unbounded for
the dummy and scripted models), at the pilot's mean latency per call. With archetype
sampling (a model's ``sampling:``), the archetypes' calls grow with the number of archetypes
and workers, not the agents; only the audited agents' own calls grow with the agents (see
:func:`_archetypes`). The platform's own
time per agent (seconds per million agents for the dummy model; see docs/benchmarks.md) is
not included.
"""

from __future__ import annotations

import json
import math
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from populace.core import ConfigError
from populace.llm import OpenAIConfig
from populace.results import RunDirectory

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
    def all_models(self) -> tuple[ModelEstimate, ...]:
        return self.models + ((self.backgrounds,) if self.backgrounds is not None else ())

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(calls=self.calls, cost=self.cost, wall_s=self.wall_s)
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
    small: dict[str, Any] = {**(overrides or {}), "agents": pilot_agents}
    if "steps" in full.scenario.options:
        small["steps"] = 1
    data = dict(data)
    population = data.get("population")
    if isinstance(population, dict) and population.get("size") is not None:
        data["population"] = {**population, "size": pilot_agents}  # it follows agents
    pilot_file: RunFile = parse_run_file(data, source, small)
    with tempfile.TemporaryDirectory(prefix="populace-estimate-") as tmp:
        run_dir = RunDirectory.create(Path(tmp) / "pilot")
        # Its own cache: a pilot must not find the backgrounds an earlier pilot wrote.
        summary = await launch(pilot_file, run_dir, max_recoveries=0,
                               cache=Path(tmp) / "cache")
        latencies = _latencies(run_dir.path)
    if summary.get("status") != "completed":
        raise ConfigError(f"{source}: the pilot run ended {summary.get('status')}: "
                          f"{summary.get('error') or 'see its messages'}")
    entries = summary["steps"]
    pilot_steps = len(entries)
    scale = o.agents * o.steps / (pilot_agents * pilot_steps)
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
        wall = None
        if latency is not None and individual is not None:  # calls no longer per agent
            waves = 1.0 if limit is None else max(1.0, calls / o.steps / limit)
            wall = round(o.steps * waves * latency, 3)
        elif latency is not None:
            per_agent = requests / (pilot_agents * pilot_steps)  # calls one agent makes in turn
            waves = 1.0 if limit is None else max(1.0, o.agents / limit)
            wall = round(o.steps * math.ceil(per_agent) * latency * waves, 3)
        models.append(ModelEstimate(name, round(calls), round(ptok), round(ctok), cost,
                                    None if latency is None else round(latency, 6), limit,
                                    wall, individual))
    return Estimate(o.agents, o.steps, pilot_agents, pilot_steps,
                    float(summary.get("wall_s", 0.0)), tuple(models),
                    _backgrounds(full, summary.get("backgrounds")))


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


def _backgrounds(full: RunFile, pilot: dict[str, Any] | None) -> ModelEstimate | None:
    """Backgrounds for every agent, at the pilot's calls and tokens per written one (as if
    none were cached yet: an upper bound)."""
    o = full.options
    if pilot is None or not pilot.get("generated") or o.population is None:
        return None
    per = o.agents / pilot["generated"]
    name = pilot["model"]
    prices = getattr(o.models[name], "price_per_million", None)
    ptok, ctok = pilot["prompt_tokens"] * per, pilot["completion_tokens"] * per
    cost = None if prices is None else round((ptok * prices[0] + ctok * prices[1]) / 1e6, 6)
    latency = pilot["wall_s"] / max(1.0, pilot["generated"] / o.population.backgrounds.concurrency)
    waves = max(1.0, o.agents / o.population.backgrounds.concurrency)
    return ModelEstimate(f"{name} (backgrounds)", round(pilot["sent"] * per), round(ptok),
                         round(ctok), cost, round(latency, 6),
                         o.population.backgrounds.concurrency, round(waves * latency, 3))
