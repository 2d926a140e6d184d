"""Results for any scenario: ``load_run``, ``populace report``, ``compare`` and sweeps on the
runs of ``market.py``, a scenario that is not the game (no numbers, targets or rounds).

Each test fails when a metric, a distribution, a breakdown or the scenario's own figure is
missing, or when one shows other values than the run recorded.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from rich.console import Console

from cli_helpers import run_in_process as cli
from populace.launch import RunFile, launch, parse_run_file
from populace.results import (
    Breakdown,
    RunDirectory,
    headline,
    load_run,
    read_summary,
    read_table,
    sweep_table,
    write_comparison,
    write_report,
)
from populace.results._report import run_figures, sweep_figures
from populace.sweep import SweepIndex, expand, run_sweep

MARKET = Path(__file__).with_name("market.py")
POPULATION = {"aspects": {"region": {"values": ["north", "south", "east"]},
                          "plan": {"values": ["basic", "premium"]}}}
STEPS = 4
METRICS = ["mean_spend", "buyers", "revenue", "by_plan.basic", "by_plan.premium", "wall_s"]
FIGURES = {"metric_mean_spend", "metric_buyers", "metric_revenue", "metric_by_plan",
           "metric_wall_s", "distribution_spend", "purchases_by_region", "purchases_by_plan"}


def run_data(**keys: Any) -> dict[str, Any]:
    return {"scenario": f"{MARKET}:Market", "name": "market", "agents": 90, "steps": STEPS,
            "population": POPULATION, **keys}


def market_file(**keys: Any) -> RunFile:
    return parse_run_file(run_data(**keys), MARKET.with_name("market.yaml"))


def make_market(path: Path, **keys: Any) -> Path:
    asyncio.run(launch(market_file(**keys), RunDirectory.create(path)))
    return path


@pytest.fixture(scope="module")
def markets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    root = tmp_path_factory.mktemp("markets")
    yield {"slow": make_market(root / "slow", settings={"growth": 1.0}),
           "fast": make_market(root / "fast", settings={"growth": 6.0}, steps=STEPS + 1)}


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


# -- load_run -----------------------------------------------------------------------------------
def test_load_run_reads_metrics_distributions_tables_and_profiles(
        markets: dict[str, Path]) -> None:
    run = load_run(markets["slow"])
    summary = read_summary(markets["slow"])
    assert (run.name, run.status, run.agents, run.steps_planned) == ("market", "completed",
                                                                     90, STEPS)
    assert run.scenario == f"{MARKET}:Market"
    assert run.steps() == list(range(1, STEPS + 1)) == run.metric_steps().tolist()
    assert list(run.metrics()) == METRICS  # text ("busiest") and step numbers are no series
    for name in ("mean_spend", "buyers", "revenue"):
        assert run.metric(name).tolist() == [e[name] for e in summary["steps"]]
    assert run.metric("by_plan.premium").tolist() == [
        e["by_plan"]["premium"] for e in summary["steps"]]
    assert run.last_metrics()["busiest"] == "east"
    with pytest.raises(KeyError, match="no metric 'busiest'"):
        run.metric("busiest")
    assert run.distribution_names() == ["spend"]
    spend = run.distribution("spend")
    assert sorted(spend) == list(range(1, STEPS + 1))
    assert all(sum(d["counts"]) == d["n"] == 90 for d in spend.values())
    assert run.tables == ["prices", "purchases"]
    assert run.table("purchases").num_rows == 90 * STEPS
    assert run.table_steps("prices") == list(range(1, STEPS + 1))
    assert run.profiles is not None and run.profiles.num_rows == 90
    # Aspects in the order the run file lists them; group (one value) is no category.
    assert run.categories() == {"region": ["north", "south", "east"],
                                "plan": ["basic", "premium"]}
    assert run.agent_columns("purchases") == ["spend", "bought", "visits"]
    assert run.agent_columns("prices") == []  # no agent_id: nothing per agent


def test_a_breakdown_is_the_mean_per_category_per_step(markets: dict[str, Path]) -> None:
    run = load_run(markets["slow"])
    b = run.breakdown("purchases", "spend", "region")
    assert isinstance(b, Breakdown)
    assert (b.table, b.column, b.by) == ("purchases", "spend", "region")
    assert b.steps == tuple(range(1, STEPS + 1)) and b.values == ("north", "south", "east")
    assert b.means.shape == b.counts.shape == (3, STEPS)
    # The same from the Parquet files, joined by hand.
    rows = read_table(markets["slow"], "purchases").join(
        run.profiles.select(["agent_id", "region"]).cast(pa.schema(
            [("agent_id", pa.int64()), ("region", pa.string())])), "agent_id")
    expected = rows.group_by(["region", "step"]).aggregate([("spend", "mean"),
                                                            ("spend", "count")])
    for row in expected.to_pylist():
        i, j = b.values.index(row["region"]), b.steps.index(row["step"])
        assert b.means[i, j] == pytest.approx(row["spend_mean"])
        assert b.counts[i, j] == row["spend_count"]
    assert b.counts.sum() == 90 * STEPS
    # The regions' levels show, and spending grows by the setting (1.0) each day.
    assert list(b.means[:, 0]) == sorted(b.means[:, 0])
    assert b.means[:, -1] - b.means[:, 0] == pytest.approx([3.0] * 3, abs=2.5)
    share = run.breakdown("purchases", "bought", "region").means
    assert share[0].max() == 0.0 and share[2].min() == 1.0  # north never, east always buys
    split = run.values_by("purchases", "spend", "plan", 1)
    assert list(split) == ["basic", "premium"] and sum(v.size for v in split.values()) == 90
    assert float(split["premium"].mean()) > float(split["basic"].mean())
    with pytest.raises(KeyError, match="neither a column"):
        run.breakdown("purchases", "spend", "nothing")


# -- populace report ------------------------------------------------------------------------------
def test_report_draws_every_metric_distribution_breakdown_and_own_figure(
        markets: dict[str, Path], tmp_path: Path) -> None:
    copy = _copy(markets["slow"], tmp_path / "slow")
    scenario = market_file().scenario()
    report = write_report(copy, extra_figures=scenario.figures)
    assert set(report.figures) == FIGURES | {"buyers_share"}
    assert {p.stem for p in (copy / "figures").glob("*.png")} == set(report.figures)
    html = report.path.read_text()
    assert html.count('src="data:image/png;base64,') == len(FIGURES) + 1
    assert "share of shoppers who bought" in html  # the scenario figure's caption
    assert "purchases by region (step 4)" in html and "mean spend" in html

    run = load_run(copy)
    figures = run_figures(run)
    assert set(figures) == FIGURES  # without the scenario's own
    summary = read_summary(copy)
    for name in ("mean_spend", "buyers", "revenue"):
        (ax,) = figures[f"metric_{name}"].axes
        (line,) = ax.get_lines()
        assert list(line.get_xdata()) == list(range(1, STEPS + 1))
        assert list(line.get_ydata()) == [e[name] for e in summary["steps"]]
    plans = figures["metric_by_plan"].axes
    assert [ax.get_title() for ax in plans] == ["basic", "premium"]
    assert list(plans[1].get_lines()[0].get_ydata()) == [
        e["by_plan"]["premium"] for e in summary["steps"]]
    panels = figures["distribution_spend"].axes
    assert [ax.get_title().split("\n")[0] for ax in panels] == [
        f"step {t}" for t in range(1, STEPS + 1)]
    for ax, entry in zip(panels, summary["steps"], strict=True):
        (patch,) = ax.patches
        assert list(patch.get_data().values) == entry["distributions"]["spend"]["counts"]
    by_region = figures["purchases_by_region"].axes
    assert [ax.get_title() for ax in by_region] == ["mean spend", "share bought",
                                                    "mean visits"]
    b = run.breakdown("purchases", "spend", "region")
    lines = by_region[0].get_lines()
    assert [line.get_label() for line in lines] == ["north", "south", "east"]
    for line, means in zip(lines, b.means, strict=True):
        assert list(line.get_ydata()) == list(means)
    assert [line.get_label() for line in figures["purchases_by_plan"].axes[0].get_lines()] \
        == ["basic", "premium"]


def test_report_tables_are_steps_by_metrics(markets: dict[str, Path], tmp_path: Path) -> None:
    copy = _copy(markets["slow"], tmp_path / "slow")
    report = write_report(copy)
    console = Console(width=120, record=True)
    for table in report.tables:
        console.print(table)
    text = console.export_text()
    lines = [line.split() for line in text.splitlines() if line.strip()]
    head = next(line for line in lines if line[0] == "step")
    assert head == ["step", "mean_spend", "buyers", "revenue", "busiest", "wall_s"]
    body = [line for line in lines if line[0].isdigit()]
    summary = read_summary(copy)
    assert [int(line[0]) for line in body] == list(range(1, STEPS + 1))
    for line, entry in zip(body, summary["steps"], strict=True):
        assert line[2] == str(entry["buyers"]) and line[4] == "east"
    assert "market: 90 agents, dummy, completed" in " ".join(text.split())
    html = report.path.read_text()
    assert "<h2>Per step</h2>" in html and "<th>busiest</th>" in html
    assert "<h2>purchases by plan (step 4)</h2>" in html


def test_populace_report_on_any_scenario(markets: dict[str, Path], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    copy = _copy(markets["fast"], tmp_path / "fast")
    code, out, err = cli(capsys, monkeypatch, "report", copy)
    assert (code, err) == (0, "")
    assert FIGURES <= {p.stem for p in (copy / "figures").glob("*.png")}
    assert "0 figures" not in out and "mean_spend" in out and "revenue" in out


def test_report_of_a_partial_run(markets: dict[str, Path], tmp_path: Path) -> None:
    partial = _copy(markets["slow"], tmp_path / "partial")
    for name in ("purchases", "prices"):
        (partial / f"{name}.parquet").unlink()
        (partial / "parts" / f"{name}-r00004.parquet").unlink()
    summary = read_summary(partial)
    summary.update(status="interrupted", steps=summary["steps"][:2])  # step 3: parts/ only
    (partial / "summary.json").write_text(json.dumps(summary))
    run = load_run(partial)
    assert run.steps() == [1, 2, 3] and run.metric_steps().tolist() == [1, 2]
    assert run.table("purchases").num_rows == 3 * 90
    report = write_report(partial)
    assert set(report.figures) == FIGURES
    assert run_figures(run)["purchases_by_region"].axes[0].get_lines()[0].get_xdata(
        ).tolist() == [1, 2, 3]
    assert "This run is interrupted: the report shows the 3 step(s)" in report.path.read_text()
    (partial / "summary.json").unlink()
    assert load_run(partial).status == "partial"
    assert set(write_report(partial).figures) == {"purchases_by_region", "purchases_by_plan"}


# -- compare and sweeps --------------------------------------------------------------------------
def test_compare_overlays_every_common_metric(markets: dict[str, Path], tmp_path: Path) -> None:
    done = write_comparison([markets["slow"], markets["fast"]], tmp_path / "cmp")
    overlays = {"overlay_mean_spend", "overlay_buyers", "overlay_revenue", "overlay_by_plan",
                "overlay_wall_s", "overlay_distribution_spend"}
    assert set(done.figures) == overlays
    assert [r["run"] for r in done.rows] == ["slow", "fast"]
    assert [r["steps"] for r in done.rows] == [STEPS, STEPS + 1]
    slow, fast = (read_summary(markets[k])["steps"] for k in ("slow", "fast"))
    assert done.rows[0]["final"]["revenue"] == slow[-1]["revenue"]
    assert done.rows[1]["final"]["revenue"] == fast[-1]["revenue"]
    assert done.rows[1]["final"]["busiest"] == "east"
    assert "calls" not in done.rows[0]["final"]  # no LLM usage reported
    console = Console(width=150, record=True)
    console.print(done.table)
    head = next(line.split() for line in console.export_text().splitlines()
                if line.strip().startswith("run"))
    assert head == ["run", "agents", "steps", "mean_spend", "buyers", "revenue", "busiest",
                    "wall_s"]
    html = done.path.read_text()
    assert html.count('src="data:image/png;base64,') == len(overlays)


def test_a_sweep_of_any_scenario(tmp_path: Path) -> None:
    data = {**run_data(steps=2), "sweep": {"settings.growth": [0.0, 5.0, 10.0]}}
    points = expand(data, "market.yaml")
    root = tmp_path / "sweep"
    index = SweepIndex.create(root, "market", "market.yaml", data, points)

    def run_point(point: Any, directory: Path) -> dict[str, Any]:
        run_file = parse_run_file(point.data, MARKET.with_name("market.yaml"))
        return asyncio.run(launch(run_file, RunDirectory.create(directory)))

    result = run_sweep(index, points, run_point)
    assert [p["status"] for p in result["points"]] == ["completed"] * 3
    for p in result["points"]:
        summary = read_summary(root / p["dir"])
        assert p["final"] == headline(summary)
        assert p["final"]["revenue"] == summary["steps"][-1]["revenue"]
        assert p["final"]["steps_done"] == 2 and p["final"]["busiest"] == "east"
    revenues = [p["final"]["revenue"] for p in result["points"]]
    assert revenues == sorted(revenues) and revenues[0] < revenues[-1]

    console = Console(width=150, record=True)
    console.print(sweep_table(result))
    lines = [line.split() for line in console.export_text().splitlines() if line.strip()]
    assert next(line for line in lines if line[0] == "settings.growth") == [
        "settings.growth", "status", "steps", "mean_spend", "buyers", "revenue", "wall_s"]
    assert [line[0] for line in lines if line[-1][0].isdigit() and line[1] == "completed"] \
        == ["0.0", "5.0", "10.0"]

    report = write_report(root)
    runs = [(p["dir"], load_run(root / p["dir"])) for p in result["points"]]
    figures = sweep_figures(result, runs)
    assert set(report.figures) == set(figures) == {
        "sweep_settings.growth", "overlay_mean_spend", "overlay_buyers", "overlay_revenue",
        "overlay_by_plan", "overlay_wall_s", "overlay_distribution_spend"}
    panels = figures["sweep_settings.growth"].axes
    assert [ax.get_title() for ax in panels] == ["mean_spend", "buyers", "revenue", "wall_s"]
    (line,) = panels[2].get_lines()
    assert list(line.get_xdata()) == [0.0, 5.0, 10.0] and list(line.get_ydata()) == revenues
    assert len(figures["overlay_revenue"].axes[0].get_lines()) == 3
    assert [len(p.figures) for p in report.points] == [len(FIGURES)] * 3
    html = report.path.read_text()
    assert all(f'href="{p["dir"]}/report.html"' in html for p in result["points"])
    assert yaml.safe_load((root / "sweep.yaml").read_text())["sweep"] == data["sweep"]


def test_headline_of_any_summary() -> None:
    summary = {"status": "completed", "steps": [
        {"step": 1, "share": 0.25, "label": "a", "hist": [1, 2], "distributions": {}},
        {"step": 2, "share": 0.5, "label": "b", "wall_s": 0.1}]}
    assert headline(summary) == {"share": 0.5, "label": "b", "wall_s": 0.1, "step": 2,
                                 "steps_done": 2, "status": "completed"}
    old = {"status": "interrupted", "rounds": [{"round": 1, "mean": 3.0, "usage": {
        "m": {"calls": 2, "prompt_tokens": 10, "completion_tokens": 5}}}]}
    assert headline(old) == {"mean": 3.0, "step": 1, "calls": 2, "tokens": 15,
                             "steps_done": 1, "status": "interrupted"}
    assert headline({"status": "running"})["steps_done"] == 0


def test_categories_prefer_labels_and_skip_what_is_no_category(tmp_path: Path) -> None:
    """A hand-written run: which profile columns a report breaks results down by."""
    rd = RunDirectory.create(tmp_path)
    n = 30
    region = [["north", "south", "east"][i % 3] for i in range(n)]
    rd.write_profiles(pa.table({
        "agent_id": pa.array(range(n), pa.int64()),
        "group": pa.array([i % 3 for i in range(n)], pa.int32()),  # = region, as numbers
        "region": region,
        "zone": [r.upper() for r in region],  # the same split again, as text: the later
        "member": [i % 2 == 0 for i in range(n)],
        "age": list(range(20, 20 + n)),  # 30 distinct values: no category
        "background": [f"story {i}" for i in range(n)],
        "alone": ["x"] * n,  # one value: nothing to compare
    }))
    rd.write_config({"population": {"aspects": {"region": {"values": ["south", "north",
                                                                      "east"]}}}})
    rd.write_step("scores", 1, pa.table({"step": [1] * n, "agent_id": list(range(n)),
                                          "score": [float(i) for i in range(n)]}))
    assert rd.holds_run() and rd.config_path == tmp_path / "config.yaml"
    run = load_run(tmp_path)
    assert run.categories() == {"region": ["south", "north", "east"],  # the run file's order
                                "member": ["false", "true"]}
    b = run.breakdown("scores", "score", "member")
    assert b.values == ("false", "true") and b.means[:, 0].tolist() == [15.0, 14.0]
    assert set(run_figures(run)) == {"scores_by_region", "scores_by_member"}
