"""The example queries of docs/queries.md run against real run directories."""

from __future__ import annotations

import ast
import contextlib
import io
import re
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from populace.cli import app
from populace.results import read_summary

DOC = Path(__file__).resolve().parents[2] / "docs" / "queries.md"
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.DOTALL)


def blocks(kind: str) -> list[str]:
    return [code for lang, code in BLOCK.findall(DOC.read_text()) if lang == kind]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The runs the page uses (runs/edu, runs/temps), made by its own commands, smaller."""
    root = tmp_path_factory.mktemp("queries")
    (root / "examples").symlink_to(DOC.parents[1] / "examples")  # commands run from the repo
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        for command in blocks("sh"):
            args = command.strip().replace("--agents 500", "--agents 150").split()
            assert args[0] == "populace"
            with contextlib.redirect_stdout(io.StringIO()):
                app(args[1:], standalone_mode=False)
        yield root


def test_sql_queries_run_in_duckdb(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(workdir)
    # Unpacking checks the count too: a new query on the page needs a check here.
    by_level, usage, invalid, sweep = (duckdb.sql(q).fetchall() for q in blocks("sql"))
    round_one = [row for row in by_level if row[1] == 1]
    assert [row[0] for row in round_one] == ["doctorate", "master's degree",
                                             "bachelor's degree", "high school",
                                             "primary school"]  # ordered by mean
    assert sum(row[2] for row in round_one) == 150
    # The table's totals agree with what the model client itself counted during the run.
    [entry] = read_summary(workdir / "runs" / "edu")["steps"]
    counted = entry["llm"]["scripted"]
    assert counted["requests"] == 300  # two calls per agent: the answer and its extraction
    tokens = counted["prompt_tokens"] + counted["completion_tokens"]
    assert tokens > 0
    assert usage == [(1, "scripted", 150, 0, counted["requests"], tokens)]
    assert invalid == []
    temperatures = [row[0] for row in sweep]
    assert temperatures == [0.05, 0.25, 0.5, 1.0]
    assert sweep[-1][2] > sweep[0][2]  # the spread grows with the temperature


#: The page says these versions are checked for syntax only (neither is a dependency).
SYNTAX_ONLY = {"pandas", "polars"}


def imported(code: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_python_examples_run(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(workdir)
    ran = []
    syntax_only = []
    for code in blocks("python"):
        compile(code, "queries.md", "exec")
        if imported(code) & SYNTAX_ONLY:
            syntax_only.append(imported(code) & SYNTAX_ONLY)
            continue
        # Anything else must run: a missing import is a failure, not a skip.
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(code, {})
        ran.append((code, out.getvalue()))
    printed = next(o for c, o in ran if "pyarrow" in c)
    rows = ast.literal_eval(printed.strip())
    first = [r for r in rows if r["round"] == 1]
    assert first[0]["education"] == "doctorate" and first[-1]["education"] == "primary school"
    sql_means = {row[0]: row[3] for row in duckdb.sql(blocks("sql")[0]).fetchall()}
    for r in first:
        assert round(r["number_mean"], 2) == pytest.approx(sql_means[r["education"]])
    assert any("sweep.json" in c for c, _ in ran)
    assert len(ran) == 2 and syntax_only == [{"pandas"}, {"polars"}]
