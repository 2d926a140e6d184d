"""The run directory: everything a run produces, written as it is produced, and read back.

Layout::

    RUN_DIR/config.yaml                 the fully resolved run file
    RUN_DIR/profiles.parquet            one row per agent (agent_id + profile columns)
    RUN_DIR/parts/TABLE-r00001.parquet  one file per table per step, written atomically
    RUN_DIR/partial/TABLE-r00004.parquet  rows of a step still in progress
    RUN_DIR/TABLE.parquet               all steps of a table, consolidated when the run ends
    RUN_DIR/summary.json                per-step metrics, rewritten after every step

Step files make results durable as soon as a step finishes: a crash in step 3 keeps steps
1-2, and :func:`read_table` reads them whether or not consolidation happened.
:class:`RunDirectory` is the only code that knows these paths; everything else reads through
it (or the ``read_*`` functions).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import io
import json
import math
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from populace.core import ConfigError

#: The file a process writing a run holds locked (see :meth:`RunDirectory.hold`).
LOCK = ".lock"
#: The file writers of a run's management files take turns on (:meth:`RunDirectory.managing`).
MANAGE_LOCK = ".manage.lock"


def new_run_dir(parent: str | Path, base: str,
                taken: Callable[[str], bool] = lambda name: False) -> Path:
    """``PARENT/BASE-YYYYmmdd-HHMMSS``, with ``-2``, ``-3``… while that exists (or is
    ``taken``): the one form of the directories Populace names itself (runs, sweeps, forks,
    the studio's runs, comparisons), so that two started in the same second never meet."""
    import time

    stamp = time.strftime("%Y%m%d-%H%M%S")
    for k in range(1, 1000):
        path = Path(parent) / (f"{base}-{stamp}" + (f"-{k}" if k > 1 else ""))
        if not os.path.lexists(path) and not taken(path.name):
            return path
    raise FileExistsError(f"{parent}: no free name for {base}-{stamp}")  # pragma: no cover


class RunInUse(ConfigError):
    """Another process is writing this run directory (its run, or a resume of it): the
    directory does not fit this run, like a bad run file (exit 2)."""


def _new_temp(path: Path) -> Path:
    """A new empty file beside ``path``, to be written and renamed over it. Its mode is what
    the umask makes of 0666, as for every file of a run directory (``mkstemp``'s 0600 would
    hide ``summary.json`` from a group that reads the Parquet files)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        return tmp


def _replace(path: Path, write: Callable[[Path], object]) -> None:
    """``write(tmp)``, then ``tmp`` made durable and renamed to ``path``: readers see the old
    file or the new one, never half; a failure leaves no temporary file."""
    tmp = _new_temp(path)
    try:
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never half."""
    _replace(path, lambda tmp: tmp.write_bytes(data))


def _write_parquet(path: Path, table: pa.Table) -> None:
    _replace(path, lambda tmp: pq.write_table(table, tmp, compression="zstd"))


class DamagedRunFile(ConfigError, ValueError):
    """A file of a run directory that cannot be what it should: not a regular file (a FIFO,
    a device, a directory), too large, or not of its format. ``str(err)`` is one line naming
    the file; a ValueError too, so callers that skip unreadable runs catch it."""


#: The most bytes a small run file (summary.json, a checkpoint header) is read to.
SMALL_LIMIT = 256 << 20


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a plain file"


@contextmanager
def open_run_file(path: str | Path) -> Iterator[io.BufferedReader[io.FileIO]]:
    """``path`` opened for reading, binary, once it is known to be a regular file: the one
    way every reader of a run directory opens a file. A symlink is followed only by
    ``os.stat`` (a link to ``/dev/zero`` is refused, never read); the open is non-blocking,
    so a FIFO swapped in cannot hang it. FileNotFoundError when absent, DamagedRunFile when
    not a regular file."""
    p = Path(path)
    if not stat.S_ISREG(os.stat(p).st_mode):
        raise DamagedRunFile(f"{p}: not a regular file ({_kind(os.stat(p).st_mode)})")
    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise DamagedRunFile(f"{p}: not a regular file ({_kind(mode)})")
        os.set_blocking(fd, True)
        f = io.BufferedReader(io.FileIO(fd, "rb"))
    except BaseException:
        os.close(fd)
        raise
    with f:
        yield f


def read_run_bytes(path: str | Path, limit: int = SMALL_LIMIT) -> bytes:
    """The bytes of run file ``path`` (see :func:`open_run_file`), at most ``limit`` of
    them: a larger file is a DamagedRunFile."""
    with open_run_file(path) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise DamagedRunFile(f"{path}: larger than {limit:,} bytes; not a file of a run")
    return data


#: Parquet files at least this large are decoded on Arrow's threads (see read_parquet).
THREADED_READ_BYTES = 8 << 20


@contextmanager
def open_arrow_file(path: str | Path) -> Iterator[pa.NativeFile]:
    """Run file ``path``, checked as by :func:`open_run_file`, as a file Arrow reads itself.

    Never a Python object: Arrow's threads would call into it (a Python file's ``read``,
    the release of a ``bytes`` buffer), and a thread that needs the interpreter while it
    shuts down is ended with ``pthread_exit``, which aborts the process ("terminate called
    without an active exception", apache/arrow#34314: a few runs in a hundred of a
    command that exits right after reading a table). Arrow opens the checked descriptor
    again through ``/dev/fd``; where there is none, the bytes are copied into Arrow's
    memory."""
    with open_run_file(path) as f:
        again = f"/dev/fd/{f.fileno()}"
        if os.path.exists(again):
            native: pa.NativeFile = pa.OSFile(again)
        else:
            buffer = pa.allocate_buffer(os.fstat(f.fileno()).st_size)
            native = pa.BufferReader(buffer[:f.readinto(memoryview(buffer))])
        with native:
            yield native


def _parquet_error(path: str | Path, error: BaseException) -> Exception:
    """What a reader raises for ``error``: as it is when the file is absent or not a
    regular file, else a DamagedRunFile naming the file."""
    if isinstance(error, DamagedRunFile | FileNotFoundError):
        return error
    why = " ".join(str(error).split()) or type(error).__name__
    return DamagedRunFile(f"{path}: not a readable Parquet file ({why})")


def read_parquet(path: str | Path, **options: Any) -> pa.Table:
    """Parquet file ``path`` of a run directory; a file that is not one (cut short,
    garbage, not a regular file) is a DamagedRunFile naming it."""
    try:
        with open_arrow_file(path) as f:
            # A small file is decoded on this thread: no pool to start for a few rows.
            options.setdefault("use_threads", f.size() > THREADED_READ_BYTES)
            return pq.read_table(f, **options)
    except (pa.ArrowException, ValueError, OSError) as e:
        raise _parquet_error(path, e) from None


def _read_schema(path: Path) -> pa.Schema:
    try:
        with open_arrow_file(path) as f:
            return pq.read_schema(f)
    except (pa.ArrowException, ValueError, OSError) as e:
        raise _parquet_error(path, e) from None


def _sha256(path: Path) -> str | None:
    """The SHA-256 of ``path``; None when absent or unreadable, DamagedRunFile when not a
    regular file."""
    try:
        with open_run_file(path) as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except DamagedRunFile:
        raise
    except OSError:
        return None


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float (in lists and dicts too) made None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


#: Parquet files at the top of a run directory that are not per-step tables.
_NOT_TABLES = frozenset({"profiles", "backgrounds"})


def _step_of(part: Path) -> int:
    return int(part.stem.rsplit("-r", 1)[1])


def _table_of(part: Path) -> str:
    return part.stem.rsplit("-r", 1)[0]


def plain_categories(table: pa.Table) -> pa.Table:
    """``table`` with its categories (dictionary columns) as their values, so filters and
    queries compare them as text."""
    for i, field in enumerate(table.schema):
        if pa.types.is_dictionary(field.type):
            table = table.set_column(i, field.name, table.column(i).cast(field.type.value_type))
    return table


def _parts(directory: Path, name: str) -> list[Path]:
    """The step files of table ``name`` in ``directory``, in step order."""
    found = [p for p in directory.glob(f"{name}-r*.parquet") if _table_of(p) == name]
    return sorted(found, key=_step_of)


class RunDirectory:
    """Writes one run's outputs under ``path``, and reads them back (finished or partial).

    >>> rd = RunDirectory("runs/demo")                       # doctest: +SKIP
    >>> rd.table_names(), rd.read_table("votes").num_rows  # doctest: +SKIP
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._made: tuple[Path, ...] = ()  # directories create() made, deepest first

    @classmethod
    def create(cls, path: str | Path) -> RunDirectory:
        """Make a new run directory (and its missing parents); refuses one that already
        holds a run, or any file. An OS error (a parent that is a file, a read-only or
        too long path) is an :class:`OSError` whose ``strerror`` says why."""
        made = cls(path)
        missing = []
        for p in (made.path, *made.path.parents):
            if p.exists():
                if p != made.path and not p.is_dir():
                    raise NotADirectoryError(errno.ENOTDIR, f"{p} is a file, not a directory",
                                             str(made.path))
                break
            missing.append(p)
        if made.holds_run():
            raise FileExistsError(f"{made.path} already holds a run; choose another output "
                                  "directory")
        if made.path.is_dir() and any(made.path.iterdir()):
            # never write a run over someone's files (`--out .` once replaced a config.yaml)
            raise FileExistsError(f"{made.path} is not empty and holds no run; choose a new "
                                  "or empty output directory")
        if made.path.exists() and not made.path.is_dir():
            raise FileExistsError(f"{made.path} is a file; choose an output directory")
        made.path.mkdir(parents=True, exist_ok=True)
        made._made = tuple(missing)
        return made

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Hold the run directory for the run writing it: an exclusive ``flock`` on its
        ``.lock`` file, released by the kernel however the process ends (kill -9 too).
        A second process that would write the same run (two resumes at once) gets
        :class:`RunInUse`; :meth:`in_use` tells readers (the studio) whether a run said
        ``running`` is still alive."""
        path = self.path / LOCK
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 32).decode("ascii", "replace").strip() or "?"
                raise RunInUse(f"{self.path}: another process (pid {holder}) is writing this "
                               "run; wait for it to end, or stop it first") from None
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            try:
                yield
            finally:
                # Unlinked while still held: a run that failed before writing anything
                # leaves an empty directory, which remove_if_empty() takes away.
                path.unlink(missing_ok=True)
        finally:
            os.close(fd)

    @contextmanager
    def managing(self) -> Iterator[None]:
        """Take turns with every other writer of the run's management files (interviews,
        interventions), in this process or another: an exclusive ``flock`` on
        ``.manage.lock``, waited for, released by the kernel however the process ends.
        A read, change and rewrite under it loses no other writer's rows. The file is
        removed when the turn ends (a run directory keeps no trace of it): whoever was
        waiting on the removed file finds it gone once it has the lock and takes its turn
        on the path's new file instead."""
        path = self.path / MANAGE_LOCK
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    current = os.stat(path).st_ino
                except FileNotFoundError:
                    current = None
            except BaseException:
                os.close(fd)
                raise
            if current == os.fstat(fd).st_ino:
                break
            os.close(fd)  # locked a file removed meanwhile: the next holder has the path's
        try:
            yield
        finally:
            path.unlink(missing_ok=True)  # before the lock is released (see above)
            os.close(fd)

    def read_file(self, name: str, limit: int = SMALL_LIMIT) -> bytes | None:
        """The bytes of the run's file ``name``, None when absent; DamagedRunFile naming it
        when it is not a regular file (a FIFO is never opened for a blocking read) or
        larger than ``limit``."""
        try:
            return read_run_bytes(self.path / name, limit)
        except FileNotFoundError:
            return None

    def read_parquet(self, name: str) -> pa.Table | None:
        """The run's Parquet file ``name``, None when absent; DamagedRunFile naming it when
        it is not a regular file or not readable Parquet (cut short, garbage)."""
        try:
            return read_parquet(self.path / name)
        except FileNotFoundError:
            return None

    def in_use(self) -> bool:
        """Whether a process holds this run (see :meth:`hold`): a ``running`` run that is
        not in use was interrupted (killed, or its machine went down)."""
        try:
            fd = os.open(self.path / LOCK, os.O_RDONLY)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # closing drops a lock this call took
        return False

    def remove_if_empty(self) -> None:
        """Remove the directories :meth:`create` made, as long as they are empty: a run that
        failed before writing anything (its preflight) leaves nothing behind. A directory
        that existed before is never removed."""
        for directory in self._made:
            try:
                directory.rmdir()
            except OSError:
                break  # not empty (or gone): nor are its parents
        self._made = ()

    def holds_run(self) -> bool:
        """Whether a run has written here (a summary, or step files)."""
        return (self.path / "summary.json").exists() or (self.path / "parts").exists()

    @property
    def config_path(self) -> Path:
        """``config.yaml``: the resolved run file, which ``--resume`` reads back."""
        return self.path / "config.yaml"

    def write_config(self, config: dict[str, Any]) -> None:
        text = yaml.safe_dump(config, sort_keys=False, allow_unicode=True)
        atomic_write(self.config_path, text.encode())

    def write_profiles(self, table: pa.Table) -> None:
        _write_parquet(self.path / "profiles.parquet", table)

    def write_step(self, name: str, step: int, table: pa.Table) -> Path:
        """Persist step ``step`` of table ``name``; durable once this returns."""
        path = self.path / "parts" / f"{name}-r{step:05d}.parquet"
        _write_parquet(path, table)
        return path

    def part_digest(self, name: str, step: int) -> str:
        """The SHA-256 of step ``step`` of table ``name`` as it is on disk (checkpoints keep
        it, so :meth:`damaged_parts` can tell a step file that changed since)."""
        digest = _sha256(self.path / "parts" / f"{name}-r{step:05d}.parquet")
        if digest is None:
            raise FileNotFoundError(f"{self.path}: no step {step} of table {name!r}")
        return digest

    def damaged_parts(self, digests: dict[str, str]) -> list[str]:
        """Of the step files in ``digests`` (``file name → SHA-256``), those missing or
        changed since they were written, each as ``"parts/FILE (missing)"`` or
        ``"parts/FILE (damaged)"``."""
        found = []
        for file, digest in sorted(digests.items()):
            now = _sha256(self.path / "parts" / file)
            if now != digest:
                found.append(f"parts/{file} ({'missing' if now is None else 'damaged'})")
        return found

    def write_partial(self, name: str, step: int, table: pa.Table) -> Path:
        """Persist the rows of a step still in progress (replaced by each call, removed by
        :meth:`clear_partial` once the step is written whole)."""
        path = self.path / "partial" / f"{name}-r{step:05d}.parquet"
        _write_parquet(path, table)
        return path

    def clear_partial(self, name: str) -> None:
        for part in _parts(self.path / "partial", name):
            part.unlink(missing_ok=True)

    def write_summary(self, summary: dict[str, Any]) -> None:
        """Write ``summary.json``; NaN and infinities are written as null (JSON has none)."""
        try:
            text = json.dumps(summary, indent=2, allow_nan=False)
        except ValueError:  # rare: walk it only then
            text = json.dumps(_finite(summary), indent=2, allow_nan=False)
        atomic_write(self.path / "summary.json", (text + "\n").encode())

    def partial_tables(self) -> list[str]:
        """The tables with rows saved from a step still in progress."""
        return sorted({p.stem.rsplit("-r", 1)[0]
                       for p in (self.path / "partial").glob("*-r*.parquet")})

    def read_summary(self) -> dict[str, Any]:
        """``summary.json``; FileNotFoundError when absent, ValueError when unreadable."""
        return read_summary(self.path)

    def read_config(self) -> dict[str, Any]:
        """``config.yaml`` as a mapping; empty when absent or unreadable."""
        try:
            data = yaml.safe_load(read_run_bytes(self.config_path).decode("utf-8"))
        except (OSError, ValueError, yaml.YAMLError, RecursionError):
            return {}
        return data if isinstance(data, dict) else {}

    def read_profiles(self) -> pa.Table | None:
        """``profiles.parquet`` (``agent_id`` and profile columns), None when absent."""
        path = self.path / "profiles.parquet"
        try:
            return read_parquet(path)
        except FileNotFoundError:
            return None

    def table_names(self) -> list[str]:
        """The per-step tables of the run, sorted: those the summary lists and those with
        step files (a partial run's summary may lag); for a directory with neither, its
        consolidated ``TABLE.parquet`` files."""
        names = {_table_of(p) for p in (self.path / "parts").glob("*-r*.parquet")}
        try:
            listed = self.read_summary().get("tables") or []
        except (OSError, ValueError):
            listed = []
        names |= {str(n) for n in listed}
        if not names:
            names = {p.stem for p in self.path.glob("*.parquet")
                     if p.stem not in _NOT_TABLES}
        return sorted(names)

    def read_table(self, name: str | None = None) -> pa.Table:
        """Table ``name`` (default: the run's only table); see :func:`read_table`."""
        return read_table(self.path, name)

    def part_steps(self, name: str) -> list[int]:
        """The steps of table ``name`` written so far, in order."""
        return [_step_of(p) for p in _parts(self.path / "parts", name)]

    def part_schema(self, name: str) -> tuple[int, pa.Schema] | None:
        """``(step, schema)`` of the first step file of table ``name``; None if none."""
        parts = _parts(self.path / "parts", name)
        return (_step_of(parts[0]), _read_schema(parts[0])) if parts else None

    def drop_steps_after(self, step: int) -> None:
        """Forget every table's rows after ``step`` (a resumed run plays them again)."""
        for part in (self.path / "parts").glob("*-r*.parquet"):
            if _step_of(part) > step:
                part.unlink()
                (self.path / f"{_table_of(part)}.parquet").unlink(missing_ok=True)

    def consolidated(self, name: str) -> bool:
        """Whether ``NAME.parquet`` holds the step files of ``name``: it is there, its footer
        reads and it has as many rows as they do (a file cut short, or missing, does not).
        True when there are no step files."""
        parts = _parts(self.path / "parts", name)
        if not parts:
            return True
        try:
            return _rows(self.path / f"{name}.parquet") == sum(_rows(p) for p in parts)
        except (OSError, ValueError):
            return False

    def consolidate(self, name: str) -> Path | None:
        """Join the step files of ``name`` into ``NAME.parquet`` (None if no steps)."""
        parts = _parts(self.path / "parts", name)
        if not parts:
            return None
        out = self.path / f"{name}.parquet"
        schema = _read_schema(parts[0])

        def join(tmp: Path) -> None:
            with pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
                for part in parts:
                    writer.write_table(read_parquet(part, schema=schema))

        _replace(out, join)
        return out


