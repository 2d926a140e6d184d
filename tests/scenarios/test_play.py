"""Playing the guessing game end to end on the local backend, into a run directory."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import yaml

from game_helpers import Scripted, game_file, make_config, result_message, run_into
from populace.agents import Memory
from populace.core import ModelError
from populace.results import RunDirectory, latest_checkpoint, read_summary, read_table
from populace.scenarios.guess_number import (
    RESPONSE_SCHEMA,
    RoundOutcome,
    Timings,
    play,
)

COLUMNS = ["round", "agent_id", "group", "model", "number", "valid", "raw", "extract_raw",
           "error", "latency_s", "calls", "retries", "prompt_tokens", "completion_tokens"]

#: What the direct protocol (the dummy model's) appends to every round prompt.
ANSWER_FORMAT = " End with the sentence 'The answer is N', where N is your number."


def numbers_by_agent(table: pa.Table, round_no: int) -> list[float | None]:
    rows = table.filter(pc.equal(table.column("round"), round_no))
    order = np.argsort(rows.column("agent_id").to_numpy())
    return [rows.column("number")[int(i)].as_py() for i in order]


# -- the run directory ---------------------------------------------------------------------------
async def test_one_row_per_agent_per_round(tmp_path: Path) -> None:
    config = make_config()
    path = await run_into(tmp_path, config)
    table = read_table(path)
    assert table.column_names == COLUMNS
    assert table.schema.equals(RESPONSE_SCHEMA)
    assert table.num_rows == 200 * 3
    pairs = set(zip(table.column("round").to_pylist(), table.column("agent_id").to_pylist(),
                    strict=True))
    assert pairs == {(r, a) for r in (1, 2, 3) for a in range(200)}
    assert set(table.column("model").to_pylist()) == {"dummy"}
    # The dummy model answers integers in [0, 100]: all valid, none failed.
    assert all(table.column("valid").to_pylist())
    assert table.column("error").null_count == 600
    numbers = table.column("number").to_numpy()
    assert numbers.min() >= 0 and numbers.max() <= 100
    assert np.all(numbers == np.round(numbers))
    assert [str(int(x)) for x in numbers[:20]] == table.column("raw").to_pylist()[:20]
    # The dummy model uses the direct protocol: one call, no extraction, no retries.
    assert table.column("extract_raw").null_count == 600
    assert set(table.column("calls").to_pylist()) == {1}
    assert set(table.column("retries").to_pylist()) == {0}
    latency = table.column("latency_s").to_numpy()
    assert latency.min() >= 0.0 and latency.max() < 5.0
    # Files: one part per round, the consolidated table, profiles, config.
    assert sorted(p.name for p in (path / "parts").iterdir()) == [
        "responses-r00001.parquet", "responses-r00002.parquet", "responses-r00003.parquet"]
    profiles = read_table(path, "profiles")
    assert profiles.num_rows == 200
    assert profiles.column("agent_id").to_pylist() == list(range(200))


async def test_summary_matches_the_responses(tmp_path: Path) -> None:
    config = make_config(game={"ratio": "2/3"})
    path = await run_into(tmp_path, config)
    summary = read_summary(path)
    assert summary["status"] == "completed"
    assert "error" not in summary
    assert (summary["agents"], summary["steps_planned"], summary["seed"]) == (200, 3, 7)
    assert summary["models"] == ["dummy"]
    assert summary["models"] == ["dummy"]
    assert summary["wall_s"] > 0
    table = read_table(path)
    assert [r["round"] for r in summary["steps"]] == [1, 2, 3]
    for entry in summary["steps"]:
        rows = table.filter(pc.equal(table.column("round"), entry["round"]))
        valid = rows.filter(rows.column("valid")).column("number").to_numpy()
        # Recomputed here without score_round.
        mean = valid.sum() / len(valid)
        target = 2 / 3 * mean
        dist = np.abs(valid - target)
        winner = valid[dist == dist.min()].min()
        assert entry["n"] == 200
        assert entry["n_valid"] == len(valid)
        assert entry["mean"] == pytest.approx(mean)
        assert entry["median"] == pytest.approx(float(np.median(valid)))
        assert entry["std"] == pytest.approx(float(np.sqrt(((valid - mean) ** 2).mean())))
        assert entry["target"] == pytest.approx(target)
        assert entry["winner_number"] == winner
        assert entry["n_winners"] == int((valid == winner).sum())
        assert entry["wall_s"] > 0
        # The dummy model reports no tokens; one direct call per agent.
        assert entry["usage"] == {"dummy": {"agents": 200, "calls": 200, "retries": 0,
                                            "prompt_tokens": 0, "completion_tokens": 0}}


async def test_config_and_profiles(tmp_path: Path) -> None:
    config = make_config(game={"groups": 3})
    path = await run_into(tmp_path, config)
    written = yaml.safe_load((path / "config.yaml").read_text())
    assert written == config.resolved()
    # flat, in the order the game has always written it: forks and sweeps set game.ratio
    assert list(written) == ["scenario", "name", "seed", "agents", "rounds", "workers",
                             "backend", "address", "models", "model", "assign", "game",
                             "checkpoint_minutes", "keep_checkpoints", "population",
                             "confirm_above"]  # keys added since: after them
    assert written["game"]["ratio"] == "2/3"
    assert written["game"]["groups"] == 3
    assert written["models"]["dummy"]["latency"] == 0.01
    assert game_file(written) == config  # the written config reproduces the run
    profiles = read_table(path, "profiles")
    assert profiles.column("group").to_pylist() == [i % 3 for i in range(200)]


async def test_groups_follow_the_game_setting(tmp_path: Path) -> None:
    path = await run_into(tmp_path, make_config(rounds=1, game={"groups": 3}))
    table = read_table(path)
    ids = table.column("agent_id").to_numpy()
    assert table.column("group").to_pylist() == (ids % 3).tolist()
    assert set(table.column("group").to_pylist()) == {0, 1, 2}

    path = await run_into(tmp_path, make_config(rounds=1), "one-group")
    assert set(read_table(path).column("group").to_pylist()) == {0}


# -- reproducibility ----------------------------------------------------------------------------
async def test_same_seed_same_numbers_different_seed_different(tmp_path: Path) -> None:
    a = read_table(await run_into(tmp_path, make_config(seed=11), "a"))
    b = read_table(await run_into(tmp_path, make_config(seed=11, workers=3), "b"))
    c = read_table(await run_into(tmp_path, make_config(seed=12), "c"))
    for r in (1, 2, 3):
        # Same seed: the same answer from every agent, however agents are spread over workers.
        assert numbers_by_agent(a, r) == numbers_by_agent(b, r)
        diff = sum(x != y for x, y in zip(numbers_by_agent(a, r), numbers_by_agent(c, r),
                                          strict=True))
        assert diff > 150  # 101 possible answers: most agents answer differently
    # Rounds differ from one another too.
    assert numbers_by_agent(a, 1) != numbers_by_agent(a, 2)


async def test_play_without_run_directory_returns_the_summary() -> None:
    timings = Timings()
    summary = await play(make_config(rounds=2, agents=50), None, None, timings)
    assert summary["status"] == "completed"
    assert [r["round"] for r in summary["steps"]] == [1, 2]
    assert all(r["n_valid"] == 50 for r in summary["steps"])
    assert len(timings.round_wall_s) == len(timings.round_cpu_s) == 2
    assert all(w >= 0.01 for w in timings.round_wall_s)  # the dummy waits 10 ms
    assert timings.wall_s == summary["wall_s"] >= sum(timings.round_wall_s) - 1e-3
    json.dumps(summary, allow_nan=False)


async def test_reporter_sees_every_round() -> None:
    events: list[tuple[Any, ...]] = []

    class Recorder:
        def round_started(self, round_no: int, total: int) -> None:
            events.append(("started", round_no, total))

        def round_progress(self, round_no: int, done: int, total: int) -> None:
            assert 0 <= done <= total

        def round_finished(self, outcome: RoundOutcome, wall_s: float) -> None:
            events.append(("finished", outcome.round, outcome.n))

    await play(make_config(rounds=2, agents=30), None, Recorder())
    assert events == [("started", 1, 30), ("finished", 1, 30),
                      ("started", 2, 30), ("finished", 2, 30)]


# -- answers outside the rules -------------------------------------------------------------------
async def test_out_of_range_answers_are_invalid_but_kept(tmp_path: Path) -> None:
    # The dummy answers 0..100, the game only accepts 0..50.
    path = await run_into(tmp_path, make_config(rounds=1, game={"low": 0, "high": 50}))
    table = read_table(path)
    raw = np.array([float(x) for x in table.column("raw").to_pylist()])
    valid = table.column("valid").to_numpy(zero_copy_only=False)
    assert np.array_equal(valid, raw <= 50)
    assert 0 < valid.sum() < 200
    numbers = table.column("number")
    assert numbers.null_count == int((~valid).sum())
    assert all(x <= 50 for x in numbers.to_pylist() if x is not None)
    assert table.column("error").null_count == 200  # invalid is not an error
    assert read_summary(path)["steps"][0]["n_valid"] == int(valid.sum())


async def test_unparsable_answers_and_model_errors(
    tmp_path: Path, scripted: Scripted
) -> None:
    config = make_config(agents=60, rounds=2, game={"ratio": "1/2"})

    def answer(agent: int, round_no: int) -> str:
        if agent % 10 == 3:
            raise ModelError(f"server said no to agent {agent}")
        if agent % 10 == 7:
            return "I CAN'T"
        return f"I pick {agent}"

    config, model = scripted(config, answer)
    path = await run_into(tmp_path, config)
    assert set(model.prompts) == {(a, r) for a in range(60) for r in (1, 2)}  # one call each
    summary = read_summary(path)
    assert summary["status"] == "completed"
    table = read_table(path)
    assert table.num_rows == 120
    for row in table.to_pylist():
        agent = row["agent_id"]
        if agent % 10 == 3:
            assert row["valid"] is False
            assert row["number"] is None and row["raw"] is None
            # the error's type (a ModelError), then the client's message naming the cause
            kind, message = row["error"].split(": ", 1)
            assert kind.startswith("Model") and kind.endswith("Error")
            assert message == (f"model 'dummy': HTTP 400: server said no to agent {agent} "
                               f"from {model.url} (after 1 attempt)")
            assert row["latency_s"] is None
            assert (row["prompt_tokens"], row["completion_tokens"]) == (0, 0)
            assert (row["calls"], row["retries"], row["extract_raw"]) == (0, 0, None)
        elif agent % 10 == 7:
            assert (row["valid"], row["number"], row["raw"], row["error"]) == (
                False, None, "I CAN'T", None)
            assert row["completion_tokens"] == len("I CAN'T")
            assert row["calls"] == 1
        else:
            assert (row["valid"], row["number"], row["error"]) == (True, float(agent), None)
            assert row["raw"] == f"I pick {agent}"
            assert row["prompt_tokens"] > 0
            assert row["latency_s"] >= 0
            assert (row["calls"], row["retries"], row["extract_raw"]) == (1, 0, None)
    valid = [a for a in range(60) if a % 10 not in (3, 7)]
    mean = sum(valid) / len(valid)
    for entry in summary["steps"]:
        assert (entry["n"], entry["n_valid"]) == (60, 48)
        assert entry["mean"] == pytest.approx(mean)
        assert entry["target"] == pytest.approx(mean / 2)
        assert entry["winner_number"] == min(valid, key=lambda a: (abs(a - mean / 2), a))
        # Usage counts every agent of the model, but only the calls that answered.
        rows = table.filter(pc.equal(table.column("round"), entry["round"]))
        assert entry["usage"] == {"dummy": {
            "agents": 60, "calls": 54, "retries": 0,
            "prompt_tokens": pc.sum(rows.column("prompt_tokens")).as_py(),
            "completion_tokens": 48 * len("I pick ") + sum(len(str(a)) for a in valid)
            + 6 * len("I CAN'T"),
        }}


async def test_a_round_without_valid_answers(
    tmp_path: Path, scripted: Scripted
) -> None:
    config = make_config(agents=20, rounds=2)
    config, model = scripted(config, lambda agent, round_no: "no idea")
    path = await run_into(tmp_path, config)
    summary = read_summary(path)
    assert summary["status"] == "completed"
    for entry in summary["steps"]:
        assert (entry["n"], entry["n_valid"], entry["n_winners"]) == (20, 0, 0)
        assert entry["mean"] is entry["target"] is entry["winner_number"] is None
    # No winner, so the moderator has nothing to tell: round 2 remembers only the agent's
    # own answer.
    conversations = model.conversations
    for agent in range(20):
        assert conversations[agent, 2] == [
            conversations[agent, 1][0],
            {"role": "assistant", "content": "no idea"},
            {"role": "user", "content": "It is your turn: choose your number."},
        ]


# -- what participants are told ------------------------------------------------------------------
def turn(round_no: int) -> dict[str, str]:
    """The user's turn that closes a shared-first conversation."""
    return {"role": "user", "content": "It is your turn: choose your number."}


