"""A storm forecast and neighbours' talk: personas that remember what they were told.

Every day each villager hears the forecast (an observation), says how worried it is (a
whole number from 0 to 10) and what it tells a neighbour (free text); the next day that
neighbour remembers it. Memory is bounded: what outgrows ``memory_tokens`` is summarised by
the villager's own model.
"""
from dataclasses import dataclass

import numpy as np

from populace.agents import Number, Persona, PersonaOptions, Text
from populace.core import Msg
from populace.launch import Run, Scenario, ScenarioSettings

WORRY = Number(0, 10, integer=True)
TALK = Text()


@dataclass
class Day:
    worry: int | None
    said: str | None
    prompt_tokens: int


class Villager(Persona):
    rules = "A storm may reach your village this week. You live here with your neighbours."

    async def day(self, t: int, seed: int, words: int) -> Msg:
        worry = await self.decide("How worried are you about the storm?", WORRY, step=t,
                                  seed=seed)
        said = await self.decide("What do you tell a neighbour today?", TALK, step=t,
                                 seed=seed, max_tokens=words)
        return Msg(self.id, Day(worry.value, said.value, worry.prompt_tokens))


class Gossip(Scenario):
    name = "gossip"

    class Settings(ScenarioSettings):
        persona: PersonaOptions = PersonaOptions(shown=["age", "job"], memory_tokens=400,
                                                 event_tokens=80)
        words: int = 60  # how much a villager says a day (a chatty persona)

    async def setup(self, run: Run) -> None:
        self.people = await Villager.populate(run)

    async def step(self, run: Run, t: int) -> None:
        strength = int(run.rng("forecast").integers(0, 11))
        await self.people.observe(Msg("radio", f"The forecast says storm strength {strength} "
                                      "out of ten.",
                                      metadata={"step": t, "kind": "observation"}))
        days = await run.collect(self.people.map(Villager.day, t, run.seed, run.settings.words),
                                 as_table=True)
        run.record("days", {"agent_id": self.people.ids, "worry": days.column("worry"),
                            "said": days.column("said"),
                            "prompt_tokens": days.column("prompt_tokens")})
        worry = days.column("worry").to_numpy(zero_copy_only=False).astype(float)
        run.metric("forecast", strength)
        run.metric("mean_worry", float(np.nanmean(worry)) if np.isfinite(worry).any() else None)
        run.metric("unreadable", int(np.isnan(worry).sum()))
        run.metric("prompt_tokens", int(np.max(days.column("prompt_tokens"))))
        run.distribution("worry", worry, range=(0, 11), bins=11)
        # each villager tells one other (a seeded cycle: nobody tells itself)
        ids = np.asarray(self.people.ids)
        order = run.rng("talk").permutation(len(ids))
        said = days.column("said").to_pylist()
        heard = [Msg(int(ids[order[i - 1]]), said[order[i - 1]] or "…",
                     metadata={"step": t}) for i in range(len(ids))]
        await self.people.select(order).scatter(Villager.observe, heard)
