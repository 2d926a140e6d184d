"""The guessing game against the OpenAI-compatible test server over real loopback HTTP.

Protocols (two calls, structured), retries under injected errors, mixed models, the levels of
guidance and the conversation each participant sends. Every participant passes
``seed=seed_for(derive_seed(run seed, round), agent id)``, and the server answers
``mix64(seed) % 101`` for a seed (policies ``random``/``reasoning``), so every number can be
predicted here.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from aiohttp import web

from game_helpers import game_file
from populace.core import derive_seed, mix64, seed_for
from populace.launch import RunFile
from populace.llm import server_kind
from populace.llm.offline import ServerOptions, create_app, running_server
from populace.results import RunDirectory, read_summary, read_table
from populace.scenarios.guess_number import play
from populace.scenarios.guess_number._prompts import RESPONSE_SCHEMA as JSON_SCHEMA

SEED = 5
ANSWER_FORMAT = " End with the sentence 'The answer is N', where N is your number."
P1_PROMPT = (
    "You are one of {n} players in a number game. Every player privately chooses a real "
    "number between 0 and 100, inclusive. The target is 2/3 of the average of all chosen "
    "numbers. The player whose number is closest to the target wins. Give your number directly."
)


def llm(base_urls: Iterable[str], model: str = "dummy", **extra: Any) -> dict[str, Any]:
    """An ``openai`` model entry for the run file."""
    return {"provider": "openai", "model": model, "base_urls": list(base_urls),
            "timeout": 10, **extra}


def make_config(models: dict[str, Any], *, agents: int, rounds: int = 2,
                game: dict[str, Any] | None = None, **changes: Any) -> RunFile:
    """A run on ``models``; the paper's two calls unless ``game`` says otherwise (``auto``
    would take one constrained call at P1 on serve-llm)."""
    game = {"protocol": "two_call", **(game or {})}
    data: dict[str, Any] = {"name": "http", "seed": SEED, "agents": agents, "rounds": rounds,
                            "workers": 2, "models": models, "game": game, **changes}
    return game_file(data)


def expected_number(agent: int, round_no: int) -> int:
    """What the server answers this agent in this round (and DummyModel would)."""
    return mix64(seed_for(derive_seed(SEED, round_no), agent)) % 101


def who_asks(config: RunFile) -> dict[int, tuple[int, int]]:
    """Request seed → (agent, round)."""
    o = config.options
    return {seed_for(derive_seed(o.seed, r), a): (a, r)
            for a in range(o.agents) for r in range(1, o.steps + 1)}


async def run_into(tmp_path: Path, config: RunFile, name: str = "run") -> Path:
    rd = RunDirectory.create(tmp_path / name)
    await play(config, rd)
    return rd.path


async def server_stats(base_url: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s, \
            s.get(base_url.removesuffix("/v1") + "/stats") as r:
        assert r.status == 200
        stats: dict[str, Any] = await r.json()
        return stats


def rows_by_agent_round(table: pa.Table) -> dict[tuple[int, int], dict[str, Any]]:
    return {(row["agent_id"], row["round"]): row for row in table.to_pylist()}


def result_message(entry: dict[str, Any]) -> str:
    return (f"Round {entry['round']} is over. The target was {entry['target']:.2f} and the "
            f"winning number was {entry['winner_number']:g}.")


class Recorder:
    """Serves the fake server (the public ``create_app``) and keeps the JSON body of every
    chat completion it receives, in ``seen``."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    async def _record(self, request: web.Request, response: web.StreamResponse) -> None:
        if request.method == "POST" and request.path == "/v1/chat/completions":
            self.seen.append(json.loads(await request.read()))  # cached by the handler

    @asynccontextmanager
    async def serve(self, options: ServerOptions) -> AsyncIterator[str]:
        app = create_app(options)
        app.on_response_prepare.append(self._record)
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True,
                               shutdown_timeout=1.0)
        await runner.setup()
        try:
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            host, port = runner.addresses[0][:2]
            yield f"http://{host}:{port}/v1"
        finally:
            await runner.cleanup()


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


