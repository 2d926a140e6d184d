"""The scripted model: its documented rule, as a provider and as a serve-llm policy."""

from __future__ import annotations

import json
import statistics
from fractions import Fraction
from typing import Any

import aiohttp
import pytest

from game_helpers import game_file
from populace.core import ConfigError
from populace.llm import ScriptedConfig, build_model
from populace.llm.offline import (
    ScriptedModel,
    ScriptedParams,
    ServerOptions,
    running_server,
    scripted_reply,
)
from populace.scenarios.guess_number._prompts import (
    EXTRACT,
    FAMOUS_NOTE,
    INSTRUCTIONS,
    RULES,
    describe_target,
)

Messages = list[dict[str, Any]]


def prompt(level: str = "P1", ratio: Fraction = Fraction(2, 3), offset: float = 0,
           famous: bool = False, low: str = "0", high: str = "100") -> str:
    """A round prompt exactly as the game writes it."""
    return (RULES + " " + INSTRUCTIONS[level]).format(
        n_players=100, composition="", low=low, high=high, group_note="",
        target_rule=describe_target(ratio, offset), famous_note=FAMOUS_NOTE if famous else "")


def number(text: str) -> float:
    assert text.endswith("."), text
    return float(text.rsplit(" ", 1)[1].rstrip("."))


PLAIN = ScriptedParams()


def answers(messages: Messages, n: int = 300, temperature: float | None = 0.7,
            params: ScriptedParams = PLAIN) -> list[float]:
    return [number(scripted_reply(messages, seed=s, temperature=temperature, params=params))
            for s in range(n)]


def mean(messages: Messages, **kw: Any) -> float:
    return statistics.fmean(answers(messages, **kw))


def persona(text: str, level: str = "P1") -> Messages:
    return [{"role": "system", "content": text}, {"role": "user", "content": prompt(level)}]


def test_same_request_same_answer_and_seeds_vary_it() -> None:
    messages = [{"role": "user", "content": prompt("P2")}]
    assert scripted_reply(messages, seed=5) == scripted_reply(messages, seed=5)
    assert len({scripted_reply(messages, seed=s) for s in range(20)}) > 5
    assert scripted_reply(messages) == scripted_reply(messages)  # no seed: a hash of the text
    text = scripted_reply(messages, seed=1)
    assert text.startswith("If the others choose about 50, the target is about 33.")
    assert text.endswith(f"The answer is {number(text):g}.")


def test_each_guidance_cue_lowers_the_answers() -> None:
    means = [mean([{"role": "user", "content": prompt(level)}]) for level in INSTRUCTIONS]
    assert means[0] == pytest.approx(50, abs=2)  # P1 clusters near the middle
    assert means == sorted(means, reverse=True)
    assert means[1] == pytest.approx(100 / 3, abs=2)  # one step: 2/3 of 50
    famous = mean([{"role": "user", "content": prompt("P1", famous=True)}])
    assert famous == pytest.approx(means[1], abs=2)  # the note is one more step


@pytest.mark.parametrize(("table", "values"), [
    ("education", ["no schooling", "primary school", "high school", "bachelor's degree",
                   "master's degree", "doctorate"]),
    ("profession", ["artist", "athlete", "writer", "psychologist", "economist",
                    "game theory professor"]),
])
def test_persona_attributes_order_the_answers(table: str, values: list[str]) -> None:
    means = [mean(persona(f"About you: {table}: {v}.")) for v in values]
    assert means == sorted(means, reverse=True)
    assert means[0] > 50 > means[-1]
    # Only system messages count: the same words in the round prompt change nothing.
    told = [{"role": "user", "content": prompt() + " 200 doctorate players take part."}]
    assert mean(told) == mean([{"role": "user", "content": prompt()}])


def test_ratio_offset_and_range_are_read_from_the_rules() -> None:
    deep = ScriptedParams(depth=20, noise=0.1)
    half = [{"role": "user", "content": prompt(ratio=Fraction(1, 2), offset=5)}]
    assert mean(half, params=deep) == pytest.approx(10, abs=0.6)  # the equilibrium is 10
    assert mean([{"role": "user", "content": prompt()}], params=deep) < 0.6
    narrow = [{"role": "user", "content": prompt(low="10", high="20")}]
    values = answers(narrow, temperature=1.0)
    assert min(values) >= 10 and max(values) <= 20
    assert statistics.fmean(values) == pytest.approx(15, abs=0.5)
    assert any(v != round(v) for v in values)  # a narrow range answers to 0.01


