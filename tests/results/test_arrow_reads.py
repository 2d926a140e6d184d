"""Run files reach Arrow as Arrow's own files, never as Python objects: Arrow finishes a
read on its threads after returning, and a thread that calls into Python while the
interpreter shuts down aborts the process (apache/arrow#34314, #33975)."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from populace.core import ConfigError
from populace.results import read_table

RESULTS = Path(__file__).resolve().parents[2] / "src" / "populace" / "results" / "_rundir.py"


@pytest.fixture
def run(tmp_path: Path) -> Path:
    (tmp_path / "parts").mkdir()
    for step in (1, 2):
        pq.write_table(pa.table({"step": [step] * 3, "x": [1.0, 2.0, 3.0]}),
                       tmp_path / "parts" / f"votes-r{step:05d}.parquet")
    return tmp_path


def test_step_files_read_as_written(run: Path) -> None:
    table = read_table(run, "votes")
    assert table.column("step").to_pylist() == [1, 1, 1, 2, 2, 2]


def test_without_dev_fd_the_bytes_are_copied_into_arrow(run: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    exists = os.path.exists
    seen: list[str] = []

    def no_dev_fd(path: object) -> bool:
        if str(path).startswith("/dev/fd/"):
            seen.append(str(path))
            return False
        return exists(path)  # type: ignore[arg-type]

    monkeypatch.setattr(os.path, "exists", no_dev_fd)
    assert read_table(run, "votes").column("x").to_pylist() == [1.0, 2.0, 3.0] * 2
    assert seen  # the fallback was taken


def test_a_damaged_file_is_still_named(run: Path) -> None:
    (run / "parts" / "votes-r00002.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(ConfigError, match=r"votes-r00002\.parquet: not a readable Parquet"):
        read_table(run, "votes")


def test_no_reader_hands_arrow_a_python_object() -> None:
    """Every Parquet read of a run directory goes through ``open_arrow_file``."""
    code = RESULTS.read_text()
    assert "open_arrow_file(path) as f" in code
    for call in ("pq.read_table(", "pq.read_schema(", "pq.read_metadata("):
        for line in (ln for ln in code.splitlines() if call in ln and "def " not in ln):
            assert f"{call}f" in line, line
