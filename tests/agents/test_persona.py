"""The persona agent on the scripted model: what it is shown, what it remembers (within its
budget), how it decides, what it counts, and what an interview leaves untouched."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from populace.agents import Choice, Number, Persona, PersonaOptions, Text
from populace.core import ConfigError, Msg
from populace.llm import DummyConfig, ModelSet, ScriptedConfig

PROFILE = {"age": 40, "job": "nurse", "arm": "treated", "group": 3,
           "background": "You grew up by the sea."}


class Voter(Persona):
    rules = "An election is held every step."


def voter(invalid: float = 0.0, **options: Any) -> tuple[Voter, ModelSet]:
    models = ModelSet.build({"s": ScriptedConfig(provider="scripted", invalid=invalid)})
    return Voter(7, PROFILE, models=models, persona=PersonaOptions(**options)), models


def test_only_the_shown_columns_and_the_background_are_told() -> None:
    v, _ = voter(shown=["age", "job"])
    assert v.persona_text() == "About you: age: 40; job: nurse.\n\nYou grew up by the sea."
    assert voter(background=None)[0].persona_text() == ""
    messages = v.messages("Who?", Choice(["red", "green"]), "")
    told = " ".join(m["content"] for m in messages)
    assert "treated" not in told and "arm" not in told and "group" not in told
    assert [m["role"] for m in messages] == ["system", "system", "user"]
    assert messages[0]["content"] == Voter.rules  # shared first: the prefix every agent has


def test_an_unknown_shown_column_and_a_budget_below_one_event_are_one_line() -> None:
    with pytest.raises(ConfigError, match=r"settings.persona.shown.1: no profile column 'agee' "
                       r"\(have: age, job\)"):
        PersonaOptions(shown=["age", "agee"]).check(["agent_id", "age", "job"])
    with pytest.raises(ValidationError, match="memory_tokens: 50 is below one event"):
        PersonaOptions(memory_tokens=50, event_tokens=120)


async def test_an_intervention_is_read_at_the_next_decision() -> None:
    v, _ = voter()
    vote = Choice(["red", "green", "blue"])
    before = [(await v.decide("Whom do you vote for?", vote, step=t, seed=1)).value
              for t in range(1, 4)]
    for t in range(4, 6):
        v.observe(Msg("intervention", "Vote blue: it is the only honest party.",
                      metadata={"step": t}))
    after = await v.decide("Whom do you vote for?", vote, step=5, seed=1)
    assert after.value == "blue" and after.valid, before
    prompt = v.messages("Whom do you vote for?", vote, await v.recall(6, 1))[-1]["content"]
    assert "[step 4, intervention] Vote blue" in prompt
    assert "I answered: blue" in prompt  # its own decision is remembered too


async def test_an_unreadable_reply_gets_one_extraction_call_and_is_counted() -> None:
    v, models = voter(invalid=1.0)
    d = await v.decide("How old do you feel?", Number(0, 100, integer=True), step=1)
    assert (d.value, d.valid, d.calls) == (None, False, 2)
    assert d.text == "I am not sure.\n---\nI CAN'T"
    assert models.statistics()["s"].unreadable == 1
    assert not v.memory  # an unreadable decision is not remembered as an answer


async def test_a_number_and_free_text() -> None:
    v, models = voter()
    d = await v.decide("How old do you feel?", Number(0, 100, integer=True), step=1)
    assert d.valid and isinstance(d.value, int) and 0 <= d.value <= 100 and d.calls == 1
    t = await v.decide("What is on your mind?", Text(), step=2, max_tokens=40)
    assert t.valid and len(t.value.split()) >= 20
    assert models.statistics()["s"].unreadable == 0


async def test_the_prompt_stops_growing_once_the_memory_budget_is_reached() -> None:
    v, models = voter(shown=["age"], memory_tokens=300, event_tokens=60)
    sizes = []
    for t in range(1, 61):
        v.observe(Msg(f"neighbour{t % 5}", f"Step {t}: " + "the market was busy today " * 4,
                      metadata={"step": t}))
        d = await v.decide("What is on your mind?", Text(), step=t, max_tokens=60)
        sizes.append(d.prompt_tokens)
    kinds = [e.kind for e in v.memory.events()]
    assert kinds[0] == "summary" and "summary" not in kinds[1:]
    assert max(sizes[30:]) <= max(sizes[:30]) + 5  # bounded: no growth after the budget
    assert max(sizes) < 4 * 300  # a word is a scripted token; the budget counts 4 characters
    calls = models.statistics()["s"].requests
    assert 60 < calls < 90  # a summary every few steps, not one per decision


async def test_an_interview_reads_memory_and_writes_nothing_back() -> None:
    v, _ = voter(shown=["job"])
    v.observe(Msg("intervention", "The bridge is closed.", metadata={"step": 2}))
    state = v.get_state()
    messages = v.interview_messages("How was your week?")
    assert messages[1]["content"].startswith("About you: job: nurse.")
    assert "[step 2, intervention] The bridge is closed." in messages[-1]["content"]
    assert messages[-1]["content"].endswith("Question: How was your week?")
    assert v.get_state() == state


async def test_state_round_trips_and_a_new_agent_resumes_the_same_decisions() -> None:
    v, models = voter()
    for t in range(1, 4):
        await v.decide("What is on your mind?", Text(), step=t)
    again = Voter(7, PROFILE, models=models, persona=v.persona)
    again.set_state(v.get_state())
    a = await v.decide("Whom?", Choice(["red", "green"]), step=4, seed=9)
    b = await again.decide("Whom?", Choice(["red", "green"]), step=4, seed=9)
    assert a == b and v.mind() == again.mind()


async def test_a_model_that_reads_no_prompt_draws_its_answer() -> None:
    models = ModelSet.build({"d": DummyConfig(latency=0.0)})
    v = Voter(1, PROFILE, models=models)
    d = await v.decide("Whom?", Choice(["red", "green"]), step=1)
    assert d.valid and d.value in ("red", "green")
    n = await v.decide("How many?", Number(1, 5, integer=True), step=1)
    assert n.value in range(1, 6)


async def test_the_dummys_draws_cover_the_whole_range_and_every_option() -> None:
    models = ModelSet.build({"d": DummyConfig(latency=0.0)})
    voters = [Voter(i, PROFILE, models=models) for i in range(600)]
    numbers = [(await v.decide("How many?", Number(0, 1000, integer=True), step=1)).value
               for v in voters]
    assert min(numbers) < 100 and max(numbers) > 900  # not only low + the dummy's 0..100
    five = [(await v.decide("Which?", Choice(list("abcde")), step=1)).value for v in voters]
    assert {o: five.count(o) for o in "abcde"} == pytest.approx(
        dict.fromkeys("abcde", 120), abs=45)
