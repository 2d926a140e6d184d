"""GPU time on simulated engines: Populace's client against a naive asyncio client.

    .venv/bin/python benchmarks/llm_engine.py --agents 2000                 # quick, ~1 min
    .venv/bin/python benchmarks/llm_engine.py --json /tmp/llm_engine.json   # 20,000, ~6 min

Every measured client gets fresh ``populace serve-llm`` processes (four ``--engine`` ones,
docs/engine.md; the same seed and options for every client), so caches and counters start
empty; ``GET /stats`` of each then gives the engine's busy time, prefill tokens computed and
cached, decode tokens and batch sizes. Populace runs as ``populace run FILE`` in a child
process (a run file written here: an ``openai`` model over the four servers,
``max_concurrency: 256``, two local workers); its wall time is the round's (summary.json),
so backgrounds and start-up are left out.

The naive client is written here the way simulators' users write one (OASIS, AgentScope
scripts): asyncio + aiohttp, one coroutine per agent, all started at once, one
``asyncio.Semaphore(128)`` around every request, a random endpoint per request, no retries,
no coalescing, persona-first prompts (the persona as the system message, then the rules as
the user message), and two calls per agent: the answer, then the extraction of the number
from it. It sends the texts Populace sends: the personas, rules and seeds are read from the
recording of Populace's two_call run of the same scenario (RUN/llm_calls), and its
extraction prompt is Populace's extraction text around its own answer.

Scenarios:

1. The paper's education config (backgrounds written by the scripted model, so no server
   time for them; five education levels), P2: Populace ``two_call`` and Populace
   ``structured``, each against the naive two calls. Targets: busy time >= 2x lower than
   the naive client's; Populace's simulated wall within 1.15x of its lower bound, the busy
   time summed over the servers / 4 (the wall of four engines that are never idle).
2. P1 with no population (every agent's prompt is the same): Populace with ``coalesce:
   true``, ``two_call`` and ``structured``, against the naive client. Target: >= 50x fewer
   prefill tokens computed.
3. A rate-limited endpoint: one ``serve-llm --max-running K --latency L`` without an engine,
   so that the throughput the hidden limit allows is K / L requests per second (with an
   engine a request's latency would depend on the batch size). Populace's adaptive
   concurrency (ceiling 256 per endpoint and worker, one call per agent) should reach >= 90%
   of it with no failed call; the same run with a fixed ``max_concurrency: 256`` is shown
   for contrast, and a client told K (exactly K requests in flight) for the most this host
   gets through the limit (K / the latency a request really takes here).

Simulated wall = real wall x time scale. The time scale must leave the CPUs idle enough
that the wall measures the engines, not this machine: each row says how many cores the
servers and the client used (``cores``; Populace's include its start-up). On 2 cores a time
scale of 2 does; at 4, Populace's burst of 20,000 small extraction calls at the end of the
two_call round runs at the CPUs' ~3,000 requests/s, and its wall reads 1.2x its bound.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

SERVERS = 4
MODEL = "dummy"
NAIVE_CONCURRENCY = 128
POPULACE = Path(sys.executable).with_name("populace")
EDUCATION = ["primary school", "high school", "bachelor's degree", "master's degree",
             "doctorate"]


# -- servers ---------------------------------------------------------------------------------
def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


@dataclass
class Servers:
    """``serve-llm`` processes started for one measured client."""

    urls: list[str]
    procs: list[subprocess.Popen[bytes]]
    cpu0: list[float]

    def stats(self) -> list[dict[str, Any]]:
        return [_get_json(u.removesuffix("/v1") + "/stats") for u in self.urls]

    def cpu_s(self) -> float:
        return sum(_cpu_s(p.pid) - c for p, c in zip(self.procs, self.cpu0, strict=True))


@contextmanager
def servers(n: int, args: list[str], tmp: Path) -> Iterator[Servers]:
    """``n`` fresh ``populace serve-llm ARGS`` on free ports, stopped on leaving."""
    procs, logs = [], []
    try:
        for i in range(n):
            log = tmp / f"server-{time.monotonic_ns()}-{i}.log"
            logs.append(log)
            procs.append(subprocess.Popen(
                [str(POPULACE), "serve-llm", "--port", "0", "--model", MODEL, *args],
                stdout=log.open("wb"), stderr=subprocess.STDOUT))
        urls: list[str] = []
        deadline = time.monotonic() + 60
        for proc, log in zip(procs, logs, strict=True):
            while True:
                found = re.search(r"serving \S+ at (http://\S+)", log.read_text())
                if found:
                    urls.append(found.group(1))
                    break
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"serve-llm did not start:\n{log.read_text()}")
                time.sleep(0.05)
        yield Servers(urls, procs, [_cpu_s(p.pid) for p in procs])
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)


def engine_args(time_scale: float) -> list[str]:
    return ["--engine", "--time-scale", f"{time_scale:g}", "--policy", "reasoning",
            "--seed", "0"]


# -- one measured client ---------------------------------------------------------------------
@dataclass
class Row:
    """What one client cost the servers."""

    scenario: str
    client: str
    calls: int  # the agents' calls
    requests: int  # completions the servers answered (coalesced calls share one)
    failed: int  # calls without an answer in the end
    retries: int
    over_limit: int  # 429s of --max-running
    wall_s: float  # real seconds of the round
    time_scale: float
    busy_s: float = 0.0  # simulated engine seconds, summed over the servers
    prefill_computed: int = 0
    prefill_cached: int = 0
    decode_tokens: int = 0
    iterations: int = 0
    cores: float = 0.0  # CPU of servers + client during the run / its real wall
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def sim_wall_s(self) -> float:
        return self.wall_s * self.time_scale

    @property
    def bound_s(self) -> float:
        return self.busy_s / SERVERS

    @property
    def mean_batch(self) -> float:
        return self.decode_tokens / self.iterations if self.iterations else 0.0

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(sim_wall_s=round(self.sim_wall_s, 2), bound_s=round(self.bound_s, 2),
                   mean_batch=round(self.mean_batch, 1),
                   wall_over_bound=round(self.sim_wall_s / self.bound_s, 3)
                   if self.bound_s else None)
        return out


def _add_engine(row: Row, stats: list[dict[str, Any]]) -> None:
    row.extra["busy_per_server"] = [round(s["engine"]["busy_s"], 1) for s in stats
                                    if "engine" in s]
    row.extra["max_waiting"] = [s["engine"]["max_waiting"] for s in stats if "engine" in s]
    for s in stats:
        row.over_limit += s.get("injected", {}).get("over_limit", 0)
        e = s.get("engine")
        if e is None:
            continue
        row.busy_s += e["busy_s"]
        row.prefill_computed += e["prefill_tokens_computed"]
        row.prefill_cached += e["prefill_tokens_cached"]
        row.decode_tokens += e["decode_tokens"]
        row.iterations += e["iterations"]


def run_populace(scenario: str, client: str, config: dict[str, Any], srv: Servers,
                 time_scale: float, tmp: Path) -> tuple[Row, Path]:
    """``populace run`` of ``config`` against ``srv``; its row and run directory."""
    name = re.sub(r"\W+", "-", f"{scenario}-{client}").strip("-")
    config = {"scenario": "guess_number", **config, "name": name}
    config["models"]["eng"]["base_urls"] = srv.urls
    path, out = tmp / f"{name}.yaml", tmp / name
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_srv0 = srv.cpu_s()
    with (tmp / f"{name}.log").open("wb") as log:  # --yes: no pilot in the server's counts
        done = subprocess.run([str(POPULACE), "run", str(path), "--out", str(out), "--yes"],
                              stdout=log, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        raise SystemExit(f"populace run {path} exited {done.returncode}:\n"
                         + (tmp / f"{name}.log").read_text()[-3000:])
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary = json.loads((out / "summary.json").read_text())
    step = summary["steps"][0]
    llm = step["llm"]["eng"]
    stats = srv.stats()
    requests = sum(s["status"].get("200", 0) for s in stats)
    row = Row(scenario, client, calls=llm["requests"], requests=requests,
              failed=llm["failures"], retries=llm["retries"], over_limit=0,
              wall_s=step["wall_s"], time_scale=time_scale,
              extra={"coalesced": llm.get("coalesced", 0), "n_valid": step["n_valid"],
                     "populace_run_wall_s": summary["wall_s"]})
    _add_engine(row, stats)
    client_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # The client's CPU includes its start-up and backgrounds: an upper bound for the round.
    row.cores = (srv.cpu_s() - cpu_srv0 + client_cpu) / row.wall_s
    return row, out


# -- the naive client ------------------------------------------------------------------------
@dataclass(frozen=True)
class Agent:
    persona: str | None
    rules: str
    seed: int
    temperature: float | None


@dataclass(frozen=True)
class Workload:
    agents: list[Agent]
    extract: str  # the extraction prompt, "{answer}" where the answer goes
    extract_temperature: float | None
    extract_max_tokens: int | None


def workload_from(run_dir: Path) -> Workload:
    """The agents of a Populace two_call run (shared-first, as recorded), for the naive
    client: each one's persona, the rules and its seed; and the extraction prompt."""
    calls = [json.loads(line) for p in sorted((run_dir / "llm_calls").glob("eng-*.jsonl"))
             for line in p.read_text().splitlines() if line.strip()]
    firsts = [c for c in calls if c["request"]["messages"][0]["role"] == "system"]
    extractions = {c["request"]["seed"]: c for c in calls
                   if c["request"]["messages"][0]["role"] == "user"}
    agents = []
    for c in firsts:
        req = c["request"]
        msgs = req["messages"]
        persona = msgs[1]["content"] if len(msgs) == 3 else None  # shared, persona, turn
        agents.append(Agent(persona, msgs[0]["content"], req["seed"], req["temperature"]))
    # The extraction text of one agent, with its answer cut out.
    sample = next(c for c in firsts if c["request"]["seed"] in extractions)
    ext = extractions[sample["request"]["seed"]]["request"]
    text = ext["messages"][0]["content"]
    if text.count(sample["text"]) != 1:
        raise SystemExit("cannot find the answer in the recorded extraction prompt")
    template = text.replace("{", "{{").replace("}", "}}").replace(sample["text"], "{answer}")
    return Workload(agents, template, ext["temperature"], ext["max_tokens"])