# -- protocols ----------------------------------------------------------------------------------
async def test_two_call_protocol(tmp_path: Path, recorder: Recorder) -> None:
    async with recorder.serve(ServerOptions(policy="reasoning")) as url:
        config = make_config({"llm": llm([url])}, agents=40,
                             game={"temperature": 0.7, "max_tokens": 200,
                                   "protocol": "two_call"})
        path = await run_into(tmp_path, config)
        stats = await server_stats(url)

    table = read_table(path)
    assert table.num_rows == 80
    assert table.column("error").null_count == 80
    assert set(table.column("calls").to_pylist()) == {2}
    assert set(table.column("retries").to_pylist()) == {0}
    for (agent, r), row in rows_by_agent_round(table).items():
        n = expected_number(agent, r)
        assert row["raw"].endswith(f"The answer is {n}.")
        assert row["extract_raw"] == f"The answer is {n}"
        assert (row["number"], row["valid"]) == (n, True)
        assert row["prompt_tokens"] > 0 and row["completion_tokens"] > 0
    # Exactly two requests per agent and round reached the server, all answered.
    assert stats["requests"] == 2 * 40 * 2
    assert stats["status"] == {"200": 160}
    summary = read_summary(path)
    assert summary["models"] == ["llm"]
    for entry in summary["steps"]:
        rows = table.filter(pc.equal(table.column("round"), entry["round"]))
        assert entry["usage"] == {"llm": {
            "agents": 40, "calls": 80, "retries": 0,
            "prompt_tokens": pc.sum(rows.column("prompt_tokens")).as_py(),
            "completion_tokens": pc.sum(rows.column("completion_tokens")).as_py()}}

    # What was sent: the answer call with the game's settings, then the extraction call.
    by_key: dict[tuple[int, int], list[dict[str, Any]]] = {}
    who = who_asks(config)
    for body in recorder.seen:
        by_key.setdefault(who[body["seed"]], []).append(body)
    assert sorted(by_key) == sorted((a, r) for a in range(40) for r in (1, 2))
    rows = rows_by_agent_round(table)
    for key, (answer, extraction) in by_key.items():
        # shared first: the rules (no format line) open it, the turn closes it
        assert answer["messages"][0] == {"role": "system", "content": P1_PROMPT.format(n=40)}
        assert answer["messages"][-1] == {"role": "user",
                                          "content": "It is your turn: choose your number."}
        assert (answer["temperature"], answer["max_tokens"]) == (0.7, 200)
        assert "response_format" not in answer
        (ask,) = extraction["messages"]
        # the shared instruction first, so a server computes it once
        assert ask["role"] == "user" and ask["content"].startswith("Extract the one number")
        assert ask["content"].endswith(f"\n---\n{rows[key]['raw']}\n---")
        assert (extraction["temperature"], extraction["max_tokens"]) == (0.0, 24)


async def test_structured_protocol(tmp_path: Path, recorder: Recorder) -> None:
    async with recorder.serve(ServerOptions(policy="reasoning")) as url:
        # Answers above 50 are out of the game's range: parsed, then found invalid.
        config = make_config({"llm": llm([url])}, agents=30,
                             game={"protocol": "structured", "high": 50})
        path = await run_into(tmp_path, config)
        stats = await server_stats(url)

    table = read_table(path)
    assert table.num_rows == 60
    assert set(table.column("calls").to_pylist()) == {1}
    assert table.column("extract_raw").null_count == 60
    assert table.column("error").null_count == 60
    assert stats["requests"] == 30 * 2
    for (agent, r), row in rows_by_agent_round(table).items():
        n = expected_number(agent, r)
        answer = json.loads(row["raw"])
        assert set(answer) == {"reasoning", "number"} and answer["number"] == n
        assert isinstance(answer["reasoning"], str) and answer["reasoning"]
        assert (row["number"], row["valid"]) == ((n, True) if n <= 50 else (None, False))
    assert 0 < pc.sum(table.column("valid")).as_py() < 60

    assert len(recorder.seen) == 60
    for body in recorder.seen:
        # serve-llm says it is populace's: the schema goes in vLLM's spelling
        assert body["structured_outputs"] == {"json": JSON_SCHEMA["json_schema"]["schema"]}
        assert "response_format" not in body
        prompt = body["messages"][0]["content"]
        assert prompt.startswith("You are one of 30 players")
        assert prompt.endswith(' Reply with a JSON object with two fields: "reasoning" '
                               '(a string) and "number" (your number).')


