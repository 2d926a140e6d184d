"""The studio managing a big live run: update size, an agent's mind, interviews, an
intervention and a fork, all over HTTP while the run goes.

    .venv/bin/python benchmarks/studio_manage.py --agents 1000000 --rounds 3 --workers 2 \\
        --backend ray

The run goes through the launcher on the main thread with the studio in a thread of its own
(as ``populace run --studio`` does). A client reads the live server-sent events as the page
does; another, once step 1 is written, opens the minds of 20 random agents (each timed),
interviews a sample of 20 (timed: it waits for the step in progress), and schedules an
intervention for the next step. After the run, minds are opened again (from the
checkpoints) and the run is forked from step 1 (the time until the fork's run starts).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import threading
import time
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import httpx
import numpy as np
import yaml

from populace._procmem import PeakMemory
from populace.launch import RunControl, launch, load_run_file
from populace.results import RunDirectory, RunMonitor
from populace.studio import Runs, StudioServer


def read_events(url: str, out: list[int], stop: threading.Event) -> None:
    with httpx.Client(timeout=None) as client, client.stream("GET", url) as response:
        for line in response.iter_lines():
            if line.startswith("data:") and line != "data: {}":
                out.append(len(line) - 5)
            if stop.is_set():
                return


def minds(client: httpx.Client, base: str, ids: list[int]) -> dict[str, Any]:
    """Open each agent's mind: the median and longest time, and where the states came
    from (``live``: read from the worker; ``checkpoint``: it was busy, or the run over)."""
    took, sources = [], []
    for agent in ids:
        t0 = time.perf_counter()
        r = client.get(f"{base}/agents/{agent}/mind")
        took.append(time.perf_counter() - t0)
        r.raise_for_status()
        sources.append((r.json().get("state") or {}).get("source"))
    return {"median_s": round(statistics.median(took), 4), "max_s": round(max(took), 4),
            "live": sources.count("live"), "checkpoint": sources.count("checkpoint")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--backend", default="ray", choices=("local", "ray"))
    ap.add_argument("--latency", type=float, default=1.0)
    args = ap.parse_args()
    with TemporaryDirectory() as tmp, PeakMemory() as peak:
        root = Path(tmp)
        config = root / "big.yaml"
        config.write_text(yaml.safe_dump({
            "scenario": "guess_number", "name": "big", "agents": args.agents,
            "rounds": args.rounds,
            "workers": args.workers, "backend": args.backend, "seed": 1,
            "models": {"dummy": {"provider": "dummy", "latency": args.latency}},
            "population": {"aspects": {"education": {
                "values": ["PhD", "master", "bachelor", "high school"]}}}}))
        run_file = load_run_file(config)
        run_dir = RunDirectory.create(root / "runs" / "big")
        runs = Runs(root / "runs")
        monitor, control = RunMonitor(), RunControl()
        runs.attach(run_dir.path, monitor, control)
        server = StudioServer(runs, port=0)
        server.start()
        base = f"{server.url.rstrip('/')}/api/runs/big"
        sizes: list[int] = []
        stop = threading.Event()
        reader = threading.Thread(target=read_events, args=(f"{base}/events", sizes, stop),
                                  daemon=True)
        found: dict[str, Any] = {}

        def manage() -> None:
            rng = np.random.default_rng(0)
            ids = rng.choice(args.agents, 20, replace=False).tolist()
            with httpx.Client(timeout=300) as client:
                while control.steps_done < 1:
                    time.sleep(0.05)
                t0 = time.perf_counter()
                r = client.post(f"{base}/interventions",
                                json={"kind": "message", "text": "A storm is coming.",
                                      "where": 'education == "PhD"'})
                found["intervention"] = {"status": r.status_code,
                                         "s": round(time.perf_counter() - t0, 3),
                                         "step": r.json().get("intervention", {}).get("step")}
                t0 = time.perf_counter()
                r = client.post(f"{base}/interviews",
                                json={"question": "How is it going?", "sample": 20})
                found["live_interview"] = {"status": r.status_code,
                                           "s": round(time.perf_counter() - t0, 3)}
                found["live_mind"] = minds(client, base, ids)

        helper = threading.Thread(target=manage, daemon=True)
        reader.start()
        helper.start()
        t0 = time.perf_counter()
        summary = asyncio.run(launch(run_file, run_dir, monitor=monitor, control=control))
        wall = time.perf_counter() - t0
        helper.join(600)
        stop.set()
        with httpx.Client(timeout=600) as client:
            ids = np.random.default_rng(1).choice(args.agents, 20, replace=False).tolist()
            found["after_mind"] = minds(client, base, ids)
            carried = [e.get("interventions") for e in summary["steps"]]
            found["carried_out"] = [c for c in carried if c]
        server.stop()
        result = {"agents": args.agents, "backend": args.backend, "workers": args.workers,
                  "status": summary["status"], "wall_s": round(wall, 2),
                  "update_bytes": {"median": int(statistics.median(sizes)),
                                   "max": max(sizes), "n": len(sizes)},
                  **found}
    result["peak_mb"] = round(peak.mb)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