async def _naive(work: Workload, urls: list[str], seed: int) -> tuple[int, int, float]:
    """The naive client, as a simulator's user writes it: (calls, failed calls, wall s)."""
    import aiohttp

    pick = random.Random(seed)
    sem = asyncio.Semaphore(NAIVE_CONCURRENCY)
    calls = failed = 0

    async def chat(session: aiohttp.ClientSession, messages: list[dict[str, str]],
                   **params: Any) -> str | None:
        nonlocal calls, failed
        body = {"model": MODEL, "messages": messages,
                **{k: v for k, v in params.items() if v is not None}}
        async with sem:
            calls += 1
            try:
                async with session.post(f"{pick.choice(urls)}/chat/completions",
                                        json=body) as r:
                    r.raise_for_status()
                    data = await r.json()
            except (TimeoutError, aiohttp.ClientError):
                failed += 1
                return None
        return str(data["choices"][0]["message"]["content"])

    async def play(session: aiohttp.ClientSession, a: Agent) -> None:
        persona = [{"role": "system", "content": a.persona}] if a.persona else []
        answer = await chat(session, [*persona, {"role": "user", "content": a.rules}],
                            seed=a.seed, temperature=a.temperature)
        if answer is not None:
            await chat(session, [{"role": "user",
                                  "content": work.extract.format(answer=answer)}],
                       seed=a.seed, temperature=work.extract_temperature,
                       max_tokens=work.extract_max_tokens)

    # No connection limit of aiohttp's own (100 by default): the semaphore is the bound.
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=aiohttp.ClientTimeout(total=3600)) as session:
        t0 = time.perf_counter()
        await asyncio.gather(*(play(session, a) for a in work.agents))
        wall = time.perf_counter() - t0
    return calls, failed, wall


