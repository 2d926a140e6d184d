"""The examples/opinions scenario runs, and its outcome does not depend on the worker count."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

EXAMPLE = Path(__file__).parents[2] / "examples" / "opinions" / "opinions.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("opinions_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_opinions_example_runs_and_is_deterministic() -> None:
    example = load()
    one = await example.run({"agents": 300, "days": 4, "workers": 1, "seed": 3})
    two = await example.run({"agents": 300, "days": 4, "workers": 2, "seed": 3})
    assert [d["date"] for d in one["days"]] == ["2024-03-02", "2024-03-03", "2024-03-04",
                                                "2024-03-05"]
    assert one["days"] == two["days"]
    assert all(d["meetings"] > 0 for d in one["days"])
    assert one["final"]["monitored"]["meetings"] == sum(d["meetings"] for d in one["days"])
