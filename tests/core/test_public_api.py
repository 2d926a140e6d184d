"""The public surface is exactly what ``__all__`` lists (STYLE.md, point 2)."""

from __future__ import annotations

import types

import populace
import populace.core


def public_names(module: types.ModuleType) -> set[str]:
    """Names a user can reach without an underscore, other than submodules."""
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }


def test_core_all_is_exactly_the_public_names() -> None:
    assert sorted(populace.core.__all__) == sorted(set(populace.core.__all__)), "duplicates"
    assert set(populace.core.__all__) == public_names(populace.core)


def test_top_level_all_is_exactly_the_public_names() -> None:
    listed = set(populace.__all__)
    assert len(listed) == len(populace.__all__), "duplicates"
    assert "__version__" in listed and isinstance(populace.__version__, str)
    assert listed - {"__version__"} == public_names(populace)


def test_every_listed_name_exists() -> None:
    for module in (populace, populace.core):
        missing = [n for n in module.__all__ if not hasattr(module, n)]
        assert missing == [], module.__name__


def test_top_level_reexports_are_the_core_objects() -> None:
    for name in set(populace.__all__) - {"__version__"}:
        assert getattr(populace, name) is getattr(populace.core, name), name


def test_public_api_check_catches_an_unlisted_name() -> None:
    # The check above must fail when a public name is added without listing it.
    fake = types.ModuleType("fake")
    vars(fake).update(Listed=1, Unlisted=2, _private=3, sub=types.ModuleType("fake.sub"),
                      __all__=["Listed"])
    assert public_names(fake) == {"Listed", "Unlisted"}
    assert set(vars(fake)["__all__"]) != public_names(fake)
