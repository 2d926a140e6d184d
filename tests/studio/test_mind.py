"""An agent's mind over the studio's API, on real runs of the game and of a scenario of the
user's own: its state from the checkpoint, its LLM calls from the call log, the
conversation its model saw last."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

from populace.launch import launch, load_run_file
from populace.results import RunDirectory
from populace.studio import AgentBrowser, Runs, UnknownAgent, create_app

HOST = "http://127.0.0.1:8765"  # a loopback studio checks the Host header

GAME = """\
scenario: guess_number
name: mind-game
agents: 30
rounds: 2
workers: 2
seed: 11
models:
  scripted: {provider: scripted}
population:
  aspects:
    profession:
      values: [economist, artist, writer]
"""

SCENARIO = '''
from populace.core import Agent, Msg
from populace.launch import Scenario


class Asker(Agent):
    __slots__ = ("asked", "models")

    def __init__(self, id, profile=None, *, models):
        super().__init__(id, profile)
        self.models = models
        self.asked = 0

    async def ask(self, t):
        messages = [{"role": "system", "content": f"You are agent {self.id}."},
                    {"role": "user", "content": f"Day {t}: pick a number between 0 and 9."}]
        answer = await self.models["llm"].complete(messages, seed=1000 * t + self.id)
        self.asked += 1
        self.memory.add(Msg(self.id, answer.text, role="assistant"))
        return answer.text

    def get_state(self):
        return {**super().get_state(), "asked": self.asked, "notes": "x" * 30_000,
                "seen": list(range(500))}


class Ask(Scenario):
    async def setup(self, run):
        self.people = await run.create(Asker, init={"models": run.models()})

    async def step(self, run, t):
        answers = await run.collect(self.people.map(Asker.ask, t))
        run.record("answers", {"agent_id": self.people.ids, "text": answers})
'''


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mind")
    (root / "game.yaml").write_text(GAME)
    (root / "ask.py").write_text(SCENARIO)
    (root / "ask.yaml").write_text(yaml.safe_dump({
        "scenario": "ask.py:Ask", "agents": 12, "steps": 2, "workers": 2, "seed": 3,
        "models": {"llm": {"provider": "scripted"}}}))
    for name in ("game", "ask"):
        summary = asyncio.run(launch(load_run_file(root / f"{name}.yaml"),
                                     RunDirectory.create(root / "runs" / name)))
        assert summary["status"] == "completed", summary.get("error")
    return root / "runs"


@pytest.fixture(scope="module")
def client(runs_dir: Path) -> Iterator[TestClient]:
    runs = Runs(runs_dir, roots=[runs_dir.parent])
    yield TestClient(create_app(runs, interval=0.1), base_url=HOST)
    runs.shutdown(timeout=30)


def logged_calls(run: Path, agent_id: int) -> list[dict[str, Any]]:
    """The agent's calls found by reading the whole call log: what the index must give."""
    lines = [json.loads(line) for path in sorted((run / "llm_calls").glob("*.jsonl"))
             for line in path.read_text().splitlines()]
    return sorted((c for c in lines if c.get("agent") == agent_id), key=lambda c: c["time"])


