"""Run outputs: the run directory, streamed Parquet tables, summaries."""

from ._checkpoint import (
    CheckpointError,
    latest_checkpoint,
    read_checkpoint,
    write_checkpoint,
)
from ._rundir import RunDirectory, atomic_write, read_summary, read_table

__all__ = [
    "CheckpointError",
    "RunDirectory",
    "atomic_write",
    "latest_checkpoint",
    "read_checkpoint",
    "read_summary",
    "read_table",
    "write_checkpoint",
]
