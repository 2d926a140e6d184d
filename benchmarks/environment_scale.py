"""A rumour on a map, at scale: what an environment-heavy step costs, per-agent vs columnar.

Agents live on a plane. Every simulated day every agent who knows the rumour tells the
agents within ``radius`` of it: it finds them on the map (``Map2D``) and adds one to each
one's counter in the served environment (``Env``, through ``run.serve``); an agent told for
the first time learns it, and records the day in the environment. Tables: ``learned`` (per
day, who learned it, with their counter then) and, on the last day, ``heard`` (everyone's
counter). Written against the documented Scenario API, in four ways, run side by side:

- ``agent``: per-agent operations, the only way before issue 32 -- the scenario asks
  ``Map2D.nearby`` once per knower, each knower sends one ``incr`` per neighbour
  (``env.apply([Op.incr(...), ...])``), each learner reads the day and registers its own
  key; every agent's ``EnvClient`` sends its worker's operations of a tick one by one, as
  before (``EnvClient(service, merge=False)``);
- ``merged``: the same agent code with today's ``EnvClient``, which merges a worker's runs
  of like one-key ops into one many-key op per tick;
- ``agent-at``: agents still tell, each knower with one ``incr_many("heard", 1, at=near)``
  on an array key (its neighbours from one ``Map2D.nearby_many`` for all knowers), which
  the client merges per tick into one vectorised op, each knower's result its own;
- ``columnar``: one ``Map2D.nearby_many`` for all knowers, and the environment's columnar
  operations: the counters are one array key, told with one ``incr_many(..., at=)``, the
  learners' day set with one ``update_many(..., at=)``.

The tables must be identical between the ways (the script compares them and says so).
``--throughput`` measures the environment service alone instead (below).
Each way is one ``populace run`` in a child process; its peak memory is the whole process
tree's (Ray's processes included), PSS. Prints one JSON line per way: seconds per day (the
step's own work, ``day_s``, and with the checkpoint after it, ``wall_s``), key operations
through the environment per second of the day, the peak memory::

    .venv/bin/python benchmarks/environment_scale.py --agents 100000 --days 4
    .venv/bin/python benchmarks/environment_scale.py --agents 1000000 --days 4 --backend ray \\
        --workers 2 [--ways merged,columnar]

``--throughput``: key operations per second through the service (a Ray actor with
``--backend ray``), ``--agents`` keys: every agent adds one to its own key per round through
its worker's ``EnvClient``, without and with merging (net of an idle round, best of 3), and
to its own element of an array key (``incr_many(key, 1, at=[i])``);
then the central process adds one to every key with one ``incr_many`` of the keys' names,
and to every element of an array key with one ``incr_many(..., at=)``::

    .venv/bin/python benchmarks/environment_scale.py --throughput --agents 1000000 \\
        --backend ray --workers 2 [--shards 2] [--no-agents]

(Unmerged, an agent's ``at=`` operation copies the whole array, so that part is skipped
above 100,000 agents; ``--no-agents`` leaves out the agents' rounds.)

``--nearby``: ``Map2D`` alone, ``--agents`` positions at ``--density``: every position's
neighbours within ``--radius`` at once (asked by ids, and by points), a tenth of them, one
point at a time, and ``k_nearest_many``, each the best of 3; then up to 100,000 agents
(on ``--backend``) each asking a served map ``nearby`` for themselves::

    .venv/bin/python benchmarks/environment_scale.py --nearby --agents 1000000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np

from populace.core import Agent, PerWorker, Profile, Simulation
from populace.environment import Env, EnvClient, Map2D, Op, serve
from populace.launch import Run, Scenario, ScenarioSettings


class Person(Agent):
    __slots__ = ("env", "learned")

    def __init__(self, id: int, profile: Profile | None = None, *, env: EnvClient) -> None:
        super().__init__(id, profile)
        self.env = env
        self.learned = -1

    async def tell(self, near: list[int]) -> list[int]:
        """Tell each neighbour (one ``incr`` each); those told now for the first time."""
        counts = await self.env.apply([Op.incr(f"heard/{j}") for j in near])
        return [j for j, count in zip(near, counts, strict=True) if count == 1]

    async def tell_at(self, near: list[int]) -> list[int]:
        """Tell each neighbour, all in one operation on the counters' array."""
        counts = await self.env.incr_many("heard", 1, at=near)
        return [j for j, count in zip(near, counts.tolist(), strict=True) if count == 1]

    async def learn(self) -> int:
        """Record the day I learned it; my counter now."""
        self.learned = await self.env.query("day")
        await self.env.register(f"learned/{self.id}", self.learned)
        return int(await self.env.query(f"heard/{self.id}"))

    async def learned_on(self, day: int) -> None:
        """The columnar way: the scenario recorded the day for everyone at once."""
        self.learned = day

    def get_state(self) -> dict[str, int]:
        return {"learned": self.learned}

    def set_state(self, state: dict[str, int]) -> None:
        self.learned = state["learned"]