def test_an_earlier_winner_pulls_answers_down() -> None:
    def with_winner(w: float) -> Messages:
        return [{"role": "user", "content": prompt()},
                {"role": "assistant", "content": "The answer is 50."},
                {"role": "user", "content": f"Round 1 is over. The target was 33.00 and the "
                                            f"winning number was {w:g}."},
                {"role": "user", "content": prompt()}]

    first = mean([{"role": "user", "content": prompt()}])
    after = [mean(with_winner(w)) for w in (33, 20, 8)]
    assert first > after[0] > after[1] > after[2]
    assert after[0] == pytest.approx(33 * (2 / 3) ** 0.5, abs=2)
    text = scripted_reply(with_winner(33), seed=3)
    assert text.startswith("Last round the winning number was 33.")
    # Its own earlier answers never count as a winner.
    own = [{"role": "assistant", "content": "the winning number was 2"},
           {"role": "user", "content": prompt()}]
    assert mean(own) == first


def test_temperature_widens_the_spread_not_the_mean() -> None:
    messages = [{"role": "user", "content": prompt()}]
    cold = answers(messages, n=600, temperature=0.05)
    hot = answers(messages, n=600, temperature=1.0)
    assert statistics.pstdev(cold) == pytest.approx(6.1, abs=0.6)
    assert statistics.pstdev(hot) == pytest.approx(8.5, abs=0.8)
    assert statistics.fmean(cold) == pytest.approx(statistics.fmean(hot), abs=1.5)


def test_extraction_json_invalid_and_background_requests() -> None:
    ask = [{"role": "user", "content": EXTRACT.format(answer="I think 40. The answer is 27.")}]
    assert scripted_reply(ask, seed=1) == "The answer is 27"
    lost = [{"role": "user", "content": EXTRACT.format(answer="I cannot decide at all.")}]
    assert scripted_reply(lost, seed=1) == "I CAN'T"

    schema = {"type": "json_schema", "json_schema": {"name": "g", "schema": {
        "type": "object", "properties": {"reasoning": {"type": "string"},
                                         "number": {"type": "number"}}}}}
    data = json.loads(scripted_reply([{"role": "user", "content": prompt("P2")}], seed=2,
                                     response_format=schema))
    assert set(data) == {"reasoning", "number"} and 0 <= data["number"] <= 100

    never = ScriptedParams(invalid=1.0)
    silent = scripted_reply([{"role": "user", "content": prompt()}], seed=2, params=never)
    assert not any(ch.isdigit() for ch in silent)
    some = ScriptedParams(invalid=0.2)
    share = sum("The answer is" not in scripted_reply(
        [{"role": "user", "content": prompt()}], seed=s, params=some) for s in range(500)) / 500
    assert share == pytest.approx(0.2, abs=0.05)

    request = ("Invent one person and write their background.\n"
               '{\n  "education": "doctorate",\n  "age": "35-44"\n}')
    bio = scripted_reply([{"role": "system", "content": "You create people."},
                          {"role": "user", "content": request}], seed=9)
    assert bio.startswith("You are ")
    assert "Your education is doctorate." in bio and "Your age is 35-44." in bio
    assert "The answer is" not in bio
    assert scripted_reply([{"role": "user", "content": request}], seed=10) != bio


async def test_provider_config_build_and_accounting() -> None:
    cfg = game_file({"agents": 10, "models": {"s": {"provider": "scripted", "depth": 2}}})
    assert isinstance(cfg.options.models["s"], ScriptedConfig)
    assert cfg.config.protocol_for("s") == "two_call"  # the paper's two calls, like a real model
    with pytest.raises(ConfigError, match=r"run.yaml: models.s.invalid: .*less than or equal"):
        game_file({"models": {"s": {"provider": "scripted", "invalid": 2}}})
    model = build_model("s", cfg.options.models["s"])
    assert isinstance(model, ScriptedModel) and model.params.depth == 2
    messages = [{"role": "user", "content": prompt()}]
    done = await model.complete(messages, seed=4, temperature=0.5)
    assert done.text == scripted_reply(messages, seed=4, temperature=0.5,
                                       params=ScriptedParams(depth=2))
    assert done.prompt_tokens == len(prompt().split())
    assert done.completion_tokens == len(done.text.split())
    cut = await model.complete(messages, seed=4, max_tokens=3)
    assert len(cut.text.split()) == 3
    stats = model.statistics()
    assert (stats.requests, stats.completion_tokens) == (2, done.completion_tokens + 3)
    await model.aclose()


async def test_serve_llm_scripted_policy_is_the_same_rule() -> None:
    messages = [{"role": "system", "content": "About you: profession: economist."},
                {"role": "user", "content": prompt("P3")}]
    async with running_server(ServerOptions(policy="scripted", models=["s"])) as base, \
            aiohttp.ClientSession() as session:
        for seed, temperature in ((1, 0.2), (2, 1.0), (3, None)):
            body: dict[str, Any] = {"model": "s", "messages": messages, "seed": seed}
            if temperature is not None:
                body["temperature"] = temperature
            async with session.post(base + "/chat/completions", json=body) as r:
                data = await r.json()
            assert data["choices"][0]["message"]["content"] == scripted_reply(
                messages, seed=seed, temperature=temperature)
