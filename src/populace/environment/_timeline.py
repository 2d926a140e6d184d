"""The timeline: a global simulated clock that agents read and react to.

Simulated time advances in equal steps (an hour, a day) when the scenario says so, never by
itself. Scenario rounds map onto steps (``steps_per_round``), so "round 3" and "the morning
of 4 March" name the same moment. Time is a ``datetime`` (with a ``timedelta`` step) or a
plain number (with a numeric step).

:meth:`Timeline.mirror` keeps the time in an environment, so agents read it like any other
key: in an :class:`Env` directly, or through an environment service (what ``serve`` returns,
on any backend), which each step writes through; ``await timeline.synced()`` then waits until
the service has the new time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast, overload

from ._env import Env
from ._errors import DuplicateKeyError, EnvServedError
from ._listeners import ErrorLog, ListenerError, Subscription, call_listener, logger
from ._ops import Op, Reply

if TYPE_CHECKING:
    from populace.core import Placeholder

T = TypeVar("T", datetime, float)


class Submits(Protocol):
    """What a timeline mirrors through: an environment service (``EnvService``,
    ``RemoteEnvService``)."""

    def submit(self, ops: Sequence[Op]) -> Placeholder[Reply]: ...


@dataclass(frozen=True, slots=True)
class TimeStep(Generic[T]):
    """What step listeners receive: the step just reached, its time and its round."""

    step: int
    time: T
    round: int


class Timeline(Generic[T]):
    """A simulated clock of equal steps, with listeners on steps.

    >>> days = Timeline(datetime(2024, 3, 1), timedelta(days=1))
    >>> days.advance()
    datetime.datetime(2024, 3, 2, 0, 0)
    >>> days.step_at(datetime(2024, 3, 5, 12)), days.time_at(10).day
    (4, 11)
    """

    @overload
    def __init__(self: Timeline[datetime], start: datetime, step: timedelta, *,
                 steps_per_round: int = 1) -> None: ...
    @overload
    def __init__(self: Timeline[float], start: float = 0.0, step: float = 1.0, *,
                 steps_per_round: int = 1) -> None: ...
    def __init__(self, start: Any = 0.0, step: Any = 1.0, *, steps_per_round: int = 1) -> None:
        if isinstance(start, datetime) != isinstance(step, timedelta):
            raise TypeError("a datetime start needs a timedelta step, a numeric start a "
                            f"numeric step; got {type(start).__name__} and "
                            f"{type(step).__name__}")
        if (step.total_seconds() if isinstance(step, timedelta) else step) <= 0:
            raise ValueError(f"step must be positive, got {step!r}")
        if steps_per_round < 1:
            raise ValueError(f"steps_per_round must be >= 1, got {steps_per_round}")
        self._start: T = start
        self._step_len: timedelta | float = step
        self._steps_per_round = steps_per_round
        self._step = 0
        self._listeners: list[tuple[int, Callable[[TimeStep[T]], Any]]] = []
        self._errors = ErrorLog("timeline")
        self._mirrors: list[tuple[Env, str]] = []
        self._service_mirrors: list[tuple[Submits, str]] = []
        # Writes sent to service mirrors, not known to be applied, each with its check.
        self._in_flight: list[tuple[Placeholder[Reply], Callable[[Placeholder[Reply]], None]]] = []
        self._failed: list[BaseException] = []

    # -- reading -----------------------------------------------------------------------------
    @property
    def start(self) -> T:
        return self._start

    @property
    def step_length(self) -> timedelta | float:
        return self._step_len

    @property
    def steps_per_round(self) -> int:
        return self._steps_per_round

    @property
    def step(self) -> int:
        """Steps taken since the start."""
        return self._step

    @property
    def now(self) -> T:
        """The current simulated time."""
        return self.time_at(self._step)

    @property
    def round(self) -> int:
        """The scenario round the current step belongs to."""
        return self._step // self._steps_per_round

    def time_at(self, step: int) -> T:
        """The time of ``step`` (any integer step, past or future)."""
        return cast(T, self._start + step * self._step_len)  # type: ignore[operator]

    def step_at(self, time: T) -> int:
        """The step in progress at ``time`` (the last step that started at or before it)."""
        if isinstance(self._start, datetime):
            if not isinstance(time, datetime):
                raise TypeError(f"this timeline counts datetimes, got {time!r}")
            assert isinstance(self._step_len, timedelta)
            return (time - self._start) // self._step_len
        if isinstance(time, datetime):
            raise TypeError(f"this timeline counts numbers, got {time!r}")
        assert not isinstance(self._step_len, timedelta)
        q = (time - self._start) / self._step_len
        nearest = round(q)  # time_at(k) may come back a hair below k steps in floating point
        return nearest if math.isclose(q, nearest, rel_tol=1e-9, abs_tol=1e-9) else math.floor(q)

    def time_of_round(self, round: int) -> T:
        """When ``round`` starts."""
        return self.time_at(round * self._steps_per_round)

    def round_at(self, time: T) -> int:
        """The round in progress at ``time``."""
        return self.step_at(time) // self._steps_per_round

    # -- moving ------------------------------------------------------------------------------
    def advance(self, steps: int = 1) -> T:
        """Move ``steps`` steps forward, calling step listeners once per step; the new time."""
        if steps < 0:
            raise ValueError(f"time does not run backwards: steps={steps}")
        self._check_mirrors()
        for _ in range(steps):
            self._step += 1
            self._announce()
        return self.now

    def advance_to_round(self, round: int) -> T:
        """Advance to the first step of ``round`` (no-op if already there or past it)."""
        return self.advance(max(0, round * self._steps_per_round - self._step))

    def _announce(self) -> None:
        event = TimeStep(self._step, self.now, self.round)
        for env, key in self._mirrors:
            env.update(key, event.time)
        for service, key in self._service_mirrors:
            self._send(service, key, [Op.set(key, event.time)])
        for every, fn in list(self._listeners):
            if self._step % every == 0:
                call_listener(self._errors, fn, event)

    def on_step(self, listener: Callable[[TimeStep[T]], Any], *,
                every: int = 1) -> Subscription:
        """Call ``listener(TimeStep)`` after every ``every``-th step; ``.cancel()`` to stop.

        A listener's exception is reported (:meth:`listener_errors`, the
        ``populace.environment`` logger), never raised into ``advance``.
        """
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        entry = (every, listener)
        self._listeners.append(entry)
        return Subscription(lambda: self._listeners.remove(entry))

    def mirror(self, target: Env | Submits, key: str = "time") -> None:
        """Keep ``key`` equal to :attr:`now` in an environment, so agents anywhere can read
        the time (and monitor it) there. Registers the key if it is not there.

        ``target`` is an :class:`Env`, written at once on every step, or an environment
        service (what ``serve`` returns, on any backend), written through as one batch per
        step. Agents read through the service too, so ``await timeline.synced()`` after
        ``advance()`` and before they read: immediate in-process, one round trip to a remote
        service. A failed write is raised by ``synced()`` or the next ``advance()``.

        >>> service = await serve(world, sim)     # doctest: +SKIP
        >>> days.mirror(service, "date")          # doctest: +SKIP
        >>> days.advance(); await days.synced()   # doctest: +SKIP
        """
        if isinstance(target, Env):
            if target._served is not None:
                raise _served_mirror(target, key)
            if key in target:
                target.update(key, self.now)
            else:
                target.register(key, self.now, owner="timeline")
            self._mirrors.append((target, key))
            return
        if not callable(getattr(target, "submit", None)):
            raise TypeError(f"mirror() takes an Env or an environment service (what serve() "
                            f"returns), got {type(target).__name__}")
        self._service_mirrors.append((target, key))
        now = self.now
        # One batch, applied in order: register fails if the key exists, the set then wins.
        self._send(target, key, [Op.register(key, now, owner="timeline"), Op.set(key, now)],
                   first_may_exist=True)

    async def synced(self) -> None:
        """Wait until every write to a mirrored service so far is applied; raise the first
        that failed (a closed or lost service, say)."""
        in_flight, self._in_flight = self._in_flight, []
        for placeholder, check in in_flight:
            await placeholder
            check(placeholder)  # its done-callback may not have run yet
        self._raise_failed()

    def _check_mirrors(self) -> None:
        """Before moving: refuse Env mirrors served elsewhere since, raise failed writes."""
        for env, key in self._mirrors:
            if env._served is not None:
                raise _served_mirror(env, key)
        self._raise_failed()

    def _raise_failed(self) -> None:
        if self._failed:
            error, self._failed = self._failed[0], []
            raise error

    def _send(self, service: Submits, key: str, ops: list[Op], *,
              first_may_exist: bool = False) -> None:
        placeholder = service.submit(ops)
        step = self._step
        checked = False

        def check(done: Placeholder[Reply]) -> None:
            nonlocal checked
            if checked:
                return
            checked = True
            error = done.exception()
            if error is None:
                errors = dict(done.result().errors)
                if first_may_exist and isinstance(errors.get(0), DuplicateKeyError):
                    del errors[0]
                error = errors[min(errors)] if errors else None
            if error is not None:
                error.add_note(f"(the timeline writing {key!r} at step {step} through "
                               f"{service!r})")
                logger.error("timeline: writing %r at step %d through %r failed: %s", key,
                             step, service, error)
                self._failed.append(error)

        if placeholder.done():
            check(placeholder)
            return
        placeholder.add_done_callback(check)
        self._in_flight = [(p, c) for p, c in self._in_flight if not p.done()]
        self._in_flight.append((placeholder, check))

    def listener_errors(self) -> list[ListenerError]:
        return self._errors.records()

    # -- checkpoints -------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        return {"step": self._step}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Jump to a checkpointed step without calling listeners (mirrors are updated)."""
        self._check_mirrors()
        self._step = int(state["step"])
        for env, key in self._mirrors:
            env.update(key, self.now)
        for service, key in self._service_mirrors:
            self._send(service, key, [Op.set(key, self.now)])

    def __repr__(self) -> str:
        return f"<Timeline step {self._step} at {self.now!r}>"


def _served_mirror(env: Env, key: str) -> EnvServedError:
    return EnvServedError(
        f"environment {env.path!r} is served by {env._served}: the timeline's writes to this "
        "Env object would never reach the agents. Mirror through the service that serve() "
        f"returned instead: `timeline.mirror(service, {key!r})`, and `await "
        "timeline.synced()` after each advance(); that works on every backend")
