"""``write_comparison`` and its tables, on run directories written by hand: which runs, which
metrics, which columns, how sweeps and repeated names are labelled."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from populace.results import Comparison, write_comparison
from populace.results._compare import common_last_metrics, compare_table


def a_run(path: Path, steps: list[dict[str, Any]], *, status: str = "completed",
          agents: int = 10) -> Path:
    path.mkdir(parents=True)
    entries = [{"step": i, **e} for i, e in enumerate(steps, 1)]
    summary = {"name": path.name, "status": status, "agents": agents, "steps": entries}
    (path / "summary.json").write_text(json.dumps(summary))
    return path


def printed(comparison: Comparison) -> list[str]:
    console = Console(width=200, record=True)
    console.print(comparison.table)
    return console.export_text().splitlines()


def header(lines: list[str]) -> list[str]:
    return next(line.split() for line in lines if line.strip().startswith("run"))


def test_rows_hold_each_run_s_last_step_and_the_shared_metrics(tmp_path: Path) -> None:
    a = a_run(tmp_path / "a", [{"mean": 5.0, "share": 0.1}, {"mean": 4.0, "share": 0.2,
                                                               "only_a": 1}])
    b = a_run(tmp_path / "b", [{"share": 0.9, "mean": 7.5, "label": "x"}], status="stopped",
              agents=20)
    done = write_comparison([a, b], tmp_path / "out")
    assert [(r["run"], r["path"], r["status"], r["agents"], r["steps"]) for r in done.rows] \
        == [("a", str(a), "completed", 10, 2), ("b", str(b), "stopped", 20, 1)]
    assert done.rows[0]["final"]["mean"] == 4.0 and done.rows[1]["final"]["mean"] == 7.5
    # shared by both, in the first run's order; run keys (step, status...) are not metrics
    assert common_last_metrics(done.rows) == ["mean", "share"]
    assert common_last_metrics([]) == []
    lines = printed(done)
    assert header(lines) == ["run", "agents", "steps", "mean", "share"]
    row_b = next(line for line in lines if line.strip().startswith("b"))
    assert row_b.split()[:5] == ["b", "(stopped)", "20", "1", "7.5"]
    html = done.path.read_text()
    assert done.path == tmp_path / "out" / "compare.html"
    assert "Comparison of 2 runs" in html and "only_a" not in html


def test_llm_usage_adds_calls_and_tokens(tmp_path: Path) -> None:
    usage = {"m": {"agents": 10, "calls": 10, "retries": 0, "prompt_tokens": 300,
                   "completion_tokens": 20}}
    a = a_run(tmp_path / "a", [{"mean": 1.0, "usage": usage}, {"mean": 2.0, "usage": usage}])
    b = a_run(tmp_path / "b", [{"mean": 3.0}])
    done = write_comparison([a, b], tmp_path / "out")
    assert (done.rows[0]["final"]["calls"], done.rows[0]["final"]["tokens"]) == (20, 640)
    assert "calls" not in done.rows[1]["final"]
    assert header(printed(done)) == ["run", "agents", "steps", "mean", "calls", "tokens"]
    assert "LLM calls" in done.path.read_text()


def test_more_metrics_than_the_terminal_shows_are_counted_in_a_caption(tmp_path: Path) -> None:
    wide = {f"m{i:02d}": float(i) for i in range(11)}
    done = write_comparison([a_run(tmp_path / "a", [wide]), a_run(tmp_path / "b", [wide])],
                            tmp_path / "out")
    table = compare_table(done.rows)
    assert [c.header for c in table.columns] == ["run", "agents", "steps",
                                                 *[f"m{i:02d}" for i in range(8)]]
    assert table.caption == "3 more metrics in compare.html"
    assert all(f"m{i:02d}" in done.path.read_text() for i in range(11))


def test_a_sweep_stands_for_its_points_and_repeated_names_are_numbered(tmp_path: Path) -> None:
    sweep = tmp_path / "temps"
    for t in ("0.1", "0.5"):
        a_run(sweep / f"t={t}", [{"mean": float(t)}])
    points = [{"dir": "t=0.1"}, {"dir": "t=0.5"}, {"dir": "t=0.9"}]  # 0.9 never started
    (sweep / "sweep.json").write_text(json.dumps({"points": points}))
    # One step per point: nothing to draw over steps.
    assert write_comparison([sweep], tmp_path / "points").figures == {}
    single = a_run(tmp_path / "single", [{"mean": 1.0}, {"mean": 2.0}])
    done = write_comparison([sweep, single, single], tmp_path / "out")
    assert [r["run"] for r in done.rows] == ["temps/t=0.1", "temps/t=0.5", "single",
                                             "single (2)"]
    assert [r["final"]["mean"] for r in done.rows] == [0.1, 0.5, 2.0, 2.0]
    assert set(done.figures) == {"overlay_mean"}  # a run with two steps: drawn per step
    assert done.figures["overlay_mean"] == tmp_path / "out" / "figures" / "overlay_mean.png"
    assert done.figures["overlay_mean"].exists()


def test_a_directory_that_holds_no_run_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no run"):
        write_comparison([tmp_path / "empty"], tmp_path / "out")
    with pytest.raises(FileNotFoundError, match="no such directory"):
        write_comparison([tmp_path / "missing"], tmp_path / "out")
    assert not (tmp_path / "out").exists()