class MapRumour(Scenario):
    """Every knower tells everyone within ``radius``, every day."""

    name = "map-rumour"

    class Settings(ScenarioSettings):
        way: Literal["agent", "merged", "agent-at", "columnar"] = "columnar"
        radius: float = 5.0
        density: float = 0.1   # agents per unit of area: ~7.9 within radius 5
        first: float = 0.01    # the share of agents who know it on day 1

    async def setup(self, run: Run) -> None:
        s, n = run.settings, run.agents
        side = float(np.sqrt(n / s.density))
        rng = run.rng("places")
        self.plane = Map2D(side, side, cell_size=s.radius)
        self.plane.place_many(np.arange(n), rng.uniform(0, side, n), rng.uniform(0, side, n))
        self.known = np.zeros(n, dtype=bool)
        self.known[run.rng("first").choice(n, max(1, int(s.first * n)), replace=False)] = True
        world = Env("global")
        if s.way in ("columnar", "agent-at"):
            world.register("heard", np.zeros(n, dtype=np.int64))
            world.register("learned", np.full(n, -1, dtype=np.int64))
        else:
            world.register("day", 0)
            for i in range(n):
                world.register(f"heard/{i}", 0)
        self.world = await run.serve(world)
        client = (run.env_client() if s.way != "agent" else
                  PerWorker(EnvClient, self.world, merge=False))
        self.people = await run.create(Person, init={"env": client})

    async def step(self, run: Run, t: int) -> None:
        s = run.settings
        t0 = time.perf_counter()
        ops0 = (await self.world.fetch_statistics()).ops
        knowers = np.flatnonzero(self.known)
        if s.way in ("columnar", "agent-at"):
            indptr, near = self.plane.nearby_many(knowers, s.radius, exclude=knowers)
            if s.way == "columnar":
                told, times = np.unique(near, return_counts=True)
                await self.world.incr_many("heard", times, at=told)
            else:
                # Lists, not arrays: a list of ints pickles 7x faster than a small array.
                rows = [row.tolist() for row in np.split(near, indptr[1:-1])]
                firsts = await run.collect(self.people.select(knowers).scatter(
                    Person.tell_at, rows))
                told = np.unique(np.fromiter((j for f in firsts for j in f), dtype=np.int64))
            learners = told[~self.known[told]]
            await self.world.update_many("learned", t, at=learners)
            heard = await self.world.query_many("heard", at=learners)
            await run.collect(self.people.select(learners).map(Person.learned_on, t))
        else:
            await self.world.update("day", t)
            xs, ys = self.plane.positions(knowers)
            nears = [self.plane.nearby((x, y), s.radius, exclude=i).tolist()
                     for i, x, y in zip(knowers.tolist(), xs.tolist(), ys.tolist(),
                                        strict=True)]
            firsts = await run.collect(self.people.select(knowers).scatter(Person.tell, nears))
            told = np.unique(np.fromiter((j for f in firsts for j in f), dtype=np.int64))
            learners = told[~self.known[told]]
            heard = np.array(await run.collect(self.people.select(learners).map(Person.learn)),
                             dtype=np.int64)
        self.known[learners] = True
        day_s = time.perf_counter() - t0
        ops = (await self.world.fetch_statistics()).ops - ops0 - 1  # less our own read
        run.record("learned", {"agent_id": learners, "heard": heard})
        if t == run.steps:
            if s.way in ("columnar", "agent-at"):
                counters = await self.world.query("heard")
            else:
                counters = np.array(await self.world.query_many(
                    [f"heard/{i}" for i in range(run.agents)]), dtype=np.int64)
            run.record("heard", {"agent_id": np.arange(run.agents), "heard": counters})
        run.metric("knowers", int(knowers.size))
        run.metric("learners", int(learners.size))
        run.metric("env_ops", ops)
        run.metric("day_s", round(day_s, 3))

    def get_state(self) -> dict[str, np.ndarray]:
        return {"known": self.known}

    def set_state(self, state: dict[str, np.ndarray]) -> None:
        self.known = state["known"]


