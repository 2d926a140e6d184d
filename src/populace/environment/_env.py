"""The environment tree: shared key/value state with fall-through reads and listeners.

Environments nest. A simulation has one global environment; groups get children of it (and
deeper levels if wanted). A child sees its own keys first and then its ancestors' keys, never
its siblings': two groups can each hold a ``"mean"`` while both read the global ``"rules"``.

Reads fall through to the parent when a key is not local. Writes (``update``, ``delete``) go
to the environment that holds the key, wherever it is on the path to the root; ``register``
always creates the key locally, so a child may shadow an ancestor's key on purpose.

Values are plain data (numbers, strings, lists, dicts, arrays, dataclass records) and are
treated as immutable: replace a value with ``update`` instead of mutating it in place, or
listeners will not hear about the change and ``old`` in their events will be wrong.

Once :func:`~populace.environment.serve` has copied a tree into a remote service (the Ray
backend), the ``Env`` objects of that tree refuse every read, write and new listener with
:class:`EnvServedError`, naming the service call to use instead: they are a stale copy, and
using them would silently diverge from what the agents see. On the local backend the service
owns the very same objects, so they keep working.
"""

from __future__ import annotations

import inspect
import types
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from ._errors import DuplicateKeyError, EnvServedError, UnknownKeyError
from ._listeners import ErrorLog, ListenerError, Subscription, call_listener

EventKind = Literal["register", "update", "delete"]
_KINDS: frozenset[str] = frozenset(("register", "update", "delete"))
_MISSING: Any = object()
# Exact types accepted without further checks; anything else must not be callable/awaitable.
_PLAIN = frozenset((int, float, str, bool, type(None), bytes, list, tuple, dict, set,
                    frozenset, complex))


@dataclass(frozen=True, slots=True)
class EnvEvent:
    """A change, as listeners see it: ``kind`` is ``register``, ``update`` or ``delete``.

    ``old`` is ``None`` for a register, ``new`` is ``None`` for a delete.
    """

    env: str
    key: str
    kind: EventKind
    old: Any
    new: Any


@dataclass(frozen=True, slots=True)
class EnvStats:
    """A snapshot of one environment (and its children), cheap enough to poll live.

    ``monitored`` holds the current value of every key that a listener monitors by name,
    which is what a dashboard shows next to the counters.
    """

    path: str
    keys: int
    reads: int
    writes: int
    listeners: int
    listener_calls: int
    listener_errors: int
    monitored: Mapping[str, Any]
    children: tuple[EnvStats, ...]

    def all_monitored(self) -> dict[str, Any]:
        """``monitored`` of this environment and every one below it, keys named by their
        path below this one (``"group-3/report"``): what a dashboard lists."""
        out = dict(self.monitored)
        for child in self.children:
            below = child.path[len(self.path) + 1:]
            out.update({f"{below}/{k}": v for k, v in child.all_monitored().items()})
        return out


def check_value(value: Any) -> None:
    """Reject what is certainly not plain data: functions, coroutines, placeholders."""
    if type(value) in _PLAIN:
        return
    if hasattr(value, "__await__") or (callable(value) and not isinstance(value, type)):
        if isinstance(value, types.CoroutineType):
            value.close()
        raise TypeError(f"environment values must be plain data, got {type(value).__name__}; "
                        "await placeholders and coroutines before storing their results")


