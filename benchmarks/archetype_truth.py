"""An archetype run against the same run file asked individually: calls, the audit, the
true distance, per step.

    .venv/bin/python benchmarks/archetype_truth.py runs/game-p1 runs/game-p1-individual

For each step of ``SAMPLED`` (a run with ``sampling:``; the game or the social network):
the calls it made and the calls of ``INDIVIDUAL`` (the same run file with ``mode:
individual``), the audit its summary reported (per decision: distance, 95% interval,
audited agents; ``fell_back`` when the adaptive mode fell back after it), and the *true*
distance: between the answers of every agent in the two runs (the game: Wasserstein of
the valid numbers, in points; the social network: TV of the active agents' actions).
The audit compares the audited agents' own answers with their archetypes' in the sampled
run's world; the true distance compares two worlds, which drift apart when the answers
of one step shape the next (feeds, the winning number).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
from scipy.stats import wasserstein_distance

from populace.results import read_table


def answers(run: Path) -> tuple[str, dict[int, Any]]:
    """The answers of every agent per step: the game's valid numbers, or the social
    network's actions (a Counter)."""
    if (run / "actions.parquet").exists():
        table = read_table(run, "actions").select(["step", "action"])
        out: dict[int, Any] = {}
        for step, action in zip(table.column("step").to_pylist(),
                                table.column("action").to_pylist(), strict=True):
            out.setdefault(step, Counter())[action] += 1
        return "TV", out
    table = read_table(run, "responses").select(["round", "number", "valid"])
    table = table.filter(pc.field("valid"))
    numbers: dict[int, list[float]] = {}
    for step, number in zip(table.column("round").to_pylist(),
                            table.column("number").to_pylist(), strict=True):
        numbers.setdefault(step, []).append(number)
    return "Wasserstein", numbers


def distance(kind: str, a: Any, b: Any) -> float:
    if kind == "Wasserstein":
        return float(wasserstein_distance(a, b))
    na, nb = sum(a.values()), sum(b.values())
    return 0.5 * sum(abs(a[k] / na - b[k] / nb) for k in {*a, *b})


def steps(run: Path) -> list[dict[str, Any]]:
    return json.loads((run / "summary.json").read_text())["steps"]


def calls(entry: dict[str, Any]) -> int:
    return sum(m.get("requests", 0) for m in (entry.get("llm") or {}).values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sampled", type=Path)
    parser.add_argument("individual", type=Path)
    args = parser.parse_args()
    kind, mine = answers(args.sampled)
    _, theirs = answers(args.individual)
    alone = {e["step"]: e for e in steps(args.individual)}
    made = everyone = 0
    print(f"{'step':>4} {'calls':>9} {'individual':>10} {'ratio':>6}  "
          f"{'decision':<8} {'audited':>7} {'distance':>8} {'95% interval':>15}  "
          f"{'true ' + kind:>16}")
    for entry in steps(args.sampled):
        t = entry["step"]
        n, m = calls(entry), calls(alone[t])
        made, everyone = made + n, everyone + m
        got = next(iter((entry.get("sampling") or {}).values()), None)
        true = f"{distance(kind, mine[t], theirs[t]):.4f}"
        if got is None:  # nothing sampled: every agent asked
            print(f"{t:>4} {n:>9,} {m:>10,} {m / n:>6.1f}  {'(all asked individually)':<43}"
                  f" {true:>16}")
            continue
        for decision, d in got["decisions"].items():
            value = d.get("tv", d.get("wasserstein"))
            print(f"{t:>4} {n:>9,} {m:>10,} {m / n:>6.1f}  {decision:<8} {d['audited']:>7,} "
                  f"{value:>8.4f} {d['low']:>7.4f}-{d['high']:<7.4f}  {true:>16}"
                  + ("  fell_back" if decision in got.get("fell_back", ()) else ""))
    print(f"all {made:>9,} {everyone:>10,} {everyone / made:>6.1f}")


if __name__ == "__main__":
    main()