def run_way(way: str, args: argparse.Namespace, tmp: Path) -> dict[str, object]:
    from populace._procmem import PeakMemory

    here = Path(__file__).resolve()
    run_file = tmp / f"{way}.yaml"
    run_file.write_text(
        f"scenario: {here}:MapRumour\nname: rumour-{way}\nagents: {args.agents}\n"
        f"steps: {args.days}\nseed: {args.seed}\nkeep_checkpoints: 2\n"
        f"settings:\n  way: {way}\n  radius: {args.radius}\n  density: {args.density}\n"
        f"  first: {args.first}\n")
    out = tmp / way
    command = [sys.executable, "-m", "populace.cli", "run", str(run_file), "--out", str(out),
               "--backend", args.backend, "--workers", str(args.workers)]
    t0 = time.perf_counter()
    with PeakMemory(interval=0.25) as peak:
        done = subprocess.run(command, stdout=subprocess.DEVNULL, check=False)
    if done.returncode != 0:
        sys.exit(f"populace run ({way}) exited with {done.returncode}")
    summary = json.loads((out / "summary.json").read_text())
    steps = summary["steps"]
    day_s = [s["day_s"] for s in steps]
    return {
        "way": way, "agents": args.agents, "backend": args.backend, "workers": args.workers,
        "day_s": day_s, "median_day_s": round(statistics.median(day_s), 3),
        "wall_s": [s["wall_s"] for s in steps],
        "median_wall_s": round(statistics.median(s["wall_s"] for s in steps), 3),
        "knowers": [s["knowers"] for s in steps], "env_ops": [s["env_ops"] for s in steps],
        "env_ops_per_s": round(sum(s["env_ops"] for s in steps) / sum(day_s)),
        "create_s": summary.get("create_s"), "run_s": round(time.perf_counter() - t0, 1),
        "peak_pss_mb": None if peak.pss_mb is None else round(peak.pss_mb),
        "peak_rss_mb": round(peak.mb),
    }


def same_tables(a: Path, b: Path) -> bool:
    from populace.results import read_table

    return all(read_table(a, name).sort_by([("step", "ascending"), ("agent_id", "ascending")])
               .equals(read_table(b, name).sort_by([("step", "ascending"),
                                                    ("agent_id", "ascending")]))
               for name in ("learned", "heard"))


class Counter(Agent):
    __slots__ = ("at", "env", "key")

    def __init__(self, id: int, profile: Profile | None = None, *, env: EnvClient,
                 keys: int) -> None:
        super().__init__(id, profile)
        self.env = env
        self.key = f"k/{id % keys}"
        self.at = [id % keys]

    async def bump(self) -> None:
        await self.env.incr(self.key)

    async def bump_at(self) -> None:
        await self.env.incr_many("column", 1, at=self.at)

    async def idle(self) -> None:
        pass


