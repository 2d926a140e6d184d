"""A scenario written only against the documented API, for the launcher's tests.

Voters lean yes or no; every step each one hears last step's yes share from the shared
environment, moves its lean toward it, waits ``think`` seconds (the "LLM call") and votes.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from populace.core import Agent, Profile
from populace.environment import Env, EnvClient, Op
from populace.launch import Run, Scenario, ScenarioSettings


class Voter(Agent):
    __slots__ = ("broken", "env", "lean", "think")

    def __init__(self, id: int, profile: Profile | None = None, *, env: EnvClient,
                 think: float, broken: int = -1) -> None:
        super().__init__(id, profile)
        self.env = env
        self.think = think
        self.broken = broken
        self.lean = 0.5

    async def vote(self, draw: float) -> bool:
        if self.id == self.broken:
            raise ValueError(f"voter {self.id} cannot decide")
        share = await self.env.query("yes_share")
        self.lean = 0.8 * self.lean + 0.2 * share
        if self.think:
            await asyncio.sleep(self.think)
        yes = draw < self.lean
        if yes:
            await self.env.incr("yes_total")
        return yes

    def get_state(self) -> dict[str, Any]:
        return {"lean": self.lean}

    def set_state(self, state: dict[str, Any]) -> None:
        self.lean = state["lean"]


class Votes(Scenario):
    name = "votes"
    defaults = {"agents": 200, "steps": 4}

    class Settings(ScenarioSettings):
        start_share: float = 0.6
        think: float = 0.0
        fail_at: int = 0  # a step that raises, for the error tests
        broken: int = -1  # a voter whose vote raises, for the error tests

    async def setup(self, run: Run) -> None:
        env = Env("town")
        env.register("yes_share", run.settings.start_share)
        env.register("yes_total", 0)
        self.env = await run.serve(env)
        self.voters = await run.create(Voter, init={"env": run.env_client(),
                                                    "think": run.settings.think,
                                                    "broken": run.settings.broken})
        self.history: list[float] = []

    async def step(self, run: Run, t: int) -> None:
        if t == run.settings.fail_at:
            raise RuntimeError(f"step {t} breaks on purpose")
        draws = run.rng("votes").random(run.agents)
        votes = np.asarray(await run.collect(self.voters.scatter(Voter.vote, draws.tolist())))
        leans = np.asarray(await self.voters.map(lambda v: v.lean))
        share = float(votes.mean())
        await self.env.apply([Op.set("yes_share", share)])
        self.history.append(share)
        run.record("votes", {"agent_id": self.voters.ids, "yes": votes, "lean": leans})
        run.metric("yes_share", share)
        run.metric("yes_total", await self.env.query("yes_total"))
        run.metric("trend", share - self.history[0])
        run.distribution("lean", leans, range=(0.0, 1.0), bins=10)

    def get_state(self) -> list[float]:
        return list(self.history)

    def set_state(self, state: list[float]) -> None:
        self.history = list(state)


class FixedTown(Votes):
    """The same, for a town whose size is not the user's to choose."""

    name = "fixed-town"
    options = Votes.options - {"agents"}