async def test_prompts_carry_the_rules_and_the_last_winner(
    tmp_path: Path, scripted: Scripted
) -> None:
    config = make_config(agents=40, game={"ratio": "1/2", "offset": 5, "low": 0, "high": 60})
    config, model = scripted(config, lambda agent, round_no: str(10 + (agent * 7 + round_no) % 41))
    path = await run_into(tmp_path, config)
    prompts = model.prompts
    conversations = model.conversations
    assert set(prompts) == {(a, r) for a in range(40) for r in (1, 2, 3)}
    rounds = read_summary(path)["steps"]

    # The default prompt: the rules, the P1 instruction, and the direct protocol's format.
    assert prompts[0, 1] == (
        "You are one of 40 players in a number game. Every player privately chooses a real "
        "number between 0 and 60, inclusive. The target is 1/2 of the average of all chosen "
        "numbers, plus 5. The player whose number is closest to the target wins. Give your "
        "number directly." + ANSWER_FORMAT)
    # It does not change between rounds or agents: what happened is in the conversation.
    assert {prompts[a, r] for a in range(40) for r in (1, 2, 3)} == {prompts[0, 1]}
    for a in range(40):
        answers = [str(10 + (a * 7 + r) % 41) for r in (1, 2, 3)]
        # Shared first: the rules open every conversation, the turn closes it.
        rules = {"role": "system", "content": prompts[0, 1]}
        assert conversations[a, 1] == [rules, turn(1)]
        assert conversations[a, 3] == [
            rules,
            {"role": "assistant", "content": answers[0]},
            {"role": "user", "content": result_message(rounds[0])},
            {"role": "assistant", "content": answers[1]},
            {"role": "user", "content": result_message(rounds[1])},
            turn(3),
        ]
        assert conversations[a, 2] == [*conversations[a, 3][:3], turn(2)]


