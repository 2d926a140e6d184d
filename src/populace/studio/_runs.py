"""The runs the studio knows: past ones on disk, live ones in this process.

Every run is a directory directly under the runs directory, named by its id. Ids from
requests are checked against a strict pattern and resolved; anything that would land
outside the runs directory (``..``, absolute paths, symlinks out) is simply not found.

The run files the studio lists and the ones it starts follow one rule (``Runs._hidden``):
a regular ``.yaml``/``.yml`` file of at most 1 MiB under the working directory or the runs
directory, at most three folders deep, not hidden, not in a skipped folder (hidden ones,
``node_modules``, virtual environments, …), not inside a run directory, reached through no
linked folder and, if it is a link itself, linking inside those directories; its first
64 KiB set ``agents:`` or ``scenario:``. The listing looks at a bounded number of directory
entries and lists at most ``MAX_CONFIGS`` files.

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
import itertools
import json
import os
import re
import stat
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from populace.core import ConfigError, PopulaceError
from populace.launch import RunControl, RunFile, fork, launch, load_run_file
from populace.results import RunDirectory, RunMonitor, new_run_dir, run_snapshot

_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_CONFIG_SUFFIXES = (".yaml", ".yml")
_SKIP_DIRS = {"node_modules", "__pycache__", "site-packages", "build", "dist"}
_RUN_FILE_KEY = re.compile(rb"^(agents|scenario):", re.MULTILINE)
# Opening never blocks (a FIFO) and never follows a last link (the target was checked).
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) \
    | getattr(os, "O_CLOEXEC", 0)
MAX_CONFIGS = 500            # run files listed
MAX_CONFIG_DEPTH = 3         # folders between a root and a run file
MAX_CONFIG_ENTRIES = 20_000  # directory entries one listing looks at, per root
CONFIG_HEAD = 64 * 1024      # bytes read of a file to tell whether it is a run file
MAX_RUN_FILE = 1 << 20       # bytes: `populace run` reads a run file whole
MAX_RUNS = 500


class NotFound(PopulaceError, LookupError):
    """No such run (or an id that could not name one)."""


class Refused(PopulaceError):
    """A request the studio will not carry out; the message is one line for the user."""


class Damaged(PopulaceError):
    """A run directory whose ``summary.json`` cannot be read as a summary; the message is
    the one-line reason."""


@dataclass
class LiveRun:
    """A run this process is executing (started here, or attached by ``run --studio``)."""

    run_id: str
    path: Path
    monitor: RunMonitor
    thread: threading.Thread | None = None
    config: str | None = None
    control: RunControl | None = None  # the studio's way in: agents read, asked, changed


def _run_to_end(run: RunFile, run_dir: RunDirectory, monitor: RunMonitor,
                control: RunControl, resume: bool) -> None:
    """Run ``run`` to its end in this thread (on an event loop of its own); the launcher
    recovers from a lost worker by resuming from the last checkpoint."""
    asyncio.run(launch(run, run_dir, monitor=monitor, control=control,
                       resume=resume))  # a scenario's bug: error.txt


class Runs:
    """Past runs under ``runs_dir`` and the live runs of this process.

    ``roots``: directories that configs started from the studio must lie under (the working
    directory and the runs directory, by default; never a run directory inside them).
    """

    def __init__(self, runs_dir: str | Path, roots: Sequence[str | Path] | None = None
                 ) -> None:
        self.runs_dir = Path(runs_dir).resolve()
        if roots is None:
            roots = [Path.cwd(), self.runs_dir]
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
        if not relative or relative.startswith(("/", "\\")) or "\\" in relative \
                or "\x00" in relative:
            raise NotFound(relative)
        try:
            p = (base / relative).resolve()
            found = p.is_relative_to(base) and p.suffix.lower() in suffixes \
                and stat.S_ISREG(p.stat().st_mode)
        except (OSError, RuntimeError):  # a name too long, a link loop
            found = False
        if not found:
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

    def check(self, run_id: str) -> Path:
        """The directory of run ``run_id`` (:meth:`path`), :class:`Damaged` when it is not
        live and its summary cannot be read."""
        p = self.path(run_id)
        if run_id not in self._live:
            why = summary_problem(p)
            if why is not None:
                raise Damaged(f"run {run_id} is damaged: {why}")
        return p

    def _row(self, path: Path, live: LiveRun | None) -> dict[str, Any] | None:
        why = summary_problem(path) if live is None else None
        if why is not None:
            try:
                modified: float | None = path.stat().st_mtime
            except OSError:
                modified = None
            return {"id": path.name, "name": path.name, "status": "damaged", "error": why,
                    "live": False, "agents": None, "steps_done": 0, "steps_planned": None,
                    "wall_s": None, "modified": modified, "report": False, "tables": []}
        disk = run_snapshot(path)
        snap = live.monitor.snapshot() if live is not None else disk
        if live is None and snap.status == "unknown" and not _holds_run(path):
            return None  # a directory, not a run
        try:
            modified = path.stat().st_mtime
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
        """Run files a user may start (the rule in the module docstring), sorted per
        folder, at most ``MAX_CONFIGS`` of them."""
        out: dict[str, None] = {}
        for root in self.roots:
            for p in self._walk(root):
                if len(out) >= MAX_CONFIGS:
                    return list(out)
                if self._not_run_file(p) is None:
                    out.setdefault(self._display(p))
        return list(out)

    def _walk(self, root: Path) -> Iterator[Path]:
        """Paths of YAML files under ``root``, in folders the rule lets in, in order;
        ``MAX_CONFIG_ENTRIES`` directory entries looked at in all."""
        budget = MAX_CONFIG_ENTRIES

        def walk(d: Path, depth: int) -> Iterator[Path]:
            nonlocal budget
            try:
                with os.scandir(d) as it:
                    entries = sorted((e.name, e.is_dir(follow_symlinks=False))
                                     for e in itertools.islice(it, max(0, budget)))
            except OSError:
                return
            budget -= len(entries)
            for name, is_dir in entries:
                p = d / name
                if not is_dir:
                    if p.suffix.lower() in _CONFIG_SUFFIXES:
                        yield p
                elif depth < MAX_CONFIG_DEPTH and self._skipped(p) is None:
                    yield from walk(p, depth + 1)

        yield from walk(root, 0)

    def _in_run_dir(self, p: Path) -> bool:
        return p.is_relative_to(self.runs_dir) and len(p.relative_to(self.runs_dir).parts) > 1

    def _skipped(self, d: Path) -> str | None:
        """Why the rule keeps out of folder ``d`` (under a root); None if it does not."""
        if d.parent == self.runs_dir:
            return f"it lies in run directory {d.name}"
        if d.name.startswith("."):
            return f"{d.name}/ is hidden"
        if d.name in _SKIP_DIRS:
            return f"{d.name}/ is skipped"
        try:
            mode = d.lstat().st_mode
        except OSError:
            return f"{d.name}/ cannot be read"
        if stat.S_ISLNK(mode):
            return f"{d.name}/ is a link"
        if not stat.S_ISDIR(mode):
            return f"{d.name} is not a folder"
        if (d / "pyvenv.cfg").exists():
            return f"{d.name}/ is a virtual environment"
        return None

    def _not_run_file(self, p: Path) -> str | None:
        """Why file ``p`` (in a folder the rule lets in) is not a run file; None if it is."""
        if p.name.startswith("."):
            return "it is hidden"
        if p.suffix.lower() not in _CONFIG_SUFFIXES:
            return "it is not .yaml or .yml"
        if self._in_run_dir(p):
            return f"it lies in run directory {p.relative_to(self.runs_dir).parts[0]}"
        try:
            target = p.resolve(strict=True)
        except (OSError, RuntimeError):  # gone, a broken link, a link loop
            return "it cannot be read"
        if target != p and (self._in_run_dir(target)
                            or not any(target.is_relative_to(r) for r in self.roots)):
            return "it links outside the folders the studio reads"
        try:
            if not stat.S_ISREG(target.stat().st_mode):
                return "it is not a regular file"
            fd = os.open(target, _OPEN_FLAGS)
        except OSError:
            return "it cannot be read"
        try:
            info = os.fstat(fd)  # what was opened, whatever the path names by now
            if not stat.S_ISREG(info.st_mode):
                return "it is not a regular file"
            if info.st_size > MAX_RUN_FILE:
                return f"it is over {MAX_RUN_FILE >> 20} MiB"
            head = os.read(fd, CONFIG_HEAD)
        except OSError:
            return "it cannot be read"
        finally:
            os.close(fd)
        if not _RUN_FILE_KEY.search(head):
            return f"its first {CONFIG_HEAD >> 10} KiB set neither agents nor scenario"
        return None

    def _hidden(self, root: Path, p: Path) -> str | None:
        """Why the listing would not show ``p`` (lexically under ``root``); None if it
        would (the cap on the number listed aside)."""
        folders = p.relative_to(root).parts[:-1]
        if len(folders) > MAX_CONFIG_DEPTH:
            return f"it is more than {MAX_CONFIG_DEPTH} folders deep"
        d = root
        for part in folders:
            d = d / part
            why = self._skipped(d)
            if why is not None:
                return why
        return self._not_run_file(p)

    def _display(self, p: Path) -> str:
        for root in self.roots:
            if p.is_relative_to(root):
                return str(p.relative_to(root))
        return str(p)

    def resolve_config(self, ref: str) -> Path:
        """The config file ``ref`` names (relative to an allowed root, or absolute inside
        one), if the listing would show it; :class:`Refused` otherwise."""
        ref = (ref or "").strip()
        if not ref or "\x00" in ref:
            raise Refused("give a run file (YAML) to start")
        given = Path(ref)
        candidates: list[tuple[Path, Path]]
        if ".." in given.parts:
            candidates = []
        elif given.is_absolute():
            candidates = [(r, given) for r in self.roots if given.is_relative_to(r)]
        else:
            candidates = [(r, r / given) for r in self.roots]
        why = None
        for root, p in candidates:
            if p.suffix.lower() not in _CONFIG_SUFFIXES:
                raise Refused(f"{ref}: a run file must be .yaml or .yml")
            if not os.path.lexists(p):  # False for names the system refuses, too
                continue
            reason = self._hidden(root, p)
            if reason is None:
                return p.resolve()
            why = why or reason
        if why is not None:
            raise Refused(f"{ref}: not a run file the studio lists ({why})")
        where = " or ".join(str(r) for r in self.roots)
        raise Refused(f"{ref}: no such run file under {where}")

    # -- management --------------------------------------------------------------------------
    def attach(self, path: str | Path, monitor: RunMonitor,
               control: RunControl | None = None) -> LiveRun:
        """Show a run that this process executes itself (``populace run --studio``)."""
        p = Path(path).resolve()
        live = LiveRun(p.name, p, monitor, control=control)
        monitor.run_id = p.name
        monitor.forked_from = run_snapshot(p).forked_from  # a fork says so from the start
        self._live[p.name] = live
        return live

    def start(self, ref: str, overrides: dict[str, Any] | None = None) -> LiveRun:
        """Validate run file ``ref`` (with ``overrides`` such as ``{"agents": 1000}``) and
        start it in a thread of its own; one-line :class:`Refused` errors otherwise."""
        self._not_busy()
        path = self.resolve_config(ref)
        given = {k: v for k, v in (overrides or {}).items() if v is not None}
        if "rounds" in given:  # the form's old name for the steps of any scenario
            given.setdefault("steps", given.pop("rounds"))
        try:
            run = load_run_file(path, given)
        except ConfigError as e:
            raise Refused(str(e)) from None
        except (KeyboardInterrupt, asyncio.CancelledError):
            raise
        except BaseException as e:  # a scenario's code run on import: SystemExit, a bug
            frames = traceback.extract_tb(e.__traceback__)
            where = f" in {Path(frames[-1].filename).name} line {frames[-1].lineno}" \
                if frames else ""
            text = " ".join(str(e).split())[:200]
            raise Refused(f"{ref}: loading it raised {type(e).__name__}"
                          f"{f': {text}' if text else ''}{where}") from None
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        run_id = self._free_id(re.sub(r"[^A-Za-z0-9._-]+", "-", run.name).strip("-.") or "run")
        run_dir = RunDirectory.create(self.runs_dir / run_id)
        return self._begin(run_id, run, run_dir, self._display(path), resume=False)

    def fork(self, run_id: str, step: int, sets: dict[str, Any]) -> LiveRun:
        """Start a fork of run ``run_id`` after ``step`` with ``sets`` changed (dotted keys)
        as a live run of its own; one-line errors (:class:`Refused`) otherwise."""
        self._not_busy()
        source = self.check(run_id)
        fork_id = self._free_id(f"{run_id}-fork{step}"[:100])
        try:
            run = fork(source, step, sets, self.runs_dir / fork_id)
        except ConfigError as e:  # the run as the page names it, not a path on the server
            raise Refused(str(e).replace(str(source), run_id)) from None
        return self._begin(fork_id, run, RunDirectory(self.runs_dir / fork_id),
                           f"fork of {run_id} after step {step}", resume=True)

    def _not_busy(self) -> None:
        busy = [r.run_id for r in list(self._live.values()) if not r.monitor.finished]
        if busy:
            raise Refused(f"run {busy[0]} is still going; stop it before starting another")

    def _free_id(self, base: str) -> str:
        # a run started is live before its directory is made
        return new_run_dir(self.runs_dir, base, taken=self._live.__contains__).name

    def _begin(self, run_id: str, run: RunFile, run_dir: RunDirectory, config: str,
               *, resume: bool) -> LiveRun:
        monitor = RunMonitor(run_id=run_id)
        monitor.forked_from = run_snapshot(run_dir.path).forked_from
        live = LiveRun(run_id, run_dir.path.resolve(), monitor, config=config,
                       control=RunControl())
        live.thread = threading.Thread(target=self._execute,
                                       args=(run, run_dir, monitor, live.control, resume),
                                       name=f"populace-run-{run_id}", daemon=True)
        self._live[run_id] = live
        live.thread.start()
        return live

    def _execute(self, run: RunFile, run_dir: RunDirectory, monitor: RunMonitor,
                 control: RunControl, resume: bool) -> None:
        try:
            _run_to_end(run, run_dir, monitor, control, resume)
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


MAX_SUMMARY = 64 << 20  # bytes of a summary.json the studio reads


def summary_problem(run_dir: Path) -> str | None:
    """Why ``run_dir/summary.json`` cannot be read as a summary (one line); None when it is
    a JSON object, or absent (a run that has not written one yet). Never blocks: anything
    but a regular file is refused before it is opened, and it is opened non-blocking."""
    path = run_dir / "summary.json"
    try:
        info = path.lstat()
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"summary.json cannot be read ({e.strerror or type(e).__name__})"
    if stat.S_ISLNK(info.st_mode):
        try:
            info = path.stat()
        except OSError:
            return "summary.json is a broken link"
    if not stat.S_ISREG(info.st_mode):
        return "summary.json is not a regular file"
    if info.st_size > MAX_SUMMARY:
        return f"summary.json is over {MAX_SUMMARY >> 20} MiB"
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        return f"summary.json cannot be read ({e.strerror or type(e).__name__})"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced since the check
            return "summary.json is not a regular file"
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(MAX_SUMMARY + 1)
    except OSError as e:
        return f"summary.json cannot be read ({e.strerror or type(e).__name__})"
    finally:
        os.close(fd)
    try:
        summary = json.loads(data)
    except RecursionError:
        return "summary.json is nested too deeply"
    except ValueError as e:  # not JSON, not UTF-8
        return f"summary.json is not valid JSON ({' '.join(str(e).split())[:100]})"
    if not isinstance(summary, dict):
        return f"summary.json is not a JSON object (a {type(summary).__name__})"
    return None


def _holds_run(path: Path) -> bool:
    """Does ``path`` (with no readable summary) hold a run that has not written one yet?"""
    directory = RunDirectory(path)
    try:
        return bool(directory.read_config() or directory.table_names())
    except OSError:
        return False
