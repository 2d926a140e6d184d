"""Placing a group's members on one worker (``create(..., colocate=labels)``)."""

from __future__ import annotations

import numpy as np
import pytest

from game_helpers import game_file
from populace.core import Agent, Msg, Simulation
from populace.results import RunDirectory, read_table
from populace.scenarios.guess_number import play


class Echo(Agent):
    __slots__ = ()

    async def reply(self, msg: Msg) -> Msg:
        return Msg(self.id, (self.id, msg.content))

    def where(self) -> int:
        return self.id


async def test_each_label_lives_on_one_worker_and_load_is_balanced() -> None:
    labels = np.arange(1000) % 8  # interleaved groups, as the game deals them
    async with Simulation(workers=3) as sim:
        group = await sim.create(Echo, 1000, colocate=labels)
        workers = np.array([group[i].worker for i in range(1000)])
        for g in range(8):
            assert len(set(workers[labels == g])) == 1, g
        counts = [w.agents for w in sim.statistics().workers]
        assert sum(counts) == 1000 and max(counts) - min(counts) <= 125  # one group of 125
        # Ids stay the member order: agent i is member i, wherever it lives.
        answers = await group.broadcast(Msg("m", "x"))
        assert [m.content[0] for m in answers] == list(range(1000))
        assert await group.map(Echo.where) == list(range(1000))
        # Handles and sub-groups keep working on non-contiguous placements.
        picked = group.select(labels == 3)
        assert [m.sender for m in await picked.broadcast(Msg("m", "y"))] == \
            list(np.flatnonzero(labels == 3))
        relay = group[999].reply(Msg("m", group[0].reply(Msg("m", "z"))))
        assert (await relay).content == (999, Msg(0, (0, "z")))


async def test_profiles_follow_their_agents() -> None:
    async with Simulation(workers=2) as sim:
        labels = [i % 2 for i in range(10)]
        group = await sim.create(Echo, 10, colocate=labels,
                                 profiles={"name": [f"a{i}" for i in range(10)]})
        names = await group.map(lambda agent: agent.profile["name"])
        assert names == [f"a{i}" for i in range(10)]


async def test_wrong_number_of_labels_is_an_error() -> None:
    async with Simulation(workers=2) as sim:
        with pytest.raises(ValueError, match="one label per agent"):
            await sim.create(Echo, 5, colocate=[0, 1])


async def test_game_results_do_not_depend_on_colocation(tmp_path: object) -> None:
    tables = []
    for colocate in (False, True):
        cfg = game_file({
            "agents": 300, "rounds": 2, "workers": 3, "seed": 9,
            "models": {"dummy": {"provider": "dummy", "latency": 0.0}},
            "game": {"groups": 4, "colocate_groups": colocate},
        })
        run = RunDirectory.create(tmp_path / f"c{colocate}")  # type: ignore[operator]
        await play(cfg, run)
        tables.append(read_table(run.path))
    assert tables[0].column("number").to_pylist() == tables[1].column("number").to_pylist()