async def test_persona_first_layout(tmp_path: Path, scripted: Scripted) -> None:
    # The order most simulators use: history, then the rules as the user's turn.
    config = make_config(agents=4, rounds=2, game={"layout": "persona_first"})
    config, model = scripted(config, lambda agent, round_no: str(agent + 20))
    path = await run_into(tmp_path, config)
    rounds = read_summary(path)["steps"]
    prompt = model.prompts[0, 1]
    assert prompt.startswith("You are one of 4 players")
    for a in range(4):
        assert model.conversations[a, 1] == [{"role": "user", "content": prompt}]
        assert model.conversations[a, 2] == [
            {"role": "assistant", "content": str(a + 20)},
            {"role": "user", "content": result_message(rounds[0])},
            {"role": "user", "content": prompt}]


async def test_custom_prompt_template(
    tmp_path: Path, scripted: Scripted
) -> None:
    config = make_config(agents=5, rounds=2, game={
        "prompt": "Round {round} of {rounds}, ratio {ratio}, offset {offset}. {history}Go."})
    config, model = scripted(config, lambda agent, round_no: "50")
    await run_into(tmp_path, config)
    prompts = model.prompts
    assert prompts[0, 1] == "Round 1 of 2, ratio 2/3, offset 0. Go." + ANSWER_FORMAT
    # {history} is still filled in for templates that ask for it: everyone said 50.
    assert prompts[0, 2] == (
        "Round 2 of 2, ratio 2/3, offset 0. In the previous round the average was 50.00, the "
        "target was 33.33 and the winning number was 50. Go." + ANSWER_FORMAT)


