"""Checkpoints: the state a run needs to continue, written atomically and checksummed.

A checkpoint is one file per completed step, ``RUN_DIR/checkpoints/step-NNNNN.ckpt``:
a small header line (format, step, SHA-256 of the body, body length) followed by the pickled
body. It is written to a temporary file, fsynced and renamed, so a crash leaves either the
previous checkpoint or the new one; a damaged file is detected by its checksum on load and
the loader falls back to the previous step. Earlier versions named the files
``round-NNNNN.ckpt`` and the header's step ``round``: both are still read (and counted when
older checkpoints are pruned), so their runs resume, fork and replay as before.

The body (format 3) is a sequence of pickles: the head (the state with its large lists left
out), the lists in slices of :data:`SLICE` items (every list of agents' states under
``state["agents"]``, and any other top-level list longer than a slice), and last an index:
where each slice starts, its length and CRC-32, and each group's agent ids as runs of
consecutive ids. The header says where the index is, so :func:`read_agent_state` reads the
header, the index and one slice: one agent of a million without unpickling the others.
Format 2 files (no index) are still read.
"""

from __future__ import annotations

import bisect
import hashlib
import io
import json
import os
import pickle
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from populace.core import PopulaceError

from ._rundir import DamagedRunFile, open_run_file

_MAGIC = "populace-checkpoint/3"
_OLD = "populace-checkpoint/2"  # no index: read whole
AGENTS = "agents"  # the key of agents' states: {group label: [state of each member]}


class CheckpointError(PopulaceError):
    """A checkpoint file is missing, truncated or fails its checksum."""


_PREFIXES = ("step-", "round-")  # the name written, then the one of older runs


