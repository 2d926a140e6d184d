"""SIGINT and SIGTERM always end the process, within a bounded time.

:func:`run_until_signalled` runs a command's coroutine; the first signal cancels it, so the
run stops cleanly (its cleanup writes what it has and stops the workers). A step that
cannot be cancelled — blocked in ``time.sleep``, a busy loop, an agent stuck in a local
worker, an ``await`` that swallows the cancellation — would keep the process alive for
ever. So a thread of the :class:`Watchdog` reads the signals from the interpreter's wakeup
file descriptor (written by the C signal handler, whatever the main thread is doing) and,
``grace`` seconds after the first signal or at a second one, ends the run itself: the
stoppers the run registered write its summary (status ``stopped``) and what the step
received, the one line goes to stderr, and ``os._exit`` ends the process with 130 or 143.

The thread and its lock exist because the event loop may be stuck: nothing else can act.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import math
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

from populace.core import ConfigError, PopulaceError

#: Seconds a signalled run has to stop before the process ends anyway; the environment
#: variable ``POPULACE_STOP_GRACE`` changes it.
STOP_GRACE_S = 10.0
GRACE_VARIABLE = "POPULACE_STOP_GRACE"
MAX_GRACE_S = 86400.0

_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


class Terminated(PopulaceError):
    """SIGTERM arrived; the run was stopped cleanly."""


def stop_grace() -> float:
    """The grace period: ``POPULACE_STOP_GRACE`` seconds if set (0 < s ≤ 86400), else 10."""
    given = os.environ.get(GRACE_VARIABLE)
    if given is None or not given.strip():
        return STOP_GRACE_S
    try:
        seconds = float(given)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds <= MAX_GRACE_S:
        raise ConfigError(f"{GRACE_VARIABLE}={given!r}: expected seconds above 0 and at most "
                          f"{MAX_GRACE_S:g}")
    return seconds


class Watchdog:
    """Ends the process ``grace`` s after the first SIGINT/SIGTERM, or at the second.

    ``say(why)`` is the one line printed when it does (without ``error:``). A run registers
    a stopper (:meth:`add_stopper`): called on the watchdog's thread with the reason, it writes
    what the run can still write. The run's own summary writes go through :meth:`writing`,
    so the two never write at once and the run writes nothing once the watchdog took over.
    """

    def __init__(self, grace: float, say: Callable[[str], str]) -> None:
        self.grace = grace
        self.say = say
        self.signal: int | None = None
        self._lock = threading.Lock()
        self._taken = False
        self._told = False  # the command printed its own line: nothing more to say
        self._stoppers: list[Callable[[str], str | None]] = []
        self._cancel: Callable[[], object] | None = None
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._thread = threading.Thread(target=self._watch, name="populace-watchdog",
                                        daemon=True)

    @contextlib.contextmanager
    def writing(self) -> Iterator[bool]:
        """Held while the run writes its summary; yields False once the watchdog took over
        (then nothing is written: the watchdog's summary is the last)."""
        with self._lock:
            yield not self._taken

    def add_stopper(self, stop: Callable[[str], str | None]) -> None:
        """``stop(why)`` is called if the watchdog ends the process before
        :meth:`remove_stopper`; what it returns is added to the line, in parentheses."""
        self._stoppers.append(stop)

    def remove_stopper(self, stop: Callable[[str], str | None]) -> None:
        self._stoppers.remove(stop)

    def arm(self, cancel: Callable[[], object]) -> None:
        """Signals now cancel the run with ``cancel`` (thread-safe), at once if one came."""
        self._cancel = cancel
        if self.signal is not None:
            cancel()

    def told(self) -> None:
        """The command said how it ended: if its exit is stuck, end it without a word."""
        self._told = True

    def _watch(self) -> None:
        deadline: float | None = None
        while True:
            wait = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            ready, _, _ = select.select([self._read], [], [], wait)
            if not ready:
                assert self.signal is not None
                self._end(f"the run did not stop within {self.grace:g} s of "
                          f"{signal.Signals(self.signal).name}")
            for number in os.read(self._read, 64):
                if number == 0:  # stopped: the command ended without a signal
                    return
                if number not in _CODES:
                    continue
                if self.signal is not None:
                    self._end(f"a second {signal.Signals(number).name}")
                self.signal = number
                deadline = time.monotonic() + self.grace
                if self._cancel is not None:
                    self._cancel()

    def _end(self, why: str) -> None:
        assert self.signal is not None
        # The run's own last write, if under way, is left to finish (it is short).
        got = self._lock.acquire(timeout=5)
        self._taken = True
        if not self._told:
            notes = []
            for stop in list(self._stoppers):
                try:
                    note = stop(why)
                except BaseException as e:  # the process ends regardless
                    note = f"could not save the stopped run: {type(e).__name__}: {e}"
                if note:
                    notes.append(note)
            _say(f"error: {self.say(''.join([why, *(f' ({n})' for n in notes)]))}")
        if got:
            self._lock.release()
        os._exit(_CODES[signal.Signals(self.signal)])

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Catch SIGINT and SIGTERM here (main thread only) while the block runs."""
        if threading.current_thread() is not threading.main_thread():
            yield  # signals reach the main thread only: nothing to watch here
            return
        ignore: Callable[[int, Any], None] = lambda number, frame: None  # noqa: E731
        before = {s: signal.signal(s, ignore) for s in _CODES}
        old_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._thread.start()
        try:
            yield
        finally:
            signal.set_wakeup_fd(old_fd)
            for s, handler in before.items():
                signal.signal(s, handler)
            if self.signal is None:
                os.write(self._write, b"\0")  # no signal: the thread has nothing to watch
            # else it keeps its deadline until the process exits (an exit can hang too)


def _say(line: str) -> None:
    """One line on stderr, written by the descriptor (no lock another thread may hold)."""
    with contextlib.suppress(OSError):
        os.write(2, (line + "\n").encode("utf-8", "replace"))


_current: contextvars.ContextVar[Watchdog | None] = contextvars.ContextVar(
    "populace_watchdog", default=None)


def watchdog() -> Watchdog | None:
    """The watchdog of the command running this coroutine, if any."""
    return _current.get()


def run_until_signalled(coro: Coroutine[Any, Any, Any], *,
                        say: Callable[[str], str] | None = None) -> Any:
    """``asyncio.run(coro)``; SIGINT and SIGTERM cancel it, so its cleanup (flushing results,
    stopping workers) runs before the process exits; raises :class:`KeyboardInterrupt` or
    :class:`Terminated`. If it has not ended ``POPULACE_STOP_GRACE`` (10) s after the
    signal, or at a second signal, the :class:`Watchdog` ends the process (exit 130/143),
    printing ``error: say(why)``."""
    dog = Watchdog(stop_grace(), say or (lambda why: f"stopped: {why}"))

    async def main() -> Any:
        _current.set(dog)
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        dog.arm(lambda: loop.call_soon_threadsafe(task.cancel))
        return await coro

    try:
        with dog.installed():
            return asyncio.run(main())
    except asyncio.CancelledError:
        if dog.signal == signal.SIGTERM:
            raise Terminated() from None
        raise KeyboardInterrupt() from None
    finally:
        if dog.signal is not None:
            dog.told()
