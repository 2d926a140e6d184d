"""Are two runs' tables the same, column for column?

    python benchmarks/same_responses.py RUN_A RUN_B [TABLE ...]

Compares the named tables (default: every table both runs' ``summary.json`` lists, or the
game's ``responses``). ``latency_s`` (measured wall time of each call) is left out: it
differs between any two runs. Exit status 0 when all are equal, 1 otherwise.
"""

from __future__ import annotations

import sys

from populace.results import read_summary, read_table

MEASURED = ("latency_s",)


def tables_of(run: str) -> set[str]:
    try:
        return set(read_summary(run).get("tables") or ())
    except (OSError, ValueError):
        return set()


def same(a: str, b: str, name: str) -> bool:
    left, right = read_table(a, name), read_table(b, name)
    columns = [c for c in left.column_names if c not in MEASURED]
    equal = left.schema == right.schema and left.select(columns).equals(right.select(columns))
    print(f"{a} vs {b}: {name}: {left.num_rows} rows, "
          f"{'identical (all columns but latency_s)' if equal else 'DIFFERENT'}")
    return equal


def main(a: str, b: str, *names: str) -> int:
    chosen = list(names) or sorted(tables_of(a) & tables_of(b)) or ["responses"]
    results = [same(a, b, name) for name in chosen]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
