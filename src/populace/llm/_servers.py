"""What each kind of OpenAI-compatible server can do, in one registry.

Every server answers ``POST /v1/chat/completions``; they differ in how the preflight tells
them apart, how they take structured decoding, how they show they are busy, and whether
they take OpenAI's Batch API. A :class:`ServerKind` holds those differences for one server,
and the client, the preflight and the scenarios ask it (``server_kind(name)``,
``kind.supports("choice")``) instead of branching on names. A new server is one
``ServerKind`` and one :func:`register_server_kind`.

Callers say what an answer must look like in one vocabulary, the ``response_format`` of a
request: OpenAI's ``{"type": "json_schema", "json_schema": {"schema": ...}}`` or
``{"type": "json_object"}``, or two that OpenAI lacks — ``{"type": "regex", "regex": R}``
(the answer matches ``R``) and ``{"type": "choice", "choice": [...]}`` (the answer is one of
the strings). :meth:`ServerKind.constrain` writes it into a request body the way the server
takes it:

=========  ====================================  ==========================  ===============
server     JSON schema                           regex                       choice
=========  ====================================  ==========================  ===============
openai     ``response_format`` (``strict``)      not sent                    not sent
vllm       ``structured_outputs.json``           ``structured_outputs.regex``  ``…choice``
sglang     ``response_format``                   ``regex``                   ``regex``
llamacpp   ``json_schema``                       not sent                    ``grammar``
populace   ``structured_outputs`` (as vLLM)      as vLLM                     as vLLM
auto       ``response_format`` as given          not sent                    not sent
=========  ====================================  ==========================  ===============

vLLM took ``guided_json``/``guided_regex``/``guided_choice`` until 0.12, which removed them
for ``structured_outputs``. A constraint a server cannot take is not sent: the caller reads
the answer as text, as it would without one (the game's parser and the survey's re-ask).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

Body = dict[str, Any]

#: What :meth:`ServerKind.supports` answers about.
FEATURES = ("choice", "regex", "busy", "batch")


@dataclass(frozen=True, slots=True)
class BusyProbe:
    """How a server shows whether it is computing: ``GET {root}{path}`` (the root is the
    base URL without ``/v1``), whose body ``read`` turns into ``(computing, queued)``:
    whether it works on requests now, and whether requests wait in its queue. ``read`` may
    raise ValueError, TypeError, AttributeError or IndexError on a body it cannot read
    (taken as idle)."""

    path: str
    read: Callable[[bytes], tuple[bool, bool]]


@dataclass(frozen=True, slots=True)
class ServerKind:
    """One kind of OpenAI-compatible server, as ``server:`` of an openai model names it.

    >>> toy = ServerKind("toy", owned_by=("toy-inc",),
    ...                  choice=lambda body, choices: body.update(allowed=choices))
    >>> body = {}
    >>> toy.constrain(body, {"type": "choice", "choice": ["yes", "no"]})
    >>> body, toy.supports("choice"), toy.supports("regex")
    ({'allowed': ['yes', 'no']}, True, False)

    - ``owned_by``: the ``owned_by`` values of ``GET /v1/models`` that mean this server
      (how the preflight learns ``server: auto``);
    - ``json_schema``, ``regex``, ``choice``: write that constraint into a request body
      (given the ``json_schema`` object, the pattern, the list of strings); a missing
      ``json_schema`` sends OpenAI's ``response_format`` as given, a missing ``regex`` or
      ``choice`` sends nothing (the server cannot hold an answer to it);
    - ``busy``: how it shows it is computing (:class:`BusyProbe`); a request that outlasts
      its timeout on a server that says it is computing is waited for, not sent again;
    - ``slots_path``: where, beside ``/v1``, it declares how many requests it computes at
      once (``{"total_slots": N}``, llama.cpp's ``/props``);
    - ``batches``: it takes OpenAI's Batch API (``/v1/files`` and ``/v1/batches``);
    - ``prompt_cache_key``: it routes requests with equal ``prompt_cache_key`` to the same
      cache (OpenAI's), so each request carries one.
    """

    name: str
    owned_by: tuple[str, ...] = ()
    json_schema: Callable[[Body, dict[str, Any]], None] | None = None
    regex: Callable[[Body, str], None] | None = None
    choice: Callable[[Body, list[str]], None] | None = None
    busy: BusyProbe | None = None
    slots_path: str | None = None
    batches: bool = False
    prompt_cache_key: bool = False

    def constrain(self, body: Body, response_format: dict[str, Any]) -> None:
        """Write ``response_format`` into ``body`` in this server's spelling (see the
        module docstring)."""
        kind = response_format.get("type")
        if kind == "regex":
            if self.regex is not None:
                self.regex(body, str(response_format["regex"]))
        elif kind == "choice":
            if self.choice is not None:
                self.choice(body, [str(c) for c in response_format["choice"]])
        elif kind == "json_schema" and self.json_schema is not None:
            self.json_schema(body, response_format.get("json_schema") or {})
        else:
            body["response_format"] = response_format

    def supports(self, feature: str) -> bool:
        """Whether this server takes ``feature``: ``choice`` or ``regex`` (it holds an
        answer to a list of strings, a pattern), ``busy`` (it shows what it computes),
        ``batch`` (OpenAI's Batch API)."""
        if feature == "choice":
            return self.choice is not None
        if feature == "regex":
            return self.regex is not None
        if feature == "busy":
            return self.busy is not None
        if feature == "batch":
            return self.batches
        raise ValueError(f"unknown server feature {feature!r}; expected one of "
                         f"{', '.join(FEATURES)}")


# -- the spellings ------------------------------------------------------------------------
def _structured_outputs(key: str) -> Callable[[Body, Any], None]:
    def spell(body: Body, value: Any) -> None:
        body["structured_outputs"] = {key: value.get("schema", {}) if key == "json" else value}
    return spell


def _strict_schema(body: Body, spec: dict[str, Any]) -> None:
    body["response_format"] = {"type": "json_schema", "json_schema": {"strict": True, **spec}}


def _sglang_regex(body: Body, pattern: str) -> None:
    body["regex"] = pattern


def _sglang_choice(body: Body, choices: list[str]) -> None:
    body["regex"] = "(" + "|".join(re.escape(c) for c in choices) + ")"


def _llamacpp_schema(body: Body, spec: dict[str, Any]) -> None:
    body["json_schema"] = spec.get("schema", {})


def _gbnf_choice(body: Body, choices: list[str]) -> None:
    """A GBNF grammar: one quoted alternative per choice."""
    body["grammar"] = "root ::= " + " | ".join(json.dumps(c) for c in choices)


# -- how each shows it is busy -----------------------------------------------------------
_VLLM_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting")


def _vllm_metrics(content: bytes) -> tuple[bool, bool]:
    """vLLM's Prometheus ``/metrics``: requests running and waiting, summed over models."""
    gauges: dict[str, float] = {}
    for line in content.decode().splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in _VLLM_GAUGES:
            gauges[name] = gauges.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return gauges.get(_VLLM_GAUGES[0], 0.0) > 0, gauges.get(_VLLM_GAUGES[1], 0.0) > 0


def _llamacpp_slots(content: bytes) -> tuple[bool, bool]:
    """llama.cpp's ``/slots``: a slot is processing; it shows no queue."""
    return any(slot.get("is_processing") for slot in json.loads(content)), False


def _populace_stats(content: bytes) -> tuple[bool, bool]:
    """serve-llm's ``/stats``: ``computing`` (injected hangs excluded), the engine's
    ``waiting``."""
    data = json.loads(content)
    engine = data.get("engine") or {}
    return bool(data.get("computing")), bool(engine.get("waiting"))


#: A server the preflight could not tell (or a replay of an old run): the plainest requests.
AUTO = ServerKind("auto")
OPENAI = ServerKind("openai", owned_by=("openai", "system", "openai-internal"),
                    json_schema=_strict_schema, batches=True, prompt_cache_key=True)
VLLM = ServerKind("vllm", owned_by=("vllm",), json_schema=_structured_outputs("json"),
                  regex=_structured_outputs("regex"), choice=_structured_outputs("choice"),
                  busy=BusyProbe("/metrics", _vllm_metrics))
SGLANG = ServerKind("sglang", owned_by=("sglang",), regex=_sglang_regex, choice=_sglang_choice)
LLAMACPP = ServerKind("llamacpp", owned_by=("llamacpp",), json_schema=_llamacpp_schema,
                      choice=_gbnf_choice, busy=BusyProbe("/slots", _llamacpp_slots),
                      slots_path="/props")
#: ``populace serve-llm``: vLLM's spelling, its own ``/stats``, llama.cpp's ``/props``.
POPULACE = ServerKind("populace", owned_by=("populace",), json_schema=VLLM.json_schema,
                      regex=VLLM.regex, choice=VLLM.choice,
                      busy=BusyProbe("/stats", _populace_stats), slots_path="/props",
                      batches=True)

_KINDS: dict[str, ServerKind] = {k.name: k for k in (AUTO, OPENAI, VLLM, SGLANG, LLAMACPP,
                                                      POPULACE)}


def register_server_kind(kind: ServerKind) -> None:
    """Make server ``kind.name`` known to ``server:`` of openai models, the preflight's
    ``owned_by`` detection and the client."""
    _KINDS[kind.name] = kind


def unregister_server_kind(name: str) -> None:
    """Forget server kind ``name`` (a test's own, say); unknown names are ignored."""
    _KINDS.pop(name, None)


def server_kind_names() -> tuple[str, ...]:
    """The names of the known server kinds, built-in and registered."""
    return tuple(_KINDS)


def _expected() -> str:
    names = [repr(n) for n in _KINDS]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def server_kind(name: str) -> ServerKind:
    """The kind of server ``name``; ValueError naming the known ones otherwise.

    >>> server_kind("sglang").supports("choice")
    True
    """
    try:
        return _KINDS[name]
    except KeyError:
        raise ValueError(f"unknown server kind {name!r}; expected {_expected()}") from None


def owner_kind(owned_by: str | None) -> ServerKind | None:
    """The kind whose ``owned_by`` is this model list's (the first registered), if any."""
    return next((k for k in _KINDS.values() if owned_by in k.owned_by), None)


def _known(value: Any) -> str:
    if not isinstance(value, str) or value not in _KINDS:
        raise PydanticCustomError("literal_error", "Input should be {expected}",
                                  {"expected": _expected()})
    return value


#: ``server:`` of an openai model: a kind's name, registered ones included, in pydantic's
#: words for a choice when unknown.
ServerName = Annotated[str, BeforeValidator(_known)]