def run_naive(scenario: str, work: Workload, srv: Servers, time_scale: float,
              seed: int) -> Row:
    cpu0, srv0 = time.process_time(), srv.cpu_s()
    calls, failed, wall = asyncio.run(_naive(work, srv.urls, seed))
    cores = (time.process_time() - cpu0 + srv.cpu_s() - srv0) / wall
    stats = srv.stats()
    row = Row(scenario, "naive two_call", calls=calls,
              requests=sum(s["status"].get("200", 0) for s in stats), failed=failed,
              retries=0, over_limit=0, wall_s=round(wall, 4), time_scale=time_scale,
              cores=cores)
    _add_engine(row, stats)
    return row


async def _knowing(url: str, n: int, concurrency: int) -> tuple[int, float]:
    """``n`` requests, exactly ``concurrency`` in flight: (failed, wall seconds)."""
    import aiohttp

    sem = asyncio.Semaphore(concurrency)
    failed = 0

    async def one(session: aiohttp.ClientSession, i: int) -> None:
        nonlocal failed
        body = {"model": MODEL, "seed": i,
                "messages": [{"role": "user", "content": "Pick a number."}]}
        async with sem, session.post(f"{url}/chat/completions", json=body) as r:
            await r.read()
            failed += r.status != 200

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        t0 = time.perf_counter()
        await asyncio.gather(*(one(session, i) for i in range(n)))
        return failed, time.perf_counter() - t0


