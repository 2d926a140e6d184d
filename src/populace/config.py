"""Loading config files: YAML → validated pydantic model, every mistake as one clear line.

>>> cfg = load_config("examples/population/education_200x5.yaml", PopulationConfig,
...                   {"size": 500})  # doctest: +SKIP

(Run files are read by :func:`populace.launch.load_run_file`, which uses these pieces.)

Errors are :class:`~populace.core.ConfigError` whose message names the file, the key path
and what was expected, e.g. ``run.yaml: game.ratio: expected a fraction like 2/3, got '3/0'
(division by zero)``.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from populace.core import ConfigError
from populace.llm import ModelConfig

M = TypeVar("M", bound=BaseModel)


#: The largest run file read (settings only; data comes in Parquet or CSV files).
MAX_RUN_FILE_BYTES = 4 * 2**20


class _UniqueKeys(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (plain YAML keeps the
    last one silently: a run would use a value other than the one the user reads)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, list | dict):
                continue  # unhashable: the safe loader itself reports it
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: str | Path) -> dict[str, Any]:
    """The mapping at the top of a YAML file, or ConfigError."""
    p = Path(path)
    try:
        if not p.is_file():  # a FIFO or /dev/zero would hang or fill the memory
            raise ConfigError(f"{p}: no such file" if not p.exists() else
                              f"{p}: not a regular file")
        with open(p, "rb") as f:
            raw = f.read(MAX_RUN_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such file") from None
    except OSError as e:
        raise ConfigError(f"{p}: cannot read: {e.strerror}") from None
    if len(raw) > MAX_RUN_FILE_BYTES:
        raise ConfigError(f"{p}: larger than {MAX_RUN_FILE_BYTES // 2**20} MiB; a run file "
                          "holds settings, not data")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{p}: not UTF-8 text (byte {e.start}: {raw[e.start]:#04x}); save "
                          "it as UTF-8") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeys)
    except RecursionError:
        raise ConfigError(f"{p}: invalid YAML: nested too deeply") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{p}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(p)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{where}: invalid YAML: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping of keys at the top, got {type(data).__name__}")
    return data


def _models(tp: Any) -> list[type[BaseModel]]:
    """The pydantic models a field of type ``tp`` may hold (through Optional, unions and
    Annotated)."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _models(get_args(tp)[0])
    if origin is Union or origin is types.UnionType:
        return [m for arg in get_args(tp) for m in _models(arg)]
    return [tp] if isinstance(tp, type) and issubclass(tp, BaseModel) else []


def _tags(model: type[BaseModel]) -> set[Any]:
    """The literal values of ``model``'s fields (a tagged union's tag is one of them)."""
    return {v for f in model.model_fields.values() if get_origin(f.annotation) is Literal
            for v in get_args(f.annotation)}


def _members(tp: Any) -> list[Any]:
    """The types a plain union ``tp`` may hold (None left out); [] for any other type."""
    while get_origin(tp) is Annotated:
        if any(getattr(m, "discriminator", None) for m in get_args(tp)[1:]):
            return []  # a tagged union: its tag is a key of the path (see _is_tag)
        tp = get_args(tp)[0]
    if get_origin(tp) is not Union and get_origin(tp) is not types.UnionType:
        return []
    return [a for a in get_args(tp) if a is not type(None)]


def _member(members: list[Any], tag: Any) -> Any:
    """The member of a union that pydantic names ``tag`` in an error's path (a model by its
    class name, ``constrained-float``, ``dict[str,any]``…); None when unknown."""
    tag = str(tag)
    if tag.startswith("function-") and ", " in tag:  # function-after[_check(), Model]
        tag = tag.partition(", ")[2].removesuffix("]")
    for m in members:
        if isinstance(m, type) and issubclass(m, BaseModel) and m.__name__ == tag:
            return m
    base = tag.split("[")[0].removeprefix("constrained-")
    found = [m for m in members if _type_name(m) == base]
    return found[0] if len(found) == 1 else None


def _type_name(tp: Any) -> str:
    """``float`` for ``Annotated[float, …]``, ``dict`` for ``dict[str, Any]``…"""
    if get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    return str(getattr(get_origin(tp) or tp, "__name__", "")).lower()


