"""Choosing agents by their profile: ``--where 'education == "PhD" and age >= 40'``.

A selection is what an interview asks or an intervention reaches: explicit agent ids, a
profile query, a seeded random sample, or the three combined (ids or query first, then the
sample of what they left). A query is a Python-like expression over profile columns, read
with :mod:`ast` and turned into a vectorised Arrow filter (never evaluated as Python):
comparisons (``== != < <= > >=``, ``in``/``not in`` a list), ``and``, ``or``, ``not``,
parentheses, a bare boolean column, and literal strings, numbers, booleans and ``None``.

>>> import pyarrow as pa
>>> profiles = pa.table({"agent_id": [0, 1, 2], "age": [30, 45, 61],
...                      "education": ["PhD", "BA", "PhD"]})
>>> select(profiles, where='education == "PhD" and age > 40').tolist()
[2]
"""

from __future__ import annotations

import ast
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from populace.core import ConfigError, derive_seed
from populace.results import plain_categories

MAX_WHERE = 2000  # characters of a query
MAX_DEPTH = 64    # operators and brackets nested in a query
MAX_SHOWN = 80    # characters of a query an error repeats

_COMPARE = {ast.Eq: "equal", ast.NotEq: "not_equal", ast.Lt: "less", ast.LtE: "less_equal",
            ast.Gt: "greater", ast.GtE: "greater_equal"}
_FLIP = {"less": "greater", "less_equal": "greater_equal", "greater": "less",
         "greater_equal": "less_equal", "equal": "equal", "not_equal": "not_equal"}


class SelectionError(ConfigError):
    """A selection that cannot be made (a bad query, an unknown agent); one line."""


def utf8_text(text: str, what: str) -> str:
    """``text`` when it can be written as UTF-8, else ConfigError naming ``what``: a lone
    surrogate (bytes that were not UTF-8 on the command line, a ``\\udc80`` in JSON) would
    fail only when the text is written to a table or a prompt, as a traceback."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ConfigError(f"{what}: not UTF-8 text (a lone surrogate "
                          f"{text[e.start]!r} at character {e.start + 1})") from None
    return text


def _shown(text: str) -> str:
    return repr(text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN - 1] + "…")


def _depth(tree: ast.AST) -> int:
    """How deeply ``tree`` nests (walked without recursion: the depth is what is checked)."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


def _literal(node: ast.AST, text: str) -> Any:
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(
            node.value, bool | int | float | str)):
        return _in_range(node.value, text)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) \
            and isinstance(node.operand, ast.Constant) \
            and isinstance(node.operand.value, int | float) \
            and not isinstance(node.operand.value, bool):
        return _in_range(-node.operand.value, text)
    raise SelectionError(f"where {_shown(text)}: {ast.unparse(node)!r} is not a literal (a string "
                         "in quotes, a number, True, False or None)")


def _in_range(value: Any, text: str) -> Any:
    """A whole number must fit the 64 bits of a profile column (Arrow overflows past it)."""
    if isinstance(value, int) and not isinstance(value, bool) \
            and not -(2**63) <= value < 2**63:
        digits = len(str(abs(value)))
        raise SelectionError(f"where {_shown(text)}: a number of {digits:,} digits is too "
                             "large (whole numbers are 64-bit: at most 19 digits)")
    return value


def _column(node: ast.AST, columns: Sequence[str], text: str) -> str:
    if not isinstance(node, ast.Name):
        raise SelectionError(f"where {_shown(text)}: expected a profile column, got "
                             f"{ast.unparse(node)!r}")
    if node.id not in columns:
        raise SelectionError(f"where {_shown(text)}: no profile column {node.id!r} (have: "
                             f"{', '.join(c for c in columns if c != 'background')})")
    return node.id


def _compare(node: ast.Compare, columns: Sequence[str], text: str) -> pc.Expression:
    if len(node.ops) != 1:  # a < b < c: write it with and
        raise SelectionError(f"where {_shown(text)}: compare two things at a time (use and)")
    op, left, right = node.ops[0], node.left, node.comparators[0]
    if isinstance(op, ast.In | ast.NotIn):
        if not isinstance(right, ast.List | ast.Tuple | ast.Set):
            raise SelectionError(f"where {_shown(text)}: in needs a list, as in "
                                 "x in [\"a\", \"b\"]")
        values = [_literal(v, text) for v in right.elts]
        found = pc.field(_column(left, columns, text)).isin(values)
        return ~found if isinstance(op, ast.NotIn) else found
    name = _COMPARE.get(type(op))
    if name is None:
        raise SelectionError(f"where {_shown(text)}: unsupported comparison "
                             f"{ast.unparse(node)!r}")
    if isinstance(left, ast.Name):
        column, value = _column(left, columns, text), _literal(right, text)
    else:  # 40 < age
        column, value, name = _column(right, columns, text), _literal(left, text), _FLIP[name]
    field = pc.field(column)
    if value is None:
        return field.is_null() if name == "equal" else field.is_valid() \
            if name == "not_equal" else _refuse_none(text)
    return getattr(pc, name)(field, pc.scalar(value))