async def throughput(args: argparse.Namespace) -> None:
    n = args.agents
    keys = [f"k/{i}" for i in range(n)]
    world = Env("global")
    for key in keys:
        world.register(key, 0)
    world.register("column", np.zeros(n, dtype=np.int64))
    clock = time.perf_counter
    async with Simulation(workers=args.workers, backend=args.backend) as sim, \
            await serve(world, sim, shards=args.shards) as service:
        at_rounds = 0
        for merge in (False, True) if not args.no_agents else ():
            people = await sim.create(Counter, n, name=f"merge-{merge}",
                                      init={"env": PerWorker(EnvClient, service, merge=merge),
                                            "keys": n})
            await people.map(Counter.bump)  # warm up
            idle = busy = float("inf")
            for _ in range(3):
                t0 = clock()
                await people.map(Counter.idle)
                t1 = clock()
                await people.map(Counter.bump)
                t2 = clock()
                idle, busy = min(idle, t1 - t0), min(busy, t2 - t1)
            print(json.dumps({"throughput": "agents, one incr each", "merge": merge,
                              "backend": args.backend, "shards": args.shards, "keys": n,
                              "round_s": round(busy, 3), "idle_round_s": round(idle, 3),
                              "key_ops_per_s": round(n / max(busy - idle, 1e-9))}),
                  flush=True)
            if not merge and n > 100_000:
                # Unmerged, each op copies the whole array: n copies of n elements.
                print(json.dumps({"throughput": "agents, one incr_many(at=) each",
                                  "merge": merge, "skipped": "quadratic above 100,000"}))
                continue
            await people.map(Counter.bump_at)  # warm up
            busy = float("inf")
            for _ in range(3):
                t0 = clock()
                await people.map(Counter.bump_at)
                busy = min(busy, clock() - t0)
            at_rounds += 4
            print(json.dumps({"throughput": "agents, one incr_many(at=) each", "merge": merge,
                              "backend": args.backend, "shards": args.shards, "keys": n,
                              "round_s": round(busy, 3),
                              "key_ops_per_s": round(n / max(busy - idle, 1e-9))}),
                  flush=True)
        for label, call in (
                ("central, incr_many(keys)", lambda: service.incr_many(keys, 1)),
                ("central, incr_many(key, at=)",
                 lambda: service.incr_many("column", 1, at=np.arange(n)))):
            best = float("inf")
            for _ in range(3):
                t0 = clock()
                await call()
                best = min(best, clock() - t0)
            print(json.dumps({"throughput": label, "backend": args.backend,
                              "shards": args.shards, "keys": n,
                              "op_s": round(best, 3), "key_ops_per_s": round(n / best)}),
                  flush=True)
        rounds = 0 if args.no_agents else 8  # warm-up and 3 rounds, twice
        counts = await service.query_many(keys[:1])
        assert counts == [rounds + 3], counts  # and 3 incr_many
        column = await service.query_many("column", at=[0, n - 1])
        assert column.tolist() == [at_rounds + 3] * 2, column  # at= per agent


class Looker(Agent):
    __slots__ = ("town", "x", "y")

    def __init__(self, id: int, profile: Profile | None = None, *, town: Any,
                 xs: np.ndarray, ys: np.ndarray) -> None:
        super().__init__(id, profile)
        self.town = town
        self.x, self.y = float(xs[id]), float(ys[id])

    async def look(self, radius: float) -> int:
        return len(await self.town.nearby((self.x, self.y), radius, exclude=self.id))