@pytest.mark.parametrize(("high", "constraint"), [
    (60, {"choice": [str(i) for i in range(61)]}),
    (60.5, {"regex": r"-?[0-9]{1,15}(\.[0-9]{1,4})?"}),
])
async def test_constrained_protocol(tmp_path: Path, recorder: Recorder, high: float,
                                    constraint: dict[str, Any]) -> None:
    # One call of a few tokens, held to a number by the server: no extraction call.
    async with recorder.serve(ServerOptions(policy="reasoning")) as url:
        config = make_config({"llm": llm([url])}, agents=20,
                             game={"protocol": "constrained", "high": high})
        path = await run_into(tmp_path, config)
    table = read_table(path)
    assert table.num_rows == 40 and set(table.column("calls").to_pylist()) == {1}
    for (agent, r), row in rows_by_agent_round(table).items():
        n = expected_number(agent, r)
        if high == 60 and n > 60:  # not a choice: the server picks one of the choices
            assert 0 <= row["number"] <= 60 and row["valid"]
        else:
            assert row["raw"] == str(n)
            assert (row["number"], row["valid"]) == ((n, True) if n <= high else (None, False))
    assert len(recorder.seen) == 40
    for body in recorder.seen:
        assert body["structured_outputs"] == constraint
        assert body["max_tokens"] == 8
        assert body["messages"][0]["content"].endswith(" Reply with your number only.")


async def test_retries_under_injected_errors(tmp_path: Path) -> None:
    # A short max_backoff keeps the test fast; eject_after is out of reach so that both URLs
    # stay in use, and 10 retries make a failed call practically impossible (0.12 ** 11 per
    # call).
    chaos = ServerOptions(rate_500=0.1, rate_malformed=0.02)
    async with running_server(chaos) as url_a, running_server(chaos) as url_b:
        config = make_config({"llm": llm([url_a, url_b], max_retries=10, eject_after=1000,
                                             max_backoff=0.01)},
                             agents=300)
        path = await run_into(tmp_path, config)
        stats = [await server_stats(url_a), await server_stats(url_b)]

    table = read_table(path)
    pairs = set(zip(table.column("agent_id").to_pylist(), table.column("round").to_pylist(),
                    strict=True))
    assert table.num_rows == 600 and pairs == {(a, r) for a in range(300) for r in (1, 2)}
    assert table.column("error").null_count == 600
    assert all(table.column("valid").to_pylist())
    for (agent, r), row in rows_by_agent_round(table).items():
        assert row["number"] == expected_number(agent, r)  # retries do not change answers

    failed = sum(s["injected"].get("500", 0) + s["injected"].get("malformed", 0) for s in stats)
    assert {k for s in stats for k in s["injected"]} == {"500", "malformed"}
    assert sum(s["requests"] for s in stats) == 2 * 600 + failed
    retries = pc.sum(table.column("retries")).as_py()
    assert retries == failed > 0  # every failed attempt was retried, and recorded
    assert pc.max(table.column("calls")).as_py() == 2
    rounds = read_summary(path)["steps"]
    assert [e["usage"]["llm"]["retries"] for e in rounds] == [
        pc.sum(table.filter(pc.equal(table.column("round"), r)).column("retries")).as_py()
        for r in (1, 2)]
    assert sum(e["usage"]["llm"]["calls"] for e in rounds) == 1200
    # Both URLs of the model share the load.
    a, b = (s["requests"] for s in stats)
    assert abs(a - b) <= 0.2 * max(a, b), (a, b)


