"""Run outputs: the run directory, streamed Parquet tables, summaries, reports.

``load_run`` reads a run (finished or partial) for analysis; ``write_report`` turns a run or
sweep directory into PNG figures and a self-contained ``report.html``; ``write_comparison``
puts several runs side by side. Figures need matplotlib, imported only when drawing.
"""

from ._checkpoint import (
    CheckpointError,
    latest_checkpoint,
    read_checkpoint,
    write_checkpoint,
)
from ._compare import Comparison, write_comparison
from ._monitor import RunMonitor, run_snapshot
from ._report import Report, sweep_table, write_report
from ._rundir import RunDirectory, atomic_write, read_partial, read_summary, read_table
from ._runs import RunData, headline, load_run

__all__ = [
    "CheckpointError",
    "Comparison",
    "Report",
    "RunData",
    "RunDirectory",
    "RunMonitor",
    "atomic_write",
    "headline",
    "latest_checkpoint",
    "load_run",
    "read_checkpoint",
    "read_partial",
    "read_summary",
    "read_table",
    "run_snapshot",
    "sweep_table",
    "write_checkpoint",
    "write_comparison",
    "write_report",
]
