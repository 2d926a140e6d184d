"""OpenAIConfig validation, the provider union, and build_model."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from populace.core import ConfigError
from populace.llm import DummyConfig, ModelConfig, OpenAIConfig, OpenAIModel, build_model
from populace.llm.offline import DummyModel


class Run(BaseModel):
    models: dict[str, ModelConfig]


def test_the_provider_tag_picks_the_config_class() -> None:
    run = Run.model_validate({"models": {
        "d": {"provider": "dummy", "latency": 0},
        "q": {"provider": "openai", "model": "qwen", "base_urls": ["http://h:8000/v1/"],
              "max_concurrency": 8, "temperature": 0.7},
    }})
    assert isinstance(run.models["d"], DummyConfig)
    q = run.models["q"]
    assert isinstance(q, OpenAIConfig)
    assert q.base_urls == ["http://h:8000/v1"] and q.max_concurrency == 8
    assert (q.timeout, q.max_retries, q.api_key_env) == (60.0, 4, None)


@pytest.mark.parametrize("bad", [
    {"base_urls": []},
    {"base_urls": ["h:8000/v1"]},
    {"base_urls": ["http://a/v1", "http://a/v1/"]},
    {"model": ""},
    {"timeout": 0},
    {"max_retries": -1},
    {"max_concurrency": 0},
    {"temperature": 3},
    {"unknown": 1},
])
def test_invalid_openai_configs_are_rejected(bad: dict[str, object]) -> None:
    raw = {"provider": "openai", "model": "m", "base_urls": ["http://a/v1"], **bad}
    with pytest.raises(ValidationError):
        Run.model_validate({"models": {"x": raw}})


def test_build_model_reads_the_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = OpenAIConfig(provider="openai", model="m", base_urls=["http://a/v1", "https://b/v1"],
                       api_key_env="POPULACE_TEST_KEY", max_retries=2, timeout=5)
    monkeypatch.delenv("POPULACE_TEST_KEY", raising=False)
    with pytest.raises(ConfigError, match="POPULACE_TEST_KEY"):
        build_model("q", cfg)
    monkeypatch.setenv("POPULACE_TEST_KEY", "secret")
    model = build_model("q", cfg)
    assert isinstance(model, OpenAIModel)
    assert model.name == "q" and model.model == "m" and model.retrying.max_retries == 2
    assert [e.url for e in model.endpoint_statistics()] == ["http://a/v1", "https://b/v1"]
    assert model.chat.headers["Authorization"] == "Bearer secret"
    assert isinstance(build_model("d", DummyConfig(latency=0)), DummyModel)
