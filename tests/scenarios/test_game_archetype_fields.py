"""The game's archetypes and a round prompt with per-agent fields: an archetype's prompt
is filled with its members' values (a `{profession}` outside `sampling.by` splits the
archetype), never with those of whichever member asked first."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import yaml

from cli_helpers import populace
from populace.results import read_table

MODEL = '''
from populace.llm import Completion, ModelClient, Request


class ByJob(ModelClient):
    """10 to a round prompt that names an artist, else 90."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def send(self, request: Request) -> Completion:
        text = request.messages[0]["content"]
        return Completion(f"The answer is {10 if 'artist' in text else 90}.", self.name)
'''


def test_an_archetype_prompt_shows_its_own_members_fields(tmp_path: Path) -> None:
    (tmp_path / "models.py").write_text(MODEL)
    config = {
        "scenario": "guess_number", "name": "fields", "agents": 400, "rounds": 1,
        "seed": 3, "workers": 2,
        "models": {"m": {"provider": "python", "factory": "models.py:ByJob",
                         "sampling": {"by": ["education"], "samples": 4, "audit": 0.1}}},
        "population": {"aspects": {"education": {"values": ["high school", "doctorate"]},
                                   "profession": {"values": ["artist", "economist"]}}},
        "game": {"protocol": "direct", "prompt": (
            "You are a {profession}. {instruction} Choose a number between {low} and "
            "{high}; the target is {target_rule}")},
    }
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    out = tmp_path / "out"
    done = populace("run", tmp_path / "run.yaml", "--out", out)
    assert done.returncode == 0, done.stderr
    profession = {p["agent_id"]: p["profession"]
                  for p in read_table(out, "profiles").to_pylist()}
    got = Counter((profession[r["agent_id"]], r["number"])
                  for r in read_table(out, "responses").to_pylist())
    assert set(got) == {("artist", 10.0), ("economist", 90.0)}, got