def run_knowing(scenario: str, n: int, k: int, srv: Servers) -> Row:
    """A client told the hidden limit: the most this host gets through it."""
    cpu0, srv0 = time.process_time(), srv.cpu_s()
    failed, wall = asyncio.run(_knowing(srv.urls[0], n, k))
    cores = (time.process_time() - cpu0 + srv.cpu_s() - srv0) / wall
    stats = srv.stats()
    row = Row(scenario, f"knows K: exactly {k} in flight", calls=n,
              requests=sum(s["status"].get("200", 0) for s in stats), failed=failed,
              retries=0, over_limit=0, wall_s=round(wall, 4), time_scale=1.0, cores=cores)
    _add_engine(row, stats)
    row.extra["throughput_rps"] = round(row.requests / wall, 1)
    return row


# -- run files -------------------------------------------------------------------------------
def model(**extra: Any) -> dict[str, Any]:
    return {"provider": "openai", "model": MODEL, "base_urls": [], "max_concurrency": 256,
            "timeout": 3600, "max_retries": 20, **extra}


def education(agents: int, seed: int, protocol: str) -> dict[str, Any]:
    """examples/paper/education.yaml at P2, its game on the servers."""
    return {
        "seed": seed, "agents": agents, "rounds": 1, "workers": 2, "model": "eng",
        "models": {"scripted": {"provider": "scripted"}, "eng": model()},
        "population": {
            "aspects": {"education": {"values": EDUCATION}},
            "groups": {"by": "education"},
            "backgrounds": {"model": "scripted", "words": 120, "temperature": [0.7, 1.0]},
        },
        "game": {"ratio": "2/3", "level": "P2", "protocol": protocol},
    }


def identical(agents: int, seed: int, protocol: str, extract: str = "always",
              **extra: Any) -> dict[str, Any]:
    """No population: every agent is sent the same prompt."""
    return {"seed": seed, "agents": agents, "rounds": 1, "workers": 2, "model": "eng",
            "models": {"eng": model(**extra)},
            "game": {"ratio": "2/3", "level": "P1", "protocol": protocol,
                     "extract": extract}}


