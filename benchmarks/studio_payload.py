"""The studio's live page under load: update payload size and update rate during a big run.

    .venv/bin/python benchmarks/studio_payload.py --agents 1000000 --rounds 3 --workers 2

Runs the guessing game on the dummy model (as ``populace run --studio`` does: the run on the
main thread, the studio in a thread of its own) while a client reads the live run's
server-sent events, as the browser's EventSource does. Reports the largest and the median
update, the gaps between updates (the page asks for two a second), and the round times, with
and without the studio, from the same process.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import threading
import time
from pathlib import Path
from tempfile import TemporaryDirectory

import httpx

from populace.launch import RunFile, parse_run_file
from populace.results import RunDirectory, RunMonitor
from populace.scenarios.guess_number import Timings, play
from populace.studio import Runs, StudioServer


def read_events(url: str, out: list[tuple[float, int, str]], stop: threading.Event) -> None:
    """Every ``data:`` line of the stream: (arrival time, bytes, run status)."""
    with httpx.Client(timeout=None) as client, client.stream("GET", url) as response:
        for line in response.iter_lines():
            if line.startswith("data:") and line != "data: {}":
                out.append((time.perf_counter(), len(line) - 5,
                            json.loads(line[5:])["status"]))
            if stop.is_set():
                return


def run(config: RunFile, studio: bool, root: Path) -> dict[str, object]:
    timings = Timings()
    run_dir = RunDirectory.create(root / "runs" / f"bench-{time.time_ns()}")
    if not studio:
        asyncio.run(play(config, run_dir, None, timings))
        return {"round_s": [round(w, 2) for w in timings.round_wall_s]}
    runs = Runs(root / "runs")
    monitor = RunMonitor()
    live = runs.attach(run_dir.path, monitor)
    server = StudioServer(runs, port=0, interval=0.5)
    server.start()
    events: list[tuple[float, int, str]] = []
    done = threading.Event()
    reader = threading.Thread(target=read_events, args=(
        f"http://127.0.0.1:{server.port}/api/runs/{live.run_id}/events", events, done))
    reader.start()
    try:
        asyncio.run(play(config, run_dir, None, timings, monitor=monitor))
    finally:
        done.set()
        server.stop(linger=1.0)
        reader.join(timeout=10)
    running = [e for e in events if e[2] == "running"]
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(running)]
    sizes = [e[1] for e in events]
    return {
        "round_s": [round(w, 2) for w in timings.round_wall_s],
        "updates": len(events),
        "payload_max_bytes": max(sizes),
        "payload_median_bytes": int(statistics.median(sizes)),
        "gap_median_s": round(statistics.median(gaps), 3) if gaps else None,
        "gap_p95_s": round(sorted(gaps)[int(0.95 * (len(gaps) - 1))], 3) if gaps else None,
        "gap_max_s": round(max(gaps), 3) if gaps else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--latency", type=float, default=1.0)
    ap.add_argument("--backend", default="local")
    args = ap.parse_args()
    config = parse_run_file({
        "scenario": "guess_number", "name": "studio-bench", "agents": args.agents,
        "rounds": args.rounds, "workers": args.workers, "backend": args.backend,
        "models": {"dummy": {"provider": "dummy", "latency": args.latency}},
    }, Path("studio_payload"))
    with TemporaryDirectory() as tmp:
        result = {"agents": args.agents, "backend": args.backend, "workers": args.workers,
                  "latency_s": args.latency,
                  "with_studio": run(config, True, Path(tmp)),
                  "without_studio": run(config, False, Path(tmp))}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
