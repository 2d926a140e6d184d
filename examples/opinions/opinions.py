"""Opinions on a map: people meet their neighbours every simulated day and talk.

Each person holds an opinion in [0, 1] and lives in one of two towns (the west and the east
half of a square map). Every day they wander a little, meet the people within
``radius`` and move their opinion toward those that are not too far from their own
(bounded confidence: a gap above ``confidence`` is ignored), and a little toward their
town's mood, which the town hall recomputes each evening. On weekends people meet twice as
many neighbours. A mayor in each town notices who walks into their street.

It shows the environment API end to end:

- ``Env`` tree: the global environment holds everyone's stated opinion, the date and a
  meeting counter; each town has its own environment with its ``mood``, which people of the
  other town cannot see;
- ``EnvService`` + ``EnvClient``: agents read and write through the service; each worker
  sends its agents' operations of one tick as one batch;
- ``Timeline``: simulated days, mirrored into the global environment as ``date``;
- ``Map2D``: positions, ``nearby`` for meetings, ``watch`` for the mayors' streets.

Run it (about a second for the defaults):

    .venv/bin/python examples/opinions/opinions.py
    .venv/bin/python examples/opinions/opinions.py --agents 20000 --days 30 --workers 2
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from populace.core import Agent, PerWorker, Profile, Simulation, wait
from populace.environment import Env, EnvClient, EnvService, Map2D, Op, Timeline
from populace.results import RunMonitor

DEFAULTS: dict[str, Any] = {
    "agents": 2000,
    "days": 14,
    "workers": 2,
    "seed": 7,
    "size": 100.0,          # the map is size x size
    "radius": 3.0,          # who you meet
    "contacts": 6,          # at most this many (twice as many on weekends)
    "confidence": 0.25,     # opinions further apart than this do not move each other
    "convergence": 0.3,     # how far toward an acceptable neighbour you move
    "town_pull": 0.05,      # how far toward your town's mood you move each day
    "walk": 2.0,            # typical distance walked per day
    "start": "2024-03-01",
}
TOWNS = ("west", "east")


class Person(Agent):
    """Somebody with an opinion, a town and neighbours."""

    __slots__ = ("agreed", "env", "map", "met", "next_opinion", "opinion", "rules", "town")

    def __init__(self, id: int, profile: Profile | None = None, *, env: EnvClient,
                 map: Map2D, rules: dict[str, Any]) -> None:
        super().__init__(id, profile)
        assert profile is not None
        self.env = env
        self.map = map
        self.rules = rules
        self.town: str = profile["town"]
        self.opinion: float = profile["opinion"]
        self.next_opinion = self.opinion
        self.met = 0
        self.agreed = 0

    async def meet(self) -> float:
        """Talk to the nearest neighbours; decide tomorrow's opinion, and return it."""
        rules = self.rules
        # The date (global) and my town's mood (visible only from my town's environment),
        # then what each neighbour said yesterday: two batched round trips.
        day, mood = await self.env.apply([Op.query("date"), Op.query("mood", env=self.town)])
        contacts = rules["contacts"] * (2 if day.weekday() >= 5 else 1)
        near = self.map.nearby(self.map.position(self.id), rules["radius"], exclude=self.id)
        heard = await self.env.apply([Op.query(f"opinion/{n}")
                                      for n in near[:contacts].tolist()])
        mine = self.opinion
        shift = 0.0
        self.agreed = 0
        for theirs in heard:
            if abs(theirs - mine) < rules["confidence"]:
                shift += rules["convergence"] * (theirs - mine)
                self.agreed += 1
        if heard:
            mine += shift / len(heard)
        mine += rules["town_pull"] * (mood - mine)
        self.next_opinion = min(1.0, max(0.0, mine))
        self.met = len(heard)
        return self.next_opinion

    async def speak(self) -> None:
        """Say today's opinion in public; count meetings and agreements (shared counters)."""
        self.opinion = self.next_opinion
        await self.env.update(f"opinion/{self.id}", self.opinion)
        if self.met:
            await self.env.apply([Op.incr("meetings", self.met),
                                  Op.incr("agreements", self.agreed)])