# -- scenarios -------------------------------------------------------------------------------
def scenario_1(a: argparse.Namespace, tmp: Path) -> tuple[list[Row], list[dict[str, Any]]]:
    sc, eng = "1 education P2", engine_args(a.time_scale)
    with servers(SERVERS, eng, tmp) as srv:
        two, run_dir = run_populace(sc, "populace two_call", education(a.agents, a.seed,
                                    "two_call"), srv, a.time_scale, tmp)
    work = workload_from(run_dir)
    with servers(SERVERS, eng, tmp) as srv:
        naive = run_naive(sc, work, srv, a.time_scale, a.seed)
    with servers(SERVERS, eng, tmp) as srv:
        structured, _ = run_populace(sc, "populace structured", education(
            a.agents, a.seed, "structured"), srv, a.time_scale, tmp)
    targets = []
    for row in (two, structured):
        targets.append(_target(f"1 {row.client}: naive busy / populace busy", ">= 2",
                               naive.busy_s / row.busy_s, 2.0))
        targets.append(_target(f"1 {row.client}: simulated wall / lower bound", "<= 1.15",
                               row.sim_wall_s / row.bound_s, 1.15, at_most=True))
    return [naive, two, structured], targets


def scenario_2(a: argparse.Namespace, tmp: Path) -> tuple[list[Row], list[dict[str, Any]]]:
    sc, eng = "2 P1 identical prompts", engine_args(a.time_scale)
    with servers(SERVERS, eng, tmp) as srv:
        two, run_dir = run_populace(sc, "populace two_call coalesce", identical(
            a.agents, a.seed, "two_call", coalesce=True), srv, a.time_scale, tmp)
    work = workload_from(run_dir)
    with servers(SERVERS, eng, tmp) as srv:
        naive = run_naive(sc, work, srv, a.time_scale, a.seed)
    with servers(SERVERS, eng, tmp) as srv:
        structured, _ = run_populace(sc, "populace structured coalesce", identical(
            a.agents, a.seed, "structured", coalesce=True), srv, a.time_scale, tmp)
    with servers(SERVERS, eng, tmp) as srv:
        stated, _ = run_populace(sc, "populace two_call coalesce when_stated", identical(
            a.agents, a.seed, "two_call", "when_stated", coalesce=True), srv, a.time_scale,
            tmp)
    targets = [_target(f"2 {r.client}: naive prefill computed / populace's", ">= 50",
                       naive.prefill_computed / max(1, r.prefill_computed), 50.0)
               for r in (two, structured, stated)]
    return [naive, two, structured, stated], targets


def scenario_3(a: argparse.Namespace, tmp: Path) -> tuple[list[Row], list[dict[str, Any]]]:
    k, latency = a.max_running, a.latency
    allowed = k / latency
    sc = f"3 --max-running {k} --latency {latency:g}"
    args = ["--max-running", str(k), "--latency", f"{latency:g}", "--seed", "0"]
    rows, targets = [], []
    for client, extra in (("populace adaptive", {}),
                          ("populace fixed 256", {"adaptive": False})):
        with servers(1, args, tmp) as srv:
            row, _ = run_populace(sc, client, identical(a.rate_agents, a.seed, "direct",
                                                        **extra), srv, 1.0, tmp)
        row.extra["throughput_rps"] = round(row.requests / row.wall_s, 1)
        row.extra["allowed_rps"] = allowed
        rows.append(row)
    with servers(1, args, tmp) as srv:
        rows.append(run_knowing(sc, a.rate_agents, k, srv))
    rows[-1].extra["allowed_rps"] = allowed
    ada = rows[0]
    targets.append(_target("3 populace adaptive: throughput / (K / latency)", ">= 0.9",
                           ada.requests / ada.wall_s / allowed, 0.9))
    knowing = rows[-1]  # K / the latency a request really takes on this host
    targets.append(_target("3 populace adaptive: throughput / (K / measured latency)",
                           ">= 0.9", ada.requests / ada.wall_s
                           / (knowing.requests / knowing.wall_s), 0.9))
    targets.append(_target("3 populace adaptive: failed calls", "== 0", ada.failed, 0,
                           at_most=True))
    return rows, targets