def memories(path: Path) -> list[list[tuple[Any, ...]]]:
    """Every participant's memory at the end of the run, in agent order, from the last
    checkpoint (what a resumed run starts from): its events ``(step, kind, text)``."""
    point = latest_checkpoint(path)
    assert point is not None
    out = []
    for state in point[1]["agents"]["participants"]:
        memory = Memory()
        memory.set_state(state)
        out.append([tuple(e) for e in memory.events()])
    return out


def raw_by_agent(table: pa.Table) -> dict[int, list[str]]:
    """Every agent's raw answers, round by round."""
    out: dict[int, list[str]] = {}
    rows = sorted(table.select(["round", "agent_id", "raw"]).to_pylist(),
                  key=lambda r: (r["agent_id"], r["round"]))
    for row in rows:
        out.setdefault(row["agent_id"], []).append(row["raw"])
    return out


async def test_feedback_reaches_every_memory(tmp_path: Path, scripted: Scripted) -> None:
    config = make_config(agents=50, game={"feedback": True})
    config, _ = scripted(config, lambda agent, round_no: str(agent + round_no))
    path = await run_into(tmp_path, config)
    rounds = read_summary(path)["steps"]
    remembered = memories(path)
    assert len(remembered) == 50
    for agent, memory in enumerate(remembered):
        # Each round: the agent's own answer, then the moderator's announcement, which the
        # agent read from the game's environment.
        assert [text for _, _, text in memory] == [
            x for r in range(3) for x in (str(agent + r + 1), result_message(rounds[r]))]
        assert [(step, kind) for step, kind, _ in memory[::2]] == [
            (r, "decision") for r in (1, 2, 3)]
        assert [(step, kind) for step, kind, _ in memory[1::2]] == [
            (r, "observation") for r in (1, 2, 3)]