def test_a_players_mind(client: TestClient, runs_dir: Path) -> None:
    r = client.get("/api/runs/game/agents/7/mind")
    assert r.status_code == 200, r.text
    mind = r.json()
    assert mind["agent_id"] == 7
    assert mind["profile"]["profession"] in ("economist", "artist", "writer")
    state = mind["state"]
    assert (state["source"], state["step"], state["group"]) == ("checkpoint", 2, "participants")
    # the game's memory: its own answers and the moderator's results, round after round
    memory = mind["persona"]["memory"]
    assert [(m["kind"], m["step"]) for m in memory] == [
        ("decision", 1), ("observation", 1), ("decision", 2), ("observation", 2)]
    assert "The answer is" in memory[0]["text"]
    assert mind["persona"]["text"] is None  # the game renders it: the last prompt shows it
    logged = logged_calls(runs_dir / "game", 7)
    assert len(logged) == 4  # two rounds of two calls (the answer, then its extraction)
    calls = mind["calls"]
    assert len(calls) == 4 and mind["more_calls"] is False
    for call, line in zip(calls, logged, strict=True):
        assert call["prompt_tokens"] == line["prompt_tokens"] > 0
        assert call["completion_tokens"] == line["completion_tokens"] > 0
        assert call["text"] == line["text"]
        assert call["messages"] == line["request"]["messages"]
        assert call["model"] == "scripted" and call["latency_s"] >= 0
        assert call["seed"] == str(line["request"]["seed"])
    assert mind["conversation"] == logged[-1]["request"]["messages"]
    # the persona and the first round's answer are in what the model saw in round 2
    seen = " ".join(m["content"] for m in calls[2]["messages"])
    assert mind["profile"]["profession"] in seen and memory[0]["text"] in seen


def test_the_state_at_an_earlier_checkpoint(client: TestClient) -> None:
    mind = client.get("/api/runs/game/agents/7/mind", params={"step": 1}).json()
    assert mind["state"]["step"] == 1 and len(mind["persona"]["memory"]) == 2
    assert len(mind["calls"]) == 4  # the calls are the run's, whatever the step
    gone = client.get("/api/runs/game/agents/7/mind", params={"step": 9}).json()
    assert gone["state"] is None and "step 9" in gone["state_error"]


def test_a_user_scenarios_agent(client: TestClient, runs_dir: Path) -> None:
    mind = client.get("/api/runs/ask/agents/3/mind").json()
    assert mind["profile"] == {"agent_id": 3} and mind["background"] is None
    state = mind["state"]
    assert state["group"] == "Asker" and state["fields"]["asked"] == 2
    assert len(state["fields"]["notes"]) == 20_001  # cut, with "…"
    assert len(state["fields"]["seen"]) == 101 and state["fields"]["seen"][-1] == "… 400 more"
    assert [m["sender"] for m in state["memory"]] == [3, 3]
    logged = logged_calls(runs_dir / "ask", 3)
    assert [c["messages"][-1]["content"] for c in mind["calls"]] == [
        "Day 1: pick a number between 0 and 9.", "Day 2: pick a number between 0 and 9."]
    assert mind["conversation"] == logged[-1]["request"]["messages"]
    assert [c["text"] for c in mind["calls"]] == [m["content"] for m in state["memory"]]


@pytest.mark.parametrize("agent_id", ["30", "1000000000", str(2**70), "-1"])
def test_an_unknown_agent_is_a_404(client: TestClient, agent_id: str) -> None:
    r = client.get(f"/api/runs/game/agents/{agent_id}/mind")
    assert r.status_code == 404 and r.json() == {"error": f"no agent {agent_id} in this run"}


def test_no_such_run_is_a_404(client: TestClient) -> None:
    assert client.get("/api/runs/nope/agents/1/mind").status_code == 404


def test_a_live_state_is_shown_instead_of_the_checkpoint(runs_dir: Path) -> None:
    browser = AgentBrowser()
    live = {"memory": [(5, "thinking", "assistant", None)], "mood": float("nan")}
    mind = browser.mind(runs_dir / "ask", 5, live_state=live)
    assert mind["state"]["source"] == "live"
    assert mind["state"]["memory"] == [{"role": "assistant", "sender": 5,
                                        "content": "thinking", "metadata": None}]
    assert mind["state"]["fields"] == {"mood": None}
    assert len(mind["calls"]) == 2
    assert [c["messages"][-1]["content"] for c in browser.mind(runs_dir / "ask", 5, calls=1)[
        "calls"]] == ["Day 2: pick a number between 0 and 9."]
    assert browser.mind(runs_dir / "ask", 5, calls=1)["more_calls"] is True
    with pytest.raises(UnknownAgent):
        browser.mind(runs_dir / "ask", 12)
