"""An append-only on-disk cache of generated backgrounds, safe to kill at any moment.

Each run appends to a file of its own (``CACHE_DIR/bg-<time>-<pid>.jsonl``), one JSON line
per background, flushed as soon as it arrives. A run killed mid-write leaves at most one
torn last line, which the next load skips. Reading merges every file of the directory,
so resumed runs see what all earlier runs produced.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import IO, Any


def cache_key(attributes_json: str, template_digest: str, model: str, seed: int | None,
              temperature: float, max_tokens: int | None) -> str:
    """What identifies one background: the inputs that shape the model's answer."""
    blob = json.dumps([attributes_json, template_digest, model, seed, temperature, max_tokens],
                      ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


class BackgroundCache:
    """Backgrounds by :func:`cache_key`, persisted under ``directory``."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self._file: IO[str] | None = None
        self.written = 0

    def load(self) -> dict[str, dict[str, Any]]:
        """Every intact record of the directory, by key (later files win)."""
        records: dict[str, dict[str, Any]] = {}
        if not self.directory.is_dir():
            return records
        for path in sorted(self.directory.glob("bg-*.jsonl")):
            with open(path, encoding="utf-8") as f:
                for line in f:
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError:
                        continue  # a line torn by a kill
                    if isinstance(record, dict) and isinstance(record.get("key"), str):
                        records[record["key"]] = record
        return records

    def append(self, record: dict[str, Any]) -> None:
        if self._file is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            stamp = time.strftime("%Y%m%dT%H%M%S")
            path = self.directory / f"bg-{stamp}-{os.getpid()}-{time.monotonic_ns()}.jsonl"
            self._file = open(path, "a", encoding="utf-8")  # closed by close()
        self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._file.flush()
        self.written += 1

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