async def test_a_model_that_reads_no_prompt_remembers_nothing(tmp_path: Path) -> None:
    # The dummy model ignores prompts: no conversation is ever built, so a million dummy
    # participants neither store answers nor read the announcements.
    path = await run_into(tmp_path, make_config(agents=50, game={"feedback": True}))
    assert memories(path) == [[]] * 50


async def test_no_feedback_no_results_in_memory(tmp_path: Path, scripted: Scripted) -> None:
    config = make_config(agents=20, game={"feedback": False})
    config, model = scripted(config, lambda agent, round_no: str(agent + round_no))
    path = await run_into(tmp_path, config)
    remembered = memories(path)
    assert len(remembered) == 20
    for agent, memory in enumerate(remembered):  # only the agent's own answers
        assert [(kind, text) for _, kind, text in memory] == [
            ("decision", str(agent + r)) for r in (1, 2, 3)]
    prompts = model.prompts
    assert prompts[0, 1] == prompts[0, 2] == prompts[0, 3]
    assert model.conversations[4, 3] == [
        {"role": "system", "content": prompts[0, 3]},
        {"role": "assistant", "content": "5"}, {"role": "assistant", "content": "6"}, turn(3)]


@pytest.mark.parametrize("memory_rounds", [0, 1, 2])
async def test_memory_rounds_bound_the_conversation(
    tmp_path: Path, memory_rounds: int, scripted: Scripted,
) -> None:
    config = make_config(agents=6, rounds=4, game={"memory_rounds": memory_rounds})
    config, model = scripted(config, lambda agent, round_no: str(agent * 10 + round_no))
    path = await run_into(tmp_path, config)
    rounds = read_summary(path)["steps"]
    conversations = model.conversations
    rules = conversations[0, 1][0]
    for agent in range(6):
        for r in (1, 2, 3, 4):
            remembered = [m for k in range(max(1, r - memory_rounds), r) for m in (
                {"role": "assistant", "content": str(agent * 10 + k)},
                {"role": "user", "content": result_message(rounds[k - 1])})]
            assert conversations[agent, r] == [rules, *remembered, turn(r)]


