"""Throughput of populace.environment: Env, EnvService from agents, Map2D queries.

Four parts, each printed as a table:

1. a local :class:`Env`: query (local and fall-through) and update (value, fn, with a
   listener), plain synchronous calls in one loop;
2. :class:`EnvService` from populace agents: ``--agents`` agents in a ``Simulation`` with
   ``--workers`` local workers each do one ``incr`` per round, through the service directly
   or through a per-worker :class:`EnvClient` (one batch per worker per tick), all on one
   key or spread over distinct keys, at max_concurrency 1/8/64. A round in which agents do
   nothing is timed too, so the service's share can be told from the agent-call overhead;
3. async read-modify-writes that hold their key ``--hold-ms`` (an update whose function
   awaits, say, a model): here per-key queueing and max_concurrency decide the throughput;
4. :class:`Map2D` with ``--positions`` positions: bulk placement, moves, ``nearby`` and
   ``k_nearest`` queries per second;
5. the service in a Ray actor (:func:`serve` on the Ray backend, a local Ray started once):
   parts 2 and 3 again through a per-worker :class:`EnvClient`, each row next to the same
   run on the local backend and an in-process service, so the two compare under the same
   load. Needs Ray; ``--skip-remote`` leaves it out, ``--only remote`` runs it alone.
   ``--hold-fn partial`` gives parts 3 and 5b one module-level function instead of a new
   closure per update (a closure crosses to the actor pickled by value, once per op).
   ``--only reads``: one read per agent, everyone the same key (coalesced: one op per
   batch reaches the service) or each its own, in-process and in a Ray actor.

    .venv/bin/python benchmarks/environment.py
    .venv/bin/python benchmarks/environment.py --agents 20000 --positions 100000   # quick
    .venv/bin/python benchmarks/environment.py --only remote
    .venv/bin/python benchmarks/environment.py --only remote-hold --hold-fn partial
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from populace.core import Agent, PerWorker, Profile, Simulation
from populace.environment import Env, EnvClient, EnvService, Map2D, Op, serve


def rate(n: int, seconds: float) -> str:
    return f"{n / seconds:>12,.0f}/s"


def timed(fn: Callable[[], Any], repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


# -- 1. local Env ------------------------------------------------------------------------------

def bench_local_env(n: int) -> None:
    print(f"\n1. Local Env, {n:,} operations each (best of 3)")
    world = Env("global")
    group = world.child("group-1")
    world.register("rules", "r")
    group.register("score", 0)
    keys = [f"agent/{i}" for i in range(1000)]
    for k in keys:
        group.register(k, 0)

    def queries() -> None:
        q = group.query
        for _ in range(n):
            q("score")

    def fallthrough() -> None:
        q = group.query
        for _ in range(n):
            q("rules")

    def sets() -> None:
        u = group.update
        for i in range(n):
            u("score", i)

    def fns() -> None:
        u = group.update
        for _ in range(n):
            u("score", fn=lambda v: v + 1)

    def spread() -> None:
        u = group.update
        for i in range(n):
            u(keys[i % 1000], i)

    rows = [("query (local key)", queries), ("query (falls through to parent)", fallthrough),
            ("update(key, value)", sets), ("update(key, fn=...)", fns),
            ("update, 1,000 keys", spread)]
    for label, fn in rows:
        print(f"   {label:<40}{rate(n, timed(fn))}")
    group.monitor(lambda e: None, key="score")
    print(f"   {'update(key, value) + 1 key listener':<40}{rate(n, timed(sets))}")
    svc = EnvService(world)

    async def direct() -> None:
        for _ in range(n):
            await svc.incr("score", env="global/group-1")

    async def batched() -> None:
        await svc.apply([Op.incr("score", env="global/group-1")] * n)

    for label, coro_fn in (("EnvService.incr, awaited one by one", direct),
                           ("EnvService.apply, one batch", batched)):
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            asyncio.run(coro_fn())
            best = min(best, time.perf_counter() - t0)
        print(f"   {label:<40}{rate(n, best)}")


# -- 2./3. EnvService from agents ---------------------------------------------------------------

class Player(Agent):
    __slots__ = ("env",)

    def __init__(self, id: int, profile: Profile | None = None, *, env: Any) -> None:
        super().__init__(id, profile)
        self.env = env


async def idle(agent: Player, spread: bool) -> None:
    return None


async def bump(agent: Player, spread: bool) -> Any:
    return await agent.env.incr(f"k{agent.id}" if spread else "k0")


async def hold(agent: Player, spread: bool, hold_s: float) -> Any:
    async def slow_plus_one(old: int) -> int:
        await asyncio.sleep(hold_s)
        return old + 1

    return await agent.env.update(f"k{agent.id}" if spread else "k0", fn=slow_plus_one)


async def _slow_plus_one(hold_s: float, old: int) -> int:
    await asyncio.sleep(hold_s)
    return old + 1


async def hold_partial(agent: Player, spread: bool, hold_s: float) -> Any:
    """:func:`hold` with one module-level function instead of a new closure per call: to
    another process, a batch pickles it once rather than once per op, code included."""
    return await agent.env.update(f"k{agent.id}" if spread else "k0",
                                  fn=partial(_slow_plus_one, hold_s))


HOLD_FNS = {"closure": hold, "partial": hold_partial}


async def service_round(n: int, workers: int, rounds: int, via: str, spread: bool,
                        concurrency: int, body: Callable[..., Any], *args: Any
                        ) -> tuple[float, float]:
    """(best round, idle round) wall seconds; checks that no increment was lost."""
    svc = EnvService(Env("global"), max_concurrency=concurrency)
    keys = n if spread else 1
    await svc.apply([Op.register(f"k{i}", 0) for i in range(keys)])
    env: Any = svc if via == "service" else PerWorker(EnvClient, svc)
    async with Simulation(workers=workers) as sim:
        group = await sim.create(Player, n, init={"env": env})
        best, idle_s = await time_rounds(group, rounds, spread, body, *args)
    total = sum((await svc.query_prefix("k")).values())
    assert total == n * rounds, (total, n * rounds)
    return best, idle_s


async def time_rounds(group: Any, rounds: int, spread: bool, body: Callable[..., Any],
                      *args: Any) -> tuple[float, float]:
    """(best round, idle round) wall seconds of ``group.map(body, ...)``."""
    await group.map(idle, spread)  # warm-up
    t0 = time.perf_counter()
    await group.map(idle, spread)
    idle_s = time.perf_counter() - t0
    times = []
    for _ in range(rounds):
        gc.collect()
        t0 = time.perf_counter()
        await group.map(body, spread, *args)
        times.append(time.perf_counter() - t0)
    return min(times), idle_s


def bench_service(n: int, workers: int, rounds: int) -> None:
    print(f"\n2. EnvService from {n:,} agents on {workers} workers, one incr per agent per "
          f"round (best of {rounds})")
    print(f"   {'path':<9}{'keys':<8}{'max_conc':>9}{'round':>10}{'idle round':>12}"
          f"{'ops/s (round)':>16}{'ops/s (net)':>14}")
    for via in ("service", "client"):
        for spread in (False, True):
            for conc in (1, 8, 64):
                best, idle_s = asyncio.run(service_round(n, workers, rounds, via, spread, conc,
                                                         bump))
                net = max(best - idle_s, 1e-9)
                print(f"   {via:<9}{'spread' if spread else 'one':<8}{conc:>9}"
                      f"{best * 1e3:>8.0f}ms{idle_s * 1e3:>10.0f}ms"
                      f"{n / best:>16,.0f}{n / net:>14,.0f}")


def bench_hold(n: int, workers: int, hold_ms: float, body: Callable[..., Any] = hold
               ) -> None:
    print(f"\n3. Async read-modify-writes holding their key {hold_ms:g} ms, {n:,} agents on "
          f"{workers} workers (one round)")
    print(f"   {'keys':<8}{'max_conc':>9}{'round':>10}{'ops/s':>12}")
    for spread in (False, True):
        for conc in (1, 8, 64):
            best, _ = asyncio.run(service_round(n, workers, 1, "service", spread, conc, body,
                                                hold_ms / 1e3))
            print(f"   {'spread' if spread else 'one':<8}{conc:>9}{best * 1e3:>8.0f}ms"
                  f"{n / best:>12,.0f}")


# -- 5. the service in a Ray actor -------------------------------------------------------------

async def remote_round(n: int, workers: int, rounds: int, spread: bool, concurrency: int,
                       body: Callable[..., Any], *args: Any) -> tuple[float, float]:
    """:func:`service_round` through ``serve()`` on the Ray backend (agents use EnvClient)."""
    world = Env("global")
    for i in range(n if spread else 1):
        world.register(f"k{i}", 0)
    async with Simulation(workers=workers, backend="ray") as sim:
        async with await serve(world, sim, max_concurrency=concurrency) as svc:
            group = await sim.create(Player, n, init={"env": PerWorker(EnvClient, svc)})
            best, idle_s = await time_rounds(group, rounds, spread, body, *args)
            total = sum((await svc.query_prefix("k")).values())
    assert total == n * rounds, (total, n * rounds)
    return best, idle_s


def start_ray() -> bool:
    try:
        import ray
    except ImportError:
        print("\n5. Remote service: skipped (Ray is not installed)")
        return False
    if not ray.is_initialized():  # one local Ray for every row, not one per simulation
        ray.init(address="local", include_dashboard=False, configure_logging=False,
                 log_to_driver=False)
    return True


def bench_remote(n: int, workers: int, rounds: int) -> None:
    print(f"\n5a. Remote service (Ray actor) vs in-process, {n:,} agents on {workers} workers "
          f"through EnvClient, one incr per agent per round (best of {rounds})")
    print(f"   {'service':<9}{'keys':<8}{'max_conc':>9}{'round':>10}{'idle round':>12}"
          f"{'ops/s (round)':>16}{'ops/s (net)':>14}")
    for spread in (False, True):
        for conc in (1, 8, 64):
            for where in ("local", "ray"):  # interleaved: both see the same host load
                if where == "local":
                    best, idle_s = asyncio.run(service_round(n, workers, rounds, "client",
                                                             spread, conc, bump))
                else:
                    best, idle_s = asyncio.run(remote_round(n, workers, rounds, spread, conc,
                                                            bump))
                net = max(best - idle_s, 1e-9)
                print(f"   {where:<9}{'spread' if spread else 'one':<8}{conc:>9}"
                      f"{best * 1e3:>8.0f}ms{idle_s * 1e3:>10.0f}ms"
                      f"{n / best:>16,.0f}{n / net:>14,.0f}", flush=True)


def bench_remote_hold(n: int, workers: int, hold_ms: float,
                      body: Callable[..., Any] = hold) -> None:
    print(f"\n5b. Async read-modify-writes holding their key {hold_ms:g} ms, remote service "
          f"(Ray actor) vs in-process, {n:,} agents on {workers} workers through EnvClient "
          f"(one round; fn: {'a new closure per op' if body is hold else 'one function'})")
    print(f"   {'service':<9}{'keys':<8}{'max_conc':>9}{'round':>10}{'idle round':>12}"
          f"{'ops/s':>12}")
    for spread in (False, True):
        for conc in (1, 8, 64):
            for where in ("local", "ray"):
                if where == "local":
                    best, idle_s = asyncio.run(service_round(n, workers, 1, "client", spread,
                                                             conc, body, hold_ms / 1e3))
                else:
                    best, idle_s = asyncio.run(remote_round(n, workers, 1, spread, conc, body,
                                                            hold_ms / 1e3))
                print(f"   {where:<9}{'spread' if spread else 'one':<8}{conc:>9}"
                      f"{best * 1e3:>8.0f}ms{idle_s * 1e3:>10.0f}ms{n / best:>12,.0f}",
                      flush=True)


async def read(agent: Player, spread: bool) -> Any:
    return await agent.env.query(f"k{agent.id}" if spread else "k0")


async def read_round(n: int, workers: int, rounds: int, spread: bool, backend: str
                     ) -> tuple[float, float, int]:
    """(best round, idle round, ops that reached the service) of one read per agent."""
    world = Env("global")
    for i in range(n if spread else 1):
        world.register(f"k{i}", i)
    async with Simulation(workers=workers, backend=backend) as sim:
        async with await serve(world, sim) as svc:
            group = await sim.create(Player, n, init={"env": PerWorker(EnvClient, svc)})
            best, idle_s = await time_rounds(group, rounds, spread, read)
            values = await group.map(read, spread)
            ops = (await svc.fetch_statistics()).ops
    assert values == (list(range(n)) if spread else [0] * n)
    return best, idle_s, ops


def bench_reads(n: int, workers: int, rounds: int, remote: bool) -> None:
    print(f"\n5c. One read per agent through EnvClient, {n:,} agents on {workers} workers: "
          f"everyone reads one key (identical reads of a batch travel once) or its own key "
          f"(best of {rounds})")
    print(f"   {'service':<9}{'keys':<8}{'round':>10}{'idle round':>12}{'reads/s (net)':>15}"
          f"{'ops at service':>16}")
    for spread in (False, True):
        for where in ("local", "ray") if remote else ("local",):
            best, idle_s, ops = asyncio.run(read_round(n, workers, rounds, spread, where))
            net = max(best - idle_s, 1e-9)
            print(f"   {where:<9}{'own' if spread else 'one':<8}{best * 1e3:>8.0f}ms"
                  f"{idle_s * 1e3:>10.0f}ms{n / net:>15,.0f}{ops:>16,}", flush=True)


# -- 4. Map2D ----------------------------------------------------------------------------------

def bench_map(n: int, queries: int, seed: int = 0) -> None:
    side = float(np.sqrt(n))  # one position per unit of area on average
    rng = np.random.default_rng(seed)
    xs, ys = rng.uniform(0, side, n), rng.uniform(0, side, n)
    print(f"\n4. Map2D, {n:,} positions on {side:,.0f} x {side:,.0f} (density 1 per unit "
          "area), cell 2.0")
    m = Map2D(side, side, 2.0)
    t0 = time.perf_counter()
    m.place_many(np.arange(n), xs, ys)
    m.nearby((0.0, 0.0), 1.0)  # includes the index build
    print(f"   {'place_many + index build':<40}{(time.perf_counter() - t0) * 1e3:>10.0f} ms")
    qx, qy = rng.uniform(0, side, queries), rng.uniform(0, side, queries)
    pts = list(zip(qx.tolist(), qy.tolist(), strict=True))
    for label, fn in (
        ("nearby r=2 (~13 found)", lambda p: m.nearby(p, 2.0)),
        ("nearby r=5 (~79 found)", lambda p: m.nearby(p, 5.0)),
        ("nearby r=20 (~1,257 found)", lambda p: m.nearby(p, 20.0)),
        ("k_nearest k=10", lambda p: m.k_nearest(p, 10)),
        ("k_nearest k=100", lambda p: m.k_nearest(p, 100)),
    ):
        found = []
        t0 = time.perf_counter()
        for p in pts:
            found.append(len(fn(p)))
        dt = time.perf_counter() - t0
        print(f"   {label:<40}{rate(queries, dt)}   (mean found {statistics.fmean(found):.1f})")
    movers = rng.choice(n, queries, replace=False)
    mx, my = rng.uniform(0, side, queries), rng.uniform(0, side, queries)
    t0 = time.perf_counter()
    for i, x, y in zip(movers.tolist(), mx.tolist(), my.tolist(), strict=True):
        m.move(i, x, y)
    dt = time.perf_counter() - t0
    print(f"   {'move (one at a time)':<40}{rate(queries, dt)}")
    t0 = time.perf_counter()
    for p in pts:
        m.nearby(p, 2.0)
    dt = time.perf_counter() - t0
    print(f"   {'nearby r=2 after the moves (overlay)':<40}{rate(queries, dt)}")
    t0 = time.perf_counter()
    m.move_many(np.arange(n), rng.uniform(0, side, n), rng.uniform(0, side, n))
    m.nearby((0.0, 0.0), 1.0)
    print(f"   {'move_many (all) + index rebuild':<40}{(time.perf_counter() - t0) * 1e3:>10.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-ops", type=int, default=1_000_000)
    parser.add_argument("--agents", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hold-agents", type=int, default=2_000)
    parser.add_argument("--hold-ms", type=float, default=1.0)
    parser.add_argument("--positions", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=20_000)
    parser.add_argument("--only", choices=["env", "service", "hold", "map", "remote",
                                           "remote-service", "remote-hold", "reads"],
                        default=None,
                        help="one part (remote: both remote tables)")
    parser.add_argument("--hold-fn", choices=sorted(HOLD_FNS), default="closure",
                        help="the update function of parts 3 and 5b: a new closure per op "
                             "(default) or partial() of one module-level function")
    parser.add_argument("--skip-remote", action="store_true",
                        help="leave out part 5 (the service in a Ray actor)")
    args = parser.parse_args()
    if args.only in (None, "env"):
        bench_local_env(args.env_ops)
    if args.only in (None, "service"):
        bench_service(args.agents, args.workers, args.rounds)
    if args.only in (None, "hold"):
        bench_hold(args.hold_agents, args.workers, args.hold_ms, HOLD_FNS[args.hold_fn])
    if args.only in (None, "map"):
        bench_map(args.positions, args.queries)
    remote = [] if args.skip_remote else {
        None: ["service", "hold"], "remote": ["service", "hold"],
        "remote-service": ["service"], "remote-hold": ["hold"]}.get(args.only, [])
    if args.only in (None, "reads"):
        bench_reads(args.agents, args.workers, args.rounds,
                    not args.skip_remote and start_ray())
    if remote and start_ray():
        if "service" in remote:
            bench_remote(args.agents, args.workers, args.rounds)
        if "hold" in remote:
            bench_remote_hold(args.hold_agents, args.workers, args.hold_ms,
                              HOLD_FNS[args.hold_fn])


if __name__ == "__main__":
    main()