def _rows(path: Path) -> int:
    """Rows of Parquet file ``path``, from its footer; DamagedRunFile when it has none."""
    try:
        with open_arrow_file(path) as f:
            return int(pq.read_metadata(f).num_rows)
    except (pa.ArrowException, ValueError, OSError) as e:
        raise _parquet_error(path, e) from None


def _only_table(run_dir: Path) -> str:
    names = RunDirectory(run_dir).table_names()
    if not names:
        raise FileNotFoundError(f"{run_dir} has no tables (no parts/TABLE-rNNNNN.parquet and "
                                "no TABLE.parquet)")
    if len(names) > 1:
        raise ValueError(f"{run_dir} has {len(names)} tables ({', '.join(names)}): name one")
    return names[0]


def read_table(run_dir: str | Path, name: str | None = None) -> pa.Table:
    """Table ``name`` of a run: the consolidated file, or the step files of a partial run.
    Without ``name``, the run's only table (ValueError when it has several).

    >>> read_table("runs/demo", "votes").num_rows  # doctest: +SKIP
    """
    d = Path(run_dir)
    if name is None:
        name = _only_table(d)
    whole = d / f"{name}.parquet"
    parts = _parts(d / "parts", name)
    if os.path.lexists(whole):
        table = read_parquet(whole)
        if parts and table.schema.names != _read_schema(parts[0]).names:
            raise DamagedRunFile(
                f"{whole}: its columns ({', '.join(table.schema.names[:5])}) are not those "
                f"of its step files in parts/ ({', '.join(_read_schema(parts[0]).names[:5])}"
                f"); it is not this run's {name} table: restore it, or remove it to read the "
                "step files")
        return table
    if not parts:
        raise FileNotFoundError(f"{d} has no {name}.parquet and no step files of it")
    try:
        return pa.concat_tables(read_parquet(p) for p in parts)
    except pa.ArrowInvalid as e:  # step files of different columns
        raise DamagedRunFile(f"{d / 'parts'}: the step files of {name!r} do not fit "
                             f"together ({' '.join(str(e).split())})") from None


