"""agentscope 0.1.1's distributed mode and ``populace bench``, side by side in one invocation.

How to run (agentscope lives in its own venv; Populace's venv never imports it)::

    python3 -m venv /tmp/asvenv
    /tmp/asvenv/bin/pip install 'agentscope[distribute]==0.1.1' tqdm
    .venv/bin/python benchmarks/agentscope_side.py --agents 2000 --latency 1 --rounds 1 \\
        --workers 2 [--agentscope-python /tmp/asvenv/bin/python] [--json]

    # Populace at a larger N in the same invocation (throughput compared per agent):
    .venv/bin/python benchmarks/agentscope_side.py --agents 2000 --populace-agents 1000000

(``tqdm`` is imported by agentscope 0.1.1 but missing from its declared requirements.) The
agentscope python defaults to ``$AGENTSCOPE_PYTHON``, else ``/tmp/asvenv/bin/python``.

What it measures, for each system, one after the other on the same machine (agentscope
first, then Populace right after, so both see the same load; the load average before
each is recorded):

* creation: seconds to create the N agents (not counting server / Ray start-up, which is
  shown apart for agentscope and not by ``populace bench``);
* per-round wall: seconds from sending the round's message until every number is back;
* throughput: agents per second of round wall (N / mean round wall), and the ratio
  Populace / agentscope, which is per agent, so it stays meaningful when
  ``--populace-agents`` differs from ``--agents``;
* peak memory of all processes of that run: the sum of RSS over the whole process tree
  (the agent servers, or Ray's GCS, raylet and workers), sampled every 0.2 s, and the sum
  of PSS from /proc/PID/smaps_rollup (shared pages counted once), read near the RSS peak
  (``populace._procmem.PeakMemory``, as ``populace bench`` measures itself).

How the agentscope side mirrors the paper (arXiv 2407.17789, "Very Large-Scale Multi-Agent
Simulation in AgentScope"; its code shipped with agentscope 0.1.1 as
examples/paper_large_scale_simulation): ``benchmarks/_agentscope_round.py``, run with the
agentscope python,

* starts ``--workers`` agent servers, each its own OS process running
  ``RpcAgentServerLauncher(..., max_pool_size=16384).launch(in_subprocess=False)`` as the
  paper's start script did, with agentscope's default capacity of 32 concurrent replies
  per server unless ``--as-capacity`` says otherwise (``auto``: ceil(N / workers), every
  agent of a server at once);
* creates the N participants with ``to_dist={"host": ..., "port": ...}`` in consecutive
  blocks of ceil(N / workers) per server, with the paper's retry strategy (fixed, 20
  retries, 2 s apart);
* gives each participant the paper's random stand-in for an LLM: ``reply`` sleeps the
  fixed ``--latency`` then returns a random integer in [0, 100];
* plays each round as its moderator did: one message to every participant at once (each
  call returns an agentscope placeholder, ``AsyncResult``, at once), then reads every
  placeholder's number. The moderator is the main process by default; ``--as-groups G``
  puts G moderators in G more agent servers, each creating and driving its share of the
  participants (the paper's env-server layout).

Populace runs ``populace bench --agents M --latency L --rounds R --backend ray --workers W
--json`` (the guessing game on its dummy model), as a child process sampled the same way.

Reading the agentscope numbers: each server runs at most ``capacity`` replies at once (a
thread pool), so with 32 and more than 32 agents per server a round takes about
ceil(agents per server / 32) times the latency; the table says so when that happens. A
placeholder read waits up to 5 s on the server and is then retried 2 s later, which can
add up to 2 s to a round. Shutting the servers down (gRPC's 5 s grace) is not timed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from populace._procmem import PeakMemory

HERE = Path(__file__).resolve().parent
INNER = HERE / "_agentscope_round.py"
DEFAULT_AS_PYTHON = "/tmp/asvenv/bin/python"
INSTALL = ("python3 -m venv /tmp/asvenv && /tmp/asvenv/bin/pip install "
           "'agentscope[distribute]==0.1.1' tqdm")


def _last_json(text: str) -> dict | None:
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    return None


def run_sampled(command: list[str], timeout: float, what: str) -> tuple[dict, dict]:
    """Run ``command`` as a child, sampling its process tree; its last JSON line and the
    sampled memory and wall time."""
    load = os.getloadavg()[0]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                start_new_session=True)
        with PeakMemory(root=proc.pid) as mem:
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
                sys.exit(f"{what}: no result within {timeout:.0f} s (--timeout); killed")
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    result = _last_json(stdout)
    if proc.returncode != 0 or result is None:
        tail = (stderr.strip() or stdout.strip()).splitlines()[-1:] or ["(no output)"]
        sys.exit(f"{what} exited with {proc.returncode}: {tail[0]}")
    memory = {"peak_rss_mb": round(mem.mb, 1),
              "peak_pss_mb": None if mem.pss_mb is None else round(mem.pss_mb, 1),
              "peak_processes": mem.processes}
    return result, {**memory, "process_wall_s": round(wall, 2), "loadavg_1m": load}


def check_agentscope_python(python: str) -> str:
    if not (shutil.which(python) or Path(python).is_file()):
        sys.exit(f"agentscope python not found at {python}; install it with: {INSTALL}")
    probe = ("import agentscope, grpc, google.protobuf; "
             "from agentscope.server import RpcAgentServerLauncher; "
             "print(agentscope.__version__, grpc.__version__, google.protobuf.__version__)")
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        sys.exit(f"{python} cannot import agentscope's distributed mode ({last}); "
                 f"install it with: {INSTALL}")
    version, grpc_v, pb_v = done.stdout.split()
    if version != "0.1.1":
        print(f"note: {python} has agentscope {version}, not 0.1.1", file=sys.stderr)
    return f"agentscope {version}, grpcio {grpc_v}, protobuf {pb_v}"


def populace_command(args: argparse.Namespace, agents: int) -> list[str]:
    script = Path(sys.executable).parent / "populace"
    head = [str(script)] if script.is_file() else [sys.executable, "-m", "populace.cli"]
    return [*head, "bench", "--agents", str(agents), "--latency", str(args.latency),
            "--rounds", str(args.rounds), "--backend", "ray",
            "--workers", str(args.workers), "--json"]


def _throughput(agents: int, round_s: list[float]) -> float:
    return agents / statistics.mean(round_s)


def summarize(name: str, res: dict, mem: dict) -> dict:
    rounds = res["round_s"]
    peak = mem["peak_pss_mb"] if mem["peak_pss_mb"] is not None else mem["peak_rss_mb"]
    return {
        "system": name, "agents": res["agents"], "create_s": res["create_s"],
        "round_s": rounds, "mean_round_s": round(statistics.mean(rounds), 4),
        "throughput_agents_per_s": round(_throughput(res["agents"], rounds), 1),
        "peak_rss_mb": mem["peak_rss_mb"], "peak_pss_mb": mem["peak_pss_mb"],
        "kb_per_agent": round(peak * 1024 / res["agents"], 2),
        "peak_processes": mem["peak_processes"], "process_wall_s": mem["process_wall_s"],
        "loadavg_1m_before": round(mem["loadavg_1m"], 2), "raw": res,
    }


def print_table(out: dict) -> None:
    cols = [out[k] for k in ("agentscope", "populace") if k in out]
    heads = [f"agentscope {out['versions'].get('agentscope', '')}".strip(), "populace"]
    heads = [h for h, k in zip(heads, ("agentscope", "populace"), strict=True) if k in out]

    def fmt(v: object) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:,.3f}" if abs(v) < 100 else f"{v:,.0f}"
        if isinstance(v, int):
            return f"{v:,}"
        return str(v)

    rows: list[tuple[str, list[object]]] = [
        ("agents", [c["agents"] for c in cols]),
        ("load average before (1 min)", [c["loadavg_1m_before"] for c in cols]),
        ("server start s (apart)", [c["raw"].get("server_start_s") for c in cols]),
        ("agent creation s", [c["create_s"] for c in cols]),
    ]
    for i in range(max(len(c["round_s"]) for c in cols)):
        rows.append((f"round {i + 1} wall s",
                     [c["round_s"][i] if i < len(c["round_s"]) else None for c in cols]))
    rows += [
        ("throughput, agents/s of round wall", [c["throughput_agents_per_s"] for c in cols]),
        ("peak RSS MB, process tree", [c["peak_rss_mb"] for c in cols]),
        ("peak PSS MB, process tree", [c["peak_pss_mb"] for c in cols]),
        ("KB per agent (PSS, else RSS)", [c["kb_per_agent"] for c in cols]),
        ("processes (peak)", [c["peak_processes"] for c in cols]),
        ("child process wall s", [c["process_wall_s"] for c in cols]),
    ]
    w0 = max(len(r[0]) for r in rows) + 2
    w = max(14, *(len(h) + 2 for h in heads))
    a = out["args"]
    print(f"guessing game, latency {a['latency']} s, {a['rounds']} round(s), "
          f"{a['workers']} worker(s); {out['versions'].get('agentscope_full', '')}")
    print("".ljust(w0) + "".join(h.rjust(w) for h in heads))
    for label, vals in rows:
        print(label.ljust(w0) + "".join(fmt(v).rjust(w) for v in vals))
    if "ratio" in out:
        r = out["ratio"]
        print(f"throughput ratio populace / agentscope (per agent): "
              f"{r['throughput_populace_over_agentscope']:.2f}x")
        print(f"memory per agent ratio agentscope / populace: "
              f"{r['kb_per_agent_agentscope_over_populace']:.2f}x")
    if "agentscope" in out:
        raw = out["agentscope"]["raw"]
        per_server = math.ceil(raw["agents"] / raw["workers"])
        print(f"agentscope: {raw['server_processes']} agent-server processes "
              f"({raw['workers']} for participants, {raw['groups']} for moderators) + main; "
              f"capacity {raw['capacity']} concurrent replies per server, "
              f"{per_server} agents per server")
        if raw["capacity"] < per_server:
            print(f"  note: capacity {raw['capacity']} < {per_server} agents per server, so "
                  f"each server answers in ~{math.ceil(per_server / raw['capacity'])} waves "
                  "of the latency (agentscope's default, as in the paper's example); "
                  "--as-capacity auto runs every agent of a server at once")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=2000, help="agentscope agents")
    parser.add_argument("--populace-agents", type=int, default=None,
                        help="Populace agents (default: --agents)")
    parser.add_argument("--latency", type=float, default=1.0, help="model latency, seconds")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2,
                        help="agentscope participant servers / Populace Ray workers")
    parser.add_argument("--agentscope-python",
                        default=os.environ.get("AGENTSCOPE_PYTHON", DEFAULT_AS_PYTHON))
    parser.add_argument("--as-capacity", default="32",
                        help="concurrent replies per agentscope server: a number (default "
                             "32, agentscope's launcher default, as the paper ran it) or "
                             "'auto' (ceil(agents / workers))")
    parser.add_argument("--as-groups", type=int, default=0,
                        help="moderators in their own agent servers (0: the main process)")
    parser.add_argument("--only", choices=["agentscope", "populace"], default=None)
    parser.add_argument("--timeout", type=float, default=3600.0,
                        help="seconds allowed to each side")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    for flag in ("agents", "rounds", "workers"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} must be >= 1")
    if args.latency < 0 or args.as_groups < 0:
        parser.error("--latency and --as-groups must be >= 0")
    if args.as_groups > args.agents:
        parser.error("--as-groups must be <= --agents")
    pop_agents = args.populace_agents or args.agents
    if args.as_capacity == "auto":
        capacity = math.ceil(args.agents / args.workers)
    elif args.as_capacity.isdigit() and int(args.as_capacity) >= 1:
        capacity = int(args.as_capacity)
    else:
        parser.error("--as-capacity: a positive number or 'auto'")

    out: dict = {"args": {"agents": args.agents, "populace_agents": pop_agents,
                          "latency": args.latency, "rounds": args.rounds,
                          "workers": args.workers, "as_capacity": capacity,
                          "as_groups": args.as_groups},
                 "versions": {}, "cpus": os.cpu_count()}
    if args.only != "populace":
        full = check_agentscope_python(args.agentscope_python)
        out["versions"].update(agentscope=full.split(",")[0].split()[1], agentscope_full=full)
        command = [args.agentscope_python, str(INNER), "--role", "main",
                   "--agents", str(args.agents), "--latency", str(args.latency),
                   "--rounds", str(args.rounds), "--workers", str(args.workers),
                   "--groups", str(args.as_groups), "--capacity", str(capacity)]
        res, mem = run_sampled(command, args.timeout, "agentscope side")
        if any(a != args.agents for a in res["answers"]):
            sys.exit(f"agentscope side: expected {args.agents} numbers a round, "
                     f"got {res['answers']}")
        out["agentscope"] = summarize("agentscope", res, mem)
    if args.only != "agentscope":
        res, mem = run_sampled(populace_command(args, pop_agents), args.timeout,
                               "populace bench")
        out["versions"]["populace_python"] = res.get("python")
        out["populace"] = summarize("populace", res, mem)
    if "agentscope" in out and "populace" in out:
        a, p = out["agentscope"], out["populace"]
        out["ratio"] = {
            "throughput_populace_over_agentscope": round(
                p["throughput_agents_per_s"] / a["throughput_agents_per_s"], 3),
            "kb_per_agent_agentscope_over_populace": round(
                a["kb_per_agent"] / p["kb_per_agent"], 3),
        }
    if args.json:
        print(json.dumps(out))
    else:
        print_table(out)


if __name__ == "__main__":
    main()
