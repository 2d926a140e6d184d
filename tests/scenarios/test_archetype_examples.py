"""The archetype run files of the game and the social network (examples/guess_number/
archetypes-*.yaml, examples/social/archetypes.yaml) run as their comments say, at a
size a test can afford: one round shared by archetypes and audited, and the game over
rounds falling back once its players' own rounds drive the answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import populace
from populace.results import read_summary

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("level", ["p1", "p2"])
def test_one_round_is_shared_by_the_archetypes_and_audited(tmp_path: Path,
                                                            level: str) -> None:
    out = tmp_path / "out"
    done = populace("run", EXAMPLES / "guess_number" / f"archetypes-{level}.yaml",
                    "--agents", "1000", "--out", out)
    assert done.returncode == 0, done.stderr
    (step,) = read_summary(out)["steps"]
    got = step["sampling"]["scripted"]
    assert got["shared"] == 1000 and got["decisions"]["guess"]["audited"] > 0
    # 30 archetypes x 32 samples x 2 calls (answer, extraction) on each of 2 workers
    assert step["llm"]["scripted"]["requests"] == 3840 + got["audit_cost"]["calls"]
    assert "asking every agent" in done.stdout


def test_the_game_over_rounds_falls_back_after_round_2(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = populace("run", EXAMPLES / "guess_number" / "archetypes-rounds.yaml",
                    "--agents", "2000", "--out", out)
    assert done.returncode == 0, done.stderr
    steps = read_summary(out)["steps"]
    assert "fell_back" not in steps[0]["sampling"]["scripted"]
    assert steps[1]["sampling"]["scripted"]["fell_back"] == ["guess"]
    assert steps[1]["sampling"]["scripted"]["decisions"]["guess"]["low"] > 5
    assert all("sampling" not in e and e["llm"]["scripted"]["requests"] == 2 * 2000
               for e in steps[2:])


def test_the_social_example_reports_its_audit(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = populace("run", EXAMPLES / "social" / "archetypes.yaml", "--agents", "2000",
                    "--steps", "3", "--out", out)
    assert done.returncode == 0, done.stderr
    for e in read_summary(out)["steps"]:
        got = e["sampling"]["scripted"]
        assert got["shared"] == e["active"] and "tv" in got["decisions"]["action"]
        assert e["llm"]["scripted"]["requests"] == 12 * 32 + got["audit_cost"]["calls"]
