"""Language models: one ``complete`` interface, providers, and the dummy model.

``OpenAIModel`` talks to OpenAI-compatible servers through an ``EndpointPool``;
``running_server``/``serve`` run the fake OpenAI-compatible server behind ``populace serve-llm``.
``RecordingModel``/``ReplayModel`` record every call and answer a re-run from the recording;
``preflight`` checks that configured servers answer before a run starts. ``ScriptedModel``
answers by a documented rule of the prompt, for offline runs with structure in the results.
"""

from ._base import TRAFFIC, ChatMessage, Completion, ModelClient, ModelStats, model_stats, traffic
from ._config import (
    BatchConfig,
    DummyConfig,
    ModelConfig,
    OpenAIConfig,
    ScriptedConfig,
    build_model,
)
from ._dummy import DummyModel
from ._modelset import ModelSet
from ._openai import OpenAIModel
from ._pool import EndpointPool, EndpointStats, Lease
from ._preflight import preflight
from ._record import RecordingModel, ReplayModel, request_key
from ._scripted import ScriptedModel, ScriptedParams, scripted_reply
from ._server import ServerOptions, create_app, run_batch, running_server, serve

__all__ = [
    "TRAFFIC",
    "BatchConfig",
    "ChatMessage",
    "Completion",
    "DummyConfig",
    "DummyModel",
    "EndpointPool",
    "EndpointStats",
    "Lease",
    "ModelClient",
    "ModelConfig",
    "ModelSet",
    "ModelStats",
    "OpenAIConfig",
    "OpenAIModel",
    "RecordingModel",
    "ReplayModel",
    "ScriptedConfig",
    "ScriptedModel",
    "ScriptedParams",
    "ServerOptions",
    "build_model",
    "create_app",
    "model_stats",
    "preflight",
    "request_key",
    "run_batch",
    "running_server",
    "scripted_reply",
    "serve",
    "traffic",
]
