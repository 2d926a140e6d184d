"""Many keys in one operation: what ``Env.query_many``, ``incr_many`` and ``update_many``
do, and the helpers that services and clients share for them.

A list of named keys is applied in one tight loop over the environment's dict when it can
be (every key its own, nobody listening), else key by key with their homes looked up
first. An array key addressed with ``at=`` is changed in one vectorised step, in a new
array. :class:`KeyList` is how the keys travel: one string instead of a million.
"""

from __future__ import annotations

from itertools import chain, pairwise
from typing import TYPE_CHECKING, Any

import numpy as np

from ._env import _MANY_VERB, _PLAIN, _check_key, check_value
from ._errors import UnknownKeyError

if TYPE_CHECKING:
    from ._env import Env


class KeyList(list[str]):
    """The keys of a many-key operation: a list that pickles as one string.

    Pickling a list of a million short strings costs about ten times as much as pickling
    them joined by NUL and splitting them again (Ray's pickler calls back into Python once
    per object); keys with a NUL in them, or that are not strings, pickle as a list.
    """

    __slots__ = ()

    def __reduce__(self) -> tuple[Any, ...]:
        try:
            joined = "\0".join(self)
        except TypeError:
            return (list, (list(self),))
        if joined.count("\0") != len(self) - 1 or not self:
            return (list, (list(self),))
        return (_split_keys, (joined,))


def _split_keys(joined: str) -> KeyList:
    return KeyList(joined.split("\0"))


def as_keys(keys: Any) -> list[str]:
    """Keys of a many-key operation as a list (a NumPy array of strings is converted)."""
    if isinstance(keys, list):
        return keys
    if isinstance(keys, str):
        raise TypeError("a many-key operation takes a sequence of keys, got one string "
                        f"{keys!r}")
    if isinstance(keys, np.ndarray):
        return keys.tolist()
    return list(keys)


def per_key(args: Any, n: int, what: str) -> list[Any] | None:
    """One argument per key (a list), or None for one argument shared by every key (a
    scalar). ``what`` names the argument in the error for a length that does not match."""
    if isinstance(args, np.ndarray):
        if args.ndim == 0:
            return None
        args = args.tolist()
    elif not isinstance(args, list | tuple):
        return None
    if len(args) != n:
        raise ValueError(f"{what} must have one entry per key: {n} keys, {len(args)} {what}")
    return args if type(args) is list else list(args)


def at_positions(env: Env, kind: str, key: Any, at: Any, arg: Any) -> Any:
    """A many-key operation on the elements ``at`` of the array held by ``key``."""
    if env._served is not None:
        raise env._refuse(_MANY_VERB[kind], key if isinstance(key, str) else None)
    if type(key) is not str:
        raise TypeError("with at=, the first argument is one key (a string) holding an "
                        f"array, got {type(key).__name__}")
    home = env._home(key)
    if home is None:
        raise UnknownKeyError(key, env._path)
    old = home._data[key]
    if not isinstance(old, np.ndarray) or old.ndim != 1:
        raise TypeError(f"key {key!r} holds {type(old).__name__}; at= addresses the "
                        "elements of a one-dimensional NumPy array")
    idx = np.asarray(at)
    if not idx.size:  # [] reads as floats: no position is no position, of any type
        idx = idx.astype(np.int64)
    if idx.ndim != 1 or (idx.size and not np.issubdtype(idx.dtype, np.integer)):
        raise TypeError(f"at= takes one-dimensional integer positions, got {idx.dtype} "
                        f"with shape {idx.shape}")
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= len(old)):
        raise IndexError(f"at= positions must be in [0, {len(old)}) for key {key!r}, got "
                         f"{int(idx.min())}..{int(idx.max())}")
    if kind == "query":
        env._reads += 1
        return old[idx]
    new = old.copy()
    if kind == "incr":
        np.add.at(new, idx, arg)
    elif kind == "set":
        new[idx] = arg
    else:
        new[idx] = arg(old[idx])
    home._data[key] = new
    home._writes += 1
    home._emit("update", key, old, new)
    return new[idx] if kind == "incr" else None


