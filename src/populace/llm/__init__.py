"""Language models: one ``complete`` interface, providers, and the dummy model."""

from ._base import ChatMessage, Completion, ModelClient, ModelStats
from ._config import DummyConfig, ModelConfig, build_model
from ._dummy import DummyModel

__all__ = [
    "ChatMessage",
    "Completion",
    "DummyConfig",
    "DummyModel",
    "ModelClient",
    "ModelConfig",
    "ModelStats",
    "build_model",
]
