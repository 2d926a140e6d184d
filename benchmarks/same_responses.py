"""Are two game runs' ``responses`` tables the same, column for column?

    python benchmarks/same_responses.py RUN_A RUN_B

``latency_s`` (measured wall time of each call) is left out: it differs between any two
runs. Exit status 0 when equal, 1 otherwise.
"""

from __future__ import annotations

import sys

from populace.results import read_table


def main(a: str, b: str) -> int:
    left, right = read_table(a, "responses"), read_table(b, "responses")
    columns = [c for c in left.column_names if c != "latency_s"]
    same = left.schema == right.schema and left.select(columns).equals(right.select(columns))
    print(f"{a} vs {b}: {left.num_rows} rows, "
          f"{'identical (all columns but latency_s)' if same else 'DIFFERENT'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
