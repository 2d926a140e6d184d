"""An agent's mind at scale: how long the studio takes to show one agent of a million.

    .venv/bin/python benchmarks/studio_mind.py --agents 1000000 --rounds 2 --workers 2 --backend ray

Plays the guessing game with ``populace run`` in a child process (so Ray's processes are
apart from the one measured): the scripted model (``latency`` seconds a call, like the
dummy model's wait; the dummy model itself is not recorded, so its agents have no calls to
show), a population of two aspects, one call per agent and round (``protocol: direct``).
Then times :meth:`populace.studio.AgentBrowser.mind` for ``--samples`` random agents in this
process, the way the studio's endpoint calls it, and prints one JSON line: the run's wall
time and files, the first mind (which reads the profile table into the browser's cache),
the median and the slowest of all, and the size of the JSON the endpoint sends.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from populace.studio import AgentBrowser

RUN_FILE = """\
scenario: guess_number
name: studio-mind
seed: 1
agents: {agents}
rounds: {rounds}
workers: {workers}
backend: {backend}
models:
  scripted: {{provider: scripted, latency: {latency}}}
population:
  aspects:
    profession:
      values: [economist, artist, writer, athlete]
    education:
      values: [high school, bachelor, master, doctorate]
game:
  protocol: direct
"""


def size_mb(paths: list[Path]) -> float:
    return round(sum(p.stat().st_size for p in paths) / 2**20, 1)


def measure(run: Path, agents: int, samples: int, seed: int) -> dict[str, object]:
    browser = AgentBrowser()
    ids = np.random.default_rng(seed).choice(agents, size=samples, replace=False).tolist()
    seconds, sizes, calls, memory = [], [], [], []
    for agent_id in ids:
        t0 = time.perf_counter()
        mind = browser.mind(run, agent_id)
        body = json.dumps(mind, separators=(",", ":"))  # as the endpoint sends it
        seconds.append(time.perf_counter() - t0)
        sizes.append(len(body))
        calls.append(len(mind["calls"]))
        memory.append(len(mind["state"]["memory"]) if mind["state"] else 0)
    return {"samples": samples, "first_s": round(seconds[0], 4),
            "median_s": round(statistics.median(seconds), 4), "max_s": round(max(seconds), 4),
            "max_after_first_s": round(max(seconds[1:]), 4) if samples > 1 else None,
            "json_median_bytes": int(statistics.median(sizes)), "json_max_bytes": max(sizes),
            "calls_per_agent": sorted(set(calls)), "memory_items": sorted(set(memory))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--backend", default="ray")
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0, help="which agents are sampled")
    parser.add_argument("--out", type=Path, default=None,
                        help="run directory (default: a temporary one, removed after); an "
                        "existing run there is measured without playing it again")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = args.out or Path(tmp) / "run"
        wall = None
        if not (run / "summary.json").is_file():
            run_file = Path(tmp) / "mind.yaml"
            run_file.write_text(RUN_FILE.format(**vars(args)))
            t0 = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "populace.cli", "run",
                                   str(run_file), "--out", str(run)],
                                  stdout=subprocess.DEVNULL, check=False)
            wall = round(time.perf_counter() - t0, 1)
            if done.returncode != 0:
                sys.exit(f"populace run exited with {done.returncode}")
        summary = json.loads((run / "summary.json").read_text())
        result = measure(run, summary["agents"], args.samples, args.seed)
        print(json.dumps({
            "agents": summary["agents"], "rounds": len(summary["steps"]),
            "workers": args.workers, "backend": args.backend, "run_wall_s": wall,
            "call_log_mb": size_mb(list((run / "llm_calls").glob("*.jsonl"))),
            "index_mb": size_mb(list((run / "llm_calls").glob("*.agents"))),
            "checkpoint_mb": size_mb(list((run / "checkpoints").glob("*.ckpt"))),
            **result}))


if __name__ == "__main__":
    main()
