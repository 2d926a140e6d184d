"""ModelSet: the clients of a worker, built from configs, recorded, replayed, closed together."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from populace.core import ModelError
from populace.llm import (
    DummyConfig,
    ModelSet,
    ModelStats,
    OpenAIConfig,
    OpenAIModel,
    RecordingModel,
    ReplayModel,
    ScriptedConfig,
)
from populace.llm.offline import DummyModel, ScriptedModel, ServerOptions, running_server

ASK = [{"role": "user", "content": "Pick a number between 0 and 100."}]
OTHER = [{"role": "user", "content": "Pick another number."}]


def configs(url: str) -> dict[str, Any]:
    return {"d": DummyConfig(latency=0.0), "s": ScriptedConfig(provider="scripted"),
            "o": OpenAIConfig(provider="openai", model="dummy", base_urls=[url])}


async def served(url: str) -> int:
    async with aiohttp.ClientSession() as s, s.get(url.removesuffix("/v1") + "/stats") as r:
        return (await r.json())["requests"]


def recording_of(directory: Path, name: str) -> Path:
    return directory / f"{name}-{socket.gethostname()}-{os.getpid()}.jsonl"


async def test_build_makes_one_client_per_config_under_its_name() -> None:
    async with running_server() as url:
        models = ModelSet.build(configs(url))
        try:
            assert list(models) == ["d", "s", "o"] and len(models) == 3
            assert [type(models[n]) for n in models] == [DummyModel, ScriptedModel, OpenAIModel]
            assert [models[n].name for n in models] == ["d", "s", "o"]
            with pytest.raises(KeyError):
                models["nope"]
            for name in models:
                await models[name].complete(ASK, seed=1)
            stats = models.statistics()
            assert list(stats) == ["d", "s", "o"]
            assert all(isinstance(s, ModelStats) and s.model == n for n, s in stats.items())
            assert [s.requests for s in stats.values()] == [1, 1, 1]
            assert stats["o"].completion_tokens == 1 and await served(url) == 1
        finally:
            await models.aclose()


async def test_recording_wraps_every_model_but_the_dummy(tmp_path: Path) -> None:
    async with running_server() as url:
        models = ModelSet.build(configs(url), record_to=tmp_path)
        assert type(models["d"]) is DummyModel
        assert type(models["s"]) is RecordingModel and type(models["o"]) is RecordingModel
        texts = {n: (await models[n].complete(ASK, seed=3)).text for n in models}
        await models.aclose()  # writes what the recordings buffered
    assert sorted(os.listdir(tmp_path)) == sorted(
        recording_of(tmp_path, n).name for n in ("s", "o"))
    for name in ("s", "o"):
        [line] = recording_of(tmp_path, name).read_text().splitlines()
        record = json.loads(line)
        assert (record["model"], record["text"]) == (name, texts[name])


async def test_replay_answers_from_the_recording_without_a_server(tmp_path: Path) -> None:
    async with running_server() as url:
        recorded = ModelSet.build(configs(url), record_to=tmp_path)
        first = (await recorded["o"].complete(ASK, seed=5)).text
        await recorded.aclose()
    # The server is gone: only the recording can answer.
    models = ModelSet.build(configs(url), replay_from=tmp_path)
    try:
        assert type(models["d"]) is DummyModel  # the dummy needs no recording
        assert type(models["o"]) is ReplayModel and type(models["s"]) is ReplayModel
        assert (await models["o"].complete(ASK, seed=5)).text == first
        with pytest.raises(ModelError, match="not in the recording"):
            await models["o"].complete(OTHER, seed=5)
        stats = models.statistics()["o"]
        assert (stats.requests, stats.failures) == (2, 1)
    finally:
        await models.aclose()


async def test_resume_replays_what_was_recorded_and_asks_the_server_the_rest(
        tmp_path: Path) -> None:
    async with running_server(ServerOptions(policy="echo")) as url:
        recorded = ModelSet.build({"o": configs(url)["o"]}, record_to=tmp_path)
        await recorded["o"].complete(ASK, seed=5)
        await recorded.aclose()
        assert await served(url) == 1

        models = ModelSet.build(configs(url), replay_from=tmp_path, resume=True)
        try:
            assert type(models["s"]) is ScriptedModel  # nothing recorded: the live model
            again = await models["o"].complete(ASK, seed=5)
            assert again.text == ASK[0]["content"] and await served(url) == 1  # replayed
            fresh = await models["o"].complete(OTHER, seed=5)
            assert fresh.text == OTHER[0]["content"] and await served(url) == 2  # live
            # The statistics are the live client's: it made one request.
            assert models.statistics()["o"].requests == 1
        finally:
            await models.aclose()


async def test_closing_the_set_closes_every_client(tmp_path: Path) -> None:
    models = ModelSet.build({"a": ScriptedConfig(provider="scripted"),
                             "b": ScriptedConfig(provider="scripted")}, record_to=tmp_path)
    for name in models:
        await models[name].complete(ASK, seed=1)
    assert all(models[n].written == 0 for n in models)  # buffered for flush_interval
    await models.aclose()
    assert all(models[n].written == 1 for n in models)
    assert all(len(recording_of(tmp_path, n).read_text().splitlines()) == 1 for n in models)


def test_a_python_provider_builds_the_user_s_model_or_says_why_not() -> None:
    from populace.core import ConfigError
    from populace.llm import PythonConfig, build_model

    def config(factory: str, **options: object) -> PythonConfig:
        return PythonConfig.model_validate(
            {"provider": "python", "factory": factory, "options": options})

    brittle = build_model("b", config("fault_models:Brittle", agents=1, rounds=1, seed=0))
    assert brittle.name == "b" and type(brittle).__name__ == "Brittle"
    for factory, options, message in [
        ("no_such_module:make", {}, "cannot import no_such_module: ModuleNotFoundError"),
        ("fault_models:nothing", {}, "fault_models has no callable 'nothing'"),
        ("fault_models:Brittle", {"wrong": 1}, "failed: TypeError"),
        ("fault_models:FAILURES", {}, "has no callable"),
        ("os.path:basename", {}, "returned a str, not a ModelClient"),
    ]:
        with pytest.raises(ConfigError, match=message):
            build_model("b", config(factory, **options))
    with pytest.raises(ValueError, match="factory"):
        config("not a reference")
