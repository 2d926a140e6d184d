"""Code that worker processes cannot import: shipped to them by value."""

from __future__ import annotations

import sys


def ship_by_value(module_name: str) -> None:
    """Pickle module ``module_name``'s classes and functions by value when they travel to
    worker processes (a scenario file loaded from a path is not importable there).
    Only a backend with worker processes needs it; ray is imported only then."""
    module = sys.modules[module_name]
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(module)
