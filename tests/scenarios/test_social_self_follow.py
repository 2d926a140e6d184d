"""No persona follows itself. Its own post can come back to its feed through a followee's
repost once the post has left the window (an edge list with cycles, a window of one step);
before issue 33 a follow of that item's author made ``follow`` rows with target = agent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from cli_helpers import run_in_process
from populace.results import read_table
from populace.scenarios.social import Item, parse_action


def cyclic_run(directory: Path, policy: str) -> Path:
    rng = np.random.default_rng(101)
    n, edges = 500, ["follower,followee"]
    for a in range(n):  # each agent follows Poisson(5) others: cycles of every length
        for b in rng.choice(n - 1, size=int(rng.poisson(5)), replace=False):
            edges.append(f"{a},{int(b + (b >= a))}")
    (directory / "edges.csv").write_text("\n".join(edges) + "\n")
    run: dict[str, Any] = {
        "scenario": "social", "agents": n, "steps": 8, "seed": 5,
        "settings": {"graph": {"edges": "edges.csv"}, "feed": {"k": 20, "window": 1},
                     "active": 1.0, "policy": policy,
                     "scripted": {"repost_base": 0.3, "per_share": 0.0, "similar": 0.0,
                                  "like": 0.0, "post": 0.05, "follow": 0.6},
                     "news": [{"step": 1, "label": "claim", "text": "The dam will fail.",
                               "authors": 5}]}}
    (directory / "run.yaml").write_text(yaml.safe_dump(run))
    return directory / "run.yaml"


@pytest.mark.parametrize("policy", ["scripted", "dummy"])
def test_no_follow_row_of_a_run_targets_the_agent_itself(
        policy: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    code, _, err = run_in_process(capsys, monkeypatch, "run", cyclic_run(tmp_path, policy),
                                  "--out", out)
    assert code == 0, err
    actions = read_table(out, "actions").to_pylist()
    follows = [r for r in actions if r["action"] == "follow"]
    assert len(follows) > 200  # the rule follows often: the case is exercised
    assert [r for r in follows if r["target"] == r["agent_id"]] == []
    edges = read_table(out, "follows").to_pylist()
    assert edges and [e for e in edges if e["follower"] == e["followee"]] == []


def test_a_models_follow_of_its_own_post_is_nothing() -> None:
    mine = Item(root=7, via=9, author=2, shares=1, same=False, origin=5)
    reply = '{"action": "follow", "item": 1, "text": ""}'
    assert parse_action(reply, [mine], me=5) == (0, None, None)
    assert parse_action(reply, [mine], me=2) == (4, 5, None)  # another's post: followed
    assert parse_action(reply, [mine]) == (4, 5, None)