def _heard(opinions: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """What the studio's histogram shows of the day's answers: tomorrow's opinions (and no
    model latency: nobody asked a model)."""
    return np.asarray(opinions, dtype=np.float64), np.full(len(opinions), np.nan)


async def run(config: dict[str, Any], monitor: RunMonitor | None = None) -> dict[str, Any]:
    """Run the scenario; returns ``{"config", "days": [per-day summary], "final"}``.

    ``monitor`` (given by ``populace run``) receives each day as a round, so the studio
    shows the days live: progress, the histogram of opinions, the environment's counters.
    """
    cfg = {**DEFAULTS, **config}
    n, size = int(cfg["agents"]), float(cfg["size"])
    rng = np.random.default_rng(cfg["seed"])

    # Where people live and what they think at first: the west leans low, the east high.
    xs, ys = rng.uniform(0, size, n), rng.uniform(0, size, n)
    town_of = np.where(xs < size / 2, 0, 1)
    opinions = np.clip(rng.normal(np.where(town_of == 0, 0.3, 0.7), 0.15), 0.0, 1.0)
    towns = [TOWNS[t] for t in town_of.tolist()]

    world = Env("global")
    town_envs = {name: world.child(name) for name in TOWNS}
    for name, env in town_envs.items():
        env.register("mood", float(opinions[[t == name for t in towns]].mean()), owner="hall")
    world.register("meetings", 0)
    world.register("agreements", 0)
    for i, o in enumerate(opinions.tolist()):
        world.register(f"opinion/{i}", o, owner=i)
    timeline = Timeline(datetime.fromisoformat(cfg["start"]), timedelta(days=1))
    world.register("date", timeline.now.date())
    timeline.on_step(lambda s: world.update("date", s.time.date()))
    # Live values for a dashboard: statistics() shows monitored keys.
    world.monitor(lambda e: None, key="meetings")
    world.monitor(lambda e: None, key="agreements")

    plane = Map2D(size, size, cell_size=float(cfg["radius"]))
    plane.place_many(np.arange(n), xs, ys)
    visits = {name: 0 for name in TOWNS}
    mayors = {name: towns.index(name) for name in TOWNS if name in towns}
    for name, mayor in mayors.items():
        def entered(center: int, other: int, name: str = name) -> None:
            visits[name] += 1
        plane.watch(mayor, 2 * float(cfg["radius"]), on_enter=entered)

    rules = {k: cfg[k] for k in ("radius", "contacts", "confidence", "convergence",
                                 "town_pull")}
    town_paths = [town_envs[t].path for t in towns]
    days: list[dict[str, Any]] = []
    async with EnvService(world, max_concurrency=64) as service, \
            Simulation(workers=int(cfg["workers"]), seed=int(cfg["seed"])) as sim:
        people = await sim.create(
            Person, n, profiles={"town": town_paths, "opinion": opinions.tolist()},
            init={"env": PerWorker(EnvClient, service), "map": plane, "rules": rules})
        if monitor is not None:
            monitor.run_started(name="opinions", agents=n, rounds=int(cfg["days"]), low=0.0,
                                high=1.0, bins=40, workers=int(cfg["workers"]))
            monitor.simulation_started(sim)
        for _ in range(int(cfg["days"])):
            if monitor is not None and monitor.stop_requested:
                break  # stopped from the studio: the days so far are the result
            started = time.perf_counter()
            timeline.advance()
            before = (world.query("meetings"), world.query("agreements"), dict(visits))
            # Everyone wanders (one vectorised move; the mayors' watches are evaluated once).
            walk = rng.normal(0.0, float(cfg["walk"]), (2, n))
            px, py = plane.positions(np.arange(n))
            plane.move_many(np.arange(n), np.clip(px + walk[0], 0, size),
                            np.clip(py + walk[1], 0, size))
            # Everyone listens (reads only), then everyone speaks: reads and writes never mix
            # within a phase, so the outcome does not depend on the order agents run in.
            listening = people.map(Person.meet)
            if monitor is not None:
                monitor.round_started(timeline.step, listening, _heard)
                while not listening.done():
                    await wait([listening], timeout=0.1)
                    monitor.round_progress(sim.statistics())
            await listening
            await people.map(Person.speak)
            current = np.array([world.query(f"opinion/{i}") for i in range(n)])
            for env in town_envs.values():
                members = [t == env.path for t in town_paths]
                env.update("mood", float(current[members].mean()))
            days.append({
                "day": timeline.step,
                "date": timeline.now.date().isoformat(),
                "mean": round(float(current.mean()), 4),
                "std": round(float(current.std()), 4),
                "meetings": (met := world.query("meetings") - before[0]),
                "agreed": round((world.query("agreements") - before[1]) / max(met, 1), 4),
                **{f"mood_{name}": round(town_envs[name].query("mood"), 4) for name in TOWNS},
                **{f"visits_{name}": visits[name] - before[2][name] for name in TOWNS},
            })
            if monitor is not None:
                for key, value in service.statistics().env.all_monitored().items():
                    monitor.set_environment(key, value)
                for name in TOWNS:
                    monitor.set_environment(f"{name}/mood", round(town_envs[name].query("mood"), 4))
                monitor.round_finished({
                    "round": timeline.step, "n": n, "n_valid": n, "mean": days[-1]["mean"],
                    "median": float(np.median(current)), "std": days[-1]["std"],
                    "wall_s": time.perf_counter() - started}, sim.statistics())
        final_stats = service.statistics()
    return {
        "config": cfg,
        "days": days,
        "final": {
            "opinion_mean": days[-1]["mean"] if days else float(opinions.mean()),
            "opinion_std": days[-1]["std"] if days else float(opinions.std()),
            "env_ops": final_stats.ops,
            "env_batches": final_stats.batches,
            "monitored": dict(final_stats.env.monitored),
        },
    }


def report(result: dict[str, Any]) -> None:
    print(f"{'day':>4} {'date':<11}{'mean':>7}{'std':>7}{'meetings':>10}{'agreed':>8}"
          f"{'mood W':>8}{'mood E':>8}{'visits W':>10}{'visits E':>10}")
    for d in result["days"]:
        print(f"{d['day']:>4} {d['date']:<11}{d['mean']:>7.3f}{d['std']:>7.3f}"
              f"{d['meetings']:>10,}{d['agreed']:>8.1%}{d['mood_west']:>8.3f}"
              f"{d['mood_east']:>8.3f}{d['visits_west']:>10}{d['visits_east']:>10}")
    f = result["final"]
    print(f"environment service: {f['env_ops']:,} operations in {f['env_batches']:,} batches; "
          f"monitored: {f['monitored']}")
    if result["days"]:
        spread = statistics.fmean(d["std"] for d in result["days"][-3:])
        print(f"final opinion mean {f['opinion_mean']:.3f}, std {f['opinion_std']:.3f} "
              f"(last 3 days' std {spread:.3f})")


def main() -> None:
    parser = argparse.ArgumentParser(description="Opinions exchanged on a map over days.")
    for key in ("agents", "days", "workers", "seed"):
        parser.add_argument(f"--{key}", type=int, default=DEFAULTS[key])
    for key in ("radius", "confidence", "convergence", "walk"):
        parser.add_argument(f"--{key}", type=float, default=DEFAULTS[key])
    args = parser.parse_args()
    report(asyncio.run(run(vars(args))))


if __name__ == "__main__":
    main()