def each(env: Env, kind: str, keys: list[str], args: list[Any] | None,
     errors: dict[int, BaseException] | None, shared: Any = None) -> list[Any]:
    """Apply the one-key operation ``kind`` (``query``, ``incr``, ``set``, ``update``)
    to each key in order; ``args[j]`` is key ``j``'s argument (None: ``shared`` for
    all). Returns each key's result.

    ``errors`` None: every key is looked up first (an unknown one raises and nothing
    changes) and a failure raises. Otherwise each key stands alone, as one-key ops
    would: its failure goes to ``errors[j]`` (its result None) and the others apply.
    """
    if env._served is not None:
        raise env._refuse(_MANY_VERB[kind])
    if not env._n_listeners and not env._tree.n_descendant_listeners:
        out = _each_here(env, kind, keys, args, shared)
        if out is not None:
            return out
    data = env._data
    n = len(keys)
    where: dict[int, Env] | None = None
    outside = [j for j, k in enumerate(keys) if k not in data]
    if outside:
        where = {}
        for j in outside:
            home = env._parent._home(keys[j]) if env._parent is not None else None
            if home is None:
                key = keys[j]
                error: BaseException
                try:
                    _check_key(key)
                    error = UnknownKeyError(key, env._path)
                except TypeError as e:
                    error = e
                if errors is None:
                    raise error
                errors[j] = error
            else:
                where[j] = home
    if kind == "query":
        env._reads += n
    out = [None] * n
    for j, key in enumerate(keys):
        if errors is not None and j in errors:
            continue
        home = env if where is None else where.get(j, env)
        try:
            if kind == "query":
                out[j] = home._data[key]
                continue
            old = home._data[key]
            arg = shared if args is None else args[j]
            if kind == "incr":
                new = old + arg
            elif kind == "set":
                new = arg
            else:
                new = arg(old)
            check_value(new)
            home._data[key] = new
            home._writes += 1
            home._emit("update", key, old, new)
            out[j] = new
        except Exception as e:
            if errors is None:
                raise
            errors[j] = e
    return out

def _each_here(env: Env, kind: str, keys: list[str], args: list[Any] | None,
           shared: Any) -> list[Any] | None:
    """:func:`each` in one tight loop over this environment's dict, for when nobody
    listens: None (and nothing changed) if a key is not this environment's own or an
    operation fails, for the careful path to redo."""
    data = env._data
    if kind == "query":
        try:
            out = list(map(data.__getitem__, keys))
        except (KeyError, TypeError):
            return None
        env._reads += len(keys)
        return out
    out = []
    put = out.append
    olds: list[Any] = []
    keep = olds.append
    try:
        if kind == "incr" and args is None:
            for key in keys:
                keep(old := data[key])
                data[key] = new = old + shared
                put(new)
        elif kind == "incr":
            assert args is not None
            for key, by in zip(keys, args, strict=True):
                keep(old := data[key])
                data[key] = new = old + by
                put(new)
        elif kind == "set":
            assert args is not None
            for key, new in zip(keys, args, strict=True):
                if type(new) not in _PLAIN:
                    check_value(new)
                keep(data[key])
                data[key] = new
                put(new)
        else:
            for key in keys:
                keep(old := data[key])
                new = shared(old)
                if type(new) not in _PLAIN:
                    check_value(new)
                data[key] = new
                put(new)
    except Exception:
        # Undo, newest first (a key given twice gets its first old value back).
        for key, old in zip(reversed(keys[:len(olds)]), reversed(olds), strict=True):
            data[key] = old
        return None
    env._writes += len(out)
    return out


