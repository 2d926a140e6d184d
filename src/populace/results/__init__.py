"""Run outputs: the run directory, streamed Parquet tables, summaries."""

from ._rundir import RunDirectory, atomic_write, read_summary, read_table

__all__ = ["RunDirectory", "atomic_write", "read_summary", "read_table"]
