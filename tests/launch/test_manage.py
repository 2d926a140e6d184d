"""Managing runs: choosing agents by profile, interviews that change nothing, interventions
that resume and replay reproduce, forks that continue a run from one of its steps."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import yaml

from populace.core import ConfigError
from populace.launch import (
    Intervention,
    InterviewError,
    RunControl,
    SelectionError,
    fork,
    interview,
    interview_run,
    launch,
    load_run_file,
    parse_sets,
    read_interventions,
    read_interviews,
    save_interview,
    select,
)
from populace.results import RunDirectory, read_summary, read_table

GAME = {"scenario": "guess_number", "name": "g", "agents": 120, "rounds": 4, "workers": 2,
        "seed": 5,
        "models": {"llm": {"provider": "scripted"}},
        "population": {"aspects": {"education": {"values": ["PhD", "BA", "high school"]}}},
        "game": {"memory_rounds": 2}}


def game_file(tmp_path: Path, **changes: object) -> Path:
    path = tmp_path / "game.yaml"
    path.write_text(yaml.safe_dump({**GAME, **changes}))
    return path


def rows(run_dir: Path, table: str = "responses") -> pa.Table:
    t = read_table(run_dir, table)
    return t.drop_columns([c for c in ("latency_s",) if c in t.column_names])


async def play(path: Path, out: Path, **kw: object) -> dict:
    return await launch(load_run_file(path), RunDirectory.create(out), **kw)


# -- selection ------------------------------------------------------------------------------
PROFILES = pa.table({"agent_id": [0, 1, 2, 3, 4], "age": [20, 35, 50, 65, 80],
                     "education": pa.array(["PhD", "BA", "PhD", "BA", "PhD"]).dictionary_encode(),
                     "urban": [True, False, True, False, True]})


@pytest.mark.parametrize(("where", "ids"), [
    ('education == "PhD"', [0, 2, 4]),
    ('education == "PhD" and age >= 50', [2, 4]),
    ('age < 30 or age > 70', [0, 4]),
    ('not urban', [1, 3]),
    ('education in ["BA"]', [1, 3]),
    ('education not in ["BA"] and 40 < age', [2, 4]),
    ('(age > 30) and not (education == "BA")', [2, 4]),
])
def test_a_profile_query_selects_those_agents(where: str, ids: list[int]) -> None:
    assert select(PROFILES, where=where).tolist() == ids


@pytest.mark.parametrize(("where", "says"), [
    ("age >", "not an expression"),
    ("income > 3", "no profile column 'income'"),
    ("age > other", "not a literal"),
    ("__import__('os').system('x')", "cannot read"),
    ("1 < age < 3", "two things at a time"),
    ('education == "nobody"', "no agent matches"),
    ("age in 3", "in needs a list"),
])
def test_a_bad_query_is_one_line(where: str, says: str) -> None:
    with pytest.raises(SelectionError, match=says) as e:
        select(PROFILES, where=where)
    assert "\n" not in str(e.value)


def test_ids_and_a_seeded_sample() -> None:
    assert select(PROFILES, agents=[3, 1]).tolist() == [1, 3]
    with pytest.raises(SelectionError, match="agent 9: no such agent"):
        select(PROFILES, agents=[9])
    one = select(PROFILES, sample=2, seed=1)
    assert one.tolist() == select(PROFILES, sample=2, seed=1).tolist() and one.size == 2
    assert select(None, ids=np.arange(10), sample=3, seed=2).size == 3
    with pytest.raises(SelectionError, match="no profiles"):
        select(None, ids=np.arange(3), where="age > 3")


# -- interviews -------------------------------------------------------------------------------
async def test_an_interview_from_a_checkpoint_changes_no_table(tmp_path: Path) -> None:
    path = game_file(tmp_path)
    await play(path, tmp_path / "plain")
    await play(path, tmp_path / "asked")
    before = {p.name: p.read_bytes() for p in (tmp_path / "asked" / "parts").iterdir()}
    number, answers = await interview(tmp_path / "asked", "How did you choose?",
                                      where='education == "PhD"', sample=5)
    number2, _ = await interview(tmp_path / "asked", "And now?", agents=[3], step=3)
    assert (number, number2) == (1, 2)
    assert len(answers) == 5 and all(a["answer"] and a["step"] == 4 for a in answers)
    assert all(a["prompt_tokens"] > 0 for a in answers)
    saved = read_interviews(tmp_path / "asked")
    assert saved is not None and saved.num_rows == 6
    assert saved.column("interview").to_pylist() == [1] * 5 + [2]
    assert {p.name: p.read_bytes() for p in (tmp_path / "asked" / "parts").iterdir()} == before
    assert rows(tmp_path / "asked").equals(rows(tmp_path / "plain"))
    # The same question to the same agents gets the same answer: seeded, not drawn.
    _, again = await interview(tmp_path / "asked", "How did you choose?",
                               where='education == "PhD"', sample=5)
    assert [a["answer"] for a in again] == [a["answer"] for a in answers]


async def test_a_live_interview_between_steps_leaves_the_tables_alone(tmp_path: Path) -> None:
    path = game_file(tmp_path, models={"llm": {"provider": "scripted", "latency": 0.05}})
    await play(path, tmp_path / "plain")
    control = RunControl()
    answered: list[list[dict]] = []

    async def job(run: object) -> None:
        got = await interview_run(run, "What do you expect?", step=control.steps_done,
                                  source="live", sample=7)
        save_interview(tmp_path / "live", got)
        answered.append(got)

    async def main() -> None:
        first = control.between_steps(job)  # asked before the run starts: before step 1
        task = asyncio.create_task(play(path, tmp_path / "live", control=control))
        await asyncio.wrap_future(first)
        await asyncio.wrap_future(control.between_steps(job))
        await task

    await main()
    assert len(answered) == 2 and all(len(a) == 7 for a in answered)
    assert answered[0][0]["step"] == 0 and answered[1][0]["step"] >= 1
    assert rows(tmp_path / "live").equals(rows(tmp_path / "plain"))
    assert read_interviews(tmp_path / "live").num_rows == 14  # type: ignore[union-attr]


async def test_agents_without_a_model_cannot_be_interviewed(
        votes_file: Callable[..., Path], tmp_path: Path) -> None:
    await play(votes_file(agents=50, steps=2), tmp_path / "v")
    with pytest.raises(InterviewError, match="agents of Voter have no model"):
        await interview(tmp_path / "v", "Why?", agents=[1])
    with pytest.raises(ConfigError, match="step 7 has no checkpoint"):
        await interview(tmp_path / "v", "Why?", agents=[1], step=7)
    with pytest.raises(InterviewError, match="empty"):
        await interview(tmp_path / "v", "  ", agents=[1])


# -- interventions ----------------------------------------------------------------------------
MESSAGE = "Breaking news: the winning number was 90."


async def test_an_intervention_changes_later_steps_and_resume_and_replay_repeat_it(
        tmp_path: Path) -> None:
    path = game_file(tmp_path)
    await play(path, tmp_path / "plain")
    live = tmp_path / "live"
    control = RunControl()
    written: list[Intervention] = []

    async def schedule_later(run: object) -> None:  # between steps 1 and 2
        written.append(control.intervene(Intervention(
            step=1, kind="message", text=MESSAGE, where='education == "PhD"')))

    async def before_step_one(run: object) -> None:  # queues the next job for after step 1
        control.between_steps(schedule_later)

    queued = control.between_steps(before_step_one)
    await play(path, live, control=control)
    await asyncio.wrap_future(queued)
    assert written[0].step == 2  # raised to the next step to start
    step = written[0].step
    summary = read_summary(live)
    done = summary["steps"][step - 1]["interventions"]
    phd = int(np.sum(read_table(live, "profiles").column("education").to_numpy(
        zero_copy_only=False) == "PhD")) if (live / "profiles.parquet").exists() else None
    assert done[0]["kind"] == "message" and done[0]["agents"] == phd
    assert not any("interventions" in e for e in summary["steps"][:step - 1])
    changed = rows(live)
    plain = rows(tmp_path / "plain")
    assert not changed.equals(plain)
    first = changed.filter(pa.compute.less(changed["round"], step))
    assert first.equals(plain.filter(pa.compute.less(plain["round"], step)))
    assert [i.model_dump(exclude={"made"}) for i in read_interventions(live)] == \
        [written[0].model_dump(exclude={"made"})]
    # --replay carries out the replayed run's interventions again
    await play(path, tmp_path / "replayed", replay=live)
    assert rows(tmp_path / "replayed").equals(changed)
    # a resume from the checkpoint before the intervention's step carries it out again
    cut = tmp_path / "cut"
    await play(path, cut)
    (cut / "interventions.jsonl").write_bytes((live / "interventions.jsonl").read_bytes())
    summary = read_summary(cut)
    summary["steps"] = summary["steps"][:step - 1]
    summary["status"] = "interrupted"
    (cut / "summary.json").write_text(json.dumps(summary))
    for later in range(step, 5):
        (cut / "checkpoints" / f"step-{later:05d}.ckpt").unlink(missing_ok=True)
    await launch(load_run_file(path), RunDirectory(cut), resume=True)
    assert rows(cut).equals(changed)


async def test_an_environment_change_reaches_the_next_step(
        votes_file: Callable[..., Path], tmp_path: Path) -> None:
    path = votes_file(agents=200, steps=3)
    (tmp_path / "env").mkdir()
    out = RunDirectory.create(tmp_path / "env" / "run")
    (out.path / "interventions.jsonl").write_text(json.dumps(
        {"step": 2, "kind": "environment", "key": "yes_share", "value": 0.0}) + "\n")
    summary = await launch(load_run_file(path), out)
    assert summary["steps"][1]["interventions"][0]["what"] == "set yes_share = 0.0"
    await play(path, tmp_path / "plain")
    a, b = rows(out.path, "votes"), rows(tmp_path / "plain", "votes")
    assert a.slice(0, 200).equals(b.slice(0, 200)) and not a.equals(b)


@pytest.mark.parametrize(("data", "says"), [
    ({"step": 2, "kind": "message"}, "a message needs text"),
    ({"step": 2, "kind": "environment", "text": "x", "key": "k"}, "key, value and env only"),
    ({"step": 0, "kind": "message", "text": "x"}, "step"),
    ({"step": 2, "kind": "poke"}, "kind"),
])
def test_a_bad_intervention_is_refused(data: dict, says: str) -> None:
    from populace.launch import parse_intervention

    with pytest.raises(ConfigError, match=says):
        parse_intervention(data, "request")


# -- forks ------------------------------------------------------------------------------------
async def test_a_fork_without_changes_repeats_the_later_steps(tmp_path: Path) -> None:
    path = game_file(tmp_path)
    await play(path, tmp_path / "orig")
    assert sorted(p.name for p in (tmp_path / "orig" / "checkpoints").iterdir()) == [
        f"step-{t:05d}.ckpt" for t in range(1, 5)]  # every step's: any can be forked
    run_file = fork(tmp_path / "orig", 2, {}, tmp_path / "same")
    summary = await launch(run_file, RunDirectory(tmp_path / "same"), resume=True)
    assert summary["status"] == "completed" and summary["forked_from"]["step"] == 2
    assert rows(tmp_path / "same").equals(rows(tmp_path / "orig"))
    changed = fork(tmp_path / "orig", 2, parse_sets(["game.ratio=0.5"]), tmp_path / "half")
    await launch(changed, RunDirectory(tmp_path / "half"), resume=True)
    a, b = rows(tmp_path / "half"), rows(tmp_path / "orig")
    early = pa.compute.less_equal(a["round"], 2)
    assert a.filter(early).equals(b.filter(pa.compute.less_equal(b["round"], 2)))
    assert not a.equals(b)
    assert read_summary(tmp_path / "half")["forked_from"]["set"] == {"game.ratio": 0.5}


@pytest.mark.parametrize(("at", "sets", "says"), [
    (9, [], "step 9 has no checkpoint"),
    (2, ["game.nope=1"], "unknown setting 'nope' under game"),
    (2, ["agents=7"], "keeps the run's agents"),
    (2, ["nothing"], "expected KEY=VALUE"),
    (2, ["game.ratio=banana"], "ratio"),
])
async def test_a_bad_fork_is_one_line(tmp_path: Path, at: int, sets: list[str],
                                      says: str) -> None:
    path = game_file(tmp_path, rounds=2)
    await play(path, tmp_path / "orig")
    with pytest.raises(ConfigError, match=says) as e:
        fork(tmp_path / "orig", at, parse_sets(sets), tmp_path / "f")
    assert "\n" not in str(e.value) and not (tmp_path / "f").exists()


async def test_the_control_refuses_a_run_that_is_not_live(tmp_path: Path) -> None:
    from populace.launch import RunNotLive

    control = RunControl()
    with pytest.raises(RunNotLive):
        control.agent_state(1)
    with pytest.raises(RunNotLive):
        control.intervene(Intervention(step=1, kind="message", text="hi"))
    assert not control.live
    await play(game_file(tmp_path, rounds=1), tmp_path / "r", control=control)
    with pytest.raises(RunNotLive, match="ended"):
        control.between_steps(lambda run: asyncio.sleep(0))


# -- what a new user's check found ------------------------------------------------------------
async def test_an_environment_change_that_cannot_be_made_does_not_end_the_run(
        votes_file: Callable[..., Path], tmp_path: Path) -> None:
    out = RunDirectory.create(tmp_path / "run")
    (out.path / "interventions.jsonl").write_text(json.dumps(
        {"step": 2, "kind": "environment", "key": "a", "value": 1, "env": "nowhere/child"}))
    summary = await launch(load_run_file(votes_file(agents=50, steps=3)), out)
    assert summary["status"] == "completed"
    (done,) = summary["steps"][1]["interventions"]  # the line had no newline: read still
    assert "nowhere" in done["error"] and any("not carried out" in w
                                              for w in summary["steps"][1]["warnings"])
    from populace.launch import _interventions

    _interventions.append(out.path, Intervention(step=3, kind="message", text="hi"))
    assert [i.step for i in read_interventions(out.path)] == [2, 3]


async def test_the_games_run_file_keeps_checkpoints_and_a_fork_may_play_longer(
        tmp_path: Path) -> None:
    await play(game_file(tmp_path, keep_checkpoints=2), tmp_path / "two")
    assert sorted(p.name for p in (tmp_path / "two" / "checkpoints").iterdir()) == [
        "step-00003.ckpt", "step-00004.ckpt"]
    await play(game_file(tmp_path), tmp_path / "all")
    for key in ("steps", "rounds"):
        run_file = fork(tmp_path / "all", 2, {key: 6}, tmp_path / f"long-{key}")
        summary = await launch(run_file, RunDirectory(tmp_path / f"long-{key}"), resume=True)
        assert len(summary["steps"]) == 6


class Talker:
    """Stands in for an agent in the unit tests of the interview's messages and model."""

    def __init__(self, **attrs: object) -> None:
        self.id, self.profile, self._memory = 1, {"age": 30}, None
        self.__dict__.update(attrs)


def test_an_agents_own_interview_messages_that_raise_are_one_line() -> None:
    from populace.launch._interview import _model, interview_messages

    def broken(question: str) -> list:
        raise RuntimeError("no\nidea")

    with pytest.raises(InterviewError, match="interview_messages raised RuntimeError: no idea"):
        interview_messages(Talker(interview_messages=broken), "Why?")  # type: ignore[arg-type]
    one = object.__new__(type("M", (), {"complete": lambda self: None}))
    assert _model(Talker(models={"llm": one})) is one  # type: ignore[arg-type]
    with pytest.raises(InterviewError, match="no model"):
        _model(Talker(models={"a": one, "b": one}))  # type: ignore[arg-type]
    with pytest.raises(SelectionError, match="not an agent id"):
        select(PROFILES, agents=[2**70])