def read_partial(run_dir: str | Path, name: str | None = None
                 ) -> tuple[int, pa.Table] | None:
    """``(step, rows)`` saved from a step that was still in progress, if any. Without
    ``name``: the only table with such rows (ValueError when several have). A damaged file
    (cut short by a full disk) is a ValueError naming it."""
    d = Path(run_dir) / "partial"
    if name is None:
        names = sorted({_table_of(p) for p in d.glob("*-r*.parquet")})
        if len(names) > 1:
            raise ValueError(f"{d} holds rows of {len(names)} tables ({', '.join(names)}): "
                             "name one")
        if not names:
            return None
        name = names[0]
    parts = _parts(d, name)
    if not parts:
        return None
    try:
        return _step_of(parts[-1]), read_parquet(parts[-1])
    except DamagedRunFile as e:
        if "not a regular file" in str(e):
            raise
        raise DamagedRunFile(f"partial/{parts[-1].name} is damaged (not a readable Parquet "
                             "file)") from None


def read_summary(run_dir: str | Path) -> dict[str, Any]:
    """``RUN_DIR/summary.json``; FileNotFoundError when absent, a DamagedRunFile (a
    ValueError) naming it when it is not a regular file, not JSON, or not of a summary's
    shape (an object; ``steps`` a list of objects, ``tables`` a list, ``wall_s`` a number)."""
    path = Path(run_dir) / "summary.json"
    data = read_run_bytes(path)
    try:
        summary = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise DamagedRunFile(f"{path}: too deeply nested to be a run summary") from None
    except ValueError as e:  # not UTF-8, not JSON
        raise DamagedRunFile(f"{path}: not valid JSON ({e})") from None
    if not isinstance(summary, dict):
        raise DamagedRunFile(f"{path}: a JSON {type(summary).__name__}, not an object: not a "
                             "run summary")
    steps = summary.get("steps", [])
    if not isinstance(steps, list) or not all(isinstance(e, dict) for e in steps):
        raise DamagedRunFile(f"{path}: 'steps' must be a list of objects, not "
                             f"{type(steps).__name__}: not a run summary")
    if not isinstance(summary.get("tables", []), list):
        raise DamagedRunFile(f"{path}: 'tables' must be a list: not a run summary")
    wall = summary.get("wall_s", 0.0)
    if wall is not None and (isinstance(wall, bool) or not isinstance(wall, int | float)):
        raise DamagedRunFile(f"{path}: 'wall_s' must be a number: not a run summary")
    return summary
