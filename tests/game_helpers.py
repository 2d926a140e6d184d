"""Shared by the game's tests: a small config, a run into a directory, a scripted model.

``ScriptedModel`` answers what the test says and records every request, so tests can check
what each participant was told; the ``scripted`` fixture (tests/scenarios/conftest.py)
installs it into play().
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from populace.core import derive_seed, seed_for
from populace.llm import ChatMessage, Completion, ModelStats
from populace.results import RunDirectory
from populace.scenarios.guess_number import RunConfig, play


def make_config(**changes: Any) -> RunConfig:
    """200 agents, 3 rounds on 2 workers, dummy model at 10 ms; ``game`` merged key by key."""
    data: dict[str, Any] = {
        "name": "test", "seed": 7, "agents": 200, "rounds": 3, "workers": 2,
        "models": {"dummy": {"provider": "dummy", "latency": 0.01}},
    }
    game = changes.pop("game", {})
    data.update(changes)
    data["game"] = game
    return RunConfig.model_validate(data)


async def run_into(tmp_path: Path, config: RunConfig, name: str = "run") -> Path:
    rd = RunDirectory.create(tmp_path / name)
    await play(config, rd)
    return rd.path



class ScriptedModel:
    """Answers ``answer(agent_id, round)`` and records every request, keyed the same way.

    Participants pass ``seed=seed_for(derive_seed(run seed, round), agent id)``; inverting that
    tells the model who is asking. ``prompts`` holds the last message (the round prompt),
    ``conversations`` every message sent.
    """

    def __init__(self, name: str, config: RunConfig,
                 answer: Callable[[int, int], str]) -> None:
        self.name = name
        self._who = {seed_for(derive_seed(config.seed, r), i): (i, r)
                     for i in range(config.agents) for r in range(1, config.rounds + 1)}
        self._answer = answer
        self.prompts: dict[tuple[int, int], str] = {}
        self.conversations: dict[tuple[int, int], list[ChatMessage]] = {}
        self.closed = False

    async def complete(
        self,
        messages: Sequence[dict[str, str]],
        *,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        max_tokens: int | None = None,
        response_format: dict[str, Any] | None = None,
    ) -> Completion:
        assert seed is not None
        agent, round_no = self._who[seed]
        self.prompts[agent, round_no] = messages[-1]["content"]
        self.conversations[agent, round_no] = [dict(m) for m in messages]
        await asyncio.sleep(0)  # answer on a later tick, like a real model
        text = self._answer(agent, round_no)
        return Completion(text, self.name, prompt_tokens=len(messages[-1]["content"]),
                          completion_tokens=len(text))

    def statistics(self) -> ModelStats:
        return ModelStats(self.name, len(self.prompts), 0, 0, 0, 0)

    async def aclose(self) -> None:
        self.closed = True


def merged_prompts(models: list[ScriptedModel]) -> dict[tuple[int, int], str]:
    out: dict[tuple[int, int], str] = {}
    for m in models:
        out.update(m.prompts)
    return out


def merged_conversations(models: list[ScriptedModel]
                         ) -> dict[tuple[int, int], list[ChatMessage]]:
    out: dict[tuple[int, int], list[ChatMessage]] = {}
    for m in models:
        out.update(m.conversations)
    return out


def result_message(entry: dict[str, Any]) -> str:
    """What the moderator tells everyone after a round with a winner (summary.json entry)."""
    return (f"Round {entry['round']} is over. The target was {entry['target']:.2f} and the "
            f"winning number was {entry['winner_number']:g}.")