def _refuse_none(text: str) -> pc.Expression:
    raise SelectionError(f"where {_shown(text)}: None compares with == or != only")


def _expression(node: ast.AST, columns: Sequence[str], text: str) -> pc.Expression:
    if isinstance(node, ast.BoolOp):
        parts = [_expression(v, columns, text) for v in node.values]
        out = parts[0]
        for p in parts[1:]:
            out = out & p if isinstance(node.op, ast.And) else out | p
        return out
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return ~_expression(node.operand, columns, text)
    if isinstance(node, ast.Compare):
        return _compare(node, columns, text)
    if isinstance(node, ast.Name):
        return pc.field(_column(node, columns, text)) == pc.scalar(True)
    raise SelectionError(f"where {_shown(text)}: cannot read {ast.unparse(node)!r} (expected "
                         "comparisons of profile columns joined by and, or, not)")


def where_filter(text: str, columns: Sequence[str]) -> pc.Expression:
    """The Arrow filter of query ``text`` over profile ``columns``; SelectionError if bad."""
    return _expression(check_where(text).body, columns, text)


def check_where(text: str) -> ast.Expression:
    """Query ``text`` read (its columns not yet known): SelectionError, one line, for text
    that is too long, not UTF-8, not an expression, nested too deeply or holding a number
    beyond 64 bits; else its syntax tree."""
    if len(text) > MAX_WHERE:
        raise SelectionError(f"where: a query is at most {MAX_WHERE} characters")
    utf8_text(text, "where")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise SelectionError(f"where {_shown(text)}: not an expression ({e.msg})") from None
    except (RecursionError, MemoryError):  # the parser's own limit on nesting
        tree = None
    if tree is None or _depth(tree) > MAX_DEPTH:
        raise SelectionError(f"where {_shown(text)}: nested too deeply (at most {MAX_DEPTH} "
                             "levels of operators and brackets)")
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant):
            _in_range(node.value, text)
    return tree


def select(profiles: pa.Table | None, *, where: str | None = None,
           agents: Sequence[int] | None = None, sample: int | None = None,
           ids: np.ndarray | None = None, seed: int = 0) -> np.ndarray:
    """Agent ids (sorted) chosen by explicit ``agents``, a ``where`` query over
    ``profiles`` (``agent_id`` and profile columns) and a seeded random ``sample`` of those;
    nothing given means every agent. ``ids``: every agent of the run, when it has no
    profile table. SelectionError for an unknown agent, a bad query, an empty result."""
    every = (np.asarray(profiles.column("agent_id"), dtype=np.int64)
             if profiles is not None else np.asarray(ids if ids is not None else [], np.int64))
    chosen = np.sort(every)
    if agents is not None:
        given = list(agents)
        bad = next((a for a in given if isinstance(a, bool) or not isinstance(a, int)
                    or not -(2**63) <= a < 2**63), None)
        if bad is not None:
            raise SelectionError(f"agent {bad}: not an agent id (a whole number)")
        wanted = np.unique(np.asarray(given, dtype=np.int64))
        missing = wanted[~np.isin(wanted, chosen)]
        if missing.size:
            raise SelectionError(f"agent {int(missing[0])}: no such agent (the run has "
                                 f"{chosen.size:,}: ids {int(chosen[0]) if chosen.size else 0}"
                                 f"–{int(chosen[-1]) if chosen.size else 0})")
        chosen = wanted
    if where is not None:
        if profiles is None:
            raise SelectionError(f"where {_shown(where)}: the run has no profiles to query "
                                 "(profiles.parquet)")
        table = plain_categories(profiles.select([c for c in profiles.column_names
                                        if c != "background"]))
        try:
            matched = table.filter(where_filter(where, table.column_names))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise SelectionError(f"where {_shown(where)}: {first}") from None
        found = np.asarray(matched.column("agent_id"), dtype=np.int64)
        chosen = chosen[np.isin(chosen, found)]
        if not chosen.size:
            raise SelectionError(f"where {_shown(where)}: no agent matches")
    if sample is not None:
        if sample < 1:
            raise SelectionError(f"sample {sample}: expected at least 1")
        if sample < chosen.size:
            rng = np.random.default_rng(derive_seed(seed, zlib.crc32(b"sample"), sample))
            chosen = np.sort(rng.choice(chosen, size=sample, replace=False))
    return chosen
