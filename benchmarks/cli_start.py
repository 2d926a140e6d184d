"""CPU of starting the ``populace`` command (``import populace.cli``), trees side by side.

Every command a user types, and each of the hundreds of processes the test suite starts,
pays this first. Each tree's ``src`` is copied (``git archive``) to a temporary directory,
run as is (no bytecode: what every process paid where PYTHONDONTWRITEBYTECODE=1 is set,
as in this sandbox) or compiled first (``compileall``: a normal Python, or ``make test``),
and the configurations take turns, ``--repeat`` times each. Prints the median CPU seconds
(user + system, of the child alone) per configuration.

    .venv/bin/python benchmarks/cli_start.py --tree 94bc0ea --tree HEAD --repeat 15
"""

from __future__ import annotations

import argparse
import compileall
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def export(commit: str, into: Path) -> Path:
    """``commit``'s ``src`` in ``into``; returns the directory to put on PYTHONPATH."""
    data = subprocess.run(["git", "archive", commit, "src"], cwd=ROOT, check=True,
                          capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def cpu_of(src: Path, cached: bool) -> float:
    env = {**os.environ, "PYTHONPATH": str(src)}
    if not cached:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    pid = os.posix_spawn(sys.executable, [sys.executable, "-c", "import populace.cli"], env)
    _, status, usage = os.wait4(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", required=True, help="a commit (repeatable)")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        configs: dict[str, tuple[Path, bool]] = {}
        for i, commit in enumerate(args.tree):
            plain = export(commit, Path(tmp) / f"{i}-plain")
            compiled = export(commit, Path(tmp) / f"{i}-compiled")
            assert compileall.compile_dir(compiled, quiet=1)
            configs[f"{commit}, no bytecode"] = (plain, False)
            configs[f"{commit}, compiled"] = (compiled, True)
        for src, cached in configs.values():  # warm the disk cache
            cpu_of(src, cached)
        times: dict[str, list[float]] = {name: [] for name in configs}
        for _ in range(args.repeat):
            for name, (src, cached) in configs.items():
                times[name].append(cpu_of(src, cached))
        first = statistics.median(next(iter(times.values())))
        for name, t in times.items():
            m = statistics.median(t)
            print(f"{name:32} median {m:.3f} CPU-s (min {min(t):.3f}, max {max(t):.3f}), "
                  f"{m / first:.2f} of the first")


if __name__ == "__main__":
    main()
