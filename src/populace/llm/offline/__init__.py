"""Models and a server for running without a GPU: dry runs, demos and tests.

The offline half of the LLM layer (as ``trio.testing`` is Trio's): nothing here talks to a
real model. ``DummyModel`` waits and answers a seeded integer; ``ScriptedModel`` answers by
documented rules of the prompt (``scripted_reply``), which live with their scenarios and join
through the entry point group ``populace.scripted_rules`` (``scripted_rule`` orders them;
``is_structured``, ``json_answer`` and ``extracted_number``, with ``populace.llm.text_of``,
are the helpers they read and write replies with). ``running_server``/``serve`` run the fake
OpenAI-compatible server behind ``populace serve-llm`` (``ServerOptions``: policies, fault
injection, the Files and Batches API; ``run_batch`` answers a batch file offline), optionally
timed by a simulated GPU engine (``EngineParams``).

The configs that choose these models in a run file (``DummyConfig``, ``ScriptedConfig``) stay
in :mod:`populace.llm`: they are members of its ``ModelConfig`` union, which ``build_model``
turns into a client, so the union is declared in one place. :mod:`populace.llm` also still
re-exports the names below, where they were documented before this package existed.

>>> from populace.llm.offline import DummyModel
>>> DummyModel("dummy", latency=0).name
'dummy'
"""

import typing

from ._dummy import DummyModel
from ._engine import EngineParams
from ._replies import extracted_number, is_structured, json_answer
from ._scripted import ScriptedModel, ScriptedParams, scripted_reply, scripted_rule

if typing.TYPE_CHECKING:  # at run time, __getattr__ below
    from ._server import ServerOptions, create_app, run_batch, running_server, serve

#: Names of the fake server, imported when first used (PEP 562): the server needs aiohttp's
#: web half, which a run of offline models never does (~0.15 s of every start).
_SERVER_NAMES = frozenset({"ServerOptions", "create_app", "run_batch", "running_server", "serve"})


def __getattr__(name: str) -> object:
    if name in _SERVER_NAMES:
        from . import _server

        return getattr(_server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _SERVER_NAMES)

__all__ = [
    "DummyModel",
    "EngineParams",
    "ScriptedModel",
    "ScriptedParams",
    "ServerOptions",
    "create_app",
    "extracted_number",
    "is_structured",
    "json_answer",
    "run_batch",
    "running_server",
    "scripted_reply",
    "scripted_rule",
    "serve",
]
