"""Handles: how the central script addresses agents that live in workers."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from ._msg import Msg
from ._placeholder import Placeholder, PlaceholderSet

if TYPE_CHECKING:
    from ._runtime import Simulation


class _Method:
    """``handle.<method>``: calling it submits the call and returns a placeholder."""

    __slots__ = ("_handle", "_name")

    def __init__(self, handle: AgentHandle, name: str) -> None:
        self._handle = handle
        self._name = name

    def __call__(self, *args: Any) -> Placeholder[Any]:
        return self._handle._submit(self._name, args)

    @property
    def remote(self) -> Any:
        raise TypeError(
            f"Populace handles return placeholders directly: write "
            f"handle.{self._name}(...) instead of handle.{self._name}.remote(...)"
        )

    def __repr__(self) -> str:
        return f"<method {self._name} of {self._handle!r}>"


class AgentHandle:
    """A reference to one agent. Calls return :class:`Placeholder`\\ s at once.

    >>> async def ask(handle):
    ...     p = handle.reply(Msg("me", "hello"))   # does not block
    ...     return await p
    """

    __slots__ = ("_cls", "_id", "_local", "_sim", "_timeout", "_worker")

    def __init__(self, sim: Simulation, agent_id: int, worker: int, local: int, cls: type,
                 timeout: float | None = None) -> None:
        self._sim = sim
        self._id = agent_id
        self._worker = worker
        self._local = local
        self._cls = cls
        self._timeout = timeout

    @property
    def id(self) -> int:
        return self._id

    @property
    def worker(self) -> int:
        """Index of the worker hosting the agent."""
        return self._worker

    def __repr__(self) -> str:
        return f"<AgentHandle {self._cls.__name__} #{self._id} on worker {self._worker}>"

    def options(self, *, timeout: float | None = None) -> AgentHandle:
        """A copy of this handle whose calls fail with ``CallTimeout`` after ``timeout`` s."""
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        return AgentHandle(self._sim, self._id, self._worker, self._local, self._cls, timeout)

    @property
    def reply(self) -> _Method:
        """``handle.reply(msg)`` → placeholder of the agent's answer."""
        return _Method(self, "reply")

    @property
    def observe(self) -> _Method:
        """``handle.observe(msg)`` → placeholder that resolves once the agent took note."""
        return _Method(self, "observe")

    def call(self, fn: Callable[..., Any], *args: Any) -> Placeholder[Any]:
        """Run ``fn(agent, *args)`` inside the agent's worker (sync or async ``fn``)."""
        return self._submit(fn, args)

    def __getattr__(self, name: str) -> _Method:
        if name.startswith("_") or not callable(getattr(self._cls, name, None)):
            raise AttributeError(f"{self._cls.__name__} agents have no method {name!r}")
        return _Method(self, name)

    def __await__(self) -> Any:
        raise TypeError("an AgentHandle is not awaitable; did you mean `await handle.reply(msg)`?")

    def _submit(self, target: str | Callable[..., Any], args: tuple[Any, ...]) -> Placeholder[Any]:
        return self._sim._submit_call(self, target, args, self._timeout)


class AgentGroup:
    """Many agents addressed at once: the fast path for 'moderator ↔ N participants'.

    Group operations send one batched request per worker and return a
    :class:`PlaceholderSet` holding every member's result in member order.

    >>> async def step(group, msg):
    ...     answers = await group.broadcast(msg)   # list, one per member
    """

    def __init__(self, sim: Simulation, cls: type, ids: np.ndarray, name: str) -> None:
        self._sim = sim
        self._cls = cls
        self._ids = ids
        self.name = name
        self._parts: list[tuple[int, list[int] | range, range | np.ndarray]] | None = None

    def __len__(self) -> int:
        return len(self._ids)

    def __repr__(self) -> str:
        return f"<AgentGroup {self.name!r}: {len(self)} {self._cls.__name__} agents>"

    @property
    def ids(self) -> np.ndarray:
        """Global agent ids of the members, in member order."""
        return self._ids

    @property
    def workers(self) -> np.ndarray:
        """The worker each member lives on, in member order (for work done once per worker,
        e.g. handing each worker's shared resource its part of a large structure)."""
        return self._sim._worker_of[self._ids]

    @overload
    def __getitem__(self, i: int) -> AgentHandle: ...
    @overload
    def __getitem__(self, i: slice) -> AgentGroup: ...
    def __getitem__(self, i: int | slice) -> AgentHandle | AgentGroup:
        if isinstance(i, slice):
            name = f"{self.name}[{i.start}:{i.stop}]"
            return AgentGroup(self._sim, self._cls, self._ids[i], name)
        return self._sim.handle(int(self._ids[i]))

    def __iter__(self) -> Iterator[AgentHandle]:
        for agent_id in self._ids:
            yield self._sim.handle(int(agent_id))

    def select(self, which: Sequence[int] | np.ndarray, name: str | None = None) -> AgentGroup:
        """A sub-group from member indices or a boolean mask of ``len(self)``."""
        idx = np.asarray(which)
        if idx.dtype == bool:
            if idx.shape != self._ids.shape:
                raise ValueError(f"mask has shape {idx.shape}, expected {self._ids.shape}")
            ids = self._ids[idx]
        else:
            ids = self._ids[idx.astype(np.int64)]
        return AgentGroup(self._sim, self._cls, ids, name or f"{self.name}.select")

    def broadcast(self, msg: Msg) -> PlaceholderSet[Any]:
        """Every member replies to the same ``msg``."""
        return self._sim._submit_group(self, "reply", (msg,))

    def observe(self, msg: Msg) -> PlaceholderSet[Any]:
        """Every member observes ``msg``."""
        return self._sim._submit_group(self, "observe", (msg,))

    def map(self, fn: Callable[..., Any], *args: Any) -> PlaceholderSet[Any]:
        """Run ``fn(agent, *args)`` for every member inside its worker (sync or async)."""
        if not callable(fn):
            raise TypeError(f"map() needs a callable such as {self._cls.__name__}.reply, "
                            f"got {fn!r}")
        return self._sim._submit_group(self, fn, args)

    def scatter(self, fn: Callable[..., Any], values: Sequence[Any], *args: Any
                ) -> PlaceholderSet[Any]:
        """Run ``fn(agent, *args, values[i])`` for member ``i``: one value per member.

        >>> async def restore(group, states):
        ...     await group.scatter(Agent.set_state, states)
        """
        if not callable(fn):
            raise TypeError(f"scatter() needs a callable, got {fn!r}")
        if len(values) != len(self):
            raise ValueError(f"scatter() needs one value per member: got {len(values)} "
                             f"for {len(self)} members")
        return self._sim._submit_group(self, fn, args, values)

    def _partition(self) -> list[tuple[int, list[int] | range, range | np.ndarray]]:
        """``(worker, local indices, member positions)`` per worker, computed once."""
        if self._parts is None:
            self._parts = self._sim._partition(self._ids)
        return self._parts