# -- mixed models -------------------------------------------------------------------------------
async def test_mixed_models(tmp_path: Path, recorder: Recorder) -> None:
    async with recorder.serve(ServerOptions(models=["served"], policy="reasoning")) as url:
        config = make_config(
            {"dummy": {"provider": "dummy", "latency": 0}, "llm": llm([url], model="served")},
            agents=300, assign={"llm": "1/3", "dummy": "2/3"}, game={"protocol": "auto"})
        path = await run_into(tmp_path, config)
        stats = await server_stats(url)

    table = read_table(path)
    for r in (1, 2):
        rows = table.filter(pc.equal(table.column("round"), r))
        assert Counter(rows.column("model").to_pylist()) == {"llm": 100, "dummy": 200}
    model_of: dict[int, set[str]] = {}
    for row in table.to_pylist():
        model_of.setdefault(row["agent_id"], set()).add(row["model"])
    assigned = config.config.assignment().tolist()
    assert {a: m.pop() for a, m in model_of.items() if len(m) == 1} == dict(enumerate(assigned))
    profiles = read_table(path, "profiles")
    assert profiles.column("model").to_pylist() == assigned
    llm_agents = {a for a, m in enumerate(assigned) if m == "llm"}
    assert llm_agents != set(range(100))  # shuffled, not dealt in blocks

    # Each model with its own protocol (auto): on the server one call held to a number
    # (P1, a server that takes a choice), on the dummy one direct call.
    for row in table.to_pylist():
        assert row["calls"] == 1 and row["raw"].isdigit()
        assert row["extract_raw"] is None
    assert stats["models"] == {"served": 100 * 2}
    assert all(body["structured_outputs"]["choice"][:2] == ["0", "1"]
               for body in recorder.seen)
    who = who_asks(config)
    assert {who[body["seed"]][0] for body in recorder.seen} == llm_agents

    summary = read_summary(path)
    assert summary["models"] == ["dummy", "llm"]
    for entry in summary["steps"]:
        usage = entry["usage"]
        assert (usage["llm"]["agents"], usage["llm"]["calls"]) == (100, 100)
        assert (usage["dummy"]["agents"], usage["dummy"]["calls"]) == (200, 200)


def test_assignment_is_exact_and_seeded() -> None:
    models = {"a": {"provider": "dummy"}, "b": {"provider": "dummy"}, "c": {"provider": "dummy"}}

    def counts(agents: int, assign: dict[str, Any], seed: int = 0) -> Counter[str]:
        cfg = game_file({"agents": agents, "seed": seed, "models": models, "assign": assign})
        return Counter(cfg.config.assignment().tolist())

    # Largest remainder: 10 × 1/3 each → 3, 3, 3 and the seat left to the first tie.
    third = {"a": "1/3", "b": "1/3", "c": "1/3"}
    assert sorted(counts(10, third).values()) == [3, 3, 4]
    assert counts(7, {"a": "1/6", "b": "5/6"}) == {"a": 1, "b": 6}  # 1.17 / 5.83
    assert counts(300, {"a": 100, "b": 200}) == counts(300, {"a": "1/3", "b": "2/3"}) == {
        "a": 100, "b": 200}
    assert counts(5, {"a": 0, "c": 1}) == {"c": 5}

    def order(seed: int) -> list[str]:
        cfg = game_file({"agents": 60, "seed": seed, "models": models, "assign": third})
        return cfg.config.assignment().tolist()

    assert order(1) == order(1)
    assert order(1) != order(2)


