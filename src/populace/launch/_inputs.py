"""The data files a run read, pinned by their SHA-256: a later resume, fork, interview or
report of the run reads them again, and must read what the run read.

A scenario's resolved config (``config.yaml``) names its data files by absolute path — a
social network's edge list, a survey's reference shares; a questionnaire is written inline
and needs no pin. When a run starts, every string under its resolved ``settings`` and
``population`` that is the absolute path of a regular file is hashed into
``RUN_DIR/inputs.json``. Whatever reads the
run again checks them first (:func:`check_inputs`): a file changed or gone since is one line
naming it and the key that names it, before anything of the run changes — a social run
resumed on an edge list replaced by one edge would otherwise finish on that graph.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from populace.core import ConfigError
from populace.results import RunDirectory, atomic_write

INPUTS = "inputs.json"
FORMAT = "populace-inputs/1"
#: The parts of a resolved config that name data: the scenario's settings and the
#: population (never the models: a batch command's executable is no input of the run).
_DATA = ("settings", "population")


def _strings(value: Any, key: str) -> Iterator[tuple[str, str]]:
    """``(dotted key, text)`` of every string in ``value``, without recursion."""
    stack = [(key, value)]
    while stack:
        at, node = stack.pop()
        if isinstance(node, str):
            yield at, node
        elif isinstance(node, dict):
            stack.extend((f"{at}.{k}", v) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((f"{at}.{i}", v) for i, v in enumerate(node))


def data_files(resolved: dict[str, Any]) -> dict[str, Path]:
    """``key → path`` of the data files a resolved config names (absolute paths of regular
    files), in key order."""
    found = {}
    strings = [s for part in _DATA for s in _strings(resolved.get(part), part)]
    for key, text in strings:
        if not text.startswith("/") or "\n" in text or len(text) > 4096:
            continue
        path = Path(text)
        try:
            if stat.S_ISREG(os.stat(path).st_mode):
                found[key] = path
        except (OSError, ValueError):
            continue
    return dict(sorted(found.items()))


def _digest(path: Path) -> tuple[str, int]:
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def pin_inputs(run_dir: RunDirectory, resolved: dict[str, Any]) -> None:
    """Hash the data files of ``resolved`` into ``RUN_DIR/inputs.json`` (a run that names
    none writes none)."""
    files = []
    for key, path in data_files(resolved).items():
        try:
            sha, size = _digest(path)
        except OSError as e:
            raise ConfigError(f"{path}: cannot read it ({key}): {e.strerror or e}") from None
        files.append({"key": key, "path": str(path), "sha256": sha, "bytes": size})
    if files:
        text = json.dumps({"format": FORMAT, "files": files}, indent=1)
        atomic_write(run_dir.path / INPUTS, text.encode())


def check_inputs(run_dir: Path | RunDirectory) -> None:
    """Refuse, in one line naming the file, a data file of the run that changed or is gone
    since the run read it (ConfigError); a run without ``inputs.json`` passes."""
    directory = run_dir if isinstance(run_dir, RunDirectory) else RunDirectory(run_dir)
    where = directory.path / INPUTS
    data = directory.read_file(INPUTS)
    if data is None:
        return
    try:
        pinned = json.loads(data.decode("utf-8"))
        files = [(str(f["key"]), Path(f["path"]), str(f["sha256"]), int(f["bytes"]))
                 for f in pinned["files"]]
    except (ValueError, KeyError, TypeError, RecursionError):
        raise ConfigError(f"{where}: damaged (not the run's list of data files)") from None
    for key, path, sha, size in files:
        try:
            now, bytes_now = _digest(path)
        except OSError as e:
            raise ConfigError(f"{path}: the run read it ({key}) and it is gone now "
                              f"({e.strerror or e}); put it back as it was "
                              f"(sha256 {sha[:12]}…, {size:,} bytes)") from None
        if now != sha:
            raise ConfigError(f"{path}: changed since the run read it ({key}: {size:,} bytes, "
                              f"sha256 {sha[:12]}…; now {bytes_now:,} bytes, {now[:12]}…); "
                              "restore it, or start a new run with it")
