"""A run's snapshot from its directory (a run that is not live): the same
:class:`~populace.results.RunSnapshot` the live monitor gives, from ``summary.json``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ._snapshot import (
    MAX_STEP_ROWS,
    AgentStates,
    Histogram,
    Progress,
    RunSnapshot,
    _distributions,
    _fork_origin,
    _row,
    _series,
    _usage,
)


def run_snapshot(run_dir: str | Path) -> RunSnapshot:
    """The same view as :meth:`RunMonitor.snapshot`, for a run that is not live, from its
    summary: metric series, the last step's distributions, status and sizes, and the model
    traffic its steps report (requests and tokens; no latency)."""
    from ._rundir import RunDirectory, read_summary

    d = Path(run_dir)
    try:
        summary = read_summary(d)
    except (OSError, ValueError):
        summary = {"status": "unknown"}
    if not isinstance(summary, dict):
        summary = {"status": "unknown"}
    entries = [e for e in (summary.get("steps") or summary.get("rounds") or [])
               if isinstance(e, Mapping)]
    rows = [_row(e) for e in entries]
    last_dists = next((e for e in reversed(entries) if e.get("distributions")), None)
    status = str(summary.get("status", "unknown"))
    status = {"done": "completed"}.get(status, status)
    error = summary.get("error")
    if status == "running" and not RunDirectory(d).in_use():
        # nobody holds the run: its process ended without a word (kill -9, a lost machine)
        status = "interrupted"
        error = error or "the process running it ended without saving its status " \
            "(killed?); continue with populace run --resume"
    agents = summary.get("agents")
    shown = rows[-1]["step"] if rows else 0
    try:
        tables = RunDirectory(d).table_names()
    except OSError:
        tables = []
    models = summary.get("models")
    return RunSnapshot(
        run_id=d.name, seq=0, status=status, error=error,
        stop_requested=False, finished=status != "running", live=False,
        name=summary.get("name") or d.name,
        agents=agents if isinstance(agents, int) else None,
        steps_planned=summary.get("steps_planned") or summary.get("rounds_planned"),
        backend=summary.get("backend"), n_workers=summary.get("workers"),
        models=tuple(str(m) for m in models) if isinstance(models, list) else (),
        run_dir=str(d), started_at=None, elapsed_s=summary.get("wall_s"),
        step=shown, steps_done=len(rows), progress=Progress(step=shown),
        states=AgentStates(idle=agents if isinstance(agents, int) else 0),
        answers=Histogram(step=shown),
        distributions=_distributions(last_dists) if last_dists is not None else {},
        series=_series(rows[-MAX_STEP_ROWS:]), llm=_usage(entries), workers=(), workers_omitted=0,
        environment={}, tables=tuple(str(t) for t in tables),
        forked_from=_fork_origin(summary))