async def test_long_memory_is_not_cut_by_the_agent_memory_bound(
    tmp_path: Path, scripted: Scripted,
) -> None:
    # 20 rounds remembered: 40 messages, more than an agent's default memory holds (32).
    config = make_config(agents=2, rounds=22, workers=1, game={"memory_rounds": 20})
    config, model = scripted(config, lambda agent, round_no: str(round_no))
    await run_into(tmp_path, config)
    last = model.conversations[1, 22]
    assert len(last) == 1 + 2 * 20 + 1  # the rules, 20 rounds, the turn
    assert [m["content"] for m in last[1:-1:2]] == [str(r) for r in range(2, 22)]


# -- runs that stop early ------------------------------------------------------------------------
class StopAt:
    """A reporter that raises ``error`` when round ``round_no`` starts."""

    def __init__(self, round_no: int, error: BaseException) -> None:
        self.round_no = round_no
        self.error = error

    def round_started(self, round_no: int, total: int) -> None:
        if round_no == self.round_no:
            raise self.error

    def round_progress(self, round_no: int, done: int, total: int) -> None:
        pass

    def round_finished(self, outcome: RoundOutcome, wall_s: float) -> None:
        pass


def _check_rounds_one_and_two_kept(path: Path) -> dict[str, Any]:
    table = read_table(path)
    assert table.num_rows == 2 * 200
    assert sorted(set(table.column("round").to_pylist())) == [1, 2]
    summary = read_summary(path)
    assert [r["round"] for r in summary["steps"]] == [1, 2]
    assert summary["steps_planned"] == 5
    return summary


async def test_crash_in_round_three_keeps_rounds_one_and_two(tmp_path: Path) -> None:
    rd = RunDirectory.create(tmp_path / "run")
    with pytest.raises(RuntimeError, match="reporter broke"):
        await play(make_config(rounds=5), rd, StopAt(3, RuntimeError("reporter broke")))
    summary = _check_rounds_one_and_two_kept(rd.path)
    assert summary["status"] == "failed"
    assert summary["error"] == "RuntimeError: reporter broke"

    # The round files alone are enough, as after a hard kill before consolidation.
    (rd.path / "responses.parquet").unlink()
    assert read_table(rd.path).num_rows == 400


def test_keyboard_interrupt_is_recorded_as_interrupted(tmp_path: Path) -> None:
    rd = RunDirectory.create(tmp_path / "run")
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(play(make_config(rounds=5), rd, StopAt(3, KeyboardInterrupt())))
    summary = _check_rounds_one_and_two_kept(rd.path)
    assert summary["status"] == "interrupted"


async def test_cancellation_is_recorded_as_interrupted(tmp_path: Path) -> None:
    # asyncio.run delivers Ctrl-C to the main task as a cancellation.
    rd = RunDirectory.create(tmp_path / "run")
    task: asyncio.Task[Any] | None = None

    class CancelAfterTwo(StopAt):
        def round_finished(self, outcome: RoundOutcome, wall_s: float) -> None:
            if outcome.round == 2:
                assert task is not None
                task.cancel()

    task = asyncio.create_task(play(make_config(rounds=5), rd, CancelAfterTwo(0, RuntimeError())))
    with pytest.raises(asyncio.CancelledError):
        await task
    summary = _check_rounds_one_and_two_kept(rd.path)
    assert summary["status"] == "interrupted"
