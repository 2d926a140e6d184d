"""What a decision's answer must look like: one of a list, a number in a range, a regular
expression, a JSON schema (a pydantic model), or free text.

Each kind says three things, so :meth:`Persona.decide` needs no case per kind: the
instruction that ends the question (what a model that takes no constraint is told), the
constraint in Populace's ``response_format`` vocabulary (written in each server's own
spelling by :func:`populace.llm` clients, or left out where a server cannot take it), and
how a reply is read. A reply that cannot be read is :data:`UNREADABLE`, never a default.

Build answer kinds once (at module level or in ``setup``): a bad one raises
:class:`~populace.core.ConfigError`, which a run reports in one line (exit 2).

>>> Choice(["yes", "no"]).read("Yes.")
'yes'
>>> Number(0, 10, integer=True).read("I'd say 7, maybe 8. The answer is 7.")
7
>>> Number(0, 10).read("42") is UNREADABLE
True
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from populace.core import ConfigError

#: What :meth:`Answer.read` returns for a reply it cannot read.
UNREADABLE: Any = type("Unreadable", (), {"__repr__": lambda self: "UNREADABLE",
                                          "__bool__": lambda self: False,
                                          "__slots__": ()})()

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_ANSWER_IS = re.compile(r"answer\s+is\s*[:=]?\s*[*\"'(\[]*\s*(-?\d+(?:\.\d+)?)", re.IGNORECASE)
_JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def _clean(text: str) -> str:
    return text.strip().strip(" \t\n\"'`*.!").strip()


class Answer:
    """The base of answer kinds (see the module docstring)."""

    __slots__ = ()
    kind = "answer"

    def instruction(self) -> str:
        """The line that ends a question, telling the model how to answer."""
        raise NotImplementedError

    def response_format(self) -> dict[str, Any] | None:
        """The constraint, in Populace's ``response_format`` vocabulary (None: none)."""
        return None

    def read(self, text: str) -> Any:
        """The answer in ``text``, or :data:`UNREADABLE`."""
        raise NotImplementedError

    def show(self, value: Any) -> str:
        """``value`` as the persona remembers having answered it."""
        return str(value)


class Choice(Answer):
    """One of ``options`` (texts); read from the reply's exact text, a JSON ``answer``, or
    the one option the reply names.

    >>> Choice(["agree", "disagree"]).read("I disagree with that.")
    'disagree'
    """

    __slots__ = ("_lower", "options")
    kind = "choice"

    def __init__(self, options: Sequence[str]) -> None:
        opts = tuple(str(o) for o in options)
        if len(opts) < 2:
            raise ConfigError(f"Choice({list(opts)!r}): needs at least two options")
        if len({o.strip().lower() for o in opts}) != len(opts) or any(not o.strip()
                                                                      for o in opts):
            raise ConfigError(f"Choice({list(opts)!r}): options must be distinct, non-empty")
        self.options = opts
        self._lower = {o.strip().lower(): o for o in opts}

    def instruction(self) -> str:
        return "Answer with exactly one of: " + ", ".join(f'"{o}"' for o in self.options) + "."

    def response_format(self) -> dict[str, Any]:
        return {"type": "choice", "choice": list(self.options)}

    def read(self, text: str) -> Any:
        found = self._lower.get(_clean(text).lower())
        if found is not None:
            return found
        data = _json(text)
        if isinstance(data, dict) and isinstance(data.get("answer"), str):
            found = self._lower.get(_clean(data["answer"]).lower())
            if found is not None:
                return found
        lowered = text.lower()
        named = [o for low, o in self._lower.items()
                 if re.search(rf"(?<!\w){re.escape(low)}(?!\w)", lowered)]
        # "disagree" contains "agree": keep the options no other named option contains
        named = [o for o in named if not any(o != p and o.lower() in p.lower() for p in named)]
        return named[0] if len(named) == 1 else UNREADABLE


