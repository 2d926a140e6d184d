"""Archetype sampling in the guessing game and the social network (the survey's is in
test_survey_archetypes.py): both report the decisions shared and the audit's distance per
step; in the game with feedback, whose answers follow each player's own rounds, the
distance grows and the adaptive mode falls back to individual calls; a replay makes none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from cli_helpers import populace
from populace.results import read_summary, read_table

ROOT = Path(__file__).resolve().parents[2]


def write(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config))
    return path


GAME = {"scenario": "guess_number", "name": "game-archetypes", "seed": 4, "agents": 2000,
        "rounds": 4, "workers": 2,
        "models": {"scripted": {"provider": "scripted", "sampling": {
            "by": ["education"], "samples": 16, "audit": 0.1, "fallback": 5}}},
        "population": {"aspects": {"education": {"values": [
            "primary school", "high school", "bachelor's degree", "master's degree",
            "doctorate"]}}},
        "game": {"ratio": "2/3", "level": "P2", "feedback": True, "memory_rounds": 5}}


def test_the_game_falls_back_when_its_players_own_rounds_drive_the_answers(
        tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = populace("run", write(tmp_path / "game.yaml", GAME), "--out", out)
    assert done.returncode == 0, done.stderr
    steps = read_summary(out)["steps"]
    first = steps[0]["sampling"]["scripted"]
    assert first["shared"] == 2000 and "fell_back" not in first
    assert steps[0]["llm"]["scripted"]["sent"] < 2 * 2000 / 2  # P2: two calls an agent
    fell = [e["step"] for e in steps if "fell_back" in (e.get("sampling") or {}).get(
        "scripted", {})]
    assert fell, [e.get("sampling") for e in steps]
    after = [e for e in steps if e["step"] > fell[0]]
    assert after and all("sampling" not in e for e in after)  # every player asked again
    assert all(e["llm"]["scripted"]["sent"] == 2 * 2000 for e in after)
    wide = steps[fell[0] - 1]["sampling"]["scripted"]["decisions"]["guess"]
    assert wide["low"] > 5 >= steps[0]["sampling"]["scripted"]["decisions"]["guess"]["low"]

    again = tmp_path / "replay"
    replayed = populace("run", out / "config.yaml", "--replay", out, "--out", again)
    assert replayed.returncode == 0, replayed.stderr
    assert all(e["llm"]["scripted"]["sent"] == 0 for e in read_summary(again)["steps"])
    timed = ["latency_s"]  # the only column a replay cannot repeat
    assert read_table(again, "responses").drop_columns(timed).equals(
        read_table(out, "responses").drop_columns(timed))
    assert [e.get("sampling") for e in read_summary(again)["steps"]] == \
        [e.get("sampling") for e in steps]


def test_the_social_network_reports_its_audit_every_step(tmp_path: Path) -> None:
    config = yaml.safe_load((ROOT / "examples" / "social" / "llm.yaml").read_text())
    config["models"] = {"scripted": {"provider": "scripted", "sampling": {
        "by": ["politics", "age_group"], "samples": 16, "audit": 0.1}}}
    config["agents"] = config["population"]["size"] = 1000
    out = tmp_path / "out"
    done = populace("run", write(tmp_path / "social.yaml", config), "--out", out)
    assert done.returncode == 0, done.stderr
    for e in read_summary(out)["steps"]:
        action = e["sampling"]["scripted"]["decisions"]["action"]
        assert action["audited"] > 20 and action["low"] <= action["tv"] <= action["high"]
        assert e["llm"]["scripted"]["sent"] < e["sampling"]["scripted"]["shared"]
