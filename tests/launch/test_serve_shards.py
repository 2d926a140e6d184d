"""A scenario's environment served in shards (``run.serve(env, shards=N)``): the tables of
the map rumour of docs/scenarios.md are those of one service, and a fork from a step's
checkpoint (the shards' state joined, then split again) continues as its source did."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from cli_helpers import populace
from persona_helpers import tutorial_files
from populace.results import read_table


def scenario(directory: Path) -> Path:
    files = tutorial_files("rumour.py", "map_rumour.py", "map_rumour.yaml")
    files["map_rumour.py"] = files["map_rumour.py"].replace(
        "        density: float = 0.1", "        density: float = 0.1\n        shards: int = 1"
    ).replace("await run.serve(world)", "await run.serve(world, shards=run.settings.shards)")
    assert "shards=run.settings.shards" in files["map_rumour.py"]
    for name, text in files.items():
        (directory / name).write_text(text)
    return directory / "map_rumour.yaml"


def learned(run: Path) -> pa.Table:
    return read_table(run, "learned").sort_by([("step", "ascending"),
                                               ("agent_id", "ascending")])


def test_a_sharded_environment_gives_the_tables_of_one_and_forks_from_its_checkpoints(
        tmp_path: Path) -> None:
    path = scenario(tmp_path)
    small = ("--agents", "3000", "--steps", "4")
    assert populace("run", path, *small, "--out", tmp_path / "one").returncode == 0
    sharded = tmp_path / "sharded.yaml"
    sharded.write_text(path.read_text() + "settings:\n  shards: 3\n")
    done = populace("run", sharded, *small, "--out", tmp_path / "three")
    assert done.returncode == 0, done.stderr
    assert learned(tmp_path / "three").equals(learned(tmp_path / "one"))
    fork = populace("run", "--fork", tmp_path / "three", "--at", "2", "--out",
                    tmp_path / "fork")
    assert fork.returncode == 0, fork.stderr
    assert learned(tmp_path / "fork").equals(learned(tmp_path / "three"))
