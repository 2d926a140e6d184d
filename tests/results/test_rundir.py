"""The run directory: atomic files, one Parquet file per step, consolidation, reading back."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from populace.results import RunDirectory, atomic_write, read_partial, read_summary, read_table


def _round(round_no: int, n: int = 3) -> pa.Table:
    return pa.table({
        "round": pa.array([round_no] * n, pa.int32()),
        "agent_id": pa.array(range(n), pa.int64()),
        "number": pa.array([float(round_no * 10 + i) for i in range(n)]),
    })


def _leftovers(path: Path) -> list[str]:
    """Temporary files a writer should have removed or renamed."""
    return sorted(p.name for p in path.rglob("*") if p.name.startswith(".") or "tmp" in p.name)


# -- atomic_write --------------------------------------------------------------------------------
def test_atomic_write_creates_parents_and_replaces(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "file.txt"
    atomic_write(target, b"first")
    assert target.read_bytes() == b"first"
    atomic_write(target, b"second")
    assert target.read_bytes() == b"second"
    assert _leftovers(tmp_path) == []


def test_atomic_write_failure_keeps_the_old_file_and_leaves_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "file.txt"
    atomic_write(target, b"old")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk on fire"):
        atomic_write(target, b"new")
    assert target.read_bytes() == b"old"
    assert _leftovers(tmp_path) == []


# -- RunDirectory.create -------------------------------------------------------------------------
def test_create_makes_the_directory(tmp_path: Path) -> None:
    rd = RunDirectory.create(tmp_path / "runs" / "one")
    assert rd.path == tmp_path / "runs" / "one"
    assert rd.path.is_dir()


def test_create_accepts_an_existing_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    assert RunDirectory.create(tmp_path / "out").path == tmp_path / "out"


def test_create_refuses_a_directory_holding_other_files(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="is not empty and holds no run"):
        RunDirectory.create(tmp_path / "out")
    assert (tmp_path / "out" / "notes.txt").read_text() == "mine"


def test_create_refuses_a_directory_with_a_summary(tmp_path: Path) -> None:
    RunDirectory.create(tmp_path).write_summary({"status": "completed"})
    with pytest.raises(FileExistsError, match="already holds a run"):
        RunDirectory.create(tmp_path)


def test_create_refuses_a_directory_with_round_files(tmp_path: Path) -> None:
    RunDirectory.create(tmp_path).write_step("responses", 1, _round(1))
    with pytest.raises(FileExistsError, match=str(tmp_path)):
        RunDirectory.create(tmp_path)


# -- config, profiles, summary -------------------------------------------------------------------
def test_write_config_profiles_and_summary(tmp_path: Path) -> None:
    rd = RunDirectory.create(tmp_path)
    config = {"name": "x", "game": {"ratio": "2/3", "prompt": "Pick — a number"}}
    rd.write_config(config)
    assert yaml.safe_load((tmp_path / "config.yaml").read_text()) == config
    # Key order is kept, as written.
    assert (tmp_path / "config.yaml").read_text().startswith("name: x\n")

    profiles = pa.table({"agent_id": pa.array([0, 1], pa.int64()), "group": [0, 1]})
    rd.write_profiles(profiles)
    assert pq.read_table(tmp_path / "profiles.parquet").equals(profiles)

    rd.write_summary({"status": "running", "rounds": [{"round": 1, "mean": 1.5}]})
    rd.write_summary({"status": "completed", "rounds": []})
    assert read_summary(tmp_path) == {"status": "completed", "rounds": []}
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "completed"
    assert _leftovers(tmp_path) == []


# -- rounds, consolidation, read_table -----------------------------------------------------------
def test_write_step_names_files_by_step(tmp_path: Path) -> None:
    rd = RunDirectory.create(tmp_path)
    path = rd.write_step("responses", 7, _round(7))
    assert path == tmp_path / "parts" / "responses-r00007.parquet"
    assert pq.read_table(path).equals(_round(7))
    assert _leftovers(tmp_path) == []


def test_consolidate_joins_rounds_in_order(tmp_path: Path) -> None:
    rd = RunDirectory.create(tmp_path)
    # Written out of order, and past round 9 so that names must sort numerically.
    for r in (10, 2, 1):
        rd.write_step("responses", r, _round(r))
    rd.write_step("other", 1, _round(99))
    out = rd.consolidate("responses")
    assert out == tmp_path / "responses.parquet"
    table = pq.read_table(out)
    assert table.column("round").to_pylist() == [1, 1, 1, 2, 2, 2, 10, 10, 10]
    assert table.column("number").to_pylist()[:3] == [10.0, 11.0, 12.0]
    assert table.schema.equals(_round(1).schema)
    assert read_table(tmp_path, "responses").equals(table)
    assert read_table(tmp_path, "other").column("number").to_pylist() == [990.0, 991.0, 992.0]
    with pytest.raises(ValueError, match=r"has 2 tables \(other, responses\): name one"):
        read_table(tmp_path)  # no default table: the only one, or name it
    assert _leftovers(tmp_path) == []


def test_consolidate_without_rounds_returns_none(tmp_path: Path) -> None:
    rd = RunDirectory.create(tmp_path)
    assert rd.consolidate("responses") is None
    assert not (tmp_path / "responses.parquet").exists()


def test_read_table_falls_back_to_round_files(tmp_path: Path) -> None:
    rd = RunDirectory.create(tmp_path)
    rd.write_step("responses", 1, _round(1))
    rd.write_step("responses", 2, _round(2, n=2))
    # No consolidation: a run that crashed after round 2.
    table = read_table(str(tmp_path), "responses")
    assert table.num_rows == 5
    assert table.column("round").to_pylist() == [1, 1, 1, 2, 2]
    assert table.column("agent_id").to_pylist() == [0, 1, 2, 0, 1]


def test_read_table_prefers_the_consolidated_file(tmp_path: Path) -> None:
    rd = RunDirectory.create(tmp_path)
    rd.write_step("responses", 1, _round(1))
    rd.consolidate("responses")
    rd.write_step("responses", 2, _round(2))  # a stray part after consolidation
    assert read_table(tmp_path).column("round").to_pylist() == [1, 1, 1]


def test_read_table_without_any_file(tmp_path: Path) -> None:
    RunDirectory.create(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"no responses\.parquet and no step files"):
        read_table(tmp_path, "responses")
    with pytest.raises(FileNotFoundError, match=r"has no tables"):
        read_table(tmp_path)
    with pytest.raises(FileNotFoundError, match="no profiles"):
        read_table(tmp_path / "missing", "profiles")


def test_a_table_whose_name_extends_another_keeps_its_own_steps(tmp_path: Path) -> None:
    rd = RunDirectory.create(tmp_path)
    rd.write_step("votes", 1, _round(1))
    rd.write_step("votes-r", 2, _round(2))  # "votes-r*" must not catch its files
    assert rd.part_steps("votes") == [1] and rd.part_steps("votes-r") == [2]
    assert read_table(tmp_path, "votes").column("round").to_pylist() == [1, 1, 1]


# -- reading a run back ----------------------------------------------------------------------
def test_the_directory_reads_back_what_it_wrote(tmp_path: Path) -> None:
    rd = RunDirectory.create(tmp_path)
    assert (rd.read_config(), rd.read_profiles(), rd.table_names()) == ({}, None, [])
    rd.write_config({"scenario": "x.py:X", "steps": 2})
    profiles = pa.table({"agent_id": pa.array([0, 1, 2], pa.int64()), "kind": ["a", "b", "a"]})
    rd.write_profiles(profiles)
    rd.write_step("flips", 1, _round(1))
    rd.write_step("flips", 2, _round(2))
    assert rd.read_config() == {"scenario": "x.py:X", "steps": 2}
    assert rd.read_profiles().equals(profiles)
    assert rd.table_names() == ["flips"]  # profiles.parquet is no table
    assert rd.read_table().equals(read_table(tmp_path, "flips"))
    # The summary names tables a partial run has no step files of yet; both are listed.
    rd.write_summary({"status": "running", "steps": [], "tables": ["flips", "later"]})
    assert rd.table_names() == ["flips", "later"]
    rd.consolidate("flips")
    (tmp_path / "backgrounds.parquet").write_bytes((tmp_path / "profiles.parquet").read_bytes())
    assert rd.table_names() == ["flips", "later"]
    (tmp_path / "config.yaml").write_text("[not: a mapping")
    assert rd.read_config() == {}


def test_a_consolidated_table_without_step_files_is_found(tmp_path: Path) -> None:
    rd = RunDirectory.create(tmp_path)
    rd.write_step("answers", 1, _round(1))
    rd.consolidate("answers")
    rd.write_profiles(pa.table({"agent_id": [0]}))
    (tmp_path / "parts" / "answers-r00001.parquet").unlink()
    assert rd.table_names() == ["answers"]
    assert read_table(tmp_path).num_rows == 3


def test_read_partial_finds_the_step_in_progress(tmp_path: Path) -> None:
    rd = RunDirectory.create(tmp_path)
    assert read_partial(tmp_path) is None
    rd.write_partial("flips", 3, _round(3, n=2))
    step, rows = read_partial(tmp_path) or (0, None)
    assert step == 3 and rows is not None and rows.num_rows == 2
    assert read_partial(tmp_path, "other") is None
    rd.write_partial("other", 3, _round(3))
    with pytest.raises(ValueError, match="name one"):
        read_partial(tmp_path)
    rd.clear_partial("flips")
    assert read_partial(tmp_path, "flips") is None and read_partial(tmp_path) is not None


# -- file modes ----------------------------------------------------------------------------------
@pytest.fixture(params=[(0o022, 0o644), (0o077, 0o600)], ids=["umask-022", "umask-077"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    """Run the test under a umask; yields the mode its files should get."""
    mask, mode = request.param
    before = os.umask(mask)
    try:
        yield mode
    finally:
        os.umask(before)


def modes(path: Path) -> dict[str, int]:
    return {str(p.relative_to(path)): p.stat().st_mode & 0o777 for p in path.rglob("*")
            if p.is_file()}


def test_every_file_of_a_run_directory_honours_the_umask(tmp_path: Path, umask: int) -> None:
    rd = RunDirectory.create(tmp_path / "run")
    rd.write_config({"name": "modes"})
    rd.write_summary({"status": "completed"})
    rd.write_profiles(pa.table({"agent_id": [0, 1, 2]}))
    rd.write_step("numbers", 1, _round(1))
    rd.write_partial("numbers", 2, _round(2))
    rd.consolidate("numbers")
    atomic_write(rd.path / "extra.json", b"{}")
    found = modes(rd.path)
    assert set(found) == {"config.yaml", "summary.json", "profiles.parquet", "numbers.parquet",
                          "parts/numbers-r00001.parquet", "partial/numbers-r00002.parquet",
                          "extra.json"}
    assert found == dict.fromkeys(found, umask)


# -- NaN in the summary --------------------------------------------------------------------------
def test_a_summary_with_nan_is_written_with_null(tmp_path: Path) -> None:
    rd = RunDirectory.create(tmp_path)
    rd.write_summary({"status": "completed", "steps": [
        {"step": 1, "x": float("nan"), "ys": [1.0, float("inf")], "d": {"m": -float("inf")}}]})
    assert read_summary(tmp_path)["steps"] == [{"step": 1, "x": None, "ys": [1.0, None],
                                                "d": {"m": None}}]
    assert "NaN" not in (tmp_path / "summary.json").read_text()


# -- directories create() made -------------------------------------------------------------------
def test_remove_if_empty_removes_only_what_create_made(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    rd = RunDirectory.create(tmp_path / "mine" / "new" / "run")
    rd.remove_if_empty()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]
    assert list((tmp_path / "mine").iterdir()) == []
    kept = RunDirectory.create(tmp_path / "mine")  # existed before: never removed
    kept.remove_if_empty()
    assert (tmp_path / "mine").is_dir()


def test_remove_if_empty_keeps_a_directory_with_files(tmp_path: Path) -> None:
    rd = RunDirectory.create(tmp_path / "new" / "run")
    rd.write_summary({"status": "failed"})
    rd.remove_if_empty()
    assert (tmp_path / "new" / "run" / "summary.json").exists()


def test_create_under_a_file_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "somefile").write_text("mine")
    with pytest.raises(NotADirectoryError) as e:
        RunDirectory.create(tmp_path / "somefile" / "a" / "run")
    assert e.value.strerror == f"{tmp_path / 'somefile'} is a file, not a directory"
    assert (tmp_path / "somefile").read_text() == "mine"
