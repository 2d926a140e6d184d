"""The last write of a run (issue 33): ``completed`` is written only once the consolidated
tables are, and ``--resume`` of a run whose consolidation is missing or damaged writes it
again from the step files instead of saying "already complete".

The consolidation is made to fail for real: the scenario's last step leaves a directory where
``walks.parquet`` goes, so the rename onto it fails (IsADirectoryError, as a full disk or a
read-only directory would fail it) after every step was written.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from populace.results import read_summary, read_table

WALK = '''
import os

from populace.core import Agent
from populace.launch import Run, Scenario


class Walker(Agent):
    async def walk(self, t):
        return (self.id * 7 + t) % 5


class Walk(Scenario):
    name = "walk"

    async def setup(self, run: Run) -> None:
        self.walkers = await run.create(Walker)

    async def step(self, run: Run, t: int) -> None:
        xs = await run.collect(self.walkers.map(Walker.walk, t))
        run.record("walks", {"agent_id": self.walkers.ids, "x": xs})
        if t == run.steps and os.environ.get("BLOCK"):  # where walks.parquet goes
            os.makedirs(os.path.join(run.run_dir.path, "walks.parquet", "x"))
'''


def scenario(directory: Path) -> Path:
    (directory / "walk.py").write_text(WALK)
    path = directory / "walk.yaml"
    path.write_text(yaml.safe_dump({"scenario": "walk.py:Walk", "agents": 30, "steps": 3,
                                    "seed": 2}))
    return path


def expected() -> pa.Table:
    return pa.table({"agent_id": [i for _ in range(3) for i in range(30)],
                     "x": [(i * 7 + t) % 5 for t in (1, 2, 3) for i in range(30)]})


def walks(run_dir: Path) -> pa.Table:
    return pa.parquet.read_table(run_dir / "walks.parquet").select(["agent_id", "x"])


def test_completed_is_written_only_after_the_consolidated_tables(
        tmp_path: Path, populace: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    monkeypatch.setenv("BLOCK", "1")
    status, _, stderr = populace("run", scenario(tmp_path), "--out", out,
                                 cwd=tmp_path).finish(timeout=60)
    assert status == 1, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    assert str(out) in lines[0] and "walks.parquet" in lines[0] and "Is a directory" in lines[0]
    assert lines[0].endswith(f"continue with: populace run --resume {out}")
    summary = read_summary(out)
    assert summary["status"] == "failed", summary  # was: completed, and exit 1
    assert "consolidated table could not be written" in summary["error"]
    assert [e["step"] for e in summary["steps"]] == [1, 2, 3]

    shutil.rmtree(out / "walks.parquet")  # room again
    monkeypatch.delenv("BLOCK")
    status, _, stderr = populace("run", "--resume", out, cwd=tmp_path).finish(timeout=60)
    assert (status, stderr) == (0, "")
    assert read_summary(out)["status"] == "completed"
    assert walks(out).equals(expected())


@pytest.mark.parametrize("damage", ["missing", "cut short", "garbage"])
def test_a_resume_repairs_a_missing_or_damaged_consolidation(
        tmp_path: Path, populace: Callable[..., Any], damage: str) -> None:
    out = tmp_path / "out"
    status, _, stderr = populace("run", scenario(tmp_path), "--out", out,
                                 cwd=tmp_path).finish(timeout=60)
    assert (status, stderr) == (0, "")
    whole = out / "walks.parquet"
    if damage == "missing":
        whole.unlink()
    elif damage == "cut short":
        whole.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    else:
        whole.write_bytes(b"PAR1" + b"\0" * 100 + b"PAR1")
    before = read_summary(out)
    status, stdout, stderr = populace("run", "--resume", out, cwd=tmp_path).finish(timeout=60)
    assert (status, stderr) == (0, "")
    assert "already complete: 3 of 3 steps; nothing to run; walks.parquet rewritten from " \
           "the step files" in " ".join(stdout.split())
    assert walks(out).equals(expected())
    assert read_table(out, "walks").num_rows == 90
    assert read_summary(out) == before  # the summary was right: left as it was

    status, stdout, stderr = populace("run", "--resume", out, cwd=tmp_path).finish(timeout=60)
    assert (status, stderr) == (0, "")
    assert "nothing to run, nothing changed" in " ".join(stdout.split())