async def served_nearby(plane: Map2D, xs: np.ndarray, ys: np.ndarray,
                        args: argparse.Namespace) -> None:
    """Agents each asking a served map (their calls of a tick travel together)."""
    n = min(args.agents, 100_000)
    async with Simulation(workers=args.workers, backend=args.backend) as sim:
        town = await serve(plane, sim)
        people = await sim.create(Looker, n, init={"town": town, "xs": xs[:n], "ys": ys[:n]})
        await people.map(Looker.look, args.radius)
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            found = await people.map(Looker.look, args.radius)
            best = min(best, time.perf_counter() - t0)
        await town.aclose()
    print(json.dumps({"nearby": "agents, each nearby() on a served map", "backend": args.backend,
                      "workers": args.workers, "positions": args.agents, "asked": n,
                      "found": sum(found), "s": round(best, 3), "per_s": round(n / best)}),
          flush=True)


def nearby(args: argparse.Namespace) -> None:
    n, r = args.agents, args.radius
    side = float(np.sqrt(n / args.density))
    rng = np.random.default_rng(args.seed)
    ids = np.arange(n)
    xs, ys = rng.uniform(0, side, n), rng.uniform(0, side, n)
    plane = Map2D(side, side, cell_size=r)
    plane.place_many(ids, xs, ys)
    points = np.column_stack((xs, ys))
    tenth = rng.choice(n, n // 10, replace=False)
    one = rng.choice(n, min(n, 20_000), replace=False)

    def one_by_one() -> int:
        return sum(len(plane.nearby((xs[i], ys[i]), r, exclude=int(i)))
                   for i in one.tolist())

    import scipy.spatial  # noqa: F401 - imported once, on first use, not timed here

    clock = time.perf_counter
    t0 = clock()
    plane.nearby_many(ids[:1], r)  # the KD-tree, built once after a change
    print(json.dumps({"nearby": "KD-tree build", "positions": n,
                      "s": round(clock() - t0, 3)}), flush=True)
    for label, call, asked in (
            ("nearby_many, every id", lambda: plane.nearby_many(ids, r, exclude=ids), n),
            ("nearby_many, every point", lambda: plane.nearby_many(points, r, exclude=ids), n),
            ("nearby_many, a tenth of the ids",
             lambda: plane.nearby_many(tenth, r, exclude=tenth), len(tenth)),
            ("k_nearest_many k=8, every id",
             lambda: plane.k_nearest_many(ids, 8, exclude=ids), n),
            ("nearby, one point at a time", one_by_one, len(one))):
        best = float("inf")
        for _ in range(3):
            t0 = clock()
            found = call()
            best = min(best, clock() - t0)
        pairs = found if isinstance(found, int) else len(found[1])
        print(json.dumps({"nearby": label, "positions": n, "radius": r, "asked": asked,
                          "found": pairs, "s": round(best, 3),
                          "per_s": round(asked / best)}), flush=True)
    asyncio.run(served_nearby(plane, xs, ys, args))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=100_000)
    parser.add_argument("--days", type=int, default=4)
    parser.add_argument("--backend", choices=["local", "ray"], default="local")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ways", default="agent,merged,agent-at,columnar")
    parser.add_argument("--radius", type=float, default=5.0)
    parser.add_argument("--density", type=float, default=0.1)
    parser.add_argument("--first", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--throughput", action="store_true",
                        help="measure the environment service alone")
    parser.add_argument("--shards", type=int, default=1,
                        help="with --throughput: services the keys are split over")
    parser.add_argument("--no-agents", action="store_true",
                        help="with --throughput: only the central process's operations")
    parser.add_argument("--nearby", action="store_true", help="measure Map2D alone")
    args = parser.parse_args()
    if args.nearby:
        nearby(args)
        return
    if args.throughput:
        asyncio.run(throughput(args))
        return
    ways = args.ways.split(",")
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        for way in ways:
            print(json.dumps(run_way(way, args, tmp)), flush=True)
        for way in ways[1:]:
            print(json.dumps({"tables_identical": [ways[0], way],
                              "result": same_tables(tmp / ways[0], tmp / way)}), flush=True)


if __name__ == "__main__":
    main()
