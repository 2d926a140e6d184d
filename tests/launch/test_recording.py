"""Any scenario's LLM calls are recorded, and ``--replay`` answers them from the recording
with no server at all: the tables equal the recorded run's."""

from __future__ import annotations

from pathlib import Path

import yaml

from populace.launch import launch, load_run_file
from populace.llm.offline import ServerOptions, running_server
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
        answers = await run.collect(self.people.map(Asker.ask, t), on_error="return")
        texts = [a if isinstance(a, str) else None for a in answers]  # None: it failed
        run.record("answers", {"agent_id": self.people.ids, "text": texts})
        run.metric("distinct", len(set(texts)))
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


async def test_failed_answers_are_counted_and_a_step_where_all_fail_fails_the_run(
        tmp_path: Path) -> None:
    from populace.launch import AllAnswersFailed

    async with running_server(ServerOptions(models=("m",), policy="random",
                                            rate_500=0.5, seed=3)) as url:
        path = run_file(tmp_path, url)
        some = await launch(load_run_file(path, {"steps": 1}),
                            RunDirectory.create(tmp_path / "some"))
    failed = some["steps"][0]["failed"]
    assert 0 < failed["answers"] < 40 and failed["of"] == 40
    assert set(failed["kinds"]) == {"ModelError: HTTP 500"}
    # A server that fails every call: every answer fails, and so does the run.
    async with running_server(ServerOptions(models=("m",), rate_500=1.0)) as url:
        try:
            await launch(load_run_file(run_file(tmp_path, url), {"steps": 1}),
                         RunDirectory.create(tmp_path / "none"))
        except AllAnswersFailed as e:
            assert str(e).startswith("step 1: all 40 answers failed (most common: ModelError: "
                                     "HTTP 500 ×40: ")
        else:
            raise AssertionError("a step whose every answer failed did not fail the run")
    summary = read_summary(tmp_path / "none")
    assert summary["status"] == "failed" and summary["steps"] == []
    assert summary["error"].startswith("AllAnswersFailed: step 1: all 40 answers failed")


async def test_a_replay_that_cannot_fit_is_refused_up_front(tmp_path: Path) -> None:
    import pytest

    from populace.core import ConfigError

    async with running_server(ServerOptions(models=("m",), policy="random")) as url:
        path = run_file(tmp_path, url)
        await launch(load_run_file(path), RunDirectory.create(tmp_path / "rec"))
    rec = tmp_path / "rec"
    with pytest.raises(ConfigError, match=rf"^--replay {rec}: that run was made with seed 0, "
                                          r"this one has seed 5; a recording answers only"):
        await launch(load_run_file(path, {"seed": 5}), RunDirectory.create(tmp_path / "a"),
                     replay=rec)
    with pytest.raises(ConfigError, match=rf"^--replay {rec}: that run had 40 agents, this "
                                          r"one has 41"):
        await launch(load_run_file(path, {"agents": 41}), RunDirectory.create(tmp_path / "b"),
                     replay=rec)
    fewer = await launch(load_run_file(path, {"agents": 20}), RunDirectory.create(tmp_path / "c"),
                         replay=rec)
    assert fewer["status"] == "completed"  # a subset of the agents replays
