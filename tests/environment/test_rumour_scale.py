"""benchmarks/environment_scale.py's map rumour: per-agent operations (with and without the
client's merging) and columnar operations write the same tables, on both backends."""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pytest

from populace.launch import launch, parse_run_file
from populace.results import RunDirectory, read_table

SCENARIO = Path(__file__).resolve().parents[2] / "benchmarks" / "environment_scale.py"
WAYS = ("agent", "merged", "agent-at", "columnar")


@pytest.fixture(params=["local", "ray"])
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "ray":
        request.getfixturevalue("ray_cluster")  # skips when Ray is not installed
    return str(request.param)


async def tables(way: str, backend: str, tmp_path: Path) -> dict[str, object]:
    run_file = parse_run_file({
        "scenario": f"{SCENARIO}:MapRumour", "agents": 10_000, "steps": 3, "seed": 4,
        "workers": 2, "backend": backend, "settings": {"way": way}}, tmp_path / "run.yaml")
    out = tmp_path / way
    summary = await launch(run_file, RunDirectory.create(out))
    assert summary["status"] == "completed"
    return {name: read_table(out, name).sort_by([("step", "ascending"),
                                                 ("agent_id", "ascending")])
            for name in ("learned", "heard")}


async def test_every_way_writes_the_same_tables(backend: str, tmp_path: Path) -> None:
    results = {way: await tables(way, backend, tmp_path) for way in WAYS}
    learned = results["agent"]["learned"]
    assert set(pc.unique(learned["step"]).to_pylist()) == {1, 2, 3}  # learners every day
    heard = results["agent"]["heard"]
    assert heard.num_rows == 10_000 and pc.max(heard["heard"]).as_py() > 10
    for way in WAYS[1:]:
        for name in ("learned", "heard"):
            assert results[way][name].equals(results["agent"][name]), (way, name)
