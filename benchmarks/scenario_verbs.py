"""What the Scenario API's per-step verbs cost the central process, per agent.

A scenario of its own (every agent answers a number each step) runs through the launcher,
as ``populace run`` runs a user's scenario. Once a step's answers are all in, the step
times, in the central process, ``collect`` (the answers as a table), ``record`` (a table of
the step), ``metric`` and ``distribution``, and reports each in nanoseconds per agent as
metrics of the step. Two ways side by side in one invocation:

- ``table``: the verbs as documented for a million agents: ``collect(as_table=True)``,
  columns into ``record`` and ``distribution``;
- ``list``: the baseline a scenario writer reaches for first: ``collect()`` gives a list
  of answers, and the rows are built from it in a Python loop.

::

    .venv/bin/python benchmarks/scenario_verbs.py --agents 1000000 --backend ray --workers 2
    .venv/bin/python benchmarks/scenario_verbs.py --agents 100000 --workers 1

Prints one JSON line per way: the median over the steps after the first of each verb's
nanoseconds per agent, and the step's wall time.
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
from typing import Literal

import numpy as np

from populace.core import Agent, wait
from populace.launch import Run, Scenario, ScenarioSettings


class Voter(Agent):
    __slots__ = ("models",)

    def __init__(self, id, profile=None, *, models):  # type: ignore[no-untyped-def]
        super().__init__(id, profile)
        self.models = models

    async def opinion(self, t: int) -> float:
        answer = await self.models["dummy"].complete(
            [{"role": "user", "content": "How much do you agree, 0-100?"}],
            seed=t * 1_000_003 + self.id)
        return float(answer.text)


class Everyone(Scenario):
    """Every agent answers a number each step; the step times its verbs."""

    name = "scenario-verbs"

    class Settings(ScenarioSettings):
        way: Literal["table", "list"] = "table"

    async def setup(self, run: Run) -> None:
        self.voters = await run.create(Voter, init={"models": run.models()})
        self.ids = self.voters.ids

    async def step(self, run: Run, t: int) -> None:
        answers = self.voters.map(Voter.opinion, t)
        answers.prefer_columns()  # as collect(as_table=True) asks before it waits
        await wait([answers])  # time the verbs, not the model's latency
        n = len(answers)
        clock = time.perf_counter
        t0 = clock()
        if run.settings.way == "table":
            table = await run.collect(answers, as_table=True)
            t1 = clock()
            values = table.column("content").to_numpy(zero_copy_only=False)
            run.record("opinions", {"agent_id": self.ids, "opinion": values})
        else:
            replies = await run.collect(answers)
            t1 = clock()
            values = np.array([float(r) for r in replies])
            run.record("opinions", {"agent_id": [int(i) for i in self.ids],
                                    "opinion": [float(v) for v in values]})
        t2 = clock()
        run.metric("mean", float(values.mean()))
        t3 = clock()
        run.distribution("opinion", values, range=(0, 100))
        t4 = clock()
        per = 1e9 / n
        run.metric("ns_per_agent", {
            "collect": round((t1 - t0) * per, 1), "record": round((t2 - t1) * per, 1),
            "metric": round((t3 - t2) * per, 1), "distribution": round((t4 - t3) * per, 1),
            "all": round((t4 - t0) * per, 1)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=1_000_000)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--backend", choices=["local", "ray"], default="local")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--ways", default="table,list")
    args = parser.parse_args()
    here = Path(__file__).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        for way in args.ways.split(","):
            run_file = Path(tmp) / f"{way}.yaml"
            run_file.write_text(
                f"scenario: {here}:Everyone\nname: verbs-{way}\nagents: {args.agents}\n"
                f"steps: {args.steps}\nseed: 1\nkeep_checkpoints: 2\n"
                "models:\n  dummy: {provider: dummy, latency: 0.05}\n"
                f"settings:\n  way: {way}\n")
            out = Path(tmp) / way
            done = subprocess.run(
                [sys.executable, "-m", "populace.cli", "run", str(run_file), "--out", str(out),
                 "--backend", args.backend, "--workers", str(args.workers)],
                stdout=subprocess.DEVNULL, check=False)
            if done.returncode != 0:
                sys.exit(f"populace run ({way}) exited with {done.returncode}")
            steps = json.loads((out / "summary.json").read_text())["steps"][1:]
            verbs = {k: round(statistics.median(s["ns_per_agent"][k] for s in steps), 1)
                     for k in steps[0]["ns_per_agent"]}
            print(json.dumps({"way": way, "agents": args.agents, "backend": args.backend,
                              "workers": args.workers, "ns_per_agent": verbs,
                              "step_s": [s["wall_s"] for s in steps]}), flush=True)


if __name__ == "__main__":
    main()