# What to use instead of each Env method once its tree is served remotely: what would go
# wrong, the service's method, its leading arguments ("{key}": the refused call's key) and a
# note. Methods that take env= are given the environment's path when it is not the root.
_STALE = "a read of this Env object would be stale"
_LOST = "a write to this Env object would never reach the agents"
_INSTEAD: dict[str, tuple[str, str, tuple[str, ...], str]] = {
    "query": (_STALE, "query", ("{key}",), ""),
    "query_prefix": (_STALE, "query_prefix", ("{key}",), ""),
    "query_where": (_STALE, "query_where", ("predicate",), ""),
    "contains": (_STALE, "query", ("{key}",), "it raises UnknownKeyError for a missing key"),
    "owner": (_STALE, "fetch_state", (), "owners are under 'owners'"),
    "register": (_LOST, "register", ("{key}", "value"), ""),
    "update": (_LOST, "update", ("{key}", "value"), "or fn="),
    "delete": (_LOST, "delete", ("{key}",), ""),
    "query_many": (_STALE, "query_many", ("keys",), ""),
    "incr_many": (_LOST, "incr_many", ("keys", "deltas"), ""),
    "update_many": (_LOST, "update_many", ("keys", "values"), "or fn="),
    "set_state": (_LOST, "load_state", ("state",), ""),
    "monitor": ("a listener on this Env object would never hear a change", "monitor",
                ("listener", "key={key}"), "it runs where the environment lives"),
    "statistics": (_STALE, "fetch_statistics", (), ""),
    "listener_errors": (_STALE, "fetch_statistics", (), "env.listener_errors counts them"),
    "get_state": (_STALE, "fetch_state", (), ""),
}
_CLIENT_VERBS = frozenset(("query", "query_prefix", "query_where", "register", "update",
                           "delete", "query_many", "incr_many", "update_many"))
# The public verb that refuses a many-key kind on a served tree (see _each).
_MANY_VERB = {"query": "query_many", "incr": "incr_many", "set": "update_many",
              "update": "update_many"}
_TAKE_ENV = _CLIENT_VERBS | {"monitor"}


def _check_key(key: Any) -> None:
    if type(key) is not str:
        raise TypeError(f"environment keys are strings, got {type(key).__name__}: {key!r}")


class _Listener:
    __slots__ = ("active", "descendants", "fn", "key", "kinds", "prefix", "seq")

    def __init__(self, fn: Callable[[EnvEvent], Any], key: str | None, prefix: str | None,
                 kinds: frozenset[str] | None, descendants: bool, seq: int) -> None:
        self.fn = fn
        self.key = key
        self.prefix = prefix
        self.kinds = kinds
        self.descendants = descendants
        self.seq = seq
        self.active = True

    def matches(self, event: EnvEvent) -> bool:
        if self.kinds is not None and event.kind not in self.kinds:
            return False
        if self.key is not None:
            return event.key == self.key
        return self.prefix is None or event.key.startswith(self.prefix)


class _Tree:
    """State shared by every environment of one tree.

    One dispatch queue per tree: a listener that writes (to any environment of the tree) has
    its change dispatched after the current event's listeners have all run, so every listener
    sees changes in the order they happened.
    """

    __slots__ = ("dispatching", "n_descendant_listeners", "queue", "seq")

    def __init__(self) -> None:
        self.dispatching = False
        self.queue: deque[tuple[Env, EnvEvent]] = deque()
        self.seq = 0
        self.n_descendant_listeners = 0


