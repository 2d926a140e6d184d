"""Equal against proportional allocation of the archetypes' samples, at equal calls.

    .venv/bin/python benchmarks/archetype_allocation.py --truth 100000 --seeds 10

On the scripted model with ``examples/survey/archetypes.yaml`` (see
``benchmarks/archetype_audit.py``): the survey at ``--truth`` respondents asked
individually once, then in archetype mode (no audit) with ``allocate: equal`` and
``allocate: proportional`` at seeds 1..``--seeds`` (the population is the example's, the
same in every run; the seed moves the archetypes' samples). Per question (a multi-choice
question per option): the mean and largest true distance to the individual run over the
seeds, for each allocation, and the calls of each.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from archetype_audit import calls, distance, distributions, run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--truth", type=int, default=100_000)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--samples", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        individual = run(work, "individual", args.truth, 7, None)
        own = distributions(individual)
        print(f"{args.truth:,} respondents asked individually: {calls(individual):,} calls",
              flush=True)
        got: dict[str, dict[str, list[float]]] = {"equal": {}, "proportional": {}}
        made: dict[str, list[int]] = {"equal": [], "proportional": []}
        for seed in range(1, args.seeds + 1):
            for allocate in got:
                out = run(work, f"{allocate}{seed}", args.truth, seed,
                          {"audit": 0.0, "samples": args.samples, "allocate": allocate})
                theirs = distributions(out)
                for part in own:
                    got[allocate].setdefault(part, []).append(
                        distance(part, own[part], theirs[part]))
                made[allocate].append(calls(out))
            print(f"  seed {seed}: calls {made['equal'][-1]:,} (equal), "
                  f"{made['proportional'][-1]:,} (proportional)", file=sys.stderr, flush=True)
        print(f"{'question':<36} {'equal mean':>10} {'max':>7} {'prop. mean':>10} {'max':>7}")
        for part in sorted(own):
            e, p = got["equal"][part], got["proportional"][part]
            print(f"{part:<36} {sum(e) / len(e):>10.4f} {max(e):>7.4f} "
                  f"{sum(p) / len(p):>10.4f} {max(p):>7.4f}")
        for allocate, ds in got.items():
            cats = [d for part, v in ds.items() if part != "news_hours" for d in v]
            print(f"{allocate}: mean TV {sum(cats) / len(cats):.4f} over {len(cats)} "
                  f"(question, seed) pairs; above 0.03: {sum(d > 0.03 for d in cats)}; "
                  f"calls per run {min(made[allocate]):,}-{max(made[allocate]):,}")


if __name__ == "__main__":
    main()
