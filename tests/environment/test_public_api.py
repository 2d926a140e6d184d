"""The environment package exposes exactly what ``__all__`` lists (STYLE.md, point 2)."""

from __future__ import annotations

import ast
import types
from pathlib import Path

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
    for name in ("EnvError", "UnknownKeyError", "DuplicateKeyError", "ServiceClosed",
                 "EnvServedError"):
        assert issubclass(getattr(environment, name), PopulaceError)
    assert issubclass(environment.UnknownKeyError, KeyError)
    assert issubclass(environment.DuplicateKeyError, ValueError)


def imported_modules(package: Path) -> dict[str, set[str]]:
    """Every module each file of ``package`` imports (absolute names), at any depth."""
    out: dict[str, set[str]] = {}
    for path in sorted(package.glob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module)
        out[path.name] = names
    return out


def test_the_environment_uses_only_the_public_core_and_never_ray() -> None:
    imports = imported_modules(Path(environment.__file__).parent)
    assert imports, "no files found"
    for name, modules in imports.items():
        assert not {m for m in modules if m == "ray" or m.startswith("ray.")}, name
        ours = {m for m in modules if m.startswith("populace") and m != "populace.core"}
        assert not ours, f"{name} imports {sorted(ours)}: only populace.core's public names"


def test_the_import_check_sees_ray_and_private_imports(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text("def f():\n    import ray.util\n"
                                     "from populace.core._ray import RayBackend\n")
    assert imported_modules(tmp_path) == {"bad.py": {"ray.util", "populace.core._ray"}}
