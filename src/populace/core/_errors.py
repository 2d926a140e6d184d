"""The error tree of Populace.

Every error Populace raises on its own account derives from :class:`PopulaceError`::

    PopulaceError
    ├── ConfigError        a config file or argument is invalid (the CLI exits 2)
    ├── ModelError         an LLM call failed after its last retry
    ├── WorkerLost         a worker process died (or stopped reporting), taking its agents
    │                      with it
    ├── CallTimeout        an agent call did not finish within its deadline
    ├── SimulationClosed   the simulation was stopped while a call was pending
    └── ServiceLost        a service placed by a backend (Backend.place) is gone

The other layers' errors derive from it too: ``EnvError`` and its subclasses
(environment), ``CheckpointError`` (results), and the studio's ``NotFound``, ``Refused``,
``AgentQueryError`` and ``UnknownAgent`` (each keeping its builtin base, such as
``LookupError``, so ``except LookupError`` still catches it).

Errors raised by user code inside an agent are *not* wrapped: they re-raise with their
original type where the placeholder is consumed, with a note naming the agent.
"""

from __future__ import annotations


class PopulaceError(Exception):
    """Root of every error Populace raises on its own account."""


class ConfigError(PopulaceError):
    """A configuration value is invalid; ``str(err)`` is one line fit for a terminal."""


class ModelError(PopulaceError):
    """An LLM call failed after its last retry."""


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
