"""Peak memory of a process tree, sampled: this process and every descendant.

``getrusage`` cannot see Ray's worker processes (they are children of the raylet, not of
the driver), so benchmarks sample the whole tree from /proc. Linux only; elsewhere only
this process's peak is known.

Two sums are kept. RSS counts every page each process maps, so a page shared by several
(the libraries every Ray process loads, Ray's shared-memory object store) is counted once
per process; PSS (``/proc/PID/smaps_rollup``) divides a shared page among its processes,
so its sum is the memory the tree really holds.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from pathlib import Path

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def process_tree(root: int) -> list[int]:
    """``root`` and every descendant now."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def _rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def _pss(pid: int) -> int:
    """Proportional set size in bytes (0 for a process that just ended)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


#: A sample reads PSS too when its RSS is at least this share of the highest RSS seen (the
#: PSS peak is where RSS peaks), at most every PSS_EVERY seconds: one read of a 2 GB tree
#: takes about 45 ms of kernel time, which five reads a second would take from the run.
PSS_NEAR_PEAK = 0.97
PSS_EVERY = 1.0
#: How often the process tree is found again (reading the stat file of every process on
#: the machine); in between, the known processes are sampled.
TREE_EVERY = 1.0


class PeakMemory:
    """``with PeakMemory() as peak: …`` then ``peak.mb``: the largest tree RSS seen, and
    ``peak.pss_mb``: the largest tree PSS (None where unknown). ``root``: the process whose
    tree is sampled (default this one; a child started with ``subprocess``, say)."""

    def __init__(self, interval: float = 0.2, root: int | None = None) -> None:
        self.interval = interval
        self.root = root if root is not None else os.getpid()  # whose tree: default ours
        self.peak = 0
        self.processes = 0  # the most processes the tree had at once
        self.peak_pss: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._supported = Path("/proc/self/statm").exists()
        self._has_pss = Path("/proc/self/smaps_rollup").exists()  # Linux 4.14 and later
        self._pss_at = -PSS_EVERY
        self._pids: list[int] = []
        self._pids_at = -TREE_EVERY

    def _sample(self) -> None:
        now = time.monotonic()
        if now - self._pids_at >= TREE_EVERY:  # the tree from every process's stat file
            self._pids, self._pids_at = process_tree(self.root), now
            self.processes = max(self.processes, len(self._pids))
        rss = sum(map(_rss, self._pids))
        self.peak = max(self.peak, rss)
        if self._has_pss and rss >= PSS_NEAR_PEAK * self.peak \
                and now - self._pss_at >= PSS_EVERY:
            self._pss_at = now
            self.peak_pss = max(self.peak_pss or 0, sum(map(_pss, self._pids)))

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

    @property
    def pss_mb(self) -> float | None:
        return None if self.peak_pss is None else self.peak_pss / 2**20
