"""Peak memory of a process tree, sampled: this process and every descendant.

``getrusage`` cannot see Ray's worker processes (they are children of the raylet, not of
the driver), so benchmarks sample the whole tree from /proc. Linux only; elsewhere only
this process's peak is known.
"""

from __future__ import annotations

import os
import resource
import threading
from pathlib import Path

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _tree_rss(root: int) -> int:
    """Bytes resident in ``root`` and all its descendants now."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            statm = (entry / "statm").read_text()
        except OSError:
            continue
        pid = int(entry.name)
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(pid)
        rss[pid] = int(statm.split()[1]) * _PAGE
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo.extend(children.get(pid, ()))
    return total


class PeakMemory:
    """``with PeakMemory() as peak: …`` then ``peak.mb``: the largest tree RSS seen."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._supported = Path("/proc/self/statm").exists()

    def _sample(self) -> None:
        self.peak = max(self.peak, _tree_rss(os.getpid()))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> PeakMemory:
        if self._supported:
            self._sample()
            self._thread = threading.Thread(target=self._run, name="peak-memory", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if not self._supported:
            self.peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    @property
    def mb(self) -> float:
        return self.peak / 2**20

