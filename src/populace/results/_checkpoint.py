"""Checkpoints: the state a run needs to continue, written atomically and checksummed.

A checkpoint is one file per completed round, ``RUN_DIR/checkpoints/round-NNNNN.ckpt``:
a small header line (format, SHA-256 of the body, body length) followed by the pickled body.
It is written to a temporary file, fsynced and renamed, so a crash leaves either the previous
checkpoint or the new one; a damaged file is detected by its checksum on load and the loader
falls back to the previous round.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
from pathlib import Path
from typing import Any

from populace.core import PopulaceError

from ._rundir import DamagedRunFile, open_run_file

_MAGIC = "populace-checkpoint/2"


class CheckpointError(PopulaceError):
    """A checkpoint file is missing, truncated or fails its checksum."""


def _path(run_dir: Path, round_no: int) -> Path:
    return run_dir / "checkpoints" / f"round-{round_no:05d}.ckpt"


#: Items pickled per call. One ``pickle.dumps`` of a million agents' states holds the GIL
#: for seconds, freezing every other thread (the studio's live page); slices let it breathe.
SLICE = 20_000


def _dumps(state: Any) -> bytes:
    """Pickle ``state``; a top-level list value (agents' states) goes in slices."""
    if isinstance(state, dict):
        lists = {k: v for k, v in state.items() if isinstance(v, list) and len(v) > SLICE}
        if lists:
            head = {k: v for k, v in state.items() if k not in lists}
            parts = [pickle.dumps((head, {k: len(v) for k, v in lists.items()}),
                                  protocol=pickle.HIGHEST_PROTOCOL)]
            for values in lists.values():
                for i in range(0, len(values), SLICE):
                    parts.append(pickle.dumps(values[i:i + SLICE],
                                              protocol=pickle.HIGHEST_PROTOCOL))
            return b"".join(parts)
    return pickle.dumps(({"": state}, {}), protocol=pickle.HIGHEST_PROTOCOL)


def _loads(body: bytes) -> Any:
    stream = io.BytesIO(body)
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


def write_checkpoint(run_dir: str | Path, round_no: int, state: Any) -> Path:
    """Persist ``state`` as the checkpoint after ``round_no``; durable once this returns."""
    body = _dumps(state)
    header = json.dumps({"format": _MAGIC, "round": round_no, "bytes": len(body),
                         "sha256": hashlib.sha256(body).hexdigest()}).encode() + b"\n"
    path = _path(Path(run_dir), round_no)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(header)
        f.write(body)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    # Older checkpoints are superseded; keep one spare in case the newest is damaged.
    for old in sorted(path.parent.glob("round-*.ckpt"))[:-2]:
        old.unlink(missing_ok=True)
    return path


def read_checkpoint(path: str | Path) -> tuple[int, Any]:
    """``(round, state)`` from one checkpoint file, verified; raises CheckpointError.
    A checkpoint that is not a regular file (a FIFO, a link to a device) is a
    DamagedRunFile: never read, never skipped as if it were merely damaged."""
    p = Path(path)
    try:
        with open_run_file(p) as f:
            size = os.fstat(f.fileno()).st_size
            line = f.readline(4096)
            header = json.loads(line)
            if not isinstance(header, dict) or header.get("format") != _MAGIC:
                raise CheckpointError(f"{p}: not a populace checkpoint")
            n = header.get("bytes")
            if not isinstance(n, int) or isinstance(n, bool) or n != size - len(line):
                raise CheckpointError(f"{p}: checksum mismatch (the file is damaged)")
            body = f.read(n)
    except DamagedRunFile:
        raise
    except (OSError, ValueError, RecursionError) as e:
        raise CheckpointError(f"{p}: unreadable checkpoint ({e})") from None
    if len(body) != n or hashlib.sha256(body).hexdigest() != header.get("sha256"):
        raise CheckpointError(f"{p}: checksum mismatch (the file is damaged)")
    round_no = header.get("round")
    if not isinstance(round_no, int) or isinstance(round_no, bool):
        raise CheckpointError(f"{p}: not a populace checkpoint (no round number)")
    return round_no, _loads(body)


def latest_checkpoint(run_dir: str | Path, up_to: int | None = None) -> tuple[int, Any] | None:
    """The newest valid checkpoint at or before round ``up_to`` (any round if None)."""
    directory = Path(run_dir) / "checkpoints"
    if os.path.lexists(directory) and not directory.is_dir():
        raise DamagedRunFile(f"{directory}: not a directory (the run's checkpoints belong "
                             "there); restore it, or start the run again")
    for path in sorted(directory.glob("round-*.ckpt"), reverse=True):
        try:
            round_no, state = read_checkpoint(path)
        except CheckpointError:
            continue
        if up_to is None or round_no <= up_to:
            return round_no, state
    return None
