"""Structured decoding in each server's own spelling.

Callers say what an answer must look like in one vocabulary, the ``response_format`` of a
request: OpenAI's ``{"type": "json_schema", "json_schema": {"schema": ...}}`` or
``{"type": "json_object"}``, or two that OpenAI lacks — ``{"type": "regex", "regex": R}``
(the answer matches ``R``) and ``{"type": "choice", "choice": [...]}`` (the answer is one of
the strings). :func:`constrain` writes it into a request body the way the server takes it:

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
from typing import Any


def constrain(body: dict[str, Any], response_format: dict[str, Any], server: str) -> None:
    """Write ``response_format`` into ``body`` in ``server``'s spelling (see the module
    docstring)."""
    kind = response_format.get("type")
    if kind in ("regex", "choice"):
        _text(body, response_format, kind, server)
        return
    if kind == "json_schema" and server != "auto":
        spec = response_format.get("json_schema") or {}
        schema = spec.get("schema", {})
        if server in ("vllm", "populace"):
            body["structured_outputs"] = {"json": schema}
            return
        if server == "llamacpp":
            body["json_schema"] = schema
            return
        if server == "openai":
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"strict": True, **spec}}
            return
    body["response_format"] = response_format


def _text(body: dict[str, Any], response_format: dict[str, Any], kind: str,
          server: str) -> None:
    if kind == "regex":
        pattern = str(response_format["regex"])
        if server in ("vllm", "populace"):
            body["structured_outputs"] = {"regex": pattern}
        elif server == "sglang":
            body["regex"] = pattern
        return
    choices = [str(c) for c in response_format["choice"]]
    if server in ("vllm", "populace"):
        body["structured_outputs"] = {"choice": choices}
    elif server == "sglang":
        body["regex"] = "(" + "|".join(re.escape(c) for c in choices) + ")"
    elif server == "llamacpp":  # a GBNF grammar: one quoted alternative per choice
        body["grammar"] = "root ::= " + " | ".join(json.dumps(c) for c in choices)
