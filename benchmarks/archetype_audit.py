"""Does the archetype audit tell the truth? Calls saved, and the interval's coverage.

    .venv/bin/python benchmarks/archetype_audit.py --truth 100000 --agents 10000 --reps 50

On the scripted model (its survey answers depend on age and education), with
``examples/survey/archetypes.yaml`` run through the CLI as a user would:

1. the survey at ``--truth`` respondents asked individually, and again in archetype mode
   with no audit: per question (a multi-choice question per option) the *true* distance
   between the two runs' answer distributions (total variation; Wasserstein for numbers),
   and the calls of each;
2. ``--reps`` archetype runs of ``--agents`` respondents (seeds 1..reps) with an audit of
   ``--audit``: how often each question's reported 95% interval holds the true distance.

``--by gender`` shows the other side: archetypes that leave out what drives the answers.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import yaml
from scipy.stats import wasserstein_distance

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "survey" / "archetypes.yaml"
NUMERIC = {"news_hours"}
MULTI = {"news_sources"}


def run(work: Path, name: str, agents: int, seed: int, sampling: dict[str, Any] | None
        ) -> Path:
    """``populace run`` of the example with ``sampling`` (None: individual)."""
    config = yaml.safe_load(EXAMPLE.read_text())
    model = config["models"]["scripted"]
    if sampling is None:
        model.pop("sampling")
    else:
        model["sampling"].update(sampling)
    config["agents"], config["seed"] = agents, seed
    config["settings"]["questionnaire"] = str(EXAMPLE.parent / "questionnaire.yaml")
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    out = work / name
    subprocess.run([sys.executable, "-m", "populace.cli", "run", str(path), "--out",
                    str(out)], check=True, cwd=EXAMPLE.parent, stdout=subprocess.DEVNULL)
    return out


def distributions(run_dir: Path) -> dict[str, Counter[Any]]:
    """Per question (a multi-choice question per option) the answers' counts; an answer
    that could not be read is None."""
    rows = pq.read_table(run_dir / "answers.parquet",
                         columns=["question", "answer", "valid"]).to_pylist()
    options = {q["id"]: q.get("options") for q in
               yaml.safe_load((EXAMPLE.parent / "questionnaire.yaml").read_text())["questions"]}
    out: dict[str, Counter[Any]] = {}
    for r in rows:
        q, answer = r["question"], r["answer"] if r["valid"] else None
        if q in MULTI:
            chosen = set(answer.split("; ")) if answer is not None else None
            for o in options[q]:
                out.setdefault(f"{q}={o}", Counter())[
                    None if chosen is None else "chosen" if o in chosen else "not chosen"] += 1
        elif q in NUMERIC and answer is not None:
            out.setdefault(q, Counter())[float(answer)] += 1
        else:
            out.setdefault(q, Counter())[answer] += 1
    return out


def distance(part: str, a: Counter[Any], b: Counter[Any]) -> float:
    if part in NUMERIC:
        return float(wasserstein_distance(list(a), list(b), list(a.values()), list(b.values())))
    na, nb = sum(a.values()), sum(b.values())
    return 0.5 * sum(abs(a[k] / na - b[k] / nb) for k in {*a, *b})


def calls(run_dir: Path) -> int:
    summary = json.loads((run_dir / "summary.json").read_text())
    return sum(m["sent"] for e in summary["steps"] for m in e.get("llm", {}).values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--truth", type=int, default=100_000)
    parser.add_argument("--agents", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--audit", type=float, default=0.02)
    parser.add_argument("--by", nargs="+", default=["age", "education"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        individual = run(work, "individual", args.truth, 7, None)
        archetype = run(work, "archetype", args.truth, 7, {"audit": 0.0, "by": args.by})
        own, theirs = distributions(individual), distributions(archetype)
        truth = {p: distance(p, own[p], theirs[p]) for p in sorted(own)}
        print(f"{args.truth:,} respondents: individual {calls(individual):,} calls, "
              f"archetype {calls(archetype):,} calls (no audit), by {args.by}")
        covered: Counter[str] = Counter()
        seen: Counter[str] = Counter()
        for rep in range(1, args.reps + 1):
            rep_dir = run(work, f"rep{rep}", args.agents, rep,
                          {"audit": args.audit, "by": args.by})
            summary = json.loads((rep_dir / "summary.json").read_text())
            decisions = summary["steps"][0]["sampling"]["scripted"]["decisions"]
            for part, d in decisions.items():
                if part in truth and d["audited"]:
                    seen[part] += 1
                    covered[part] += d["low"] <= truth[part] <= d["high"]
            print(f"  rep {rep}: {calls(rep_dir):,} calls", file=sys.stderr)
        print(f"{'question':<36} {'true distance':>13} {'covered':>9}")
        for part in sorted(truth):
            print(f"{part:<36} {truth[part]:>13.4f} {covered[part]:>4}/{seen[part]:<4}")
        total = sum(seen.values())
        print(f"all: {sum(covered.values())}/{total} = {sum(covered.values()) / total:.1%} "
              f"of the intervals hold the true distance ({args.reps} runs of {args.agents:,}, "
              f"audit {args.audit})")


if __name__ == "__main__":
    main()
