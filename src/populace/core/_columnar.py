"""Columnar wire format for the results of group calls.

Pickling a slotted dataclass costs ~10 µs (measured: 500,000 reply messages took 5 s to
pickle and 5 s to unpickle); the same data as a few lists of floats and strings takes
0.2 s. Remote workers therefore pack a chunk of replies into columns when every reply is a
:class:`Msg` whose content has one dataclass type (or is a plain scalar), and the central
process unpacks them into equal objects.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ._msg import Msg

_SCALARS = (int, float, str, bool, type(None))


class PackedReplies:
    """Many ``Msg`` replies sharing a role and a content type, stored as columns."""

    __slots__ = ("columns", "content_type", "role", "senders")

    def __init__(self, content_type: type | None, role: str, senders: list[Any],
                 columns: dict[str, list[Any]]) -> None:
        self.content_type = content_type  # None: content is a scalar, in columns[""]
        self.role = role
        self.senders = senders
        self.columns = columns

    def __len__(self) -> int:
        return len(self.senders)

    def __reduce__(self) -> Any:
        return (PackedReplies, (self.content_type, self.role, self.senders, self.columns))

    def unpack(self) -> list[Msg]:
        role = self.role
        if self.content_type is None:
            return [Msg(s, c, role) for s, c in zip(self.senders, self.columns[""], strict=True)]
        ct = self.content_type
        rows = zip(*self.columns.values(), strict=True)
        return [Msg(s, ct(*row), role) for s, row in zip(self.senders, rows, strict=True)]


def pack(values: list[Any]) -> PackedReplies | None:
    """Columns for ``values`` if they fit the format, else None (send them as they are)."""
    if not values or type(values[0]) is not Msg:
        return None
    first = values[0]
    role, ct = first.role, type(first.content)
    if isinstance(first.content, _SCALARS):
        for v in values:
            if type(v) is not Msg or v.role != role or v.metadata is not None \
                    or not isinstance(v.content, _SCALARS):
                return None
        return PackedReplies(None, role, [v.sender for v in values],
                             {"": [v.content for v in values]})
    if not dataclasses.is_dataclass(ct):
        return None
    fields = [f.name for f in dataclasses.fields(ct) if f.init]
    if len(fields) != len(dataclasses.fields(ct)):
        return None
    for v in values:
        if type(v) is not Msg or type(v.content) is not ct or v.role != role \
                or v.metadata is not None:
            return None
    contents = [v.content for v in values]
    columns = {name: [getattr(c, name) for c in contents] for name in fields}
    return PackedReplies(ct, role, [v.sender for v in values], columns)
