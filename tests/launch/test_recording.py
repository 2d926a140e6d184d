"""Any scenario's LLM calls are recorded, and ``--replay`` answers them from the recording
with no server at all: the tables equal the recorded run's."""

from __future__ import annotations

from pathlib import Path

import yaml

from populace.launch import launch, load_run_file
from populace.llm import ServerOptions, running_server
from populace.results import RunDirectory, read_summary, read_table

SCENARIO = '''
from populace.core import Agent
from populace.launch import Scenario


class Asker(Agent):
    __slots__ = ("models",)

    def __init__(self, id, profile=None, *, models):
        super().__init__(id, profile)
        self.models = models

    async def ask(self, t):
        answer = await self.models["llm"].complete(
            [{"role": "user", "content": f"Day {t}: pick a number, agent {self.id}."}],
            seed=1000 * t + self.id)
        return answer.text


class Ask(Scenario):
    async def setup(self, run):
        self.people = await run.create(Asker, init={"models": run.models()})

    async def step(self, run, t):
        answers = await run.collect(self.people.map(Asker.ask, t))
        run.record("answers", {"agent_id": self.people.ids, "text": answers})
        run.metric("distinct", len(set(answers)))
'''


def run_file(tmp_path: Path, url: str) -> Path:
    (tmp_path / "ask.py").write_text(SCENARIO)
    path = tmp_path / "ask.yaml"
    path.write_text(yaml.safe_dump({
        "scenario": "ask.py:Ask", "agents": 40, "steps": 2, "workers": 2,
        "models": {"llm": {"provider": "openai", "model": "m", "base_urls": [url],
                           "max_retries": 0}}}))
    return path


async def test_replay_answers_every_call_from_the_recording(tmp_path: Path) -> None:
    async with running_server(ServerOptions(models=("m",), policy="random")) as url:
        path = run_file(tmp_path, url)
        recorded = await launch(load_run_file(path), RunDirectory.create(tmp_path / "rec"))
    assert recorded["status"] == "completed"
    assert list((tmp_path / "rec" / "llm_calls").glob("llm-*.jsonl"))
    # The server is gone: only the recording can answer.
    replayed = await launch(load_run_file(path), RunDirectory.create(tmp_path / "rep"),
                            replay=tmp_path / "rec")
    assert replayed["status"] == "completed", replayed.get("error")
    assert read_table(tmp_path / "rep", "answers").equals(read_table(tmp_path / "rec",
                                                                    "answers"))
    assert [e["distinct"] for e in read_summary(tmp_path / "rep")["steps"]] == \
        [e["distinct"] for e in recorded["steps"]]
