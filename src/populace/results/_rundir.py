"""The run directory: everything a run produces, written as it is produced.

Layout::

    RUN_DIR/config.yaml            the fully resolved config
    RUN_DIR/profiles.parquet       one row per agent
    RUN_DIR/parts/NAME-r00001.parquet   one file per table per round, written atomically
    RUN_DIR/NAME.parquet           all rounds of a table, consolidated when the run ends
    RUN_DIR/summary.json           per-round statistics, rewritten after every round

Round files make results durable as soon as a round finishes: a crash in round 3 keeps
rounds 1-2, and :func:`read_table` reads them whether or not consolidation happened.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_parquet(path: Path, table: pa.Table) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp, compression="zstd")
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


class RunDirectory:
    """Writes one run's outputs under ``path``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @classmethod
    def create(cls, path: str | Path) -> RunDirectory:
        """Make a new run directory; refuses one that already holds a run."""
        p = Path(path)
        if (p / "summary.json").exists() or (p / "parts").exists():
            raise FileExistsError(f"{p} already holds a run; choose another output directory")
        p.mkdir(parents=True, exist_ok=True)
        return cls(p)

    def write_config(self, config: dict[str, Any]) -> None:
        text = yaml.safe_dump(config, sort_keys=False, allow_unicode=True)
        atomic_write(self.path / "config.yaml", text.encode())

    def write_profiles(self, table: pa.Table) -> None:
        _write_parquet(self.path / "profiles.parquet", table)

    def write_round(self, name: str, round_no: int, table: pa.Table) -> Path:
        """Persist one round of table ``name``; durable once this returns."""
        path = self.path / "parts" / f"{name}-r{round_no:05d}.parquet"
        _write_parquet(path, table)
        return path

    def write_partial(self, name: str, round_no: int, table: pa.Table) -> Path:
        """Persist the rows of a round still in progress (replaced by each call, removed by
        :meth:`clear_partial` once the round is written whole)."""
        path = self.path / "partial" / f"{name}-r{round_no:05d}.parquet"
        _write_parquet(path, table)
        return path

    def clear_partial(self, name: str) -> None:
        for part in (self.path / "partial").glob(f"{name}-r*.parquet"):
            part.unlink(missing_ok=True)

    def write_summary(self, summary: dict[str, Any]) -> None:
        atomic_write(self.path / "summary.json",
                     (json.dumps(summary, indent=2, allow_nan=False) + "\n").encode())

    def read_summary(self) -> dict[str, Any]:
        return read_summary(self.path)

    def part_steps(self, name: str) -> list[int]:
        """The steps (rounds) of table ``name`` written so far, in order."""
        return sorted(int(p.stem.rsplit("r", 1)[1])
                      for p in (self.path / "parts").glob(f"{name}-r*.parquet"))

    def drop_steps_after(self, step: int) -> None:
        """Forget every table's rows after ``step`` (a resumed run plays them again)."""
        for part in (self.path / "parts").glob("*-r*.parquet"):
            if int(part.stem.rsplit("r", 1)[1]) > step:
                part.unlink()
                (self.path / f"{part.stem.rsplit('-r', 1)[0]}.parquet").unlink(missing_ok=True)

    def consolidate(self, name: str) -> Path | None:
        """Join the round files of ``name`` into ``NAME.parquet`` (None if no rounds)."""
        parts = sorted((self.path / "parts").glob(f"{name}-r*.parquet"))
        if not parts:
            return None
        out = self.path / f"{name}.parquet"
        tmp = out.with_name(f".{out.name}.tmp")
        schema = pq.read_schema(parts[0])
        with pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
            for part in parts:
                writer.write_table(pq.read_table(part, schema=schema))
        os.replace(tmp, out)
        return out


def read_table(run_dir: str | Path, name: str = "responses") -> pa.Table:
    """Table ``name`` of a run: the consolidated file, or the round files of a partial run."""
    d = Path(run_dir)
    whole = d / f"{name}.parquet"
    if whole.exists():
        return pq.read_table(whole)
    parts = sorted((d / "parts").glob(f"{name}-r*.parquet"))
    if not parts:
        raise FileNotFoundError(f"{d} has no {name}.parquet and no round files of it")
    return pa.concat_tables(pq.read_table(p) for p in parts)


def read_partial(run_dir: str | Path, name: str = "responses") -> tuple[int, pa.Table] | None:
    """``(round, rows)`` saved from a round that was still in progress, if any."""
    parts = sorted((Path(run_dir) / "partial").glob(f"{name}-r*.parquet"))
    if not parts:
        return None
    return int(parts[-1].stem.rsplit("r", 1)[1]), pq.read_table(parts[-1])


def read_summary(run_dir: str | Path) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads((Path(run_dir) / "summary.json").read_text())
    return summary