class Env:
    """A node of the environment tree.

    >>> world = Env("global")
    >>> world.register("round", 0)
    >>> town = world.child("town-1")
    >>> town.register("mood", 0.5)
    >>> town.query("round"), town.query("mood")      # "round" falls through to the parent
    (0, 0.5)
    >>> world.update("round", fn=lambda r: r + 1)
    1
    """

    __slots__ = ("__weakref__", "_by_key", "_children", "_data", "_descendant_listeners",
                 "_errors", "_general", "_listener_calls", "_n_listeners", "_name", "_owners",
                 "_parent", "_path", "_reads", "_served", "_tree", "_writes")

    def __init__(self, name: str = "global", parent: Env | None = None) -> None:
        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError(f"an environment name is a non-empty string without '/', "
                             f"got {name!r}")
        self._name = name
        self._parent = parent
        self._children: dict[str, Env] = {}
        self._data: dict[str, Any] = {}
        self._owners: dict[str, Any] = {}
        self._by_key: dict[str, list[_Listener]] = {}
        self._general: list[_Listener] = []
        self._descendant_listeners: list[_Listener] = []
        self._n_listeners = 0
        self._reads = 0
        self._writes = 0
        self._listener_calls = 0
        # Where the tree is served when that is another process (see serve()): this object
        # is then a stale copy and refuses to be used.
        self._served: str | None = None
        if parent is None:
            self._path = name
            self._tree = _Tree()
        else:
            if parent._served is not None:
                raise parent._refuse("child")
            if name in parent._children:
                raise ValueError(f"environment {parent._path!r} already has a child {name!r}")
            parent._children[name] = self
            self._path = f"{parent._path}/{name}"
            self._tree = parent._tree
        self._errors = ErrorLog(f"environment {self._path!r}")

    # -- the tree ----------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @property
    def path(self) -> str:
        """Names from the root down, joined by ``/``: ``"global/town-1"``."""
        return self._path

    @property
    def parent(self) -> Env | None:
        return self._parent

    @property
    def root(self) -> Env:
        env = self
        while env._parent is not None:
            env = env._parent
        return env

    @property
    def children(self) -> Mapping[str, Env]:
        return types.MappingProxyType(self._children)

    def child(self, name: str) -> Env:
        """The child environment ``name``, created on first use."""
        found = self._children.get(name)
        return found if found is not None else Env(name, self)

    def find(self, path: str) -> Env:
        """The environment of this tree whose :attr:`path` is ``path``."""
        env = self.root
        first, *rest = path.split("/")
        if first != env._name:
            raise LookupError(f"no environment {path!r} in the tree rooted at {env._path!r}")
        for name in rest:
            nxt = env._children.get(name)
            if nxt is None:
                raise LookupError(f"no environment {path!r}: {env._path!r} has no child "
                                  f"{name!r}")
            env = nxt
        return env

    def __repr__(self) -> str:
        if self._served is not None:
            return f"<Env {self._path!r}: served by {self._served}>"
        return f"<Env {self._path!r}: {len(self._data)} keys, {len(self._children)} children>"

    # -- served elsewhere --------------------------------------------------------------------
    def _serve_elsewhere(self, where: str) -> None:
        """Mark every environment of this tree as copied into the service at ``where``."""
        stack = [self.root]
        while stack:
            env = stack.pop()
            env._served = where
            stack.extend(env._children.values())

    def _refuse(self, verb: str, key: str | None = None) -> EnvServedError:
        """The error for calling ``verb`` on this environment while it is served elsewhere."""
        head = f"environment {self._path!r} is served by {self._served}"
        if verb == "child":
            return EnvServedError(f"{head}: a child added to this Env object would not exist "
                                  "in the service; add every child environment before serve()")
        if verb == "serve":
            return EnvServedError(f"{head} already; serve it once and share that service")
        consequence, method, leading, note = _INSTEAD[verb]
        args = [a.format(key="key" if key is None else repr(key)) for a in leading
                if key is not None or a != "key={key}"]
        if method in _TAKE_ENV and self._parent is not None:
            args.append(f"env={self._path!r}")
        call = f"await service.{method}({', '.join(args)})"
        agents = ", or an EnvClient in agents" if method in _CLIENT_VERBS else ""
        return EnvServedError(
            f"{head}: {consequence}. Use the service that serve() returned instead: `{call}`"
            f"{f' ({note})' if note else ''}{agents}; that works on every backend")

    def _oldest_listener(self) -> tuple[Env, _Listener] | None:
        """The first listener still subscribed anywhere in this environment's tree."""
        found: list[tuple[Env, _Listener]] = []
        stack = [self.root]
        while stack:
            env = stack.pop()
            for group in env._by_key.values():
                found.extend((env, entry) for entry in group)
            found.extend((env, entry) for entry in env._general)
            stack.extend(env._children.values())
        return min(found, key=lambda pair: pair[1].seq) if found else None

    # -- reads -------------------------------------------------------------------------------
    def _home(self, key: str) -> Env | None:
        """The environment on the path to the root that holds ``key`` itself."""
        env: Env | None = self
        while env is not None:
            if key in env._data:
                return env
            env = env._parent
        return None

    def query(self, key: str) -> Any:
        """The value of ``key`` here or, failing that, in the nearest ancestor holding it."""
        if self._served is not None:
            raise self._refuse("query", key)
        self._reads += 1
        value = self._data.get(key, _MISSING)
        if value is not _MISSING:
            return value
        env = self._parent
        while env is not None:
            value = env._data.get(key, _MISSING)
            if value is not _MISSING:
                return value
            env = env._parent
        _check_key(key)
        raise UnknownKeyError(key, self._path)

    def __contains__(self, key: object) -> bool:
        if self._served is not None:
            raise self._refuse("contains", key if isinstance(key, str) else None)
        return isinstance(key, str) and self._home(key) is not None

    def owner(self, key: str) -> Any:
        """The owner given when ``key`` was registered (``None`` if none was given)."""
        if self._served is not None:
            raise self._refuse("owner", key)
        home = self._home(key)
        if home is None:
            raise UnknownKeyError(key, self._path)
        return home._owners.get(key)

    def _chain(self, inherited: bool) -> list[Env]:
        chain: list[Env] = []
        env: Env | None = self
        while env is not None:
            chain.append(env)
            env = env._parent if inherited else None
        chain.reverse()  # the root first, so that nearer environments shadow farther ones
        return chain

    def query_prefix(self, prefix: str, *, inherited: bool = True) -> dict[str, Any]:
        """Every visible key starting with ``prefix`` and its value (scans the keys)."""
        if self._served is not None:
            raise self._refuse("query_prefix", prefix)
        self._reads += 1
        out: dict[str, Any] = {}
        for env in self._chain(inherited):
            for k, v in env._data.items():
                if k.startswith(prefix):
                    out[k] = v
        return out

    def query_where(self, predicate: Callable[[str, Any], bool], *,
                    inherited: bool = True) -> dict[str, Any]:
        """Every visible ``key: value`` for which ``predicate(key, value)`` is true."""
        if self._served is not None:
            raise self._refuse("query_where")
        self._reads += 1
        visible: dict[str, Any] = {}
        for env in self._chain(inherited):
            visible.update(env._data)
        return {k: v for k, v in visible.items() if predicate(k, v)}

    # -- writes ------------------------------------------------------------------------------
    def register(self, key: str, value: Any, owner: Any = None) -> None:
        """Create ``key`` in this environment (it may shadow an ancestor's key)."""
        if self._served is not None:
            raise self._refuse("register", key)
        _check_key(key)
        if key in self._data:
            raise DuplicateKeyError(key, self._path)
        check_value(value)
        self._data[key] = value
        if owner is not None:
            self._owners[key] = owner
        self._writes += 1
        self._emit("register", key, None, value)

    def update(self, key: str, value: Any = _MISSING, *,
               fn: Callable[[Any], Any] | None = None) -> Any:
        """Set ``key`` to ``value``, or to ``fn(old)`` atomically; returns the new value.

        The key is changed where it lives (here or in an ancestor). ``fn`` must be a plain
        function; for ``async`` read-modify-write go through an :class:`EnvService`.
        """
        if self._served is not None:
            raise self._refuse("update", key)
        if (value is _MISSING) == (fn is None):
            raise TypeError("update() takes either a value or fn=, not both or neither")
        home = self._home(key)
        if home is None:
            _check_key(key)
            raise UnknownKeyError(key, self._path)
        data = home._data
        old = data[key]
        new = fn(old) if fn is not None else value
        check_value(new)
        data[key] = new
        home._writes += 1
        home._emit("update", key, old, new)
        return new

    def delete(self, key: str) -> Any:
        """Remove ``key`` from the environment that holds it; returns its last value."""
        if self._served is not None:
            raise self._refuse("delete", key)
        home = self._home(key)
        if home is None:
            _check_key(key)
            raise UnknownKeyError(key, self._path)
        old = home._data.pop(key)
        home._owners.pop(key, None)
        home._writes += 1
        home._emit("delete", key, old, None)
        return old

    # -- many keys at once --------------------------------------------------------------------
    def query_many(self, keys: Sequence[str] | str, *, at: Any = None) -> Any:
        """The values of ``keys``, in order, as a list (each falls through to ancestors
        like :meth:`query`); ``UnknownKeyError`` for the first key nobody holds.

        With ``at=`` (integer positions), ``keys`` is one key holding a one-dimensional
        NumPy array, and the result is its elements at ``at`` (a new array).

        >>> env.query_many(["rules", "round"])                          # doctest: +SKIP
        ['be kind', 3]
        >>> env.query_many("heard", at=[0, 5])                          # doctest: +SKIP
        array([0, 2])
        """
        if at is not None:
            return at_positions(self, "query", keys, at, None)
        return each(self, "query", as_keys(keys), None, None)

    def incr_many(self, keys: Sequence[str] | str, deltas: Any = 1, *,
                  at: Any = None) -> npt.NDArray[Any]:
        """Add ``deltas`` (one number, or one per key) to the numbers at ``keys``, in order,
        in one pass; the new values as a NumPy array (a key given twice is added to twice,
        and its second entry shows both). Every key is looked up first: an unknown key
        raises ``UnknownKeyError`` and changes nothing. Each key changes where it lives.

        With ``at=``, ``keys`` is one key holding a one-dimensional NumPy array: its
        elements at ``at`` are added to (a position given twice, twice) in one vectorised
        step, and the result is the elements at ``at`` afterwards. The key gets a new
        array; the old one is left as it was (listeners see both).

        >>> env.incr_many(["votes/yes", "turnout"], 1)                  # doctest: +SKIP
        array([12, 40])
        >>> env.incr_many("heard", 1, at=[3, 4, 3])                     # doctest: +SKIP
        array([2, 1, 2])
        """
        if at is not None:
            return at_positions(self, "incr", keys, at, deltas)
        keys = as_keys(keys)
        return np.asarray(each(self, "incr", keys, per_key(deltas, len(keys), "deltas"), None,
                               deltas))

    def update_many(self, keys: Sequence[str] | str, values: Any = _MISSING, *,
                    fn: Callable[[Any], Any] | None = None, at: Any = None) -> None:
        """Set each of ``keys`` to its entry of ``values`` (a sequence, one per key), or
        to ``fn(old)``, in order, in one pass. Every key is looked up first, as in
        :meth:`incr_many`. ``fn`` must be a plain function (an ``async`` one: ``update``
        through a service, one key at a time).

        With ``at=``, ``keys`` is one key holding a one-dimensional NumPy array: its
        elements at ``at`` become ``values`` (one value, or one per position), or
        ``fn(elements)`` (``fn`` takes and returns an array), in a new array.
        """
        if (values is _MISSING) == (fn is None):
            raise TypeError("update_many() takes either values or fn=, not both or neither")
        if fn is not None and inspect.iscoroutinefunction(fn):
            raise TypeError("update_many() takes a plain function; an async fn holds its "
                            "key while it runs: use update(key, fn=...) through a service")
        if at is not None:
            at_positions(self, "set" if fn is None else "update", keys, at, fn or values)
            return
        keys = as_keys(keys)
        if fn is not None:
            each(self, "update", keys, None, None, fn)
            return
        args = per_key(values, len(keys), "values")
        if args is None:
            raise TypeError("update_many() takes one value per key (a list or an array), got "
                            f"{type(values).__name__}")
        each(self, "set", keys, args, None)

    # -- listeners ---------------------------------------------------------------------------
    def monitor(
        self,
        listener: Callable[[EnvEvent], Any],
        key: str | None = None,
        prefix: str | None = None,
        event: EventKind | Iterable[EventKind] | None = None,
        *,
        descendants: bool = False,
    ) -> Subscription:
        """Call ``listener(EnvEvent)`` after each matching change; ``.cancel()`` the result.

        Filter by one ``key`` or a key ``prefix`` and by ``event`` kind(s). Listeners run in
        the order they subscribed, synchronously, after the change is made. With
        ``descendants=True`` changes in every environment below this one match too.
        A listener's exception is reported (:meth:`listener_errors`, :meth:`statistics`, the
        ``populace.environment`` logger) and never reaches the writer.

        >>> sub = env.monitor(lambda e: print(e.key, e.new), key="price")  # doctest: +SKIP
        """
        if self._served is not None:
            raise self._refuse("monitor", key)
        if not callable(listener):
            raise TypeError(f"listener must be callable, got {listener!r}")
        if key is not None and prefix is not None:
            raise TypeError("monitor() takes a key or a prefix, not both")
        if key is not None:
            _check_key(key)
        kinds: frozenset[str] | None = None
        if event is not None:
            kinds = frozenset((event,) if isinstance(event, str) else event)
            bad = kinds - _KINDS
            if bad:
                raise ValueError(f"unknown event kind(s) {sorted(bad)}; expected some of "
                                 f"{sorted(_KINDS)}")
        tree = self._tree
        tree.seq += 1
        entry = _Listener(listener, key, prefix, kinds, descendants, tree.seq)
        if key is not None:
            self._by_key.setdefault(key, []).append(entry)
        else:
            self._general.append(entry)
        if descendants:
            self._descendant_listeners.append(entry)
            tree.n_descendant_listeners += 1
        self._n_listeners += 1
        return Subscription(lambda: self._unsubscribe(entry))

    def _unsubscribe(self, entry: _Listener) -> None:
        entry.active = False
        if entry.key is not None:
            group = self._by_key[entry.key]
            group.remove(entry)
            if not group:
                del self._by_key[entry.key]
        else:
            self._general.remove(entry)
        if entry.descendants:
            self._descendant_listeners.remove(entry)
            self._tree.n_descendant_listeners -= 1
        self._n_listeners -= 1

    def _emit(self, kind: EventKind, key: str, old: Any, new: Any) -> None:
        tree = self._tree
        if not self._n_listeners and not tree.n_descendant_listeners:
            return
        event = EnvEvent(self._path, key, kind, old, new)
        if tree.dispatching:
            tree.queue.append((self, event))  # delivered by the outer loop, after this one
            return
        tree.dispatching = True
        try:
            self._dispatch(event)
            queue = tree.queue
            while queue:
                env, queued = queue.popleft()
                env._dispatch(queued)
        finally:
            tree.dispatching = False
            tree.queue.clear()

    def _dispatch(self, event: EnvEvent) -> None:
        keyed = self._by_key.get(event.key)
        general = self._general
        if keyed and general:
            own: Iterable[_Listener] = sorted(keyed + general, key=lambda entry: entry.seq)
        else:
            own = tuple(keyed or general)  # a copy: listeners may unsubscribe meanwhile
        for entry in own:
            if entry.active and entry.matches(event):
                self._listener_calls += 1
                call_listener(self._errors, entry.fn, event)
        if self._tree.n_descendant_listeners:
            env = self._parent
            while env is not None:
                for entry in tuple(env._descendant_listeners):
                    if entry.active and entry.matches(event):
                        env._listener_calls += 1
                        call_listener(env._errors, entry.fn, event)
                env = env._parent

    def listener_errors(self) -> list[ListenerError]:
        """The latest failures of listeners subscribed on this environment, oldest first."""
        if self._served is not None:
            raise self._refuse("listener_errors")
        return self._errors.records()

    # -- observation and checkpoints -----------------------------------------------------------
    def statistics(self) -> EnvStats:
        if self._served is not None:
            raise self._refuse("statistics")
        monitored: dict[str, Any] = {}
        for key in self._by_key:
            home = self._home(key)
            if home is not None:
                monitored[key] = home._data[key]
        return EnvStats(
            path=self._path,
            keys=len(self._data),
            reads=self._reads,
            writes=self._writes,
            listeners=self._n_listeners,
            listener_calls=self._listener_calls,
            listener_errors=self._errors.count,
            monitored=types.MappingProxyType(monitored),
            children=tuple(c.statistics() for c in self._children.values()),
        )

    def get_state(self) -> dict[str, Any]:
        """This environment's keys, owners and children's states, for a checkpoint.

        Listeners are not part of the state: they belong to the code that set them up.
        """
        if self._served is not None:
            raise self._refuse("get_state")
        return {
            "name": self._name,
            "data": dict(self._data),
            "owners": dict(self._owners),
            "children": {name: c.get_state() for name, c in self._children.items()},
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore keys from :meth:`get_state`, recursively; listeners are kept, not called.

        Children named in ``state`` are created if missing; other children are left alone.
        """
        if self._served is not None:
            raise self._refuse("set_state")
        data = dict(state["data"])
        for key, value in data.items():
            _check_key(key)
            check_value(value)
        self._data = data
        self._owners = dict(state.get("owners") or {})
        for name, sub in (state.get("children") or {}).items():
            self.child(name).set_state(sub)


# The many-key operations' implementation uses this module's names: imported last.
from ._many import as_keys, at_positions, each, per_key  # noqa: E402
