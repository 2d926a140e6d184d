"""Peak memory of a command's process tree, process by process: RSS and PSS.

    .venv/bin/python benchmarks/process_memory.py .venv/bin/populace bench --agents 1000000 \\
        --backend ray --workers 2 --json

Runs the command, samples every process of its tree every 0.25 s (RSS and PSS from
``/proc/PID/smaps_rollup``), and prints to stderr each process's share at the moment the
tree's RSS sum was highest: which process holds what (worker actors, the central process,
Ray's own). Linux only. The command's own output is left as it is.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from populace._procmem import process_tree


def _sample(pid: int) -> tuple[str, float, float] | None:
    try:
        name = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:60]
        rss = pss = 0
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss = int(line.split()[1])
            elif line.startswith("Pss:"):
                pss = int(line.split()[1])
    except OSError:  # the process ended meanwhile
        return None
    return name.decode(errors="replace").strip(), rss / 1024, pss / 1024


def main(command: list[str]) -> int:
    proc = subprocess.Popen(command)
    peak: tuple[float, list[tuple[str, float, float]]] = (0.0, [])
    while proc.poll() is None:
        rows = [r for r in map(_sample, process_tree(proc.pid)) if r is not None]
        total = sum(r[1] for r in rows)
        if total > peak[0]:
            peak = (total, rows)
        time.sleep(0.25)
    rows = sorted(peak[1], key=lambda r: -r[1])
    print(f"peak RSS {sum(r[1] for r in rows):,.0f} MB, PSS {sum(r[2] for r in rows):,.0f} "
          f"MB, {len(rows)} processes (RSS MB, PSS MB, command):", file=sys.stderr)
    for name, rss, pss in rows:
        print(f"  {rss:7,.0f} {pss:7,.0f}  {name}", file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
