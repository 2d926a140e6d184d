"""The dummy model: seeded answers after a wait, optionally spread (``jitter``)."""

from __future__ import annotations

import asyncio

import pytest

from populace.core import mix64
from populace.llm import DummyConfig, build_model
from populace.llm.offline import DummyModel


async def test_jitter_spreads_the_waits_without_changing_the_answers() -> None:
    steady = DummyModel(latency=0.2)
    spread = DummyModel(latency=0.2, jitter=0.5)
    seeds = range(200)
    a = await asyncio.gather(*(steady.complete([], seed=s) for s in seeds))
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    calls = [asyncio.ensure_future(spread.complete([], seed=s)) for s in seeds]
    await asyncio.sleep(0)
    assert spread.statistics().in_flight == len(seeds)  # all waiting at once, none queued
    b = await asyncio.gather(*calls)
    elapsed = loop.time() - t0
    assert spread.statistics().in_flight == 0  # counted from the timers: none waits now
    # the documented answers, n = mix64(seed) in [0, 100], with and without jitter
    assert [x.text for x in a] == [x.text for x in b] == [str(mix64(s) % 101) for s in seeds]
    assert {x.latency_s for x in a} == {0.2}
    waits = [x.latency_s for x in b]
    assert min(waits) >= 0.1 - 1e-9 and max(waits) <= 0.3 + 1e-9
    assert max(waits) - min(waits) > 0.15  # really spread over the range
    # The waits really happen (a timer never fires early); that they run in parallel is the
    # in_flight count above (how fast they end is for a benchmark to measure, not a test).
    assert elapsed >= max(waits) - 1e-6
    again = await asyncio.gather(*(spread.complete([], seed=s) for s in seeds))
    assert [x.latency_s for x in again] == waits  # fixed by the seed


def test_jitter_is_validated() -> None:
    with pytest.raises(ValueError, match="jitter"):
        DummyModel(jitter=1.5)
    with pytest.raises(ValueError, match="jitter"):
        DummyConfig.model_validate({"provider": "dummy", "jitter": -0.1})
    model = build_model("d", DummyConfig.model_validate({"provider": "dummy", "jitter": 0.3}))
    assert isinstance(model, DummyModel) and model.jitter == 0.3


async def test_a_json_response_format_gets_the_number_in_the_schema() -> None:
    """The structured protocol on the dummy model: the number is the plain answer's,
    written into the schema's number fields (found by the config fuzz test: every answer
    was invalid)."""
    import json

    from populace.scenarios.guess_number._prompts import RESPONSE_SCHEMA

    model = DummyModel(latency=0)
    plain = await model.complete([], seed=7)
    structured = await model.complete([], seed=7, response_format=RESPONSE_SCHEMA)
    data = json.loads(structured.text)
    assert data["number"] == int(plain.text)


async def test_the_structured_game_on_the_dummy_model_has_valid_answers(tmp_path) -> None:
    from populace.launch import launch, load_run_file
    from populace.results import RunDirectory, read_table

    path = tmp_path / "run.yaml"
    path.write_text("scenario: guess_number\nagents: 20\nrounds: 1\nmodels:\n  dummy:\n"
                    "    provider: dummy\n"
                    "    latency: 0\ngame:\n  protocol: structured\n")
    await launch(load_run_file(path), RunDirectory.create(tmp_path / "out"))
    assert read_table(tmp_path / "out").column("valid").to_pylist() == [True] * 20


async def test_calls_in_flight_are_counted_inside_agents_too() -> None:
    from populace.core import Agent, PerWorker, Simulation

    class Asker(Agent):
        def __init__(self, id: int, profile: object = None, *, model: DummyModel) -> None:
            super().__init__(id)
            self.model = model

        async def ask(self) -> str:
            return (await self.model.complete([], seed=self.id)).text

    async with Simulation(workers=1) as sim:
        group = await sim.create(Asker, 300, init={"model": PerWorker(DummyModel, 0.3)})
        answers = group.map(Asker.ask)
        await asyncio.sleep(0.1)
        (waiting,) = sim.statistics().workers[0].resources
        assert waiting.in_flight == 300  # parked on the driver's timers
        assert len(await answers) == 300
        (after,) = sim.statistics().workers[0].resources
        assert after.in_flight == 0


async def test_a_call_is_a_coroutine_to_asyncio_without_a_frame() -> None:
    """``complete`` hands back a small object, not a coroutine frame; asyncio still takes it
    as a coroutine (create_task, gather, wait_for), it answers as ``send`` does, and a
    cancelled wait takes its wake-up back from the shared timer."""
    import collections.abc
    import sys

    from populace.llm import Request

    model = DummyModel(latency=0.2)
    call = model.complete([], seed=7)
    assert isinstance(call, collections.abc.Coroutine)
    assert sys.getsizeof(call) < 120  # a coroutine frame here is over 250 bytes
    direct = await call
    in_task = await asyncio.create_task(model.complete([], seed=7))
    sent = await model.send(Request([], seed=7))
    gathered = await asyncio.gather(model.complete([], seed=7), model.complete([], seed=8))
    seven = str(mix64(7) % 101)  # the documented answer: n = mix64(seed) in [0, 100]
    assert direct.text == in_task.text == sent.text == gathered[0].text == seven
    assert gathered[1].text == str(mix64(8) % 101) != seven
    waiting = asyncio.create_task(model.complete([], seed=9))
    await asyncio.sleep(0.01)
    assert model.statistics().in_flight == 1
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert model.statistics().in_flight == 0  # the cancelled wait left the timer
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await model.complete([], seed=9)
    assert model.statistics().in_flight == 0
    instant = DummyModel(latency=0)
    assert (await instant.complete([], seed=7)).text == seven
    assert (await asyncio.create_task(instant.complete([], seed=7))).text == seven
    assert model.statistics().requests == 7  # the instant model's calls are its own
