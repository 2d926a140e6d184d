"""``Run.record`` takes rows as well as columns and keeps a table's schema across steps (a
change is one line naming the table, the step and the column, never a silent drop or
cast); ``Run.distribution`` counts and reports the values outside its range."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from cli_helpers import run_in_process
from populace.launch import launch, load_run_file
from populace.results import RunDirectory, read_summary, read_table

SCENARIO = '''
import os

import pyarrow as pa

from populace.launch import Scenario


class Tables(Scenario):
    """What step t records is chosen by the environment variable MODE (see the tests)."""

    async def step(self, run, t):
        mode = os.environ["MODE"]
        if mode == "rows":
            run.record("t", [{"agent": i, "word": f"w{i}"} for i in range(3)])
            run.record("t", [])
            run.record("t", {"word": ["x"], "agent": [9]})  # another order: put back
        elif mode == "added":
            columns = {"agent": [1, 2], "x": [0.5, 1.5]}
            if t >= 3:
                columns["extra"] = [7, 8]
            run.record("t", columns)
        elif mode == "removed":
            run.record("t", {"agent": [1], "x": [0.5]} if t < 3 else {"agent": [1]})
        elif mode in ("123", "v123"):
            code = [123, 456] if t < 3 else [mode, mode]
            run.record("t", {"agent": [1, 2], "code": code})
        elif mode == "in_step":
            run.record("t", {"agent": [1]})
            run.record("t", {"agent": ["one"]})
        elif mode == "nulls":
            run.record("t", [{"agent": 1, "note": None if t == 2 else f"n{t}"}])
        elif mode == "resume":
            if t == 3 and os.environ.get("FAIL_AT_3"):
                raise RuntimeError("stopped at step 3")
            run.record("t", {"agent": [1], "x": [0.5] if t < 3 else ["half"]})
        elif mode == "distribution":
            run.distribution("d", [-1.0, 0.0, 0.5, 1.0, 1.5, 2.0, float("nan")],
                             range=(0, 1), bins=2)
            run.distribution("inside", [0.0, 0.5, 1.0], range=(0, 1), bins=2)
'''


def run_file(tmp_path: Path, steps: int = 4) -> Path:
    (tmp_path / "tables.py").write_text(SCENARIO)
    path = tmp_path / "tables.yaml"
    path.write_text(yaml.safe_dump({"scenario": "tables.py:Tables", "agents": 2,
                                    "steps": steps, "seed": 1}))
    return path


def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        mode: str, *flags: str) -> tuple[int, str, Path]:
    monkeypatch.setenv("MODE", mode)
    out = tmp_path / "out"
    code, _, err = run_in_process(capsys, monkeypatch, "run", run_file(tmp_path), "--out",
                                  out, *flags)
    return code, err, out


def test_record_takes_a_list_of_rows(capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    code, err, out = cli(capsys, monkeypatch, tmp_path, "rows")
    assert code == 0, err
    table = read_table(out, "t")
    assert table.column_names == ["step", "agent", "word"]
    assert table.schema.field("agent").type == pa.int64()
    assert table.filter(pa.compute.equal(table["step"], 2)).drop(["step"]).to_pylist() == [
        {"agent": 0, "word": "w0"}, {"agent": 1, "word": "w1"}, {"agent": 2, "word": "w2"},
        {"agent": 9, "word": "x"}]
    assert table.num_rows == 4 * 4


@pytest.mark.parametrize(("mode", "says"), [
    ("added", "table 't', step 3: column 'extra' (int64) is new; its columns since step 1: "
              "step, agent, x"),
    ("removed", "table 't', step 3: column 'x' (double) is missing"),
    ("123", "table 't', step 3: column 'code' is string, but int64 since step 1"),
    ("v123", "table 't', step 3: column 'code' is string, but int64 since step 1"),
    ("in_step", "table 't', step 1: column 'agent' is string, but int64 since step 1"),
])
def test_a_table_whose_columns_change_stops_the_run_in_one_line_at_that_step(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        mode: str, says: str) -> None:
    code, err, out = cli(capsys, monkeypatch, tmp_path, mode)
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert says in lines[0] and "tables.py, line" in lines[0], lines[0]
    summary = read_summary(out)
    assert summary["status"] == "failed"
    assert [e["step"] for e in summary["steps"]] == ([] if mode == "in_step" else [1, 2])


def test_a_column_of_only_missing_values_takes_the_tables_type(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    code, err, out = cli(capsys, monkeypatch, tmp_path, "nulls")
    assert code == 0, err
    table = read_table(out, "t")
    assert table.schema.field("note").type == pa.string()
    assert table.column("note").to_pylist() == ["n1", None, "n3", "n4"]


async def test_a_resumed_run_checks_its_steps_against_the_steps_on_disk(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MODE", "resume")
    monkeypatch.setenv("FAIL_AT_3", "1")
    path, out = run_file(tmp_path), tmp_path / "out"
    with pytest.raises(Exception, match="stopped at step 3"):
        await launch(load_run_file(path), RunDirectory.create(out))
    first = read_summary(out)
    assert first["status"] == "failed" and len(first["steps"]) == 2
    monkeypatch.delenv("FAIL_AT_3")
    with pytest.raises(Exception, match="table 't', step 3: column 'x' is string, but "
                                        "double since step 1"):
        await launch(load_run_file(path), RunDirectory(out), resume=True)


def test_distribution_counts_and_warns_about_values_outside_its_range(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    code, err, out = cli(capsys, monkeypatch, tmp_path, "distribution")
    assert code == 0, err
    entry: dict[str, Any] = read_summary(out)["steps"][0]
    d = entry["distributions"]["d"]
    assert (d["counts"], d["under"], d["over"], d["n"], d["missing"]) == ([1, 2], 1, 2, 6, 1)
    assert sum(d["counts"]) + d["under"] + d["over"] == d["n"]
    inside = entry["distributions"]["inside"]
    assert (inside["under"], inside["over"]) == (0, 0)
    assert entry["warnings"] == ["distribution 'd': 3 of 6 values outside its range [0, 1] "
                                 "(1 under, 2 over), not in its histogram"]
    assert err.count("outside its range") == 4  # once per step, for 'd' only