def _below(tp: Any, part: Any) -> Any:
    """The type found at key ``part`` of a value of type ``tp``; None when unknown."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _below(get_args(tp)[0], part)
    if origin is dict:  # part is one of the mapping's keys
        return get_args(tp)[1]
    if origin in (list, tuple) and isinstance(part, int):
        args = get_args(tp)
        return args[0] if len(args) == 1 or args[-1] is Ellipsis else \
            args[part] if part < len(args) else None
    models = _models(tp)
    if len(models) > 1:  # a tagged union puts the tag in the path (models.m.openai.base_url)
        tagged = [m for m in models if part in _tags(m)]
        if len(tagged) == 1:
            return tagged[0]
    for model in models:
        field = model.model_fields.get(str(part))
        if field is not None:
            return field.annotation
    return None


def _walk(model: type[BaseModel], loc: tuple[Any, ...]) -> tuple[list[Any], set[int]]:
    """The type at every step of ``loc`` (None once unknown), and the positions in ``loc``
    that name a member of a plain union (``active.constrained-float``): pydantic's, not a
    key the user wrote."""
    current: Any = model
    found: list[Any] = []
    tags: set[int] = set()
    for i, part in enumerate(loc):
        members = _members(current) if current is not None else []
        if len(members) == 1:  # Optional[X]: no tag in the path
            current, members = members[0], []
        if len(members) > 1:
            tags.add(i)
            current = _member(members, part)
        else:
            current = _below(current, part) if current is not None else None
        found.append(current)
    return found, tags


def _fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str] | None:
    """Names of the fields allowed at ``loc`` (for 'unknown key' hints)."""
    found = _models(_walk(model, loc)[0][-1] if loc else model)
    return list(found[0].model_fields) if len(found) == 1 else None


#: Error types that say a value is of another type than a branch of a union takes: the
#: branch that did not say so (or got deepest) explains what is wrong.
_MISMATCH = frozenset({"model_type", "model_attributes_type", "dict_type", "list_type",
                       "tuple_type", "set_type", "float_type", "int_type", "string_type",
                       "bool_type", "bool_parsing", "int_parsing", "float_parsing",
                       "literal_error", "is_instance_of", "none_required"})


def _union_choice(errors: list[Any], first: Any, model: type[BaseModel]) -> tuple[Any, int]:
    """The error of the union branch that explains ``first`` best (a mapping given for
    ``active``: the mapping's own problem, not "should be a valid number"), and how many
    errors of the other branches it stands for."""
    loc = tuple(first["loc"])
    _, tags = _walk(model, loc)
    if not tags:
        return first, 0
    at = min(tags)
    siblings = [e for e in errors if len(e["loc"]) > at and tuple(e["loc"][:at]) == loc[:at]]
    best = max(siblings, key=lambda e: (e["type"] not in _MISMATCH, len(e["loc"])))
    return best, len(siblings) - 1


def unknown_key(key: Any, expected: Sequence[str], *, also: Sequence[str] = (),
                more: str = "") -> str:
    """``unknown key (did you mean …?) (expected one of: …)``: the one wording of a key that
    is not allowed, the closest of ``expected`` and ``also`` suggested, ``expected`` listed
    (``more`` appended to the list).

    >>> unknown_key("base_url", ["model", "base_urls"])
    'unknown key (did you mean base_urls?) (expected one of: model, base_urls)'
    """
    close = difflib.get_close_matches(str(key), [*expected, *also], n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    listed = f" (expected one of: {', '.join(expected)}{more})" if expected or more else ""
    return f"unknown key{hint}{listed}"


def _providers() -> frozenset[str]:
    union = get_args(ModelConfig)[0]  # Annotated[Union[...], discriminator]
    members = get_args(union) or (union,)
    return frozenset(get_args(m.model_fields["provider"].annotation)[0] for m in members)


PROVIDERS = _providers()


def _is_tag(loc: tuple[Any, ...], i: int) -> bool:
    """Tagged unions put the tag in the path (``models.m.dummy.latency``): spot it to hide it."""
    return i >= 2 and loc[i - 2] == "models" and i + 1 < len(loc) and loc[i] in PROVIDERS


def key_text(part: Any) -> str:
    """A key of the path as written, quoted when it would not read as one (blank, newline)."""
    text = str(part)
    return text if text and text.isprintable() and text.strip() == text else repr(part)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def format_error(source: str, error: ValidationError, model: type[BaseModel]) -> str:
    """One line for the first problem of ``error`` (and how many more there are)."""
    errors = error.errors(include_url=False)
    first, more = errors[0], error.error_count() - 1
    if first["type"] == "missing":  # a misspelt key explains a missing one beside it
        missing = first
        first = next((e for e in errors if e["type"] == "extra_forbidden"
                      and tuple(e["loc"][:-1]) == tuple(missing["loc"][:-1])), missing)
        if first is not missing and difflib.get_close_matches(
                str(first["loc"][-1]), [str(missing["loc"][-1])], n=1):
            more -= 1  # the same mistake: base_url given, so base_urls missing
    first, others = _union_choice(errors, first, model)
    more -= others
    loc = tuple(first["loc"])
    members = _walk(model, loc)[1]  # a union's member in the path: pydantic's, not a key
    path = ".".join(key_text(p) for i, p in enumerate(loc)
                    if not _is_tag(loc, i) and i not in members)
    kind = first["type"]
    if kind == "extra_forbidden":
        message = unknown_key(loc[-1], _fields_at(model, loc[:-1]) or ())
    elif kind == "missing":
        message = "required key is missing"
    elif kind == "union_tag_invalid":  # provider: dumy
        ctx = first.get("ctx") or {}
        tags = [t.strip(" '") for t in str(ctx.get("expected_tags", "")).split(",")]
        close = difflib.get_close_matches(str(ctx.get("tag")), tags, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        path = ".".join(filter(None, [path, str(ctx.get("discriminator", "")).strip("'")]))
        message = f"unknown value {ctx.get('tag')!r}{hint} (expected one of: {', '.join(tags)})"
    else:
        message = first["msg"].removeprefix("Value error, ")
        if "input" in first and kind not in ("value_error", "assertion_error"):
            message += f" (got {_short(first['input'])})"
    suffix = f" [+{more} more problem{'s' if more > 1 else ''}]" if more else ""
    if not path:  # a check across keys; its message names them
        return f"{source}: {message}{suffix}"
    return f"{source}: {path}: {message}{suffix}"


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """``set_dotted(d, "game.ratio", "1/2")`` sets ``d["game"]["ratio"]``."""
    *parents, last = key.split(".")
    node = data
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[last] = value


def validate(data: dict[str, Any], model: type[M], source: str) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_error(source, e, model)) from None


def load_config(path: str | Path, model: type[M], overrides: dict[str, Any] | None = None) -> M:
    """Read ``path``, apply dotted ``overrides`` (skipping None values), validate."""
    data = read_yaml(path)
    for key, value in (overrides or {}).items():
        if value is not None:
            set_dotted(data, key, value)
    return validate(data, model, str(path))
