"""Language models: one ``complete`` interface, providers, wrappers, pool and recording.

``OpenAIModel`` talks to OpenAI-compatible servers through an ``EndpointPool``.
The offline machinery (the dummy and scripted models, the fake server behind
``populace serve-llm``, its engine model) is :mod:`populace.llm.offline`; its names are
re-exported here, where they were documented before (``DummyModel``, ``ScriptedModel``,
``running_server``, ``serve``, ...): new code imports them from ``populace.llm.offline``.
``RecordingModel``/``ReplayModel`` record every call and answer a re-run from the recording
(``read_agent_calls``: one agent's calls, through the recording's index);
``preflight`` checks that configured servers answer before a run starts, and learns their
kind: a ``ServerKind`` says what each server can do (``server_kind(name).supports("choice")``;
``register_server_kind`` adds one). ``ScriptedModel``
answers by documented rules of the prompt, for offline runs with structure in the results;
the rules live with their scenarios and join through the entry point group
``populace.scripted_rules`` (``scripted_rule`` orders them; ``text_of``, ``is_structured``,
``json_answer`` and ``extracted_number`` are the helpers they read and write replies with).
Clients implement one method, ``send(Request)``; :class:`Retrying`, :class:`Counted`,
:class:`RecordingModel` and :class:`ReplayThenLive` wrap any client, and :class:`MockTransport`
stands in for the network in tests.
"""

import typing

from ._base import (
    TRAFFIC,
    ChatMessage,
    Completion,
    ModelClient,
    ModelStats,
    Request,
    limits,
    model_stats,
    text_of,
    traffic,
)
from ._config import (
    BatchConfig,
    DummyConfig,
    ModelConfig,
    OpenAIConfig,
    PythonConfig,
    ScriptedConfig,
    build_model,
    load_factory,
)
from ._modelset import ModelSet
from ._openai import OpenAIChat, OpenAIModel
from ._pool import EndpointPool, EndpointStats, Lease
from ._preflight import Served, preflight
from ._prompt import LAYOUTS, Layout, conversation
from ._record import RecordingModel, ReplayModel, read_agent_calls, request_key
from ._sampling import SamplingConfig, audits
from ._servers import (
    BusyProbe,
    ServerKind,
    register_server_kind,
    server_kind,
    server_kind_names,
    unregister_server_kind,
)
from ._transport import AiohttpTransport, MockTransport, Response, Transport, TransportError
from ._wrappers import Coalescing, Counted, ReplayThenLive, Retrying, Wrapper
from .offline import (  # and the fake server's names, when first used: __getattr__ below
    DummyModel,
    EngineParams,
    ScriptedModel,
    ScriptedParams,
    extracted_number,
    is_structured,
    json_answer,
    scripted_reply,
    scripted_rule,
)

if typing.TYPE_CHECKING:  # at run time, __getattr__ below
    from .offline import ServerOptions, create_app, run_batch, running_server, serve

__all__ = [
    "LAYOUTS",
    "TRAFFIC",
    "AiohttpTransport",
    "BatchConfig",
    "BusyProbe",
    "ChatMessage",
    "Coalescing",
    "Completion",
    "Counted",
    "DummyConfig",
    "DummyModel",
    "EndpointPool",
    "EndpointStats",
    "EngineParams",
    "Layout",
    "Lease",
    "MockTransport",
    "ModelClient",
    "ModelConfig",
    "ModelSet",
    "ModelStats",
    "OpenAIChat",
    "OpenAIConfig",
    "OpenAIModel",
    "PythonConfig",
    "RecordingModel",
    "ReplayModel",
    "ReplayThenLive",
    "Request",
    "Response",
    "Retrying",
    "SamplingConfig",
    "ScriptedConfig",
    "ScriptedModel",
    "ScriptedParams",
    "Served",
    "ServerKind",
    "ServerOptions",
    "Transport",
    "TransportError",
    "Wrapper",
    "audits",
    "build_model",
    "conversation",
    "create_app",
    "extracted_number",
    "is_structured",
    "json_answer",
    "limits",
    "load_factory",
    "model_stats",
    "preflight",
    "read_agent_calls",
    "register_server_kind",
    "request_key",
    "run_batch",
    "running_server",
    "scripted_reply",
    "scripted_rule",
    "serve",
    "server_kind",
    "server_kind_names",
    "text_of",
    "traffic",
    "unregister_server_kind",
]


def __getattr__(name: str) -> object:
    """The fake server's names, re-exported from :mod:`populace.llm.offline` when first used
    (they load aiohttp's web half, which a run never needs)."""
    if name in __all__:
        from . import offline

        return getattr(offline, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