def _target(what: str, goal: str, value: float, bound: float, *,
            at_most: bool = False) -> dict[str, Any]:
    met = value <= bound if at_most else value >= bound
    return {"target": what, "goal": goal, "value": round(value, 3), "met": met}


# -- output ----------------------------------------------------------------------------------
COLUMNS = [("client", 30, "{}"), ("calls", 7, "{:,}"), ("reqs", 7, "{:,}"),
           ("fail", 5, "{:,}"), ("retry", 6, "{:,}"), ("429", 6, "{:,}"),
           ("busy s", 8, "{:,.1f}"), ("prefill", 10, "{:,}"), ("cached", 10, "{:,}"),
           ("decode", 9, "{:,}"), ("batch", 6, "{:.1f}"), ("wall s", 7, "{:.2f}"),
           ("sim s", 8, "{:,.1f}"), ("bound s", 8, "{:,.1f}"), ("w/b", 5, "{:.2f}"),
           ("cores", 5, "{:.2f}")]


def _cells(r: Row) -> list[Any]:
    return [r.client, r.calls, r.requests, r.failed, r.retries, r.over_limit, r.busy_s,
            r.prefill_computed, r.prefill_cached, r.decode_tokens, r.mean_batch, r.wall_s,
            r.sim_wall_s, r.bound_s, r.sim_wall_s / r.bound_s if r.bound_s else 0.0, r.cores]


def print_table(rows: list[Row], targets: list[dict[str, Any]]) -> None:
    scenario = None
    for r in rows:
        if r.scenario != scenario:
            scenario = r.scenario
            print(f"\n{scenario}")
            print(" ".join(f"{name:>{w}}" if i else f"{name:<{w}}"
                           for i, (name, w, _) in enumerate(COLUMNS)))
        print(" ".join(fmt.format(v).rjust(w) if i else fmt.format(v).ljust(w)
                       for i, ((_, w, fmt), v) in enumerate(zip(COLUMNS, _cells(r),
                                                                 strict=True))))
        if "throughput_rps" in r.extra:
            print(f"{'':30} throughput {r.extra['throughput_rps']:,} req/s of "
                  f"{r.extra['allowed_rps']:,.0f} allowed")
    print()
    for t in targets:
        print(f"{'MET ' if t['met'] else 'NOT MET'} {t['target']}: {t['value']} "
              f"(target {t['goal']})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=20_000,
                        help="agents of scenarios 1 and 2")
    parser.add_argument("--rate-agents", type=int, default=None,
                        help="agents (one call each) of scenario 3 (default --agents)")
    parser.add_argument("--time-scale", type=float, default=2.0,
                        help="simulated seconds per real second of the engines")
    parser.add_argument("--max-running", type=int, default=64, help="scenario 3's K")
    parser.add_argument("--latency", type=float, default=0.1,
                        help="scenario 3's seconds per request")
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--only", default="1,2,3", help="scenarios to run, e.g. 1,3")
    parser.add_argument("--json", type=Path, default=None, help="write the numbers here")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep run files, run directories and logs here")
    a = parser.parse_args()
    a.rate_agents = a.rate_agents or a.agents
    chosen = {s.strip() for s in a.only.split(",")}
    rows: list[Row] = []
    targets: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = a.keep or Path(tmp_dir)
        tmp.mkdir(parents=True, exist_ok=True)
        for name, scenario in (("1", scenario_1), ("2", scenario_2), ("3", scenario_3)):
            if name in chosen:
                got, met = scenario(a, tmp)
                rows += got
                targets += met
    print(f"\n{a.agents:,} agents (scenario 3: {a.rate_agents:,}), {SERVERS} engines, "
          f"time scale {a.time_scale:g}, python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs")
    print_table(rows, targets)
    if a.json is not None:
        a.json.write_text(json.dumps({
            "agents": a.agents, "rate_agents": a.rate_agents, "time_scale": a.time_scale,
            "servers": SERVERS, "max_running": a.max_running, "latency": a.latency,
            "rows": [r.as_dict() for r in rows], "targets": targets}, indent=1))


if __name__ == "__main__":
    main()
