"""Any scenario at scale: wall time per step and peak memory of every process together.

Runs ``populace run RUN_FILE`` as a child process (so Ray's raylet, GCS and workers are in
the sampled process tree) and prints one JSON line: creation, each step's wall time, the
rows of every table, the peak memory::

    .venv/bin/python benchmarks/run_scale.py examples/survey/million.yaml
    .venv/bin/python benchmarks/run_scale.py examples/social/million.yaml
    .venv/bin/python benchmarks/run_scale.py examples/survey/million.yaml --agents 100000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

from populace._procmem import PeakMemory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_file", type=Path)
    parser.add_argument("--agents", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None,
                        help="run directory (default: a temporary one, removed after)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp) / "run"
        command = [sys.executable, "-m", "populace.cli", "run", str(args.run_file),
                   "--out", str(out)]
        if args.agents is not None:
            command += ["--agents", str(args.agents)]
        t0 = time.perf_counter()
        with PeakMemory(interval=0.25) as peak:
            done = subprocess.run(command, stdout=subprocess.DEVNULL, check=False)
        wall = time.perf_counter() - t0
        if done.returncode != 0:
            sys.exit(f"populace run exited with {done.returncode}")
        summary = json.loads((out / "summary.json").read_text())
        rows = {name: pq.ParquetFile(out / f"{name}.parquet").metadata.num_rows
                for name in summary.get("tables", [])}
        print(json.dumps({
            "run_file": str(args.run_file), "agents": summary["agents"],
            "rows": rows, "create_s": summary.get("create_s"),
            "step_s": [s["wall_s"] for s in summary["steps"]],
            "wall_s": round(wall, 2), "peak_rss_mb": round(peak.mb, 1),
        }))


if __name__ == "__main__":
    main()
