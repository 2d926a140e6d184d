"""Opinions on a map: people meet their neighbours every simulated day and talk.

Each person holds an opinion in [0, 1] and lives in one of two towns (the west and the east
half of a square map). Every day they wander a little, meet the people within ``radius``
and move their opinion toward those that are not too far from their own (bounded
confidence: a gap above ``confidence`` is ignored), and a little toward their town's mood,
which the town hall recomputes each evening. On weekends people meet twice as many
neighbours. A mayor in each town notices who walks into their street.

It is a :class:`~populace.launch.Scenario`, so ``populace run`` gives it the whole platform
(overrides, per-day Parquet, resume, recovery, the studio, ``populace report``), and it
shows the environment API end to end:

- ``Env`` tree: the global environment holds everyone's stated opinion, the date and a
  meeting counter; each town has its own environment with its ``mood``, which people of the
  other town cannot see;
- ``run.serve`` + ``EnvClient``: agents read and write through the service (in-process on
  the local backend, a Ray actor on Ray); each worker sends its agents' operations of one
  tick as one batch;
- ``Timeline``: simulated days, written into the global environment as ``date``;
- ``Map2D``: positions, ``nearby`` for meetings, ``watch`` for the mayors' streets (the map
  lives in the central process; each person is told whom they meet).

Run it (about a second for the defaults):

    populace run examples/opinions/opinions.yaml
    populace run examples/opinions/opinions.yaml --agents 20000 --rounds 30 --backend ray
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any

import numpy as np

from populace.core import Agent, Profile
from populace.environment import Env, EnvClient, Map2D, Op, Timeline
from populace.launch import Run, Scenario, ScenarioSettings, StudioView

TOWNS = ("west", "east")


class Person(Agent):
    """Somebody with an opinion, a town and neighbours."""

    __slots__ = ("agreed", "env", "met", "next_opinion", "opinion", "rules", "town")

    def __init__(self, id: int, profile: Profile | None = None, *, env: EnvClient,
                 rules: dict[str, Any]) -> None:
        super().__init__(id, profile)
        assert profile is not None
        self.env = env
        self.rules = rules
        self.town: str = profile["town"]
        self.opinion: float = profile["first_opinion"]
        self.next_opinion = self.opinion
        self.met = 0
        self.agreed = 0

    async def meet(self, near: list[int]) -> float:
        """Talk to the nearest neighbours (``near``, nearest first); decide tomorrow's
        opinion and return it."""
        rules = self.rules
        # The date (global) and my town's mood (visible only from my town's environment),
        # then what each neighbour said yesterday: two batched round trips.
        day, mood = await self.env.apply([Op.query("date"), Op.query("mood", env=self.town)])
        contacts = rules["contacts"] * (2 if day.weekday() >= 5 else 1)
        heard = await self.env.apply([Op.query(f"opinion/{n}") for n in near[:contacts]])
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

    def get_state(self) -> dict[str, Any]:
        return {"opinion": self.opinion, "next": self.next_opinion}

    def set_state(self, state: dict[str, Any]) -> None:
        self.opinion = self.next_opinion = state["opinion"]


def _ignore(event: Any) -> None:
    """A listener that only makes its key monitored (the studio shows monitored keys)."""


class Opinions(Scenario):
    """Bounded-confidence opinion dynamics between two towns, over simulated days."""

    name = "opinions"
    defaults = {"agents": 2000, "steps": 14, "workers": 2, "seed": 7}
    answer_range = (0.0, 1.0)  # the studio's live histogram shows tomorrow's opinions

    @classmethod
    def studio(cls, config: Any) -> StudioView:
        """What the studio's forms suggest, and what its live histogram shows."""
        return StudioView(answers="opinions for tomorrow (0 to 1)",
                          message="The town halls announce a joint festival.",
                          changes="settings.confidence=0.1")

    class Settings(ScenarioSettings):
        size: float = 100.0       # the map is size x size
        radius: float = 3.0       # who you meet
        contacts: int = 6         # at most this many (twice as many on weekends)
        confidence: float = 0.25  # opinions further apart than this do not move each other
        convergence: float = 0.3  # how far toward an acceptable neighbour you move
        town_pull: float = 0.05   # how far toward your town's mood you move each day
        walk: float = 2.0         # typical distance walked per day
        start: date = date(2024, 3, 1)

    async def setup(self, run: Run) -> None:
        s, n = run.settings, run.agents
        rng = run.rng("people")
        # Where people live and what they think at first: the west leans low, the east high.
        xs, ys = rng.uniform(0, s.size, n), rng.uniform(0, s.size, n)
        town_of = np.where(xs < s.size / 2, 0, 1)
        opinions = np.clip(rng.normal(np.where(town_of == 0, 0.3, 0.7), 0.15), 0.0, 1.0)
        self.ids = np.arange(n)
        self.towns = np.array(TOWNS)[town_of]

        world = Env("global")
        self.town_paths = {name: world.child(name).path for name in TOWNS}
        for name in TOWNS:
            members = opinions[self.towns == name]
            world.child(name).register("mood", float(members.mean()) if members.size else 0.5,
                                       owner="hall")
        for key in ("meetings", "agreements"):
            world.register(key, 0)
        for i, o in enumerate(opinions.tolist()):
            world.register(f"opinion/{i}", o, owner=i)
        self.timeline = Timeline(datetime.combine(s.start, datetime.min.time()),
                                 timedelta(days=1))
        world.register("date", self.timeline.now.date())
        self.world = await run.serve(world)
        for key in ("meetings", "agreements"):  # shown live in the studio
            await self.world.monitor(_ignore, key=key)

        self.plane = Map2D(s.size, s.size, cell_size=s.radius)
        self.plane.place_many(self.ids, xs, ys)
        self.visits = dict.fromkeys(TOWNS, 0)
        for name in TOWNS:
            if (self.towns == name).any():
                mayor = int(np.flatnonzero(self.towns == name)[0])

                def entered(center: int, other: int, name: str = name) -> None:
                    self.visits[name] += 1
                self.plane.watch(mayor, 2 * s.radius, on_enter=entered)

        rules = {k: getattr(s, k) for k in ("contacts", "confidence", "convergence",
                                             "town_pull")}
        self.people = await run.create(
            Person, profiles={"town": [self.town_paths[t] for t in self.towns.tolist()],
                              "first_opinion": opinions.tolist()},
            init={"env": run.env_client(), "rules": rules})

    async def step(self, run: Run, t: int) -> None:
        s, n = run.settings, run.agents
        self.timeline.advance()
        await self.world.update("date", self.timeline.now.date())
        before = dict(self.visits)
        meetings, agreements = await self.world.apply([Op.query("meetings"),
                                                       Op.query("agreements")])
        # Everyone wanders (one vectorised move; the mayors' watches are evaluated once).
        walk = run.rng("walk").normal(0.0, s.walk, (2, n))
        px, py = self.plane.positions(self.ids)
        self.plane.move_many(self.ids, np.clip(px + walk[0], 0, s.size),
                             np.clip(py + walk[1], 0, s.size))
        near = [self.plane.nearby((x, y), s.radius, exclude=i).tolist()
                for i, x, y in zip(self.ids.tolist(), *self.plane.positions(self.ids),
                                   strict=True)]
        # Everyone listens (reads only), then everyone speaks: reads and writes never mix
        # within a phase, so the outcome does not depend on the order agents run in.
        current = np.asarray(await run.collect(self.people.scatter(Person.meet, near)))
        await self.people.map(Person.speak)
        moods = {}
        for name in TOWNS:
            members = current[self.towns == name]
            moods[name] = float(members.mean()) if members.size else 0.5
        await self.world.apply([Op.set("mood", moods[name], env=self.town_paths[name])
                                for name in TOWNS])
        met_total, agreed_total = await self.world.apply([Op.query("meetings"),
                                                          Op.query("agreements")])
        met = met_total - meetings
        run.record("opinions", {"agent_id": self.ids, "town": self.towns.tolist(),
                                "opinion": current})
        run.metric("date", self.timeline.now.date().isoformat())
        run.metric("mean", round(float(current.mean()), 4))
        run.metric("std", round(float(current.std()), 4))
        run.metric("meetings", met)
        run.metric("agreed", round((agreed_total - agreements) / max(met, 1), 4))
        for name in TOWNS:
            run.metric(f"mood_{name}", round(moods[name], 4))
        for name in TOWNS:
            run.metric(f"visits_{name}", self.visits[name] - before[name])
        run.distribution("opinion", current, range=(0.0, 1.0), bins=20)

    def get_state(self) -> dict[str, Any]:
        xs, ys = self.plane.positions(self.ids)
        return {"timeline": self.timeline.get_state(), "xs": xs, "ys": ys,
                "visits": dict(self.visits)}

    def set_state(self, state: dict[str, Any]) -> None:
        self.timeline.set_state(state["timeline"])
        self.plane.move_many(self.ids, state["xs"], state["ys"])
        self.visits = dict(state["visits"])  # after the move, whose watch events it replaces