def incr_at_each(env: Env, key: str, deltas: list[Any], ats: list[Any]
                 ) -> tuple[Pieces | list[Any], dict[int, BaseException]]:
    """``incr_many(key, deltas[m], at=ats[m])`` for each ``m`` in order, as one step: what
    an :class:`EnvClient` sends for its agents' run of such operations on one array key.

    Each operation's outcome is its own, as if applied alone: the elements at its
    positions once it (and those before it) are added. Integer arrays with nobody
    listening take one vectorised pass; anything else (floats, whose sums would round
    differently; a listener, who hears each operation; a bad operation) is applied
    operation by operation.
    """
    n = len(ats)
    home = env._home(key) if env._served is None else None
    old = home._data[key] if home is not None else None
    if (home is None or not isinstance(old, np.ndarray) or old.ndim != 1
            or old.dtype.kind != "i" or home._n_listeners
            or home._tree.n_descendant_listeners
            or not all(map(_integral, deltas))):
        return _one_at_a_time(env, key, deltas, ats)
    joined = _positions(ats)
    if joined is None:
        return _one_at_a_time(env, key, deltas, ats)
    where, sizes = joined
    if where.size and (int(where.min()) < 0 or int(where.max()) >= len(old)):
        return _one_at_a_time(env, key, deltas, ats)
    try:
        if all(type(d) is int for d in deltas):  # one number per op, the common case
            by = np.repeat(np.array(deltas, dtype=old.dtype), sizes)
        else:
            by = np.concatenate([np.broadcast_to(np.asarray(d, dtype=old.dtype), (size,))
                                 for d, size in zip(deltas, sizes.tolist(), strict=True)])
    except (ValueError, TypeError, OverflowError):  # a delta of the wrong shape or size
        return _one_at_a_time(env, key, deltas, ats)
    new = old.copy()
    np.add.at(new, where, by)
    # Each operation's result: the old value plus every delta at that position from the
    # operations up to and including its own. Sorted by (position, operation), a running
    # sum per position, read at the last element of each (position, operation) run.
    op = np.repeat(np.arange(n), sizes)
    order = np.lexsort((op, where))
    p, o, d = where[order], op[order], by[order]
    total = np.cumsum(d)
    first = np.ones(p.size, dtype=bool)
    first[1:] = p[1:] != p[:-1]
    start = np.flatnonzero(first)
    running = total - (total[start] - d[start])[np.cumsum(first) - 1]
    last = np.ones(p.size, dtype=bool)
    last[:-1] = (p[1:] != p[:-1]) | (o[1:] != o[:-1])
    run_of = np.cumsum(last) - last  # each element's (position, operation) run
    after = np.empty(where.size, dtype=new.dtype)
    after[order] = old[p] + running[np.flatnonzero(last)][run_of]
    home._data[key] = new
    home._writes += n
    return Pieces(after, np.cumsum(sizes)[:-1].tolist()), {}


class Pieces:
    """Each operation's part of one array, split where it is read: one array pickles far
    faster than thousands of small ones (about 7x for 32,000 of 8 elements)."""

    __slots__ = ("array", "bounds")

    def __init__(self, array: np.ndarray, bounds: list[int]) -> None:
        self.array = array
        self.bounds = bounds

    def __len__(self) -> int:
        return len(self.bounds) + 1

    def __iter__(self) -> Any:
        array = self.array
        return (array[a:b] for a, b in pairwise([0, *self.bounds, len(array)]))

    def __reduce__(self) -> tuple[Any, ...]:
        return (Pieces, (self.array, self.bounds))


def _positions(ats: list[Any]) -> tuple[np.ndarray, np.ndarray] | None:
    """Every op's positions joined, and how many each has; None if an op's are not a flat
    run of integers (that op must then fail, or pass, on its own)."""
    n = len(ats)
    if all(type(a) is list for a in ats):  # what agents usually send
        flat = list(chain.from_iterable(ats))
        if not all(type(x) is int for x in flat):
            return None
        return (np.array(flat, dtype=np.int64),
                np.fromiter(map(len, ats), dtype=np.int64, count=n))
    parts = [np.asarray(a) for a in ats]
    if any(a.ndim != 1 or (a.size and a.dtype.kind not in "iu") for a in parts):
        return None
    sizes = np.fromiter((a.size for a in parts), dtype=np.int64, count=n)
    return (np.concatenate(parts).astype(np.int64, copy=False) if n
            else np.empty(0, dtype=np.int64)), sizes


def _integral(delta: Any) -> bool:
    """A Python int or an array of signed integers (what adds to a signed array as it
    would one op at a time)."""
    if type(delta) is int:
        return True
    dtype = getattr(delta, "dtype", None)
    return dtype is not None and dtype.kind == "i"


def _one_at_a_time(env: Env, key: str, deltas: list[Any], ats: list[Any]
                   ) -> tuple[list[Any], dict[int, BaseException]]:
    values: list[Any] = []
    errors: dict[int, BaseException] = {}
    for m, (d, at) in enumerate(zip(deltas, ats, strict=True)):
        try:
            values.append(at_positions(env, "incr", key, at, d))
        except Exception as error:
            values.append(None)
            errors[m] = error
    return values, errors