# -- what participants are told -----------------------------------------------------------------
async def test_levels_and_famous_note_shape_the_prompt(tmp_path: Path) -> None:
    step = "Think the problem through step by step first, then give your number."
    rational = " Assume that every player is rational"
    famous = " (This is a version of the famous game 'guess 2/3 of the average'.)"
    told: dict[tuple[str, bool], str] = {}
    async with running_server(ServerOptions(policy="echo")) as url:
        for level in ("P1", "P2", "P3", "P4"):
            for note in (False, True):
                config = make_config({"llm": llm([url])}, agents=3, rounds=1, workers=1, game={
                    "level": level, "famous_note": note, "protocol": "direct",
                    "layout": "persona_first"})  # the echo answers the last message
                path = await run_into(tmp_path, config, f"{level}-{note}")
                raw = set(read_table(path).column("raw").to_pylist())
                assert len(raw) == 1  # everyone is told the same
                told[level, note] = raw.pop()  # echoed: exactly the prompt sent

    p1 = P1_PROMPT.format(n=3)
    assert told["P1", False] == p1 + ANSWER_FORMAT
    assert told["P2", False] == p1.replace("Give your number directly.", step) + ANSWER_FORMAT
    assert told["P3", False] == (p1.replace("Give your number directly.", step)
                                 + rational + "." + ANSWER_FORMAT)
    assert told["P4", False] == (
        p1.replace("Give your number directly.", step) + rational + ", tries to predict the "
        "numbers the others will choose, and adjusts their own accordingly." + ANSWER_FORMAT)
    for level in ("P1", "P2", "P3", "P4"):
        assert famous not in told[level, False]
        assert told[level, True] == told[level, False].replace(
            "closest to the target wins.", "closest to the target wins." + famous)


async def test_round_two_remembers_round_one(
    tmp_path: Path, recorder: Recorder
) -> None:
    async with recorder.serve(ServerOptions(policy="reasoning")) as url:
        config = make_config({"llm": llm([url])}, agents=4, game={"protocol": "two_call"})
        path = await run_into(tmp_path, config)
    rows = rows_by_agent_round(read_table(path))
    first = read_summary(path)["steps"][0]
    rules = {"role": "system", "content": P1_PROMPT.format(n=4)}

    who = who_asks(config)
    answers = [b for b in recorder.seen
               if not b["messages"][-1]["content"].startswith("Extract")]
    assert len(answers) == len(recorder.seen) // 2 == 8
    for body in answers:
        agent, r = who[body["seed"]]
        turn = {"role": "user", "content": "It is your turn: choose your number."}
        if r == 1:
            assert body["messages"] == [rules, turn]
        else:  # the rules, its own round-1 answer, the moderator's result, then its turn
            assert body["messages"] == [
                rules,
                {"role": "assistant", "content": rows[agent, 1]["raw"]},
                {"role": "user", "content": result_message(first)},
                turn,
            ]


