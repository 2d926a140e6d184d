"""Finding and replacing special values (placeholders, remote refs) inside call arguments.

Arguments are walked through messages, lists, tuples and dicts; other values are leaves.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ._msg import Msg


def find(value: Any, kinds: tuple[type, ...], out: list[Any]) -> list[Any]:
    """Append every instance of ``kinds`` inside ``value`` to ``out``; returns ``out``."""
    if isinstance(value, kinds):
        out.append(value)
    elif isinstance(value, Msg):
        find(value.content, kinds, out)
        if value.metadata:
            find(value.metadata, kinds, out)
    elif isinstance(value, list | tuple):
        for v in value:
            find(v, kinds, out)
    elif isinstance(value, dict):
        for v in value.values():
            find(v, kinds, out)
    return out


def replace(value: Any, kinds: tuple[type, ...], fn: Callable[[Any], Any]) -> Any:
    """A copy of ``value`` with every instance of ``kinds`` replaced by ``fn(instance)``.

    Messages are copied, never mutated: the same message may go to many agents.
    """
    if isinstance(value, kinds):
        return fn(value)
    if isinstance(value, Msg):
        meta = replace(value.metadata, kinds, fn) if value.metadata else value.metadata
        return dataclasses.replace(value, content=replace(value.content, kinds, fn),
                                   metadata=meta)
    if isinstance(value, list):
        return [replace(v, kinds, fn) for v in value]
    if isinstance(value, tuple):
        return tuple(replace(v, kinds, fn) for v in value)
    if isinstance(value, dict):
        return {k: replace(v, kinds, fn) for k, v in value.items()}
    return value
