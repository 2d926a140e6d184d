"""Model configuration as it appears under ``models:`` in a run YAML."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ._base import ModelClient
from ._dummy import DummyModel


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DummyConfig(_Strict):
    """``provider: dummy`` — no server; waits ``latency`` s, answers a random integer."""

    provider: Literal["dummy"] = "dummy"
    latency: float = Field(1.0, ge=0, description="seconds each call waits")
    low: int = Field(0, description="smallest number answered")
    high: int = Field(100, description="largest number answered")

    @model_validator(mode="after")
    def _range(self) -> DummyConfig:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self


ModelConfig = Annotated[DummyConfig, Field(discriminator="provider")]


def build_model(name: str, config: DummyConfig) -> ModelClient:
    """A client for ``config``; called once per worker (see ``populace.core.PerWorker``)."""
    if isinstance(config, DummyConfig):
        return DummyModel(name, latency=config.latency, low=config.low, high=config.high)
    raise TypeError(f"unknown model config {type(config).__name__}")
