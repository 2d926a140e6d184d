"""Errors of the environment layer.

Every one derives from :class:`populace.core.PopulaceError`::

    PopulaceError
    └── EnvError              root of the environment errors
        ├── UnknownKeyError   the key is in neither the environment nor its ancestors (KeyError)
        ├── DuplicateKeyError register() of a key the environment already holds (ValueError)
        ├── ServiceClosed     an EnvService was closed while the operation was pending
        └── EnvServedError    an Env object used directly after serve() copied it into a
                              remote service (its reads would be stale, its writes lost)
"""

from __future__ import annotations

from populace.core import PopulaceError


class EnvError(PopulaceError):
    """Root of the errors raised by :mod:`populace.environment`."""


class UnknownKeyError(EnvError, KeyError):
    """A key was found neither in the environment nor in any of its ancestors."""

    def __init__(self, key: str, path: str) -> None:
        super().__init__(key, path)
        self.key = key
        self.path = path

    def __str__(self) -> str:  # KeyError would show the repr of the args tuple
        return f"no key {self.key!r} in environment {self.path!r} or its ancestors"


class DuplicateKeyError(EnvError, ValueError):
    """``register`` of a key that the environment already holds itself."""

    def __init__(self, key: str, path: str) -> None:
        super().__init__(key, path)
        self.key = key
        self.path = path

    def __str__(self) -> str:
        return (f"key {self.key!r} is already registered in environment {self.path!r}; "
                "use update() to change it")


class ServiceClosed(EnvError):
    """The environment service was closed while the operation was still pending."""


class EnvServedError(EnvError):
    """The ``Env`` object was used directly, but :func:`serve` copied it into a remote
    service: reads there would be stale and writes lost. The message names the service
    call to use instead (the same call works on every backend)."""
