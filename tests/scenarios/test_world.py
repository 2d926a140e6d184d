"""The game's environment: announcements in the global environment, reports per group.

Group-level play (SPEC: a group's report is the mean of its members; agents see only their
group's environment) and the winner's announcement go through ``populace.environment``;
its monitored keys reach the run's live statistics.
"""

from __future__ import annotations

import json
import re
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from game_helpers import Scripted, make_config, run_into
from populace.environment import Env, EnvService, UnknownKeyError
from populace.results import RunDirectory, RunMonitor, latest_checkpoint, read_summary
from populace.scenarios.guess_number import play
from populace.scenarios.guess_number._rules import RoundOutcome, score_groups
from populace.scenarios.guess_number._world import (
    announcement,
    build_world,
    group_path,
    publish,
)

REPORT = re.compile(r"Your group's number was ([0-9.]+)\.")


async def test_groups_see_only_their_own_report() -> None:
    # group 0 reports 20, group 1 reports 40: target 15 (half the mean), group 0 wins
    scores = score_groups(np.array([10.0, 30.0, 40.0, 40.0]), np.array([0, 0, 1, 1]),
                          Fraction(1, 2))
    outcome = RoundOutcome(1, 4, 4, 30.0, 35.0, 12.2, scores.target, scores.winner_report, 1)
    assert (scores.target, scores.winner_group) == (15.0, 0)
    world = build_world([0, 1])
    async with EnvService(world) as service:
        await service.apply(publish(outcome, scores))
        for g, expected in ((0, 20.0), (1, 40.0)):
            assert await service.query("report", env=group_path(g)) == expected
            # the global announcement falls through to the group's environment
            assert await service.query("announcement", env=group_path(g)) == \
                announcement(outcome, scores)
        # the global environment holds no group's report, and a group none of another's
        with pytest.raises(UnknownKeyError):
            await service.query("report")
        assert world.find(group_path(1)).query_prefix("rep") == {"report": 40.0}
        assert await service.query("winners") == [20.0]


async def test_group_play_reports_reach_only_their_members(
    tmp_path: Path, scripted: Scripted,
) -> None:
    config = make_config(agents=30, rounds=2, game={"groups": 3, "group_play": True})
    # group g = id % 3 answers 10·(g+1) plus a little per agent: distinct group means.
    config, model = scripted(config, lambda agent, round_no: str(10 * (agent % 3 + 1) + agent // 3))
    path = await run_into(tmp_path, config)
    groups = read_summary(path)["steps"][0]["groups"]
    reports = {g["group"]: g["report"] for g in groups}
    assert len(set(reports.values())) == 3
    conversations = model.conversations
    for agent in range(30):
        heard = [m["content"] for m in conversations[agent, 2] if "Round 1 is over" in
                 m["content"]]
        assert len(heard) == 1
        found = REPORT.findall(heard[0])
        assert found == [f"{reports[agent % 3]:.2f}"], (agent, heard)


async def test_the_environment_is_checkpointed_and_monitored(tmp_path: Path) -> None:
    config = make_config(agents=40, rounds=2, game={"groups": 4, "group_play": True})
    monitor = RunMonitor()
    run = RunDirectory.create(tmp_path / "run")
    summary = await play(config, run, monitor=monitor)
    last = summary["steps"][-1]

    point = latest_checkpoint(run.path)
    assert point is not None and point[0] == 2
    env = Env("game")
    env.set_state(point[1]["envs"][0])
    assert env.query("round") == 2
    assert env.query("target") == pytest.approx(last["target"])
    assert env.query("winner_group") == last["winner_group"]
    for g in last["groups"]:
        assert env.find(group_path(g["group"])).query("report") == pytest.approx(g["report"])

    shown = monitor.snapshot().environment
    json.dumps(shown, allow_nan=False)
    assert shown["round"] == 2
    assert shown["target"] == pytest.approx(last["target"])
    assert shown["announcement"].startswith("Round 2 is over.")
    assert shown["group-3/report"] == pytest.approx(last["groups"][3]["report"])


async def test_resume_restores_the_environment(tmp_path: Path) -> None:
    # Stop after round 1, resume: the list of winners in the environment holds both rounds'
    # winners only if the resumed run started from the checkpointed environment.
    config = make_config(agents=12, rounds=2, workers=1, game={"groups": 2, "group_play": True})
    run = RunDirectory.create(tmp_path / "run")
    monitor = RunMonitor()
    real_finished = monitor.step_finished

    def stop_after_round_one(entry: dict[str, Any], stats: Any) -> None:
        real_finished(entry, stats)
        monitor.request_stop()

    monitor.step_finished = stop_after_round_one  # type: ignore[method-assign]
    summary = await play(config, run, monitor=monitor)
    assert summary["status"] == "stopped" and len(summary["steps"]) == 1

    summary = await play(config, run, resume=True)
    assert summary["status"] == "completed"
    point = latest_checkpoint(run.path)
    assert point is not None and point[0] == 2
    assert point[1]["envs"][0]["data"]["winners"] == [r["winner_number"] for r in summary["steps"]]
