"""A coin-flip scenario written only against the documented API (``populace.launch``,
``populace.core.Agent``), for the studio's tests: every step each agent flips a biased coin.

It reports three metrics per step (a share, a count and a text), one distribution (heads so
far per agent) and records one per-agent table, ``flips``. With ``delay`` the answers of a
step arrive over ``delay`` seconds, in four waves, so a page can watch a step fill.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from populace.core import Agent, Profile
from populace.launch import Run, Scenario, ScenarioSettings


class Flipper(Agent):
    """Flips a coin that lands heads with probability ``bias``."""

    __slots__ = ("bias", "delay")

    def __init__(self, id: int, profile: Profile | None = None, *, bias: float,
                 delay: float) -> None:
        super().__init__(id, profile)
        self.bias = bias
        self.delay = delay

    async def flip(self, seed: int) -> float:
        if self.delay:
            await asyncio.sleep(self.delay * (self.id % 4 + 1) / 4)
        return float(np.random.default_rng([seed, self.id]).random() < self.bias)


class Coins(Scenario):
    """Biased coins, flipped once a step by everyone."""

    name = "coins"
    answer_range = (0.0, 1.0)  # the live histogram: tails and heads

    class Settings(ScenarioSettings):
        bias: float = 0.5
        delay: float = 0.0  # seconds the slowest answer of a step takes

    async def setup(self, run: Run) -> None:
        s = run.settings
        self.people = await run.create(Flipper, init={"bias": s.bias, "delay": s.delay})
        self.heads = np.zeros(run.agents, dtype=np.int64)

    async def step(self, run: Run, t: int) -> None:
        seed = int(run.rng("flip").integers(2**31))
        flips = np.asarray(await run.collect(self.people.map(Flipper.flip, seed)))
        self.heads += flips.astype(np.int64)
        run.record("flips", {"agent_id": np.arange(run.agents), "heads": flips,
                             "heads_so_far": self.heads})
        run.metric("share_heads", float(flips.mean()))
        run.metric("total_heads", int(self.heads.sum()))
        run.metric("leader", f"agent {int(self.heads.argmax())}")
        run.distribution("heads_so_far", self.heads, range=(-0.5, run.steps + 0.5),
                         bins=run.steps + 1)

    def get_state(self) -> Any:
        return {"heads": self.heads.tolist()}

    def set_state(self, state: Any) -> None:
        self.heads = np.asarray(state["heads"], dtype=np.int64)