class Number(Answer):
    """A number from ``low`` to ``high`` (an int when ``integer``); read after "answer is",
    else the reply's last number; out of range is unreadable."""

    __slots__ = ("high", "integer", "low")
    kind = "number"

    def __init__(self, low: float, high: float, *, integer: bool = False) -> None:
        if not (isinstance(low, int | float) and isinstance(high, int | float)) or \
                isinstance(low, bool) or isinstance(high, bool) or not low < high:
            raise ConfigError(f"Number({low!r}, {high!r}): expected two numbers, low < high")
        self.low, self.high, self.integer = low, high, integer

    def instruction(self) -> str:
        kind = "a whole number" if self.integer else "a number"
        return f"Answer with {kind} from {_fmt(self.low)} to {_fmt(self.high)}."

    def response_format(self) -> dict[str, Any]:
        return {"type": "regex", "regex": r"-?\d+" if self.integer else r"-?\d+(\.\d+)?"}

    def read(self, text: str) -> Any:
        found = _ANSWER_IS.findall(text) or _NUMBER.findall(text)
        if not found:
            return UNREADABLE
        value = float(found[-1])
        if not self.low <= value <= self.high:
            return UNREADABLE
        if self.integer:
            return round(value) if value == round(value) else UNREADABLE
        return value


class Regex(Answer):
    """Text matching ``pattern`` (the whole reply, else its first match).

    >>> Regex(r"[A-D]").read("B")
    'B'
    """

    __slots__ = ("_compiled", "pattern")
    kind = "regex"

    def __init__(self, pattern: str) -> None:
        try:
            self._compiled = re.compile(pattern)
        except (re.error, TypeError) as e:
            raise ConfigError(f"Regex({pattern!r}): cannot compile: {e}") from None
        self.pattern = pattern

    def instruction(self) -> str:
        return f"Answer with text matching the regular expression {self.pattern}."

    def response_format(self) -> dict[str, Any]:
        return {"type": "regex", "regex": self.pattern}

    def read(self, text: str) -> Any:
        whole = self._compiled.fullmatch(text.strip())
        if whole is not None:
            return whole.group(0)
        found = self._compiled.search(text)
        return found.group(0) if found is not None and found.group(0) else UNREADABLE


class Schema(Answer):
    """A JSON object valid for pydantic model ``model``; the answer is the model instance.

    >>> from pydantic import BaseModel
    >>> class Vote(BaseModel):
    ...     party: str
    >>> Schema(Vote).read('{"party": "green"}').party
    'green'
    """

    __slots__ = ("_schema", "model")
    kind = "schema"

    def __init__(self, model: Any) -> None:
        from pydantic import BaseModel

        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise ConfigError(f"Schema({model!r}): expected a pydantic model class "
                              "(a subclass of pydantic.BaseModel)")
        self.model = model
        self._schema = model.model_json_schema()

    def instruction(self) -> str:
        return ("Answer with one JSON object matching this JSON schema: "
                + json.dumps(self._schema, separators=(",", ":")))

    def response_format(self) -> dict[str, Any]:
        return {"type": "json_schema",
                "json_schema": {"name": self.model.__name__, "schema": self._schema}}

    def read(self, text: str) -> Any:
        from pydantic import ValidationError

        data = _json(text)
        if data is None:
            return UNREADABLE
        try:
            return self.model.model_validate(data)
        except ValidationError:
            return UNREADABLE

    def show(self, value: Any) -> str:
        return value.model_dump_json() if hasattr(value, "model_dump_json") else str(value)


class Text(Answer):
    """Free text (any non-empty reply)."""

    __slots__ = ()
    kind = "text"

    def instruction(self) -> str:
        return "Answer in your own words."

    def read(self, text: str) -> Any:
        return text.strip() or UNREADABLE


def _json(text: str) -> Any:
    found = _JSON_OBJECT.search(text)
    if found is None:
        return None
    try:
        return json.loads(found.group(0))
    except ValueError:
        return None


def _fmt(x: float) -> str:
    return f"{x:g}"
