"""What the studio asks of a live run: read an agent, interview, intervene.

The run executes on its own event loop (a thread of the studio, or ``populace run
--studio``'s main thread); the studio's requests come from another. :class:`RunControl`
carries them across: a read of an agent's state runs on the run's loop at once (beside a
step in progress; it changes nothing), an interview waits for the end of the step in
progress (so it never competes with the step's calls nor sees half a step), and an
intervention is written to the run directory for the next step under the same lock the
launcher takes when it reads them at a step's start, so it lands in exactly one step.
A pause holds the run at the next step boundary (after a step is written, checkpoint and
summary included) until it is resumed or stopped; meanwhile agents are read and
interviewed as between any two steps. A single step plays one more step, then holds again.
While it holds, the run's ``summary.json`` says so (``paused_after``: the step written).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from populace.core import Agent, ConfigError, PopulaceError
from populace.results import RunDirectory

from . import _interventions

Job = Callable[[Any], Awaitable[Any]]  # job(run) on the run's loop


class RunNotLive(PopulaceError):
    """The run is not (or no longer) running: nothing can be asked of it live."""


def _state(agent: Agent) -> tuple[Any, Any]:
    # an agent that says what it holds (a persona's ``mind()``) is shown that way
    mind = getattr(agent, "mind", None)
    return agent.get_state(), mind() if callable(mind) else None


def _note_pause(run_dir: Path, after: int | None) -> None:
    """Say in ``summary.json`` that the run holds after step ``after`` (None: no longer).
    Called on the run's loop between steps, where nothing else writes the summary."""
    directory = RunDirectory(run_dir)
    try:
        summary = directory.read_summary()
    except (OSError, ValueError):
        return
    if after is None:
        summary.pop("paused_after", None)
    else:
        summary["paused_after"] = after
    directory.write_summary(summary)


