"""A scenario that is not the game, for the results tests (written against the public API).

Shoppers of three regions on two plans decide each day how much to spend: their region and
plan set the level, a seeded draw the rest, and a shopper's spending grows day by day.
Each step records one row per shopper (``purchases``) and one row for the day (``prices``,
no agent_id), reports plain metrics, a text metric, a mapping metric and a distribution.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from matplotlib.figure import Figure

from populace.core import Agent, Profile
from populace.launch import Run, Scenario, ScenarioSettings
from populace.results import RunData

REGIONS = {"north": 10.0, "south": 30.0, "east": 50.0}
PLANS = {"basic": 0.0, "premium": 15.0}
POPULATION = {"aspects": {"region": {"values": list(REGIONS)},
                          "plan": {"values": list(PLANS)}}}


class Shopper(Agent):
    __slots__ = ("days", "growth", "level")

    def __init__(self, id: int, profile: Profile | None = None, *, growth: float) -> None:
        super().__init__(id, profile)
        assert profile is not None
        self.level = REGIONS[str(profile["region"])] + PLANS[str(profile["plan"])]
        self.days = 0
        self.growth = growth

    async def shop(self, seed: int) -> float:
        self.days += 1
        noise = np.random.default_rng([seed, self.id]).uniform(-5, 5)
        return float(self.level + self.growth * self.days + noise)

    def get_state(self) -> dict[str, Any]:
        return {"days": self.days}

    def set_state(self, state: dict[str, Any]) -> None:
        self.days = state["days"]


class Market(Scenario):
    name = "market"
    defaults = {"agents": 90, "steps": 4}

    class Settings(ScenarioSettings):
        growth: float = 2.0
        threshold: float = 40.0

    async def setup(self, run: Run) -> None:
        self.shoppers = await run.create(Shopper, init={"growth": run.settings.growth})
        self.revenue = 0.0

    async def step(self, run: Run, t: int) -> None:
        seed = int(run.rng("shop").integers(1 << 30))
        spend = np.asarray(await run.collect(self.shoppers.map(Shopper.shop, seed)))
        bought = spend > run.settings.threshold
        self.revenue += float(spend.sum())
        run.record("purchases", {"agent_id": self.shoppers.ids, "spend": spend,
                                 "bought": bought, "visits": np.full(spend.size, t)})
        run.record("prices", pa.table({"price": [1.0 + 0.1 * t]}))
        plans = np.asarray(run.population.column("plan").to_pylist())
        run.metric("mean_spend", float(spend.mean()))
        run.metric("buyers", int(bought.sum()))
        run.metric("revenue", self.revenue)
        run.metric("busiest", "east")  # text: in the tables, not a series
        run.metric("by_plan", {p: float(spend[plans == p].mean()) for p in PLANS})
        run.distribution("spend", spend, range=(0.0, 100.0), bins=20)

    def get_state(self) -> float:
        return self.revenue

    def set_state(self, state: float) -> None:
        self.revenue = state

    def figures(self, run: RunData) -> dict[str, Figure]:
        """One figure of the scenario's own: buyers' share per step."""
        fig = Figure(figsize=(6, 3))
        ax = fig.subplots()
        ax.plot(run.metric_steps(), run.metric("buyers") / (run.agents or 1))
        fig.suptitle("share of shoppers who bought")
        return {"buyers_share": fig}
