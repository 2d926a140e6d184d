"""Operations on an environment as data, and the async verbs built on them.

An :class:`Op` is a small picklable record ("increment key k by 1 in environment e"), so a
worker can send all its agents' operations of one tick to an environment service as one
list, and a service living in another process can apply them. Named operations (``set``,
``incr``, ``append``...) need no function at all; ``update`` with a function is there for
arbitrary read-modify-write (the function must be picklable to cross a process boundary).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from ._many import KeyList, as_keys, each, incr_at_each, per_key

if TYPE_CHECKING:
    from populace.core import Placeholder

    from ._env import Env

OpKind = Literal["query", "query_prefix", "query_where", "register", "set", "update", "incr",
                 "append", "delete", "query_many", "incr_many", "set_many", "update_many",
                 "each", "each_at"]
KEYLESS = frozenset(("query_prefix", "query_where"))
#: Kinds on many keys at once. Their ``arg`` is ``(keys, x, at)``: with ``at`` None, ``keys``
#: is a sequence and ``key`` is "" (the service splits the op by key when some are held);
#: otherwise ``key`` names the one key holding an array, as for a one-key op.
MANY = frozenset(("query_many", "incr_many", "set_many", "update_many", "each", "each_at"))
_UNSET: Any = object()


class Op(NamedTuple):
    """One environment operation; build it with the named constructors.

    ``env`` is the :attr:`Env.path` of the target environment (``None``: the service's own).
    A named tuple: immutable, picklable, and cheap to make by the hundred thousand.

    >>> ops = [Op.incr("votes/yes"), Op.append("log", "agent 7 voted"), Op.query("votes/yes")]
    """

    kind: OpKind
    key: str
    arg: Any = None
    env: str | None = None
    owner: Any = None

    @classmethod
    def query(cls, key: str, *, env: str | None = None) -> Op:
        return cls("query", key, None, env)

    @classmethod
    def query_prefix(cls, prefix: str, *, env: str | None = None) -> Op:
        return cls("query_prefix", prefix, None, env)

    @classmethod
    def query_where(cls, predicate: Callable[[str, Any], bool], *,
                    env: str | None = None) -> Op:
        return cls("query_where", "", predicate, env)

    @classmethod
    def register(cls, key: str, value: Any, owner: Any = None, *,
                 env: str | None = None) -> Op:
        return cls("register", key, value, env, owner)

    @classmethod
    def set(cls, key: str, value: Any, *, env: str | None = None) -> Op:
        return cls("set", key, value, env)

    @classmethod
    def update(cls, key: str, fn: Callable[[Any], Any], *, env: str | None = None) -> Op:
        """``fn(old)`` gives the new value; it may be ``async`` (the key is held meanwhile)."""
        return cls("update", key, fn, env)

    @classmethod
    def incr(cls, key: str, by: Any = 1, *, env: str | None = None) -> Op:
        return cls("incr", key, by, env)

    @classmethod
    def append(cls, key: str, item: Any, *, env: str | None = None) -> Op:
        """Append ``item`` to the list (or tuple) at ``key``; a new list replaces the old."""
        return cls("append", key, item, env)

    @classmethod
    def delete(cls, key: str, *, env: str | None = None) -> Op:
        return cls("delete", key, None, env)

    @classmethod
    def query_many(cls, keys: Sequence[str] | str, *, at: Any = None,
                   env: str | None = None) -> Op:
        """:meth:`Env.query_many` as data."""
        return _many("query_many", keys, None, at, env)

    @classmethod
    def incr_many(cls, keys: Sequence[str] | str, deltas: Any = 1, *, at: Any = None,
                  env: str | None = None) -> Op:
        """:meth:`Env.incr_many` as data."""
        return _many("incr_many", keys, deltas, at, env)

    @classmethod
    def update_many(cls, keys: Sequence[str] | str, values: Any = _UNSET, *,
                    fn: Callable[[Any], Any] | None = None, at: Any = None,
                    env: str | None = None) -> Op:
        """:meth:`Env.update_many` as data (``fn`` must be picklable to cross a process)."""
        if (values is _UNSET) == (fn is None):
            raise TypeError("update_many() takes either values or fn=, not both or neither")
        if fn is not None:
            if inspect.iscoroutinefunction(fn):
                raise TypeError("update_many() takes a plain function; an async fn holds its "
                                "key while it runs: use update(key, fn=...), one key at a time")
            return _many("update_many", keys, fn, at, env)
        return _many("set_many", keys, values, at, env)


def _many(kind: OpKind, keys: Any, x: Any, at: Any, env: str | None) -> Op:
    if at is not None:
        if type(keys) is not str:
            raise TypeError("with at=, the first argument is one key (a string) holding an "
                            f"array, got {type(keys).__name__}")
        return Op(kind, keys, (keys, x, at), env)
    keys = KeyList(as_keys(keys))
    if kind in ("incr_many", "set_many"):
        what = "deltas" if kind == "incr_many" else "values"
        if per_key(x, len(keys), what) is None and kind == "set_many":
            raise TypeError("update_many() takes one value per key (a list or an array), got "
                            f"{type(x).__name__}")
    return Op(kind, "", (keys, x, None), env)


@dataclass(slots=True)
class Reply:
    """Outcomes of a batch of ops, in order: ``values[i]`` or ``errors[i]``."""

    values: list[Any]
    errors: dict[int, BaseException] = field(default_factory=dict)

    def result(self, i: int) -> Any:
        error = self.errors.get(i)
        if error is not None:
            raise error
        return self.values[i]

    def results(self, return_exceptions: bool = False) -> list[Any]:
        """Values in order; the first error is raised, or put in place with
        ``return_exceptions``."""
        if not self.errors:
            return list(self.values)
        if not return_exceptions:
            raise self.errors[min(self.errors)]
        out = list(self.values)
        for i, error in self.errors.items():
            out[i] = error
        return out


def apply_now(env: Env, op: Op) -> Any:
    """Apply a synchronous op to ``env``; returns its result (raises its error)."""
    kind = op.kind
    if kind == "query":
        return env.query(op.key)
    if kind == "incr":
        by = op.arg
        return env.update(op.key, fn=lambda old: old + by)
    if kind == "set":
        return env.update(op.key, op.arg)
    if kind == "append":
        item = op.arg
        return env.update(op.key, fn=lambda old: (*old, item) if type(old) is tuple
                          else [*old, item])
    if kind == "update":
        return env.update(op.key, fn=op.arg)
    if kind == "register":
        env.register(op.key, op.arg, op.owner)
        return None
    if kind == "delete":
        return env.delete(op.key)
    if kind == "query_prefix":
        return env.query_prefix(op.key)
    if kind == "query_where":
        return env.query_where(op.arg)
    if kind in MANY:
        keys, x, at = op.arg
        if kind == "incr_many":
            return env.incr_many(keys, x, at=at)
        if kind == "query_many":
            return env.query_many(keys, at=at)
        if kind == "set_many":
            return env.update_many(keys, x, at=at)
        if kind == "update_many":
            return env.update_many(keys, fn=x, at=at)
        if kind == "each":  # what EnvClient sends for a run of like one-key ops
            errors: dict[int, BaseException] = {}
            return each(env, op.key, keys, x, errors, None), errors
        if kind == "each_at":  # and for a run of incr_many(key, ..., at=) on one key
            return incr_at_each(env, op.key, x, at)
    raise ValueError(f"unknown environment operation {kind!r}")


class EnvVerbs:
    """The async verbs shared by :class:`EnvService` and :class:`EnvClient`.

    Each verb builds an :class:`Op` and returns the coroutine of ``_one`` for it (one
    coroutine frame less per call than an ``async def`` verb: agents make millions of
    these); ``env=`` names the target environment by its path (default: the service's own).
    """

    __slots__ = ()

    async def _one(self, op: Op) -> Any:  # pragma: no cover - implemented by subclasses
        raise NotImplementedError

    async def apply(self, ops: Sequence[Op], *, return_exceptions: bool = False) -> list[Any]:
        """Apply ``ops``; their results in order (not a transaction: each op stands alone).

        The first error in order is raised after every op has been applied, unless
        ``return_exceptions`` puts each error in its op's place.
        """
        raise NotImplementedError  # pragma: no cover - implemented by subclasses

    def query(self, key: str, *, env: str | None = None) -> Coroutine[Any, Any, Any]:
        """The value of ``key`` (falling through to ancestors)."""
        return self._one(Op("query", key, None, env))

    def query_prefix(self, prefix: str, *, env: str | None = None
                     ) -> Coroutine[Any, Any, dict[str, Any]]:
        """Every visible ``key: value`` whose key starts with ``prefix``."""
        return self._one(Op("query_prefix", prefix, None, env))

    def query_where(self, predicate: Callable[[str, Any], bool], *,
                    env: str | None = None) -> Coroutine[Any, Any, dict[str, Any]]:
        """Every visible ``key: value`` for which ``predicate(key, value)`` is true."""
        return self._one(Op("query_where", "", predicate, env))

    def register(self, key: str, value: Any, owner: Any = None, *,
                 env: str | None = None) -> Coroutine[Any, Any, None]:
        """Create ``key`` in the target environment."""
        return self._one(Op("register", key, value, env, owner))

    def update(self, key: str, value: Any = _UNSET, *, fn: Callable[[Any], Any] | None = None,
               env: str | None = None) -> Coroutine[Any, Any, Any]:
        """Set ``key`` to ``value``, or to ``fn(old)``; returns the new value.

        ``fn`` may be ``async``: the key is held, and later operations on it wait, until it
        returns, so no update is lost.
        """
        if (value is _UNSET) == (fn is None):
            raise TypeError("update() takes either a value or fn=, not both or neither")
        if fn is not None:
            return self._one(Op("update", key, fn, env))
        return self._one(Op("set", key, value, env))

    def incr(self, key: str, by: Any = 1, *, env: str | None = None
             ) -> Coroutine[Any, Any, Any]:
        """Add ``by`` to the number at ``key``; returns the new value."""
        return self._one(Op("incr", key, by, env))

    def append(self, key: str, item: Any, *, env: str | None = None
               ) -> Coroutine[Any, Any, Any]:
        """Append ``item`` to the list at ``key``; returns the new list."""
        return self._one(Op("append", key, item, env))

    def delete(self, key: str, *, env: str | None = None) -> Coroutine[Any, Any, Any]:
        """Remove ``key``; returns its last value."""
        return self._one(Op("delete", key, None, env))

    def query_many(self, keys: Sequence[str] | str, *, at: Any = None,
                   env: str | None = None) -> Coroutine[Any, Any, Any]:
        """:meth:`Env.query_many`: the values of ``keys`` (a list), or of the array at
        key ``keys`` at positions ``at`` (an array), as one operation."""
        return self._one(_many("query_many", keys, None, at, env))

    def incr_many(self, keys: Sequence[str] | str, deltas: Any = 1, *, at: Any = None,
                  env: str | None = None) -> Coroutine[Any, Any, Any]:
        """:meth:`Env.incr_many` as one operation: applied in one pass, in order, each key
        after the operations before it on that key; the new values as an array."""
        return self._one(_many("incr_many", keys, deltas, at, env))

    def update_many(self, keys: Sequence[str] | str, values: Any = _UNSET, *,
                    fn: Callable[[Any], Any] | None = None, at: Any = None,
                    env: str | None = None) -> Coroutine[Any, Any, None]:
        """:meth:`Env.update_many` as one operation (``fn`` a plain function)."""
        return self._one(Op.update_many(keys, values, fn=fn, at=at, env=env))


class SubmitVerbs(EnvVerbs):
    """The verbs of a service: every operation goes through :meth:`submit` (in batches)."""

    __slots__ = ()

    def submit(self, ops: Sequence[Op]) -> Placeholder[Reply]:  # pragma: no cover
        raise NotImplementedError

    async def _one(self, op: Op) -> Any:
        reply = await self.submit([op])
        return reply.result(0)

    async def apply(self, ops: Sequence[Op], *, return_exceptions: bool = False) -> list[Any]:
        reply = await self.submit(ops)
        return reply.results(return_exceptions)
