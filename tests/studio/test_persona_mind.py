"""A persona agent's mind over the studio's API: the persona text exactly as its model was
shown it (never an internal column), its memory as events (step, kind, text; summaries
marked by their kind) and its last prompt — from a checkpoint, where the persona is rendered
from the run's profiles and ``settings.persona``, and live, from the agent's own ``mind()``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

from chromium_page import ARTIFACTS, open_page
from populace.agents import Memory
from populace.launch import Intervention, RunControl, launch, load_run_file
from populace.results import RunDirectory
from populace.studio import AgentBrowser, Runs, StudioServer, create_app

HOST = "http://127.0.0.1:8765"  # a loopback studio checks the Host header
NEWS = "The council cut the park's budget by half."

SCENARIO = '''
import pyarrow.compute as pc

from populace.agents import Choice, Persona, PersonaOptions
from populace.launch import Run, Scenario, ScenarioSettings

VOTE = Choice(["yes", "no"])


class Neighbour(Persona):
    rules = "Your town votes every week on turning the old car park into a park."

    async def vote(self, t, seed):
        return (await self.decide("Do you support the park?", VOTE, step=t, seed=seed)).value


class Park(Scenario):
    class Settings(ScenarioSettings):
        persona: PersonaOptions = PersonaOptions()

    async def setup(self, run: Run) -> None:
        self.people = await Neighbour.populate(run)

    async def step(self, run: Run, t: int) -> None:
        votes = await run.collect(self.people.map(Neighbour.vote, t, run.seed), as_table=True)
        run.record("votes", {"agent_id": self.people.ids, "vote": votes.column("content")})
        run.metric("yes", pc.sum(pc.equal(votes.column("content"), "yes")).as_py() or 0)
'''


def run_file(steps: int, latency: float = 0.0) -> dict[str, Any]:
    # a small memory budget: the oldest events are folded into a summary by step 5
    return {"scenario": "park.py:Park", "agents": 12, "steps": steps, "seed": 3,
            "models": {"scripted": {"provider": "scripted", "latency": latency}},
            "population": {"aspects": {"age": {"values": ["young", "old"]},
                                       "job": {"values": ["teacher", "nurse"]},
                                       "arm": {"values": ["control", "treated"]}}},
            "settings": {"persona": {"shown": ["age", "job"], "memory_tokens": 40,
                                     "event_tokens": 20}}}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("persona-mind")
    (root / "park.py").write_text(SCENARIO)
    (root / "park.yaml").write_text(yaml.safe_dump(run_file(6)))
    (root / "slow.yaml").write_text(yaml.safe_dump(run_file(8, latency=0.4)))
    control = RunControl()

    async def before_the_first_step(_run: Any) -> None:
        control.intervene(Intervention(step=2, kind="message", text=NEWS,
                                       where='job == "nurse"'))

    control.between_steps(before_the_first_step)
    summary = asyncio.run(launch(load_run_file(root / "park.yaml"),
                                 RunDirectory.create(root / "runs" / "park"), control=control))
    assert summary["status"] == "completed", summary.get("error")
    return root


@pytest.fixture(scope="module")
def runs(root: Path) -> Iterator[Runs]:
    r = Runs(root / "runs", roots=[root])
    yield r
    r.shutdown(timeout=30)


@pytest.fixture(scope="module")
def client(runs: Runs) -> TestClient:
    return TestClient(create_app(runs, interval=0.1), base_url=HOST)


def profile_of(client: TestClient, run_id: str, agent_id: int) -> dict[str, Any]:
    return client.get(f"/api/runs/{run_id}/agents/{agent_id}").json()["profile"]


def nurse(client: TestClient, run_id: str) -> int:
    rows = client.get(f"/api/runs/{run_id}/agents",
                      params={"attribute": "job", "value": "nurse"}).json()["rows"]
    return int(rows[0][0])


def persona_shown(mind: dict[str, Any], profile: dict[str, Any]) -> str:
    """The persona text, checked: the shown columns only, and what the model was told."""
    text = mind["persona"]["text"]
    assert text == f"About you: age: {profile['age']}; job: {profile['job']}."
    assert profile["arm"] not in text and "arm" not in text and "group" not in text
    prompt = mind["conversation"]
    assert [m["role"] for m in prompt] == ["system", "system", "user"]
    assert prompt[1]["content"] == text  # exactly as the model saw it
    assert prompt[-1]["content"].endswith('Answer with exactly one of: "yes", "no".')
    return text


def test_a_personas_mind_from_its_checkpoint(client: TestClient) -> None:
    agent = nurse(client, "park")
    mind = client.get(f"/api/runs/park/agents/{agent}/mind").json()
    persona_shown(mind, profile_of(client, "park", agent))
    persona = mind["persona"]
    assert persona["source"] == "rendered"
    events = persona["memory"]
    assert events and all(set(e) == {"step", "kind", "text"} for e in events)
    assert persona["memory_total"] == len(events)
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "summary" and kinds.count("summary") == 1  # folded by the budget
    assert kinds[-1] == "decision" and events[-1]["step"] == 6
    steps = [e["step"] for e in events[1:]]  # the summary: at the step that wrote it
    assert steps == sorted(steps) and events[0]["step"] >= steps[0]
    # the state says where it is from; the memory is not repeated in it as a raw cell
    state = mind["state"]
    assert (state["source"], state["step"], state["group"]) == ("checkpoint", 6, "Neighbour")
    assert state["fields"] == {} and state["memory"] == []
    # the last prompt holds what the agent remembered then, the summary first
    assert events[0]["text"] in mind["conversation"][-1]["content"]


def test_an_intervention_is_a_memory_event_at_its_step(client: TestClient) -> None:
    agent = nurse(client, "park")
    mind = client.get(f"/api/runs/park/agents/{agent}/mind", params={"step": 2}).json()
    events = mind["persona"]["memory"]
    assert mind["state"]["step"] == 2
    assert {"step": 2, "kind": "intervention", "text": NEWS} in events
    assert [e["kind"] for e in events] == ["decision", "intervention", "decision"]


def test_a_persona_subclass_state_shows_its_own_part_as_fields(root: Path) -> None:
    memory = Memory()
    memory.add(3, "summary", "I liked the idea at first.")
    memory.add(4, "decision", "I voted no.")
    mind = AgentBrowser().mind(root / "runs" / "park", 1,
                               live_state=(memory.get_state(), {"mood": "calm"}))
    assert mind["state"]["fields"] == {"mood": "calm"}
    assert mind["persona"]["memory"] == [
        {"step": 3, "kind": "summary", "text": "I liked the idea at first."},
        {"step": 4, "kind": "decision", "text": "I voted no."}]
    assert mind["persona"]["text"].startswith("About you: age: ")


def test_a_live_personas_mind_is_its_own(client: TestClient, runs: Runs,
                                         wait_for: Callable[..., None]) -> None:
    run_id = client.post("/api/runs", json={"config": "slow.yaml"}).json()["id"]
    live = runs.live(run_id)
    assert live is not None and live.control is not None
    wait_for(lambda: live.control.live and live.control.steps_done >= 2,  # type: ignore[union-attr]
             timeout=60)
    agent = nurse(client, run_id)
    mind = client.get(f"/api/runs/{run_id}/agents/{agent}/mind").json()
    try:
        assert mind["state"]["source"] == "live" and mind["persona"]["source"] == "live"
        persona_shown(mind, profile_of(client, run_id, agent))
        events = mind["persona"]["memory"]
        assert [e["kind"] for e in events][:2] == ["decision", "decision"]
        assert all(set(e) == {"step", "kind", "text"} for e in events)
        assert mind["state"]["fields"] == {}
    finally:
        client.post(f"/api/runs/{run_id}/stop")
        wait_for(lambda: live.monitor.finished, timeout=60)


def test_the_page_shows_a_personas_mind(runs: Runs, client: TestClient) -> None:
    """In headless Chromium (skipped without it): the persona, the memory as a list with
    its summary marked, the last prompt; the profile once, above the mind."""
    agent = nurse(client, "park")
    persona = client.get(f"/api/runs/park/agents/{agent}/mind").json()["persona"]
    text, events = persona["text"], persona["memory"]
    server = StudioServer(runs, port=0, interval=0.25)
    server.start()
    try:
        with open_page(1280) as page:
            page.goto(f"{server.url}#/run/park/agent/{agent}")
            page.wait_for_selector("#mind-memory li.event")
            assert page.inner_text("#mind-persona") == text
            items = page.locator("#mind-memory li.event")
            assert items.count() == len(events) and events[0]["kind"] == "summary"
            first = items.nth(0)
            assert "summary" in (first.get_attribute("class") or "").split()
            assert first.get_attribute("data-kind") == "summary"
            assert first.inner_text().split() == (f"step {events[0]['step']} summary of "
                                                  f"earlier events {events[0]['text']}").split()
            last = items.nth(len(events) - 1).inner_text()
            assert "step 6" in last and "decision" in last and "I answered" in last
            assert "summary" not in (items.nth(1).get_attribute("class") or "").split()
            assert page.locator("#mind-conversation .msg").count() == 3
            assert page.locator("#profile-table").count() == 1
            assert page.locator("#mind-card details.about").count() == 0
            page.screenshot(path=str(ARTIFACTS / "15-persona-mind.png"), full_page=True)
            assert page.problems == []
    finally:
        server.stop()
