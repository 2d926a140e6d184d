"""What every listener registry in this package shares: unsubscribe handles and error reports.

A listener runs inside somebody else's write (an ``update``, a ``move``, an ``advance``). Its
failure must neither break that writer nor vanish: it is recorded (``listener_errors()``),
counted (``statistics()``) and logged on the ``populace.environment`` logger. Logging is
rate-limited, because a buggy listener on a key that a million agents write would otherwise
print a million tracebacks.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger("populace.environment")

#: How many failures are kept for ``listener_errors()`` (older ones are only counted).
KEPT_ERRORS = 100
#: Failures logged with a traceback before logging switches to one line per 1000.
LOGGED_IN_FULL = 10


@dataclass(frozen=True, slots=True)
class ListenerError:
    """One failure of a listener: where, which listener, for which event, and the error."""

    source: str
    listener: str
    event: Any
    error: Exception


class Subscription:
    """Handle returned by ``monitor``/``on_step``/``watch``: ``cancel()`` unsubscribes.

    >>> sub = env.monitor(print, key="price")   # doctest: +SKIP
    >>> sub.cancel()                            # doctest: +SKIP
    """

    __slots__ = ("_active", "_on_cancel")

    def __init__(self, on_cancel: Callable[[], None]) -> None:
        self._on_cancel = on_cancel
        self._active = True

    @property
    def active(self) -> bool:
        return self._active

    def cancel(self) -> None:
        """Stop receiving events. Idempotent."""
        if self._active:
            self._active = False
            self._on_cancel()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()


def describe(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


class ErrorLog:
    """Collects listener failures of one source (an environment, a map, a timeline)."""

    __slots__ = ("_kept", "count", "source")

    def __init__(self, source: str) -> None:
        self.source = source
        self.count = 0
        self._kept: deque[ListenerError] = deque(maxlen=KEPT_ERRORS)

    def report(self, listener: Any, event: Any, error: Exception) -> None:
        self.count += 1
        record = ListenerError(self.source, describe(listener), event, error)
        self._kept.append(record)
        if self.count <= LOGGED_IN_FULL:
            logger.error("listener %s failed on %s in %s", record.listener, event, self.source,
                         exc_info=error)
        elif self.count % 1000 == 0:
            logger.error("%d listener failures so far in %s; latest: %s: %s: %s", self.count,
                         self.source, record.listener, type(error).__name__, error)

    def records(self) -> list[ListenerError]:
        return list(self._kept)

    def clear(self) -> None:
        self._kept.clear()


def call_listener(log: ErrorLog, fn: Callable[..., Any], event: Any, *args: Any) -> None:
    """Call ``fn(*args)`` (``event`` when no args); report its failure, never raise it.

    Cancellation, KeyboardInterrupt and SystemExit are not ``Exception``\\ s and propagate.
    An ``async`` listener is a mistake (nobody would await it): it is closed and reported.
    """
    try:
        out = fn(*args) if args else fn(event)
        if out is not None and hasattr(out, "__await__"):
            close = getattr(out, "close", None)
            if close is not None:
                close()
            raise TypeError(f"listener {describe(fn)} returned an awaitable; listeners must be "
                            "plain functions (start a task yourself if you need one)")
    except Exception as error:
        log.report(fn, event, error)