class RunControl:
    """The studio's side door into one live run (made by whoever starts the run, handed
    to :func:`~populace.launch.launch` as ``control=``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: list[tuple[Job, concurrent.futures.Future[Any]]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._run: Any = None
        self._run_dir: Path | None = None
        self.next_step = 1       # the step whose start is still to come
        self.steps_done = 0      # steps written
        self._ended = False      # the run attempt is over: nothing more is served
        self._paused = False     # hold at the next step boundary
        self._allowed = 0        # steps to play before holding (a single step: 1)
        #: the steps written when the run began to wait at a boundary; None while it plays
        self.waiting_after: int | None = None

    # -- the studio's side (any thread) -------------------------------------------------------
    @property
    def live(self) -> bool:
        return self._run is not None

    def agent_state(self, agent_id: int) -> concurrent.futures.Future[Any]:
        """``(step, state, mind)`` of a live agent, read now on the run's loop: the steps
        written, its ``get_state()``, and its ``mind()`` when it has one (a persona's
        text and memory; else None)."""
        with self._lock:
            loop, run = self._loop, self._run
            done = self.steps_done
        if loop is None or run is None:
            raise RunNotLive("the run has no live agents now")

        async def read() -> Any:
            return (done, *await run.sim.handle(int(agent_id)).call(_state))

        return asyncio.run_coroutine_threadsafe(read(), loop)

    def between_steps(self, job: Job) -> concurrent.futures.Future[Any]:
        """Run ``job(run)`` on the run's loop once the step in progress is written (or,
        asked before the run has started, once its agents are set up: before step 1)."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            if self._ended:
                raise RunNotLive("the run has ended")
            self._queue.append((job, future))
        return future

    def check_environment(self, intervention: _interventions.Intervention
                          ) -> concurrent.futures.Future[None]:
        """Whether the environment an environment change names is one of the live run's:
        asked on the run's loop (its service may be a Ray actor); the future fails with a
        ConfigError naming the environment when the run has none of that name. A message,
        or a change of the root (no ``env``), passes at once."""
        with self._lock:
            loop, run = self._loop, self._run
        if loop is None or run is None:
            raise RunNotLive("the run is not live: fork it to change what comes next")

        async def probe() -> None:
            if intervention.kind != "environment":
                return
            if not run.services:
                raise ConfigError("the run serves no environment to change")
            if intervention.env is None:
                return
            try:
                await run.services[0].query(str(intervention.key), env=intervention.env)
            except KeyError:  # the environment is there, the key not yet: it is created
                return
            except LookupError as e:
                raise ConfigError(f"env {intervention.env!r}: the run has no such environment "
                                  f"({' '.join(str(e).split())[:200]})") from None

        return asyncio.run_coroutine_threadsafe(probe(), loop)

    def intervene(self, intervention: _interventions.Intervention
                  ) -> _interventions.Intervention:
        """Schedule ``intervention`` (its step raised to the next one to start if earlier);
        returns it as written."""
        with self._lock:
            if self._run_dir is None:
                raise RunNotLive("the run is not live: fork it to change what comes next")
            step = max(intervention.step, self.next_step)
            planned = self._run.steps if self._run is not None else None
            if planned is not None and step > planned:
                raise ConfigError(f"the run plays no step {step} (it has {planned})")
            written = _interventions.stamped(intervention.model_copy(update={"step": step}))
            if written.kind == "message" and self._run is not None:
                _interventions.chosen(self._run, written, step, 0)  # refused now if bad
            if written.kind == "environment" and self._run is not None \
                    and not self._run.services:
                raise ConfigError("the run serves no environment to change")
            _interventions.append(self._run_dir, written)
        return written

    @property
    def paused(self) -> bool:
        """A pause was asked for (the run holds at its next step boundary, or holds now:
        :attr:`waiting_after`)."""
        return self._paused

    def pause(self) -> None:
        """Hold the run at its next step boundary, until :meth:`resume` (or a stop)."""
        with self._lock:
            if self._run is None:
                raise RunNotLive("the run is not live: nothing to pause")
            self._paused, self._allowed = True, 0

    def resume(self, steps: int | None = None) -> None:
        """Go on: for good, or (``steps``) for that many steps, then hold again."""
        with self._lock:
            if self._run is None:
                raise RunNotLive("the run is not live: nothing to resume")
            if steps is None:
                self._paused, self._allowed = False, 0
            else:
                self._paused, self._allowed = True, max(1, steps)

    # -- the launcher's side --------------------------------------------------------------------
    def attach(self, run: Any, run_dir: Path | None, done: int) -> None:
        with self._lock:
            self._loop = asyncio.get_running_loop()
            self._run, self._run_dir, self._ended = run, run_dir, False
            self.steps_done, self.next_step = done, done + 1

    def starting(self, t: int, run_dir: Path | None) -> list[_interventions.Intervention]:
        """Step ``t`` begins: the interventions scheduled for it (read under the lock, so
        none scheduled meanwhile is missed or counted twice)."""
        with self._lock:
            self.next_step = t + 1
            return _interventions.read_interventions(run_dir) if run_dir is not None else []

    async def serve(self, run: Any, done: int) -> None:
        """Step ``done`` is written: carry out what waited for it; while the run is paused,
        hold here (serving what comes meanwhile) until it is resumed or stopped."""
        with self._lock:
            self.steps_done = done
        await self._jobs(run)
        held = False
        while True:
            with self._lock:
                hold = self._paused and not self._allowed and not run.stop_requested \
                    and done < run.steps
                if not hold and self._allowed:
                    self._allowed -= 1
                self.waiting_after = done if hold else None
                where = self._run_dir
            if hold != held and where is not None:
                _note_pause(where, done if hold else None)
                held = hold
            if not hold:
                return
            await asyncio.sleep(0.05)
            await self._jobs(run)

    async def _jobs(self, run: Any) -> None:
        with self._lock:
            queue, self._queue = self._queue, []
        for job, future in queue:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(await job(run))
                except Exception as e:  # the asker hears of it; the run goes on
                    future.set_exception(e)

    def detach(self) -> None:
        with self._lock:
            queue, self._queue = self._queue, []
            self._loop = self._run = self._run_dir = None
            self._ended = True
            self.waiting_after = None
        for _job, future in queue:
            if future.set_running_or_notify_cancel():
                future.set_exception(RunNotLive("the run ended before it was asked"))
