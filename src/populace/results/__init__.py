"""Run outputs: the run directory, streamed Parquet tables, summaries, reports.

Nothing here knows a scenario. :class:`RunDirectory` owns the layout, for writing and for
reading; ``load_run`` reads a run of any scenario (finished or partial) for analysis: its
metric series, declared distributions, tables, profiles and :class:`Breakdown` s of any
per-agent column by any profile column. ``write_report`` turns a run or sweep directory into
PNG figures and a self-contained ``report.html`` (plus a scenario's own figures, passed in);
``write_comparison`` puts several runs side by side. Figures need matplotlib, imported only
when drawing.
"""

from ._checkpoint import (
    CheckpointError,
    checkpoint_files,
    latest_checkpoint,
    read_agent_state,
    read_checkpoint,
    write_checkpoint,
)
from ._compare import Comparison, write_comparison
from ._grid import panel_grid
from ._monitor import RunMonitor
from ._report import Report, sweep_table, write_report
from ._rundir import (
    RunDirectory,
    RunInUse,
    atomic_write,
    new_run_dir,
    plain_categories,
    read_partial,
    read_summary,
    read_table,
)
from ._runs import Breakdown, RunData, headline, load_run
from ._snapshot import RunSnapshot, error_kind
from ._stored import run_snapshot

__all__ = [
    "Breakdown",
    "CheckpointError",
    "Comparison",
    "Report",
    "RunData",
    "RunDirectory",
    "RunInUse",
    "RunMonitor",
    "RunSnapshot",
    "atomic_write",
    "checkpoint_files",
    "error_kind",
    "headline",
    "latest_checkpoint",
    "load_run",
    "new_run_dir",
    "panel_grid",
    "plain_categories",
    "read_agent_state",
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
