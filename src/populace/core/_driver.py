"""Drives agent coroutines without one asyncio Task per call.

An asyncio Task costs about 10 µs to create, schedule and finish; a million agents would
spend 10 s on bookkeeping alone. A worker therefore steps each agent coroutine itself: it
sends into the coroutine, and when the coroutine yields something to wait on, it parks a
wake-up on it. Populace's own awaitables (placeholders, :class:`Signal`) wake parked calls
synchronously, so one timer firing resumes a hundred thousand agents in one loop.

Anything asyncio-compatible still works inside an agent (``asyncio.sleep``, futures, awaiting
a Task). Code that needs ``asyncio.current_task()`` -- ``asyncio.timeout`` or some HTTP
clients -- must run in a task of its own: ``await asyncio.create_task(coro)``.

While a step runs, the agent's id is :func:`current_agent`: the driver notes the running
call (saved and restored around each send, so steps that nest give the outer agent's id
back), and a Task started inside a step is created in a context that names the agent
(:func:`track_tasks`), so it inherits it; the call log uses it to say which agent made
each LLM call.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine, Generator
from contextvars import ContextVar
from typing import Any, Protocol

from ._placeholder import Driving, Placeholder, PlaceholderSet, _task_wait

# The agent of a Task started inside an agent's step (set in the Task's own context).
_in_task: ContextVar[int | None] = ContextVar("populace_current_agent", default=None)


def current_agent() -> int | None:
    """The id of the agent whose call is running now; None outside any agent's call.

    Set while a worker steps an agent's coroutine, and inherited by asyncio Tasks the agent
    starts (on a loop that hosts workers: see :func:`track_tasks`). Plain synchronous
    methods that a worker calls directly (the default ``observe``) run without it.

    >>> class Who(Agent):
    ...     async def reply(self, msg):
    ...         return current_agent()        # == self.id
    """
    call = Driving.call
    return call.agent if call is not None else _in_task.get()


def track_tasks(loop: asyncio.AbstractEventLoop) -> Callable[[], None]:
    """Make Tasks created on ``loop`` inside an agent's step inherit :func:`current_agent`
    (a task factory wrapping the loop's own); returns a function putting the old one back.

    Steps note their agent in a plain attribute, not a context variable (setting one per
    step cost a tenth of a million-agent step), so Tasks, which copy the context they are
    created in, are given one that names the agent.
    """
    previous = loop.get_task_factory()

    def factory(loop: asyncio.AbstractEventLoop, coro: Any,
                context: contextvars.Context | None = None) -> Any:
        call = Driving.call
        if call is not None and call.agent is not None:
            if context is None:
                context = contextvars.copy_context()
            context.run(_in_task.set, call.agent)
        if previous is not None:
            return previous(loop, coro) if context is None \
                else previous(loop, coro, context=context)  # type: ignore[call-arg]
        return asyncio.Task(coro, loop=loop, context=context)

    loop.set_task_factory(factory)

    def restore() -> None:
        if loop.get_task_factory() is factory:
            loop.set_task_factory(previous)

    return restore


class Signal:
    """A one-shot event that any number of coroutines can await cheaply.

    >>> async def agent_body(signal):
    ...     await signal           # resumes when signal.fire() is called
    """

    __slots__ = ("_callbacks", "_fired", "_loop", "_parked")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._fired = False
        self._parked: list[Callable[[], Any]] = []
        self._callbacks: list[tuple[Callable[[Any], Any], Any]] = []

    def done(self) -> bool:
        return self._fired

    def fire(self) -> None:
        """Wake every waiter. Idempotent."""
        if self._fired:
            return
        self._fired = True
        parked, self._parked = self._parked, []
        for fn in parked:
            fn()
        for cb, ctx in self._callbacks:
            self._loop.call_soon(cb, self, context=ctx)
        self._callbacks = []

    def _park(self, fn: Callable[[], Any]) -> None:
        if self._fired:
            fn()
        else:
            self._parked.append(fn)

    def _unpark(self, fn: Callable[[], Any]) -> None:
        """Take back a wake-up parked while pending (its waiter was cancelled)."""
        if not self._fired:
            self._parked.remove(fn)

    # asyncio-style callbacks; ordinary Tasks await a Signal through _task_wait.
    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def add_done_callback(self, fn: Callable[[Any], Any], *, context: Any = None) -> None:
        if self._fired:
            self._loop.call_soon(fn, self, context=context)
        else:
            self._callbacks.append((fn, context))

    def cancelled(self) -> bool:
        return False

    def result(self) -> None:
        return None

    def __await__(self) -> Generator[Any, None, None]:
        # No generator per waiter: a driven wait iterates the signal itself (a hundred
        # thousand agents waiting on one timer hold no frame for it); a Task waits on a
        # future of its own.
        if self._fired:
            return iter(())  # type: ignore[return-value]  # an iterator is all await needs
        if Driving.call is not None:
            return self  # type: ignore[return-value]  # driven: parked on directly
        return _task_wait(self)

    def __iter__(self) -> Signal:
        return self

    def __next__(self) -> Signal:
        """A driven waiter's step: yields the signal while pending (the driver parks on it),
        then ends the wait once it fired."""
        if self._fired:
            raise StopIteration
        return self


class SharedTimers:
    """Sleeps that share one timer per deadline bucket.

    ``await timers.sleep(1.0)`` from 500,000 agents in one tick arms one loop timer, not
    500,000. Deadlines are rounded up to ``resolution`` seconds.
    """

    __slots__ = ("_buckets", "_loop", "_resolution")

    def __init__(self, loop: asyncio.AbstractEventLoop, resolution: float = 0.001) -> None:
        self._loop = loop
        self._resolution = resolution
        self._buckets: dict[int, Signal] = {}

    def sleep(self, delay: float) -> Signal:
        key = -int(-(self._loop.time() + delay) // self._resolution)  # ceil
        sig = self._buckets.get(key)
        if sig is None:
            sig = self._buckets[key] = Signal(self._loop)
            self._loop.call_at(key * self._resolution, self._expire, key)
        return sig

    def _expire(self, key: int) -> None:
        self._buckets.pop(key).fire()

    def waiting(self) -> int:
        """How many are waiting on these timers now."""
        return sum(len(s._parked) + len(s._callbacks) for s in self._buckets.values())


class Sink(Protocol):
    """Where a driven call reports its outcome."""

    def _complete(self, slot: int, value: Any) -> None: ...
    def _failed(self, slot: int, error: BaseException) -> None: ...


_FAST = (Placeholder, PlaceholderSet, Signal)


class Call:
    """One agent coroutine being driven to completion (``agent``: its id, or None)."""

    __slots__ = ("agent", "coro", "loop", "sink", "slot")

    def __init__(
        self,
        coro: Coroutine[Any, Any, Any],
        sink: Sink,
        slot: int,
        loop: asyncio.AbstractEventLoop,
        agent: int | None = None,
    ) -> None:
        self.coro = coro
        self.sink = sink
        self.slot = slot
        self.loop = loop
        self.agent = agent

    def step(self) -> None:
        outer = Driving.call
        Driving.call = self
        try:
            awaited = self.coro.send(None)
        except StopIteration as stop:
            self.sink._complete(self.slot, stop.value)
            return
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # CancelledError, SystemExit too: the call failed
            # (an agent's sys.exit() would otherwise end the event loop as a clean exit)
            self.sink._failed(self.slot, error)
            return
        finally:
            Driving.call = outer
        if type(awaited) in _FAST:
            awaited._park(self)  # the call itself is its wake-up: no bound method per wait
        elif awaited is None:  # a bare yield, as in asyncio.sleep(0)
            self.loop.call_soon(self.step)
        elif getattr(awaited, "_asyncio_future_blocking", None) is not None:
            awaited._asyncio_future_blocking = False
            awaited.add_done_callback(self._wake)
            _on_futures[self] = awaited
        else:
            self.coro.close()
            self.sink._failed(
                self.slot,
                RuntimeError(f"agent coroutine awaited an unsupported object: {awaited!r}"),
            )

    __call__ = step

    def _wake(self, _future: Any) -> None:
        if _on_futures.pop(self, None) is None:
            return  # ended (end_calls) after its future finished, before this ran
        self.step()

    def _end(self) -> None:
        """Cancel the coroutine where it waits (its ``except``/``finally`` blocks run now, on
        a loop still running) and close it if it waits again; its outcome is the sink's."""
        outer = Driving.call
        Driving.call = self
        try:
            try:
                awaited = self.coro.throw(asyncio.CancelledError())
            except StopIteration as stop:
                self.sink._complete(self.slot, stop.value)
                return
            except KeyboardInterrupt:
                raise
            except BaseException as error:
                self.sink._failed(self.slot, error)
                return
            if isinstance(awaited, asyncio.Future):
                awaited.cancel()  # a wait started while cancelled (a Task of its own)
            try:
                self.coro.close()
            except KeyboardInterrupt:
                raise
            except BaseException as error:  # it ignored GeneratorExit too
                self.sink._failed(self.slot, error)
                return
            self.sink._failed(self.slot, asyncio.CancelledError())
        finally:
            Driving.call = outer


#: Driven calls parked on an asyncio future (a Task doing I/O, a queue's future), with it.
#: Only these can outlive a stop holding the loop's resources, so only these are listed:
#: calls parked on Populace's own awaitables cost nothing extra.
_on_futures: dict[Call, Any] = {}


def end_calls(owned: Callable[[Call], bool]) -> int:
    """Cancel the driven calls that wait on an asyncio future and that ``owned(call)``
    accepts, now, while their loop runs: a stopped worker's calls in flight (an LLM request,
    a queue) run their cleanup instead of being closed by the garbage collector after the
    loop closed — which printed a traceback per call and left their Tasks pending. Returns
    how many were ended."""
    ended = [c for c in _on_futures if owned(c)]
    for call in ended:
        future = _on_futures.pop(call)
        future.remove_done_callback(call._wake)
        call._end()
    return len(ended)
