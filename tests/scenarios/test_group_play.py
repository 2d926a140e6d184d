"""Group-level play: each group reports its members' mean; the groups are scored."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pytest

from game_helpers import game_file
from populace.core import ConfigError
from populace.results import RunDirectory, read_summary, read_table
from populace.scenarios.guess_number import play, score_groups, score_round
from populace.scenarios.guess_number._rules import group_outcome


def test_reports_are_member_means_and_the_closest_group_wins() -> None:
    numbers = np.array([10.0, 30.0, np.nan, 60.0, 80.0, 5.0])
    groups = np.array([0, 0, 0, 1, 1, 2])
    s = score_groups(numbers, groups, Fraction(2, 3))
    assert s.reports.tolist() == [20.0, 70.0, 5.0]
    assert s.sizes.tolist() == [3, 2, 1] and s.n_valid.tolist() == [2, 2, 1]
    assert s.mean == pytest.approx(95 / 3)
    assert s.target == pytest.approx(2 / 3 * 95 / 3)  # 21.1: group 0's 20 is closest
    assert (s.winner_group, s.winner_report) == (0, 20.0)
    assert s.as_list()[0] == {"group": 0, "n": 3, "n_valid": 2, "report": 20.0}


def test_a_group_without_valid_answers_has_no_report_and_ties_go_to_the_lower_id() -> None:
    s = score_groups(np.array([np.nan, 40.0, 20.0]), np.array([3, 5, 7]), Fraction(1, 2), 0)
    assert np.isnan(s.reports[0]) and s.as_list()[0]["report"] is None
    assert s.target == pytest.approx(15.0)  # 1/2 × mean(40, 20); the empty group is left out
    assert s.winner_group == 7
    tie = score_groups(np.array([10.0, 30.0]), np.array([4, 2]), Fraction(1, 1))
    assert (tie.target, tie.winner_group) == (20.0, 2)
    empty = score_groups(np.array([np.nan, np.nan]), np.array([0, 1]), Fraction(2, 3))
    assert (empty.target, empty.winner_group, empty.mean) == (None, None, None)


def test_the_round_keeps_individual_statistics_and_takes_the_groups_score() -> None:
    numbers = np.array([0.0, 100.0, 50.0, 50.0])
    groups = np.array([0, 0, 1, 1])
    individual = score_round(1, numbers, Fraction(2, 3), 5.0)
    scored = group_outcome(individual, score_groups(numbers, groups, Fraction(2, 3), 5.0))
    assert (scored.mean, scored.std, scored.n_valid) == (individual.mean, individual.std, 4)
    assert scored.target == pytest.approx(5 + 2 / 3 * 50)
    assert (scored.winner_number, scored.n_winners) == (50.0, 2)  # both groups report 50


def test_group_play_needs_two_groups() -> None:
    with pytest.raises(ConfigError, match=r"game\.group_play needs at least two groups"):
        game_file({"game": {"group_play": True}})
    ok = game_file({"agents": 30, "population": {"aspects": {"x": {"values": ["a", "b"]}},
                                                 "groups": {"by": "x"}},
                    "game": {"group_play": True}})
    assert ok.config.group_count() == 2


async def test_group_play_end_to_end_on_the_scripted_model(tmp_path: Path) -> None:
    data: dict[str, Any] = {
        "name": "gp", "seed": 3, "agents": 120, "rounds": 2, "workers": 2,
        "models": {"s": {"provider": "scripted", "invalid": 0.1}},
        "game": {"groups": 6, "group_play": True, "level": "P2"},
    }
    config = game_file(data)
    run = RunDirectory.create(tmp_path / "run")
    await play(config, run)
    table = read_table(run.path)
    summary = read_summary(run.path)
    assert summary["status"] == "completed"
    for entry in summary["steps"]:
        rows = table.filter(pc.equal(table.column("round"), entry["round"]))
        numbers = rows.column("number").to_numpy(zero_copy_only=False)
        groups = rows.column("group").to_numpy()
        reports = [g["report"] for g in entry["groups"]]
        assert [g["group"] for g in entry["groups"]] == list(range(6))
        assert [g["n"] for g in entry["groups"]] == [20] * 6
        for g in entry["groups"]:
            mine = numbers[(groups == g["group"]) & ~np.isnan(numbers)]
            assert g["n_valid"] == mine.size and g["report"] == pytest.approx(mine.mean())
        assert entry["group_mean"] == pytest.approx(np.mean(reports))
        assert entry["target"] == pytest.approx(2 / 3 * np.mean(reports))
        best = min(range(6), key=lambda i: (abs(reports[i] - entry["target"]), i))
        assert entry["winner_group"] == best
        assert entry["winner_number"] == pytest.approx(reports[best])
        assert entry["mean"] == pytest.approx(np.nanmean(numbers))  # every answer's mean
        assert entry["n_valid"] < entry["n"] == 120  # invalid answers are left out
    # Players are told how they are scored, and who won.
    calls = sorted((run.path / "llm_calls").glob("*.jsonl"))
    text = "".join(p.read_text() for p in calls)
    assert "split into 6 groups: a group's number is the average of its members'" in text
    assert f"(the average of group {summary['steps'][0]['winner_group']})" in text
