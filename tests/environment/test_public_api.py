"""The environment package exposes exactly what ``__all__`` lists (STYLE.md, point 2)."""

from __future__ import annotations

import types

import populace.environment as environment
from populace.core import PopulaceError


def public_names(module: types.ModuleType) -> set[str]:
    return {name for name, value in vars(module).items()
            if not name.startswith("_") and not isinstance(value, types.ModuleType)}


def test_all_is_exactly_the_public_names() -> None:
    assert sorted(environment.__all__) == sorted(set(environment.__all__)), "duplicates"
    assert set(environment.__all__) == public_names(environment)
    assert all(hasattr(environment, name) for name in environment.__all__)


def test_errors_hang_under_populace_error() -> None:
    for name in ("EnvError", "UnknownKeyError", "DuplicateKeyError", "ServiceClosed"):
        assert issubclass(getattr(environment, name), PopulaceError)
    assert issubclass(environment.UnknownKeyError, KeyError)
    assert issubclass(environment.DuplicateKeyError, ValueError)
