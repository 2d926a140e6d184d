"""The error tree of Populace.

Every error Populace raises on its own account derives from :class:`PopulaceError`. This
is the whole tree, every layer's public errors (``tests/test_public_api.py`` checks that no
public exception is left out of it); a class that also names a builtin base keeps it, so
``except LookupError`` still catches ``NotFound``::

    PopulaceError
    ├── ConfigError        a config file or argument is invalid (the CLI exits 2)
    │   ├── RunInUse       results: another process writes this run directory
    │   └── InterviewError, SelectionError
    │                      launch: an interview or a selection that cannot be made
    ├── ModelError         an LLM call failed after its last retry (``cause``: its kind)
    │   ├── ModelTimeout, ModelUnreachable, ModelHTTPError (``status``),
    │   │   ModelBadResponse
    │   └── RecordingMiss  a replayed call is not in the recording
    ├── WorkerLost         a worker process died (or stopped reporting), taking its agents
    │                      with it
    ├── CallTimeout        an agent call did not finish within its deadline (TimeoutError)
    ├── SimulationClosed   the simulation was stopped while a call was pending
    ├── ServiceLost        a service placed by a backend (Backend.place) is gone
    ├── TransportError     llm: no complete HTTP response; the model client raises the
    │                      ModelError it names instead, so it never reaches a run
    ├── EnvError           environment: UnknownKeyError (KeyError), DuplicateKeyError
    │                      (ValueError), ServiceClosed, EnvServedError (see its module)
    ├── CheckpointError    results: a checkpoint missing, truncated or failing its checksum
    ├── ScenarioFailed     launch: the scenario's own code raised (the original is the cause)
    ├── AllAnswersFailed   launch: every answer of a step failed; the run fails, resumable
    ├── RunNotLive         launch: the run is not running, nothing can be asked of it live
    ├── StepAbandoned      launch: a stop was requested mid-step; the step is not written
    ├── Terminated         launch: SIGTERM stopped the command cleanly
    └── NotFound, UnknownAgent (LookupError), Refused, AgentQueryError (ValueError)
                           studio: answered as a 404 or a 400

``StepAbandoned`` and ``Terminated`` are stops rather than failures: code that catches
``PopulaceError`` around :meth:`~populace.launch.Run.collect` or a whole command should let
them through (``except (StepAbandoned, Terminated): raise`` first), as Populace's own
handlers do.

Errors raised by user code inside an agent are *not* wrapped: they re-raise with their
original type where the placeholder is consumed, with a note naming the agent.
"""

from __future__ import annotations

from typing import Any


class PopulaceError(Exception):
    """Root of every error Populace raises on its own account."""


class ConfigError(PopulaceError):
    """A configuration value is invalid; ``str(err)`` is one line fit for a terminal."""


class ModelError(PopulaceError):
    """An LLM call failed. ``cause`` names what went wrong in a few countable words
    (``"timed out"``, ``"HTTP 503"``, ``"malformed JSON"``…), so progress displays and
    summaries count failures by kind without reading the message; None when no kind applies.
    The subclasses say which family of failure it was.

    ``retryable``: whether another attempt may succeed (a timeout, a 503; not a 400), read by
    :class:`~populace.llm.Retrying`; ``retry_after``: the wait the server asked for, if any;
    ``attempts``: how many attempts the call made before giving up.
    """

    def __init__(self, message: str = "", *, cause: str | None = None,
                 retryable: bool = False, retry_after: float | None = None,
                 attempts: int = 1) -> None:
        super().__init__(message)
        self.cause = cause
        self.retryable = retryable
        self.retry_after = retry_after
        self.attempts = attempts

    def __reduce__(self) -> tuple[Any, ...]:  # the details travel with the error (Ray)
        return (type(self), (str(self),), {"cause": self.cause, "retryable": self.retryable,
                                           "retry_after": self.retry_after,
                                           "attempts": self.attempts})


class ModelTimeout(ModelError):
    """The model did not answer in time."""


class ModelUnreachable(ModelError):
    """No connection to the server, or it went away mid-answer."""


class ModelHTTPError(ModelError):
    """The server answered with an error status (``status``)."""

    @property
    def status(self) -> int | None:
        found = (self.cause or "").removeprefix("HTTP ")
        return int(found) if found.isdigit() else None


class ModelBadResponse(ModelError):
    """The server answered 200 with something that is not an answer."""


class RecordingMiss(ModelError):
    """A replayed call is not in the recording (or its recorded answer is unreadable)."""


class WorkerLost(PopulaceError):
    """A worker died, or nothing more can be heard from it; the message names the worker,
    the cause and the agents it held."""


class CallTimeout(PopulaceError, TimeoutError):
    """An agent call did not finish before its deadline."""


class SimulationClosed(PopulaceError):
    """The simulation was stopped while the call was still pending."""


class ServiceLost(PopulaceError):
    """A service placed by :meth:`Backend.place` died or was killed; every call on its
    handle fails with this, naming the service and the cause."""
