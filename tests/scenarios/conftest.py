"""Fixtures of the game's tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from game_helpers import ScriptedModel
from populace.llm import _modelset as modelset_module
from populace.scenarios.guess_number import RunConfig


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> Callable[..., list[ScriptedModel]]:
    """``scripted(config, answer)`` makes play() build ScriptedModels; returns those built.

    play() builds one ModelSet per worker (``PerWorker(ModelSet.build, configs, ...)``), which
    makes each client with ``build_model(name, config)``; only that last step is replaced,
    so the set is still built, used and closed as in a real run.
    """

    def install(config: RunConfig, answer: Callable[[int, int], str]) -> list[ScriptedModel]:
        built: list[ScriptedModel] = []

        def build(name: str, _model_config: Any) -> ScriptedModel:
            built.append(ScriptedModel(name, config, answer))
            return built[-1]

        monkeypatch.setattr(modelset_module, "build_model", build)
        return built

    return install
