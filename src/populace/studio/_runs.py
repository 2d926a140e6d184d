"""The runs the studio knows: past ones on disk, live ones in this process.

Every run is a directory directly under the runs directory, named by its id. Ids from
requests are checked against a strict pattern and resolved; anything that would land
outside the runs directory (``..``, absolute paths, symlinks out) is simply not found.

Runs started from the studio each get a thread with its own event loop, running the one
launcher (``launch(run_file, run_dir, monitor=...)``), so they get what ``populace run``
gives: checkpoints, recovery from a lost worker, the summary. A simulation of a million
agents keeps its loop busy for seconds at a time (creating agents, building a step's
table); on a loop of its own it cannot stall the web server, which keeps answering between
the interpreter's thread switches. Stopping is a flag on the monitor that the run checks
every tenth of a second: the step in progress is abandoned, finished steps and their
checkpoint stay on disk.
"""

from __future__ import annotations

import asyncio
import re
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from populace.core import ConfigError, PopulaceError
from populace.launch import RunFile, launch, load_run_file
from populace.results import RunDirectory, RunMonitor, run_snapshot

_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_CONFIG_SUFFIXES = (".yaml", ".yml")
_SKIP_DIRS = {"node_modules", "__pycache__", "site-packages", "build", "dist"}
MAX_CONFIGS = 200
MAX_RUNS = 500


class NotFound(PopulaceError, LookupError):
    """No such run (or an id that could not name one)."""


class Refused(PopulaceError):
    """A request the studio will not carry out; the message is one line for the user."""


@dataclass
class LiveRun:
    """A run this process is executing (started here, or attached by ``run --studio``)."""

    run_id: str
    path: Path
    monitor: RunMonitor
    thread: threading.Thread | None = None
    config: str | None = None


def _run_to_end(run: RunFile, run_dir: RunDirectory, monitor: RunMonitor) -> None:
    """Run ``run`` to its end in this thread (on an event loop of its own); the launcher
    recovers from a lost worker by resuming from the last checkpoint."""
    asyncio.run(launch(run, run_dir, monitor=monitor))  # a scenario's bug: error.txt