async def test_cost_is_reported_per_model_and_round_when_prices_are_set(tmp_path: Path) -> None:
    async with running_server(ServerOptions(policy="reasoning")) as url:
        config = make_config({"llm": llm([url], price_per_million=[2.0, 10.0])}, agents=20,
                             rounds=1)
        path = await run_into(tmp_path, config)
    usage = read_summary(path)["steps"][0]["usage"]["llm"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    expected = (usage["prompt_tokens"] * 2.0 + usage["completion_tokens"] * 10.0) / 1e6
    assert usage["cost"] == pytest.approx(expected, abs=1e-6)


async def test_two_call_extracts_only_what_is_not_stated(tmp_path: Path,
                                                         recorder: Recorder) -> None:
    # serve-llm's reasoning answers end "The answer is N.": stated plainly, so with
    # extract: when_stated the second call is never made, and the numbers are the same.
    async with recorder.serve(ServerOptions(policy="reasoning")) as url:
        config = make_config({"llm": llm([url])}, agents=20,
                             game={"protocol": "two_call", "extract": "when_stated"})
        path = await run_into(tmp_path, config)
    table = read_table(path)
    assert set(table.column("calls").to_pylist()) == {1}
    assert table.column("extract_raw").null_count == 40
    for (agent, r), row in rows_by_agent_round(table).items():
        assert (row["number"], row["valid"]) == (expected_number(agent, r), True)
    assert len(recorder.seen) == 40
    # an answer that does not state it plainly still gets its extraction call
    async with recorder.serve(ServerOptions(policy="echo")) as url:
        config = make_config({"llm": llm([url])}, agents=4, rounds=1,
                             game={"protocol": "two_call", "extract": "when_stated"})
        path = await run_into(tmp_path, config, "echo")
    assert set(read_table(path).column("calls").to_pylist()) == {2}


def test_auto_picks_one_constrained_call_at_p1_on_a_server_that_takes_choices() -> None:
    auto = {"protocol": "auto"}
    config = make_config({"llm": llm(["http://gpu:8000/v1"])}, agents=4, game=auto)
    def choice(server: str) -> bool:  # what run.supports(model, "choice") answers
        return server_kind(server).supports("choice")

    for server in ("vllm", "sglang", "llamacpp", "populace"):
        assert config.config.protocol_for("llm", choice(server)) == "constrained"
    assert config.config.protocol_for("llm", choice("openai")) == "two_call"  # no choice constraint
    assert config.config.protocol_for("llm", choice("auto")) == "two_call"  # not known (a replay)
    assert config.config.protocol_for("llm") == "two_call"
    p2 = make_config({"llm": llm(["http://gpu:8000/v1"])}, agents=4,
                     game={**auto, "level": "P2"})
    # the level asks for reasoning
    assert p2.config.protocol_for("llm", choice("vllm")) == "two_call"
    real = make_config({"llm": llm(["http://gpu:8000/v1"])}, agents=4,
                       game={**auto, "high": 0.5})
    assert real.config.protocol_for("llm", choice("llamacpp")) == "two_call"  # not integers


async def test_auto_on_serve_llm_at_p1_is_one_call_and_a_replay_keeps_it(
        tmp_path: Path, recorder: Recorder) -> None:
    async with recorder.serve(ServerOptions(policy="reasoning")) as url:
        config = make_config({"llm": llm([url])}, agents=10, rounds=1,
                             game={"protocol": "auto"})
        path = await run_into(tmp_path, config)
    assert read_summary(path)["servers"] == {"llm": {"server": "populace", "slots": None}}
    table = read_table(path)
    assert set(table.column("calls").to_pylist()) == {1} and all(
        table.column("valid").to_pylist())
    assert all(body["max_tokens"] == 8 for body in recorder.seen)
    # replayed without the server: the same protocol, so every call is in the recording
    replay = RunDirectory.create(tmp_path / "replay")
    from populace.launch import launch, load_run_file
    summary = await launch(load_run_file(path / "config.yaml"), replay, replay=path)
    assert summary["status"] == "completed"
    (step,) = summary["steps"]
    assert (step["llm"]["llm"]["replayed"], step["llm"]["llm"]["sent"]) == (10, 0)
    assert read_table(replay.path).column("number").to_pylist() == \
        table.column("number").to_pylist()


async def test_answers_slower_than_the_timeout_are_waited_for_in_a_run(tmp_path: Path) -> None:
    # Agents are driven without a Task: the client's look at the server's /stats (while
    # an answer outlasts its timeout) must run in one, as the request does.
    async with running_server(ServerOptions(latency=0.5)) as url:
        config = make_config({"llm": llm([url], timeout=0.2, max_retries=0)}, agents=6,
                             rounds=1, workers=1, game={"protocol": "direct"})
        path = await run_into(tmp_path, config)
        stats = await server_stats(url)
    table = read_table(path)
    assert table.column("error").null_count == 6 and all(table.column("valid").to_pylist())
    assert set(table.column("retries").to_pylist()) == {0}
    assert stats["requests"] == 6  # none abandoned and sent again


async def test_a_server_named_in_the_run_file_is_the_one_in_effect(tmp_path: Path,
                                                                   recorder: Recorder) -> None:
    async with recorder.serve(ServerOptions(policy="reasoning")) as url:
        config = make_config({"llm": llm([url], server="openai", slots=3)}, agents=6,
                             rounds=1, game={"protocol": "auto"})
        path = await run_into(tmp_path, config)
    assert read_summary(path)["servers"] == {"llm": {"server": "openai", "slots": 3}}
    # OpenAI's spelling has no choice constraint: auto keeps the paper's two calls
    assert set(read_table(path).column("calls").to_pylist()) == {2}