def _path(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"{_PREFIXES[0]}{step:05d}.ckpt"


def _files(directory: Path) -> list[tuple[int, Path]]:
    """Every checkpoint file in ``directory`` as ``(step, path)``, oldest first; of two
    files for one step (an older run's and this version's), this version's last."""
    found = []
    for kind, prefix in enumerate(_PREFIXES):
        for path in directory.glob(f"{prefix}*.ckpt"):
            number = path.name[len(prefix):-len(".ckpt")]
            if number.isdigit():
                found.append((int(number), -kind, path))
    return [(step, path) for step, _, path in sorted(found)]


def checkpoint_files(run_dir: str | Path) -> dict[int, Path]:
    """The checkpoint file of each step that has one, by step, oldest first: this
    version's ``step-NNNNN.ckpt`` or an older run's ``round-NNNNN.ckpt``.

    >>> checkpoint_files("runs/demo")  # doctest: +SKIP
    {2: PosixPath('runs/demo/checkpoints/step-00002.ckpt'), 3: PosixPath(...)}
    """
    return dict(_files(Path(run_dir) / "checkpoints"))


def _step_of(path: Path, header: dict[str, Any]) -> int:
    step = header.get("step", header.get("round"))  # "round": older runs
    if not isinstance(step, int) or isinstance(step, bool):
        raise CheckpointError(f"{path}: not a populace checkpoint (no step number)")
    return step


#: Items pickled per call. One ``pickle.dumps`` of a million agents' states holds the GIL
#: for seconds, freezing every other thread (the studio's live page); slices let it breathe.
#: Small, so that reading one agent unpickles a thousand states (0.5 ms; 20,000 took 150 ms,
#: the collector running through them), and writing is no slower (measured: a little faster).
SLICE = 1_000


_PROTOCOL = pickle.HIGHEST_PROTOCOL

IdsByGroup = Mapping[str, Sequence[int] | np.ndarray]


def _id_runs(ids: np.ndarray) -> np.ndarray:
    """``ids`` as runs of consecutive ids, ``[[start, stop), …]`` (one row for a range)."""
    if not ids.size:
        return np.empty((0, 2), dtype=np.int64)
    breaks = np.flatnonzero(np.diff(ids) != 1) + 1
    starts = ids[np.concatenate(([0], breaks))]
    stops = ids[np.concatenate((breaks - 1, [ids.size - 1]))] + 1
    return np.stack([starts, stops], axis=1)


def _dumps(state: Any, ids: IdsByGroup | None = None) -> tuple[bytes, list[int]]:
    """The body of ``state``, and where its index is in it: ``[offset, length, crc32]``."""
    head = state
    lists: list[tuple[tuple[str, ...], list[Any]]] = []
    groups: list[tuple[str, int]] = []
    runs: dict[str, np.ndarray] = {}
    if isinstance(state, dict):
        head = dict(state)
        for key, value in state.items():
            if isinstance(value, list) and len(value) > SLICE:
                lists.append(((key,), value))
                head[key] = None
        agents = state.get(AGENTS)
        if isinstance(agents, dict):
            head[AGENTS] = dict(agents)
            for label, value in agents.items():
                if isinstance(value, list):
                    lists.append(((AGENTS, label), value))
                    head[AGENTS][label] = None
                    groups.append((label, len(value)))
    for label, n in groups:
        if ids is None:
            break
        if label not in ids:
            raise ValueError(f"ids: none given for the agents {label!r}")
        members = np.asarray(ids[label], dtype=np.int64).ravel()
        if members.size != n:
            raise ValueError(f"ids: {members.size} for the {n} agents {label!r}")
        runs[label] = _id_runs(members)
    parts = [pickle.dumps((head, [(path, len(values)) for path, values in lists]),
                          protocol=_PROTOCOL)]
    at = len(parts[0])
    slices = []
    for path, values in lists:
        entries = []
        for i in range(0, len(values), SLICE):
            data = pickle.dumps(values[i:i + SLICE], protocol=_PROTOCOL)
            entries.append((i, at, len(data), zlib.crc32(data)))
            parts.append(data)
            at += len(data)
        slices.append((path, entries))
    index = pickle.dumps({"slices": slices, "groups": groups, "ids": runs}, protocol=_PROTOCOL)
    parts.append(index)
    return b"".join(parts), [at, len(index), zlib.crc32(index)]


def _loads(body: bytes, form: str) -> Any:
    stream = io.BytesIO(body)
    if form == _OLD:
        return _loads_2(stream)
    head, lists = pickle.load(stream)
    for path, n in lists:
        values: list[Any] = []
        while len(values) < n:
            values.extend(pickle.load(stream))
        parent = head
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = values
    return head


def _loads_2(stream: io.BytesIO) -> Any:
    head, sizes = pickle.load(stream)
    if not sizes and list(head) == [""]:
        return head[""]
    state = dict(head)
    for key, n in sizes.items():
        values: list[Any] = []
        while len(values) < n:
            values.extend(pickle.load(stream))
        state[key] = values
    return state


def write_checkpoint(run_dir: str | Path, step: int, state: Any, *,
                     keep: int | None = 2, ids: IdsByGroup | None = None) -> Path:
    """Persist ``state`` as the checkpoint after ``step``; durable once this returns.
    ``keep``: how many of the newest checkpoints stay (None: all, so that any step can be
    forked or interviewed; at least 2, a spare in case the newest is damaged).

    ``ids``: for each group of ``state["agents"]`` (``{label: [state of each member]}``),
    its members' agent ids in the same order (``group.ids``), so that
    :func:`read_agent_state` finds an agent. Without them readers take the launcher's
    numbering: consecutive ids from 0, group after group in the order of ``state["agents"]``.
    """
    body, index = _dumps(state, ids)
    header = json.dumps({"format": _MAGIC, "step": step, "bytes": len(body),
                         "sha256": hashlib.sha256(body).hexdigest(),
                         "index": index}).encode() + b"\n"
    path = _path(Path(run_dir), step)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(header)
        f.write(body)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    if keep is not None:  # older checkpoints are superseded, an older run's among them
        for _, old in _files(path.parent)[:-max(2, keep)]:
            old.unlink(missing_ok=True)
    return path


def _body_size(p: Path, header: Any, size: int) -> int:
    """The body length ``header`` gives, checked against the ``size`` the file has left."""
    if not isinstance(header, dict) or header.get("format") not in (_MAGIC, _OLD):
        raise CheckpointError(f"{p}: not a populace checkpoint")
    n = header.get("bytes")
    if not isinstance(n, int) or isinstance(n, bool) or n != size:
        raise CheckpointError(f"{p}: checksum mismatch (the file is damaged)")
    return n


def read_checkpoint(path: str | Path) -> tuple[int, Any]:
    """``(step, state)`` from one checkpoint file, verified; raises CheckpointError.
    A checkpoint that is not a regular file (a FIFO, a link to a device) is a
    DamagedRunFile: never read, never skipped as if it were merely damaged."""
    p = Path(path)
    try:
        with open_run_file(p) as f:
            size = os.fstat(f.fileno()).st_size
            line = f.readline(4096)
            header = json.loads(line)
            n = _body_size(p, header, size - len(line))
            body = f.read(n)
    except DamagedRunFile:
        raise
    except (OSError, ValueError, RecursionError) as e:
        raise CheckpointError(f"{p}: unreadable checkpoint ({e})") from None
    if len(body) != n or hashlib.sha256(body).hexdigest() != header.get("sha256"):
        raise CheckpointError(f"{p}: checksum mismatch (the file is damaged)")
    return _step_of(p, header), _loads(body, header["format"])


def latest_checkpoint(run_dir: str | Path, up_to: int | None = None) -> tuple[int, Any] | None:
    """The newest valid checkpoint at or before step ``up_to`` (any step if None), as
    ``(step, state)``."""
    directory = Path(run_dir) / "checkpoints"
    if os.path.lexists(directory) and not directory.is_dir():
        raise DamagedRunFile(f"{directory}: not a directory (the run's checkpoints belong "
                             "there); restore it, or start the run again")
    for _, path in reversed(_files(directory)):
        try:
            step, state = read_checkpoint(path)
        except CheckpointError:
            continue
        if up_to is None or step <= up_to:
            return step, state
    return None


class _Damaged(CheckpointError):
    """This checkpoint cannot be read here; an older one may be."""


def read_agent_state(run_dir: str | Path, agent_id: int, step: int | None = None
                     ) -> tuple[int, str, Any] | None:
    """Agent ``agent_id``'s state in the checkpoint after step ``step`` (default: the
    newest one that can be read), as ``(step, group label, state)``; None when there is no
    such checkpoint or the agent is not in it.

    Reads the header, the index and the one slice that holds the agent, and checks their
    lengths and CRC-32s rather than the whole file's SHA-256 (resume still checks that). A
    damaged newest checkpoint gives way to the one before; a format-2 checkpoint is read
    whole. A state that cannot be unpickled here (a class this process cannot import)
    raises :class:`CheckpointError`.

    >>> read_agent_state("runs/demo", 17)  # doctest: +SKIP
    (3, 'Participant', {'memory': [(17, 'The answer is 33.', 'assistant', None), …]})
    """
    run = Path(run_dir)
    if not -(2**63) <= agent_id < 2**63:
        return None
    found = _files(run / "checkpoints")
    paths = [p for s, p in reversed(found) if step is None or s == step]
    for path in paths:
        try:
            return _agent_in(path, agent_id)
        except (_Damaged, DamagedRunFile, FileNotFoundError):
            continue  # (pruned meanwhile, too)
    return None


def _agent_in(path: Path, agent_id: int) -> tuple[int, str, Any] | None:
    try:
        with open_run_file(path) as f:
            size = os.fstat(f.fileno()).st_size
            line = f.readline(4096)
            header = json.loads(line)
            _body_size(path, header, size - len(line))
            step = _step_of(path, header)
            if header["format"] == _OLD:
                return _agent_in_whole(path, agent_id)
            index = pickle.loads(_part(f, path, len(line), header.get("index")))
            found = _locate(index, agent_id)
            if found is None:
                return None
            label, entry, pos = found
            data = _part(f, path, len(line), entry[1:])
    except CheckpointError as e:
        raise _Damaged(str(e)) from None
    except (OSError, ValueError, LookupError, TypeError, EOFError, pickle.UnpicklingError) as e:
        raise _Damaged(f"{path}: unreadable checkpoint ({e})") from None
    try:
        return step, label, pickle.loads(data)[pos - entry[0]]
    except Exception as e:  # the user's classes, say: one line for the viewer
        raise CheckpointError(f"{path}: cannot read the state of agent {agent_id} here "
                              f"({type(e).__name__}: {e})") from None


def _agent_in_whole(path: Path, agent_id: int) -> tuple[int, str, Any] | None:
    """From a format-2 checkpoint (no index): the whole file, the launcher's numbering."""
    step, state = read_checkpoint(path)
    groups = state.get(AGENTS) if isinstance(state, dict) else None
    start = 0
    for label, states in groups.items() if isinstance(groups, dict) else ():
        if start <= agent_id < start + len(states):
            return step, label, states[agent_id - start]
        start += len(states)
    return None


def _part(f: Any, path: Path, base: int, where: Any) -> bytes:
    """The bytes ``where`` = ``[offset, length, crc32]`` of the body points at, verified."""
    if not (isinstance(where, list | tuple) and len(where) == 3
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in where)):
        raise CheckpointError(f"{path}: no index (the header is damaged)")
    offset, length, crc = where
    f.seek(base + offset)
    data = f.read(length)
    if len(data) != length or zlib.crc32(data) != crc:
        raise CheckpointError(f"{path}: checksum mismatch (the file is damaged)")
    return bytes(data)


def _locate(index: dict[str, Any], agent_id: int
            ) -> tuple[str, tuple[int, int, int, int], int] | None:
    """(group label, the slice entry holding the agent, its position in the group)."""
    slices = dict(index["slices"])
    start = 0  # the launcher's numbering, for groups written without ids
    for label, n in index["groups"]:
        runs = index["ids"].get(label)
        if runs is None:
            runs = np.array([[start, start + n]], dtype=np.int64)
        start += n
        inside = np.flatnonzero((runs[:, 0] <= agent_id) & (agent_id < runs[:, 1]))
        if not inside.size:
            continue
        k = int(inside[0])
        pos = int((runs[:k, 1] - runs[:k, 0]).sum()) + agent_id - int(runs[k, 0])
        entries = slices[(AGENTS, label)]
        at = bisect.bisect_right([e[0] for e in entries], pos) - 1
        if not 0 <= pos < n or at < 0:
            raise CheckpointError("the index does not fit its groups (the file is damaged)")
        return label, entries[at], pos
    return None