class Runs:
    """Past runs under ``runs_dir`` and the live runs of this process.

    ``roots``: directories that configs started from the studio must lie under (the working
    directory and the runs directory's parent, by default).
    """

    def __init__(self, runs_dir: str | Path, roots: Sequence[str | Path] | None = None
                 ) -> None:
        self.runs_dir = Path(runs_dir).resolve()
        if roots is None:
            roots = [Path.cwd(), self.runs_dir.parent]
        self.roots = list(dict.fromkeys(Path(r).resolve() for r in roots))
        self._live: dict[str, LiveRun] = {}

    # -- ids and paths -----------------------------------------------------------------------
    def path(self, run_id: str) -> Path:
        """The directory of run ``run_id``; :class:`NotFound` unless it is a run directory
        directly under the runs directory."""
        live = self._live.get(run_id)
        if live is not None:
            return live.path
        if not _RUN_ID.fullmatch(run_id):
            raise NotFound(run_id)
        p = (self.runs_dir / run_id).resolve()
        if p.parent != self.runs_dir or not p.is_dir():
            raise NotFound(run_id)
        return p

    def file(self, run_id: str, relative: str, suffixes: Sequence[str]) -> Path:
        """A file inside run ``run_id`` (for the report and what it links), checked to stay
        inside the run directory and to have one of ``suffixes``."""
        base = self.path(run_id)
        if not relative or relative.startswith(("/", "\\")) or "\\" in relative:
            raise NotFound(relative)
        p = (base / relative).resolve()
        if not p.is_relative_to(base) or p.suffix.lower() not in suffixes or not p.is_file():
            raise NotFound(relative)
        return p

    # -- listing -----------------------------------------------------------------------------
    def live(self, run_id: str) -> LiveRun | None:
        return self._live.get(run_id)

    def listing(self) -> list[dict[str, Any]]:
        """One row per run, newest first: live runs, then run directories on disk."""
        rows: dict[str, dict[str, Any]] = {}
        for live in list(self._live.values()):  # a copy: a run may start meanwhile
            row = self._row(live.path, live)
            assert row is not None
            rows[live.run_id] = row
        if self.runs_dir.is_dir():
            found = []
            for p in self.runs_dir.iterdir():
                if p.name in rows or not _RUN_ID.fullmatch(p.name) or not p.is_dir():
                    continue
                found.append((p.stat().st_mtime, p))
            for _, p in sorted(found, reverse=True)[:MAX_RUNS]:
                row = self._row(p, None)
                if row is not None:
                    rows[p.name] = row
        return sorted(rows.values(), key=lambda r: (not r["live"], -(r["modified"] or 0)))

    def _row(self, path: Path, live: LiveRun | None) -> dict[str, Any] | None:
        disk = run_snapshot(path)
        snap = live.monitor.snapshot() if live is not None else disk
        if live is None and snap.status == "unknown" and not _holds_run(path):
            return None  # a directory, not a run
        try:
            modified: float | None = path.stat().st_mtime
        except OSError:
            modified = None
        return {
            "id": path.name,
            "name": snap.name or path.name,
            "status": snap.status,
            "live": live is not None and not live.monitor.finished,
            "agents": snap.agents,
            "steps_done": snap.steps_done,
            "steps_planned": snap.steps_planned,
            "wall_s": snap.elapsed_s,
            "modified": modified,
            "report": (path / "report.html").is_file(),
            "tables": list(disk.tables),
        }

    # -- configs -----------------------------------------------------------------------------
    def configs(self) -> list[str]:
        """Run files a user may start: YAML files under the allowed roots that look like
        run files (they set ``agents`` or ``scenario``)."""
        out: list[str] = []
        for root in self.roots:
            for p in _walk(root, self.runs_dir, depth=3):
                if len(out) >= MAX_CONFIGS:
                    return out
                try:
                    head = p.read_text(errors="replace")[:4096]
                except OSError:
                    continue
                if re.search(r"^(agents|scenario):", head, re.MULTILINE):
                    name = self._display(p)
                    if name not in out:
                        out.append(name)
        return out

    def _display(self, p: Path) -> str:
        for root in self.roots:
            if p.is_relative_to(root):
                return str(p.relative_to(root))
        return str(p)

    def resolve_config(self, ref: str) -> Path:
        """The config file ``ref`` names (relative to an allowed root, or absolute inside
        one); :class:`Refused` otherwise."""
        ref = (ref or "").strip()
        if not ref or "\x00" in ref:
            raise Refused("give a run file (YAML) to start")
        candidates = [Path(ref)] if Path(ref).is_absolute() else [r / ref for r in self.roots]
        for c in candidates:
            p = c.resolve()
            if not any(p.is_relative_to(r) for r in self.roots):
                continue
            if p.suffix.lower() not in _CONFIG_SUFFIXES:
                raise Refused(f"{ref}: a run file must be .yaml or .yml")
            if p.is_file():
                return p
        where = " or ".join(str(r) for r in self.roots)
        raise Refused(f"{ref}: no such run file under {where}")

    # -- management --------------------------------------------------------------------------
    def attach(self, path: str | Path, monitor: RunMonitor) -> LiveRun:
        """Show a run that this process executes itself (``populace run --studio``)."""
        p = Path(path).resolve()
        live = LiveRun(p.name, p, monitor)
        monitor.run_id = p.name
        self._live[p.name] = live
        return live

    def start(self, ref: str, overrides: dict[str, Any] | None = None) -> LiveRun:
        """Validate run file ``ref`` (with ``overrides`` such as ``{"agents": 1000}``) and
        start it in a thread of its own; one-line :class:`Refused` errors otherwise."""
        busy = [r.run_id for r in list(self._live.values()) if not r.monitor.finished]
        if busy:
            raise Refused(f"run {busy[0]} is still going; stop it before starting another")
        path = self.resolve_config(ref)
        given = {k: v for k, v in (overrides or {}).items() if v is not None}
        if "rounds" in given:  # the form's old name for the steps of any scenario
            given.setdefault("steps", given.pop("rounds"))
        try:
            run = load_run_file(path, given)
        except ConfigError as e:
            raise Refused(str(e)) from None
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        base = re.sub(r"[^A-Za-z0-9._-]+", "-", run.name).strip("-.") or "run"
        for k in range(1, 1000):
            run_id = f"{base}-{stamp}" + (f"-{k}" if k > 1 else "")
            if not (self.runs_dir / run_id).exists() and run_id not in self._live:
                break
        else:  # pragma: no cover - a thousand runs of one name in one second
            raise Refused("cannot find a free run directory name")
        run_dir = RunDirectory.create(self.runs_dir / run_id)
        monitor = RunMonitor(run_id=run_id)
        live = LiveRun(run_id, run_dir.path.resolve(), monitor, config=self._display(path))
        live.thread = threading.Thread(target=self._execute, args=(run, run_dir, monitor),
                                       name=f"populace-run-{run_id}", daemon=True)
        self._live[run_id] = live
        live.thread.start()
        return live

    def _execute(self, run: RunFile, run_dir: RunDirectory,
                 monitor: RunMonitor) -> None:
        try:
            _run_to_end(run, run_dir, monitor)
        except (PopulaceError, OSError, ValueError) as e:  # expected: a bad server, a full disk
            monitor.run_finished("failed", f"{type(e).__name__}: {e}")
        except Exception as e:  # the scenario's code, or a bug: keep the studio up
            monitor.run_finished("failed", f"{type(e).__name__}: {e}")
            print(f"studio: run {run_dir.path.name} failed: {type(e).__name__}: {e}",
                  file=sys.stderr)

    def stop(self, run_id: str) -> LiveRun:
        """Ask live run ``run_id`` to stop; :class:`Refused` if it is not running here."""
        live = self._live.get(run_id)
        if live is None:
            self.path(run_id)  # NotFound for unknown ids
            raise Refused(f"run {run_id} is not running in this studio")
        live.monitor.request_stop()
        return live

    def shutdown(self, timeout: float = 60.0) -> None:
        """Stop every run started here and wait for them to write their results."""
        started = list(self._live.values())
        for live in started:
            if live.thread is not None and not live.monitor.finished:
                live.monitor.request_stop()
        deadline = time.monotonic() + timeout
        for live in started:
            if live.thread is not None:
                live.thread.join(max(0.0, deadline - time.monotonic()))


def _holds_run(path: Path) -> bool:
    """Does ``path`` (with no readable summary) hold a run that has not written one yet?"""
    directory = RunDirectory(path)
    try:
        return bool(directory.read_config() or directory.table_names())
    except OSError:
        return False


def _walk(root: Path, skip: Path, depth: int) -> Iterator[Path]:
    """YAML files under ``root``, ``depth`` levels deep at most, skipping hidden folders,
    virtual environments and the runs directory."""
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return
    for p in entries:
        if p.name.startswith("."):
            continue
        if p.is_dir():
            if depth > 0 and p.name not in _SKIP_DIRS and p.resolve() != skip \
                    and not (p / "pyvenv.cfg").exists():
                yield from _walk(p, skip, depth - 1)
        elif p.suffix.lower() in _CONFIG_SUFFIXES:
            yield p
