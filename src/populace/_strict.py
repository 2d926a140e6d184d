"""The base of every config model, and the limits they share: what a run file says is taken
as written, or refused.

pydantic's lax mode turns ``true`` into ``1`` for an ``int`` or ``float`` field: a run file
saying ``groups: true`` would run with one group, no word said. :class:`StrictModel`
refuses a boolean for every ``int`` and ``float`` of its fields — through ``Optional``,
unions, lists, tuples and dicts (``targets: {gender: {male: true}}`` is refused at
``targets.gender.male``) — with pydantic's own words ("Input should be a valid integer"),
while every other conversion stays as it was (``1e-3``, which YAML reads as text, is still
a float). Models nested in one get the same check when they are :class:`StrictModel`
subclasses themselves, as every config model here is, and
:class:`~populace.launch.ScenarioSettings`, which users subclass.

>>> class Game(StrictModel):
...     groups: int = 1
>>> Game.model_validate({"groups": True})  # doctest: +ELLIPSIS
Traceback (most recent call last):
pydantic_core._pydantic_core.ValidationError: 1 validation error for Game
groups
  Input should be a valid integer ...
"""

from __future__ import annotations

from typing import Annotated, Any, NoReturn

from pydantic import BaseModel, BeforeValidator, ConfigDict, GetCoreSchemaHandler
from pydantic_core import (
    CoreSchema,
    InitErrorDetails,
    PydanticCustomError,
    PydanticKnownError,
    ValidationError,
    core_schema,
)

#: The most agents a run (or a population) may have; run files, ``population.size``,
#: ``game.groups`` and the command line's ``--agents`` and ``--size`` are held to it.
MAX_AGENTS = 1_000_000_000
#: The largest seed (a run's, a population's): every draw mixes the seed as a 64-bit integer
#: (SplitMix64), so a larger one would wrap silently onto a smaller (2**64 ran as seed 0).
MAX_SEED = 2**64 - 1
#: The most steps (rounds) of a run.
MAX_STEPS = 10_000_000
#: The most workers of a run.
MAX_WORKERS = 4096
#: The longest wait a model may be told to take per call, seconds (dummy and scripted
#: ``latency``, serve-llm's and bench's ``--latency``): beyond it a run would look hung.
MAX_LATENCY_S = 3600.0
#: The longest timeout, deadline or pause, seconds: one day (an openai model's ``timeout``,
#: ``retry_deadline``, ``cooldown`` and ``max_backoff``; run-batch's ``--latency``).
MAX_TIMEOUT_S = 86400.0

#: Keys of a core schema whose values are not schemas (defaults may be any value).
_NOT_SCHEMAS = frozenset({"default", "metadata", "serialization", "cls", "config", "ref"})


def _no_bool(kind: str) -> Any:
    def refuse_bool(value: Any) -> Any:
        if isinstance(value, bool):
            raise PydanticKnownError(kind)  # type: ignore[arg-type]
        return value

    return refuse_bool


_CHECKS = {"int": _no_bool("int_type"), "float": _no_bool("float_type")}


def _numbers_checked(node: Any, model: type[BaseModel]) -> Any:
    """A copy of core schema ``node`` with a boolean refused by every ``int`` and ``float``
    schema; models other than ``model`` nested in it are left as they are (a StrictModel's
    own schema has the checks already)."""
    if isinstance(node, list):
        return [_numbers_checked(item, model) for item in node]
    if not isinstance(node, dict):
        return node
    kind = node.get("type")
    if not isinstance(kind, str):  # a mapping of names (a model's fields) to schemas
        return {k: _numbers_checked(v, model) for k, v in node.items()}
    if kind == "model" and node.get("cls") is not model:
        return node
    copy = {k: v if k in _NOT_SCHEMAS else _numbers_checked(v, model) for k, v in node.items()}
    if kind in _CHECKS:
        return core_schema.no_info_before_validator_function(_CHECKS[kind], copy)
    return copy


class StrictModel(BaseModel):
    """A config model: unknown keys refused, frozen, no NaN or infinity, and no ``true`` or
    ``false`` where a number is expected."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler
                                     ) -> CoreSchema:
        schema: CoreSchema = _numbers_checked(handler(source), cls)
        return schema


def fail_at(loc: tuple[str | int, ...], message: str) -> NoReturn:
    """Raise a validation error at ``loc`` below the model being validated (from one of its
    validators): pydantic prefixes the path to the model, so the error names the whole key
    path (``game.ratio``, ``population.aspects.occupation.weights.doctorate``)."""
    error = PydanticCustomError("value_error", message.replace("{", "{{").replace("}", "}}"))
    raise ValidationError.from_exception_data(
        "config", [InitErrorDetails(type=error, loc=loc, input=None)])


def _keep_checkpoints(value: Any) -> Any:
    if value != "all" and (not isinstance(value, int) or isinstance(value, bool) or value < 2):
        raise ValueError("expected all or a whole number of checkpoints of at least 2")
    return value


#: ``keep_checkpoints:``: ``all`` (any step can be forked or interviewed) or the newest N.
KeepCheckpoints = Annotated[Any, BeforeValidator(_keep_checkpoints)]


def _known_backend(value: Any) -> str:
    from populace.core import backend_names, expected_backends

    if not isinstance(value, str) or value not in backend_names():
        raise PydanticCustomError("literal_error", "Input should be {expected}",
                                  {"expected": expected_backends()})
    return value


#: ``backend:``: a backend's name, those registered included
#: (:func:`populace.core.register_backend`), in pydantic's words for a choice when unknown.
BackendName = Annotated[str, BeforeValidator(_known_backend)]


def address_checked(address: str | None, backend: Any) -> str | None:
    """``address:`` when backend ``backend`` joins addresses of its form; a ValueError
    naming the forms otherwise (a backend that joins none is :func:`only_with_address`'s)."""
    from populace.core import backend_kind, backend_names

    if address is None or backend not in backend_names():  # the backend's own error
        return address
    kind = backend_kind(backend)
    if kind.addresses is not None and not kind.address_ok(address):
        raise ValueError(f"expected {kind.addresses}")
    return address


def only_with_address(address: str | None, backend: str) -> None:
    """A ValueError when ``address:`` is given to a backend that joins no cluster."""
    from populace.core import backend_kind, backend_names

    if address is not None and backend_kind(backend).addresses is None:
        joining = [n for n in backend_names() if backend_kind(n).addresses is not None]
        raise ValueError(f"address: is only meaningful with backend: {' or '.join(joining)}")
