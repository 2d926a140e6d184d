"""The examples/opinions scenario runs, and its outcome does not depend on the worker count."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from populace.results import RunMonitor

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


async def test_the_days_reach_the_studio_as_rounds() -> None:
    example = load()
    monitor = RunMonitor()
    result = await example.run({"agents": 300, "days": 3, "workers": 2, "seed": 3},
                               monitor=monitor)
    snap = monitor.snapshot()
    assert [r["round"] for r in snap["rounds"]] == [1, 2, 3]
    assert [r["mean"] for r in snap["rounds"]] == [d["mean"] for d in result["days"]]
    # The last day's histogram: everyone's opinion for tomorrow, over 40 bins of [0, 1].
    assert (snap["histogram"]["round"], snap["histogram"]["valid"]) == (3, 300)
    assert len(snap["histogram"]["counts"]) == 40
    assert snap["histogram"]["mean"] == pytest.approx(result["days"][-1]["mean"], abs=1e-3)
    shown = snap["environment"]
    assert shown["meetings"] == result["final"]["monitored"]["meetings"]
    assert shown["west/mood"] == result["days"][-1]["mood_west"]


async def test_a_stop_from_the_studio_ends_the_days() -> None:
    monitor = RunMonitor()
    monitor.request_stop()
    result = await load().run({"agents": 100, "days": 5}, monitor=monitor)
    assert result["days"] == []
