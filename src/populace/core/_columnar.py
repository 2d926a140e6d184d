"""Columnar replies: the wire format of group results, and their table.

Pickling a slotted dataclass costs ~10 µs (measured: 500,000 reply messages took 5 s to
pickle and 5 s to unpickle); the same data as a few columns takes a fraction of that.
Remote workers therefore pack a chunk of replies into columns when every reply is a
:class:`Msg` whose content has one dataclass type (or is a plain scalar). A column whose
values are all floats, ints, strings or bools (or None) becomes an Arrow array: a million
answers are then a few buffers, not a million Python objects, in the worker, on the wire
and in the central process.

The central process keeps the chunks as they are: :meth:`PlaceholderSet.table
<populace.core.PlaceholderSet.table>` reads a step's replies as one Arrow table without
making an object per agent (:func:`replies_table`), and the ``Msg`` objects are made only
when someone asks for the list of results (:meth:`PackedReplies.unpack`: equal objects,
every value of the same Python type as sent).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from operator import attrgetter
from typing import Any

import numpy as np
import pyarrow as pa

from ._msg import Msg

_SCALARS = (int, float, str, bool, type(None))
_NONE = type(None)
#: Python value types whose columns travel as Arrow arrays (to_pylist() gives them back).
_ARROW_TYPES: dict[type, pa.DataType] = {
    float: pa.float64(), int: pa.int64(), str: pa.string(), bool: pa.bool_(),
}
#: The column of a scalar reply's content.
CONTENT = ""


def _column(values: list[Any]) -> pa.Array | list[Any]:
    """``values`` as an Arrow array when they are of one plain type (None allowed) and come
    back from it unchanged; else the list itself."""
    kinds = set(map(type, values))
    kinds.discard(_NONE)
    if not kinds:  # all None (a map of a method that returns nothing)
        return pa.nulls(len(values))
    if len(kinds) != 1:
        return values  # mixed (an int and a float would come back as two floats), or no type
    arrow = _ARROW_TYPES.get(kinds.pop())
    if arrow is None:
        return values
    try:
        return pa.array(values, type=arrow)
    except (pa.ArrowException, OverflowError, UnicodeError):  # a huge int, a lone surrogate
        return values


def _values(column: pa.Array | list[Any]) -> list[Any]:
    return column.to_pylist() if isinstance(column, pa.Array) else column


class PackedReplies(Sequence[Any]):
    """Many ``Msg`` replies sharing a role and a content type, stored as columns; or, with
    ``role`` None, plain values (what a ``map`` of a method returning numbers, strings or
    None gives), in one column and with no senders.

    A sequence of the replies: indexing or iterating makes them (once, then kept);
    :meth:`arrow` reads a column without making any.
    """

    __slots__ = ("_msgs", "columns", "content_type", "role", "senders")

    def __init__(self, content_type: type | None, role: str | None,
                 senders: pa.Array | list[Any] | None,
                 columns: dict[str, pa.Array | list[Any]]) -> None:
        self.content_type = content_type  # None: content is a scalar, in columns[CONTENT]
        self.role = role
        self.senders = senders
        self.columns = columns
        self._msgs: list[Msg] | None = None

    def __len__(self) -> int:
        return len(next(iter(self.columns.values())))

    def __reduce__(self) -> Any:
        return (PackedReplies, (self.content_type, self.role, self.senders, self.columns))

    def __getitem__(self, i: Any) -> Any:
        return self.unpack()[i]

    def __iter__(self) -> Iterator[Msg]:
        return iter(self.unpack())

    def unpack(self) -> list[Any]:
        """The replies as ``Msg`` objects (or plain values), equal to those returned."""
        if self._msgs is not None:
            return self._msgs
        if self.senders is None:  # plain values
            self._msgs = list(_values(self.columns[CONTENT]))
            return self._msgs
        role, senders = self.role or "", _values(self.senders)
        if self.content_type is None:
            out = [Msg(s, c, role)
                   for s, c in zip(senders, _values(self.columns[CONTENT]), strict=True)]
        else:
            ct = self.content_type
            rows = zip(*(_values(c) for c in self.columns.values()), strict=True)
            out = [Msg(s, ct(*row), role) for s, row in zip(senders, rows, strict=True)]
        self._msgs = out
        return out

    def arrow(self, name: str) -> pa.Array:
        """Column ``name`` (a content field, ``"sender"``, or :data:`CONTENT`) as an Arrow
        array; TypeError naming it when its values do not fit one Arrow type."""
        column = self.senders if name == "sender" else self.columns[name]
        if column is None:  # plain values have no senders
            return pa.nulls(len(self))
        if isinstance(column, pa.Array):
            return column
        try:
            return pa.array(column)
        except (pa.ArrowException, OverflowError, UnicodeError) as e:
            what = "sender" if name == "sender" else ("content" if name == CONTENT else name)
            raise TypeError(f"replies' {what!r} values do not fit one column "
                            f"({type(e).__name__}: {e})") from None

    def names(self) -> list[str]:
        """The content's columns: the dataclass's fields, or ``[CONTENT]``."""
        return list(self.columns)


def pack(values: Sequence[Any]) -> PackedReplies | None:
    """Columns for ``values`` if they fit the format, else None (send them as they are)."""
    if type(values) is PackedReplies:
        return values
    if not values:
        return None
    first = values[0]
    # Checks and columns are C-level passes (set(), map(attrgetter)): a worker packs half
    # a million replies per step.
    if type(first) is not Msg:
        if not set(map(type, values)) <= _PLAIN:
            return None
        return PackedReplies(None, None, None, {CONTENT: _column(list(values))})
    role, ct = first.role, type(first.content)
    if set(map(type, values)) != {Msg} or set(map(_role, values)) != {role} \
            or not _no_metadata(values):
        return None
    contents = list(map(_content, values))
    senders = _column(list(map(_sender, values)))
    if isinstance(first.content, _SCALARS):
        if not set(map(type, contents)) <= _PLAIN \
                and not all(isinstance(c, _SCALARS) for c in contents):  # an IntEnum, say
            return None
        return PackedReplies(None, role, senders, {CONTENT: _column(contents)})
    if not dataclasses.is_dataclass(ct) or set(map(type, contents)) != {ct}:
        return None
    fields = [f.name for f in dataclasses.fields(ct) if f.init]
    if len(fields) != len(dataclasses.fields(ct)):
        return None
    columns = {name: _column(list(map(attrgetter(name), contents))) for name in fields}
    return PackedReplies(ct, role, senders, columns)


_PLAIN = frozenset(_SCALARS)
_role, _content, _sender = attrgetter("role"), attrgetter("content"), attrgetter("sender")
_metadata = attrgetter("metadata")


def _no_metadata(values: Sequence[Msg]) -> bool:
    return list(map(_metadata, values)).count(None) == len(values)


def error_text(error: BaseException) -> str:
    """How a failed reply reads in a table: ``"ModelError: the server said 500"``."""
    return f"{type(error).__name__}: {error}"


def replies_table(n: int, chunks: Sequence[tuple[np.ndarray, PackedReplies]],
                  errors: Mapping[int, BaseException]) -> pa.Table:
    """One row per member ``0..n-1``: ``sender``, the content's columns, ``error``.

    ``chunks`` hold the successful replies (each with its members' positions), ``errors``
    the failed members, whose other columns are null. Chunks of other columns or roles
    than the first raise TypeError. Columns of different Arrow types across chunks are
    promoted (ints and floats to floats, nulls to anything).
    """
    if not chunks:
        names = ["sender", CONTENT]
        tables = [pa.table({name: pa.nulls(0) for name in names})]
        positions = np.empty(0, dtype=np.int64)
    else:
        first = chunks[0][1]
        names = ["sender", *first.names()]
        for taken in ("sender", "error"):
            if taken in first.names():
                raise TypeError(f"replies_table(): the replies have a field named {taken!r}, "
                                f"which is a column of the table of replies")
        tables = []
        for _, packed in chunks:
            if packed.names() != first.names() or packed.role != first.role \
                    or packed.content_type is not first.content_type:
                raise TypeError(f"replies of two kinds in one table: "
                                f"{_kind(first)} and {_kind(packed)}")
            tables.append(pa.table({name: packed.arrow(name) for name in names}))
        positions = np.concatenate([np.asarray(p, dtype=np.int64) for p, _ in chunks])
    try:
        table = pa.concat_tables(tables, promote_options="permissive")
    except pa.ArrowException as e:
        raise TypeError(f"replies' columns do not fit one table: {e}") from None
    table = table.rename_columns(["content" if c == CONTENT else c for c in names])
    if positions.size != n or errors or not _ascending(positions):
        where = np.full(n, -1, dtype=np.int64)
        where[positions] = np.arange(positions.size, dtype=np.int64)
        table = table.take(pa.array(where, mask=where < 0))
    error = pa.nulls(n, pa.string())
    if errors:
        text = np.full(n, None, dtype=object)
        for i, failure in errors.items():
            text[i] = error_text(failure)
        error = pa.array(text, type=pa.string())
    return table.append_column("error", error)


def outcomes_table(outcomes: Sequence[Any], origin: str = "outcomes_table()") -> pa.Table:
    """``outcomes`` -- replies, with an exception in each failed member's place, as
    :meth:`PlaceholderSet.results <populace.core.PlaceholderSet.results>` gives them -- as
    the table :meth:`PlaceholderSet.table <populace.core.PlaceholderSet.table>` gives."""
    if type(outcomes) is PackedReplies:  # read from its columns
        n = len(outcomes)
        return replies_table(n, [(np.arange(n, dtype=np.int64), outcomes)], {})
    errors = {i: o for i, o in enumerate(outcomes) if isinstance(o, BaseException)}
    return objects_table(outcomes, errors, origin)


def objects_table(values: Sequence[Any], errors: Mapping[int, BaseException],
                  origin: str) -> pa.Table:
    """:func:`replies_table` of members' reply objects ``values`` (whatever stands in a
    failed member's place is passed over) and the failed members' ``errors``."""
    n = len(values)
    at = np.arange(n, dtype=np.int64)
    if errors:
        ok = np.ones(n, dtype=bool)
        ok[list(errors)] = False
        at = at[ok]
        values = [values[i] for i in at.tolist()]
    packed = pack(values)
    if values and packed is None:
        raise TypeError(f"{origin}: the replies are not all Msg with one role and content of "
                        f"one dataclass type or plain values (first: {values[0]!r:.120})")
    return replies_table(n, [(at, packed)] if packed is not None else [], errors)


def consecutive(positions: np.ndarray) -> bool:
    """Whether ``positions`` (not empty) are one ascending run: ``a, a+1, …, b``."""
    return int(positions[-1]) - int(positions[0]) + 1 == positions.size and (
        positions.size == 1 or bool(np.all(np.diff(positions) == 1)))


def _ascending(positions: np.ndarray) -> bool:
    return positions.size == 0 or (int(positions[0]) == 0 and consecutive(positions))


def _kind(packed: PackedReplies) -> str:
    ct = "scalars" if packed.content_type is None else packed.content_type.__name__
    return f"{ct} ({packed.role})"
