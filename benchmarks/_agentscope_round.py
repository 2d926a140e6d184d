"""The agentscope side of ``benchmarks/agentscope_side.py``: run it with agentscope's python.

Never imported by Populace (its venv has no agentscope): ``agentscope_side.py`` runs this
file with ``--agentscope-python`` (a venv holding ``agentscope[distribute]==0.1.1``).

Two roles:

* ``--role server --port P --capacity C``: one agentscope agent server (gRPC), started in
  the foreground of its own process with ``RpcAgentServerLauncher.launch(in_subprocess=False)``
  as the paper's example started each of its servers (one OS process per server).
* ``--role main``: starts ``--workers`` participant servers (plus ``--groups`` moderator
  servers), creates ``--agents`` participants on them with ``to_dist``, plays ``--rounds``
  rounds of the guessing game, stops the servers, and prints one JSON line on stdout.

The participant's "model" is a fixed wait of ``--latency`` seconds then a random integer
in [0, 100]: the random stand-in of the paper's efficiency runs. Each round the moderator
sends one message to every participant at once (each call returns agentscope's
placeholder, an ``AsyncResult``, at once) and then reads every placeholder's number.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import agentscope
from agentscope.agents import AgentBase
from agentscope.message import Msg
from agentscope.rpc import RpcClient, async_func
from agentscope.server import RpcAgentServerLauncher

HOST = "localhost"
# the paper's participants retried reading a result 20 times, 2 s apart (fixed strategy)
RETRY = {"type": "fixed", "max_retries": 20, "delay": 2}
# its servers kept up to 16384 results (agentscope's default is 8192)
MAX_POOL_SIZE = 16384


class BenchParticipant(AgentBase):
    """A participant whose model answers after a fixed latency with a random number."""

    def __init__(self, name: str, latency: float = 1.0, max_value: int = 100) -> None:
        super().__init__(name=name, use_memory=False)
        self.latency = latency
        self.max_value = max_value

    def reply(self, x: Msg | None = None) -> Msg:
        time.sleep(self.latency)  # the stand-in model call
        return Msg(name=self.name, role="assistant", content=random.randint(0, self.max_value))


class BenchGroup(AgentBase):
    """A moderator living in its own agent server, for ``--groups`` > 0: it creates its
    share of participants with ``to_dist`` and plays one round over them on request (the
    paper's layout: the main process talks to a few moderators, each to many agents)."""

    def __init__(self, name: str, configs: list | None = None, latency: float = 1.0) -> None:
        super().__init__(name=name, use_memory=False)
        self.participants = [
            BenchParticipant(
                name=c["name"], latency=latency,
                to_dist={"host": c["host"], "port": c["port"], "retry_strategy": dict(RETRY)},
            )
            for c in configs or []
        ]

    def ready(self) -> int:
        """Block until every participant is created on its server; how many there are."""
        for p in self.participants:
            p._check_created()  # the wait agentscope does before a proxy's first call
        return len(self.participants)

    @async_func
    def play(self, content: str) -> dict:
        msg = Msg(name=self.name, role="user", content=content)
        pending = [p(msg) for p in self.participants]  # placeholders, all sent at once
        values = [int(r.content) for r in pending]
        return {"sum": sum(values), "cnt": len(values)}

    def reply(self, x: Msg | None = None) -> Msg:
        return Msg(name=self.name, role="assistant", content=None)


def _init(runs: str) -> None:
    agentscope.init(project="bench", name="bench", disable_saving=True, save_log=False,
                    save_code=False, save_api_invoke=False, use_monitor=False,
                    logger_level="ERROR", save_dir=runs)


def serve(port: int, capacity: int, runs: str) -> None:
    _init(runs)
    launcher = RpcAgentServerLauncher(
        host=HOST, port=port, capacity=capacity, max_pool_size=MAX_POOL_SIZE,
        local_mode=True, custom_agent_classes=[BenchParticipant, BenchGroup],
    )
    launcher.launch(in_subprocess=False)  # returns when SIGTERM/SIGINT stops it
    launcher.wait_until_terminate()


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind((HOST, 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def _listening(port: int) -> bool:
    try:
        socket.create_connection((HOST, port), timeout=1).close()
        return True
    except OSError:
        return False


def _start_servers(ports: list[int], capacity: int, runs: str) -> list[subprocess.Popen]:
    procs = []
    for i, port in enumerate(ports):
        with open(os.path.join(runs, f"server-{i}.log"), "wb") as log:
            procs.append(subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--role", "server", "--port",
                 str(port), "--capacity", str(capacity), "--runs", runs],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + 120
    for proc, port in zip(procs, ports, strict=True):
        while not _listening(port) or not RpcClient(HOST, port).is_alive():
            if proc.poll() is not None:
                raise SystemExit(f"agentscope server on port {port} exited with "
                                 f"{proc.returncode}; see {runs}")
            if time.monotonic() > deadline:
                raise SystemExit(f"agentscope server on port {port} not up in 120 s")
            time.sleep(0.1)
    return procs


def _stop_servers(procs: list[subprocess.Popen]) -> None:
    # SIGTERM: the server's own handler stops it (gRPC grace of 5 s, then exit)
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main_role(args: argparse.Namespace) -> None:
    _init(args.runs)
    n, w, g = args.agents, args.workers, args.groups
    ports = _free_ports(w + g)
    part_ports, group_ports = ports[:w], ports[w:]
    t0 = time.perf_counter()
    procs = _start_servers(ports, args.capacity, args.runs)
    server_start_s = time.perf_counter() - t0
    # the paper's split: agents in consecutive blocks of ceil(N / servers) per server
    per_server = math.ceil(n / w)
    configs = [{"name": f"P{i}", "host": HOST, "port": part_ports[i // per_server]}
               for i in range(n)]
    result: dict = {"system": "agentscope", "agentscope_version": agentscope.__version__,
                    "agents": n, "latency_s": args.latency, "rounds": args.rounds,
                    "workers": w, "groups": g, "capacity": args.capacity,
                    "server_processes": len(procs), "server_pids": [p.pid for p in procs],
                    "python": sys.version.split()[0],
                    "server_start_s": round(server_start_s, 4)}
    try:
        t0 = time.perf_counter()
        if g == 0:  # the moderator is this process: it holds one proxy per participant
            agents = [BenchParticipant(name=c["name"], latency=args.latency,
                                       to_dist={"host": c["host"], "port": c["port"],
                                                "retry_strategy": dict(RETRY)})
                      for c in configs]
            issued = time.perf_counter() - t0
            for a in agents:
                a._check_created()  # the wait agentscope does before a proxy's first call
        else:  # moderators in their own servers, each creating its share (paper layout)
            share = n // g
            agents = [BenchGroup(name=f"group_{j}", latency=args.latency,
                                 configs=configs[j * share:(j + 1) * share if j < g - 1 else n],
                                 to_dist={"host": HOST, "port": group_ports[j],
                                          "retry_strategy": dict(RETRY)})
                      for j in range(g)]
            issued = time.perf_counter() - t0
            created = sum(a.ready() for a in agents)
            assert created == n, (created, n)
        result["create_issue_s"] = round(issued, 4)
        result["create_s"] = round(time.perf_counter() - t0, 4)
        round_s, answers, means = [], [], []
        for r in range(args.rounds):
            content = f"Round {r + 1}: give a number between 0 and 100."
            t0 = time.perf_counter()
            if g == 0:
                msg = Msg(name="moderator", role="user", content=content)
                pending = [a(msg) for a in agents]  # placeholders, all sent at once
                values = [int(p.content) for p in pending]
                total, cnt = sum(values), len(values)
            else:
                pending = [a.play(content) for a in agents]
                parts = [p.result() for p in pending]
                total, cnt = sum(x["sum"] for x in parts), sum(x["cnt"] for x in parts)
            round_s.append(round(time.perf_counter() - t0, 4))
            answers.append(cnt)
            means.append(round(total / max(cnt, 1), 3))
        result.update(round_s=round_s, answers=answers, mean_number=means,
                      overhead_s=[round(s - args.latency, 4) for s in round_s])
    finally:
        t0 = time.perf_counter()
        _stop_servers(procs)
        result["stop_s"] = round(time.perf_counter() - t0, 4)
    print(json.dumps(result), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", choices=["main", "server"], default="main")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--agents", type=int, default=200)
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--groups", type=int, default=0)
    parser.add_argument("--capacity", type=int, default=32)
    parser.add_argument("--runs", default=None, help="folder for server logs")
    args = parser.parse_args()
    if args.role == "server":
        serve(args.port, args.capacity, args.runs or tempfile.gettempdir())
        return
    own = args.runs is None
    if own:  # server logs; kept (and named in the error) only if something fails
        args.runs = tempfile.mkdtemp(prefix="agentscope-bench-")
    main_role(args)
    if own:
        shutil.rmtree(args.runs, ignore_errors=True)


if __name__ == "__main__":
    main()
