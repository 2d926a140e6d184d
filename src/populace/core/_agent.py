"""The agent base class and its small parts: profile view, memory, per-worker resources."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

from ._msg import Msg


class Profile(Mapping[str, Any]):
    """Read-only view of one agent's row in its worker's columnar profile table.

    Profiles of a million agents stay a handful of columns; each agent holds only this view.
    """

    __slots__ = ("_columns", "_row")

    def __init__(self, columns: Mapping[str, Any], row: int) -> None:
        self._columns = columns
        self._row = row

    def __getitem__(self, key: str) -> Any:
        return self._columns[key][self._row]

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns)

    def __len__(self) -> int:
        return len(self._columns)

    def __repr__(self) -> str:
        return f"Profile({dict(self)!r})"


class Memory:
    """A bounded list of messages, oldest dropped first.

    >>> m = Memory(maxlen=2)
    >>> for i in range(3): m.add(Msg("x", i))
    >>> [x.content for x in m]
    [1, 2]
    """

    __slots__ = ("_items", "maxlen")

    def __init__(self, maxlen: int = 32) -> None:
        if maxlen < 1:
            raise ValueError(f"maxlen must be >= 1, got {maxlen}")
        self.maxlen = maxlen
        self._items: list[Msg] = []

    def add(self, msg: Msg) -> None:
        self._items.append(msg)
        if len(self._items) > self.maxlen:
            del self._items[0]

    def __iter__(self) -> Iterator[Msg]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def last(self) -> Msg | None:
        return self._items[-1] if self._items else None

    def get_state(self) -> list[tuple[Any, ...]]:
        """Plain tuples, not Msg objects: pickling a million agents' memories stays fast."""
        return [(m.sender, m.content, m.role, m.metadata) for m in self._items]

    def set_state(self, items: list[Any]) -> None:
        msgs = [m if isinstance(m, Msg) else Msg(*m) for m in items]
        self._items = msgs[-self.maxlen :]


class PerWorker:
    """A resource built once in each worker and shared by the agents created there.

    Pass it among ``init`` keyword arguments of :meth:`Simulation.create`; the agent receives
    the built object. The factory and its arguments must be picklable (they travel to remote
    workers), the object they build need not be (an HTTP client, a model, a cache).

    >>> shared = PerWorker(dict, size=3)
    """

    __slots__ = ("args", "factory", "key", "kwargs")

    def __init__(self, factory: Callable[..., Any], /, *args: Any, **kwargs: Any) -> None:
        self.factory = factory
        self.args = args
        self.kwargs = kwargs
        #: Who it is, wherever it travels: agents created in several batches (a remote
        #: worker gets a new copy with each) still share one built object per worker.
        self.key = uuid.uuid4().hex

    def build(self) -> Any:
        return self.factory(*self.args, **self.kwargs)


#: The profile of an agent created without one: empty, read-only and shared (a million
#: agents need not hold a million empty dicts).
NO_PROFILE: Mapping[str, Any] = MappingProxyType({})


class Agent:
    """Base class of every agent: subclass it and write ``async def reply(self, msg)``.

    Agents are created in bulk inside workers by :meth:`Simulation.create`, never by hand in
    the central process. The constructor receives the agent's ``id``, its ``profile`` and any
    ``init`` keyword arguments given to ``create``. Subclasses meant for very large
    populations should declare ``__slots__``.

    >>> class Echo(Agent):
    ...     async def reply(self, msg: Msg) -> Msg:
    ...         return Msg(self.id, msg.content)
    """

    __slots__ = ("_memory", "id", "profile")

    #: Bound of :attr:`memory`; override in a subclass.
    memory_size: int = 32

    def __init__(self, id: int, profile: Profile | None = None, **init: Any) -> None:
        if init:
            names = ", ".join(sorted(init))
            raise TypeError(
                f"{type(self).__name__} got unexpected init arguments: {names}; "
                "accept them in your subclass's __init__"
            )
        self.id = id
        self.profile: Mapping[str, Any] = profile if profile is not None else NO_PROFILE
        self._memory: Memory | None = None

    @property
    def memory(self) -> Memory:
        """The agent's bounded message memory (created on first use)."""
        if self._memory is None:
            self._memory = Memory(self.memory_size)
        return self._memory

    async def reply(self, msg: Msg) -> Any:
        """Answer a message. Subclasses override this."""
        raise NotImplementedError(f"{type(self).__name__} does not implement reply()")

    def observe(self, msg: Msg) -> Any:
        """Take note of a message without answering; the default stores it in memory.

        Subclasses may override it with ``async def``. The default is synchronous because a
        broadcast to a million agents should not create a million coroutines to append to
        their memories.
        """
        self.memory.add(msg)

    def get_state(self) -> dict[str, Any]:
        """State to checkpoint; extend in subclasses with their own fields."""
        return {"memory": self._memory.get_state() if self._memory else []}

    def set_state(self, state: dict[str, Any]) -> None:
        items = state.get("memory") or []
        if items:
            self.memory.set_state(items)
