"""The studio's JSON API over TestClient: runs, live updates, agents, start and stop, paths."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from populace.core import PopulaceError
from populace.results import read_summary, read_table
from populace.studio import AgentQueryError, NotFound, Refused, Runs, UnknownAgent

Wait = Callable[..., None]


# -- runs on disk --------------------------------------------------------------------------------
def test_the_runs_list_shows_finished_runs_and_links_reports(client: TestClient,
                                                             workspace: Path) -> None:
    [row] = client.get("/api/runs").json()
    assert row["id"] == "finished" and row["name"] == "tiny"
    assert (row["status"], row["live"], row["agents"]) == ("completed", False, 300)
    assert (row["steps_done"], row["steps_planned"]) == (2, 2)
    assert row["report"] is False and row["tables"] == ["responses"]
    assert client.get("/runs/finished/report/").status_code == 404

    run = workspace / "runs" / "finished"
    (run / "figures").mkdir()
    (run / "figures" / "mean.png").write_bytes(b"\x89PNG fake")
    (run / "report.html").write_text('<html><img src="figures/mean.png"></html>')
    assert client.get("/api/runs").json()[0]["report"] is True
    page = client.get("/runs/finished/report/")
    assert page.status_code == 200 and "figures/mean.png" in page.text
    assert client.get("/runs/finished/report/figures/mean.png").content == b"\x89PNG fake"
    assert client.get("/api/runs/finished").json()["report"] is True


def test_the_runs_list_skips_folders_that_hold_no_run(client: TestClient,
                                                      workspace: Path) -> None:
    (workspace / "runs" / "notes").mkdir()
    early = workspace / "runs" / "early"  # killed before its first step was written
    early.mkdir()
    (early / "config.yaml").write_text("name: early\nagents: 5\n")
    rows = {r["id"]: r for r in client.get("/api/runs").json()}
    assert set(rows) == {"finished", "early"}
    assert (rows["early"]["status"], rows["early"]["steps_done"]) == ("unknown", 0)
    snap = client.get("/api/runs/early").json()
    assert (snap["status"], snap["series"]["steps"], snap["distributions"]) == \
        ("unknown", [], {})


@pytest.mark.parametrize("path", [
    "/runs/finished/report/config.yaml",                 # not a report file type
    "/runs/finished/report/..%2F..%2Ftiny.yaml",
    "/runs/finished/report/%2Fetc%2Fpasswd",
    "/runs/..%2Fproject/report/",
    "/api/runs/..",
    "/api/runs/%2E%2E",
    "/api/runs/nope",
    "/api/runs/..%2Fruns%2Ffinished",
    "/api/runs/finished%00",
    "/api/runs/.hidden/agents",
])
def test_no_endpoint_reads_outside_the_runs(client: TestClient, path: str) -> None:
    assert client.get(path).status_code == 404


@pytest.mark.parametrize(("error", "builtin"), [
    (NotFound, LookupError), (Refused, Exception), (AgentQueryError, ValueError),
    (UnknownAgent, LookupError)])
def test_the_studios_errors_are_populace_errors_and_keep_their_builtin_base(
        error: type[Exception], builtin: type[Exception]) -> None:
    assert issubclass(error, PopulaceError) and issubclass(error, builtin)


def test_a_finished_run_is_rebuilt_from_disk(client: TestClient, workspace: Path) -> None:
    snap = client.get("/api/runs/finished").json()
    assert (snap["status"], snap["live"], snap["finished"]) == ("completed", False, True)
    summary = read_summary(workspace / "runs" / "finished")
    assert snap["series"]["steps"] == [1, 2]
    assert snap["series"]["metrics"]["mean"] == pytest.approx(
        [e["mean"] for e in summary["steps"]], rel=1e-5)


def test_events_of_a_finished_run_send_one_snapshot_then_end(client: TestClient) -> None:
    with client.stream("GET", "/api/runs/finished/events") as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    data = [json.loads(line[5:]) for line in lines if line.startswith("data:")]
    assert data[0]["status"] == "completed" and data[-1] == {}
    assert "event: end" in lines


# -- agents --------------------------------------------------------------------------------------
def test_agents_are_searched_and_paged_on_the_server(client: TestClient) -> None:
    every = client.get("/api/runs/finished/agents", params={"size": 50, "page": 5}).json()
    assert (every["total"], every["pages"], len(every["rows"])) == (300, 6, 50)
    assert every["columns"] == ["agent_id", "group", "model", "profession"]
    assert every["rows"][0][0] == 250
    one = client.get("/api/runs/finished/agents", params={"agent_id": 7}).json()
    assert one["total"] == 1 and one["rows"][0][0] == 7
    group = client.get("/api/runs/finished/agents", params={"group": 1}).json()
    assert group["total"] == 100 and {r[1] for r in group["rows"]} == {1}
    artists = client.get("/api/runs/finished/agents",
                         params={"attribute": "profession", "value": "ART"}).json()
    assert artists["total"] == 100 and {r[3] for r in artists["rows"]} == {"artist"}
    both = client.get("/api/runs/finished/agents",
                      params={"attribute": "profession", "value": "art", "group": 0}).json()
    assert both["total"] == 0  # group 0 is the economists
    big = client.get("/api/runs/finished/agents", params={"size": 200}).json()
    assert big["size"] == 200 and len(big["rows"]) == 200  # pages are bounded
    for params, why in [({"size": 100_000}, "size: 100000 (expected 1 to 200 rows per page)"),
                        ({"size": 0}, "size: 0 (expected 1 to 200 rows per page)"),
                        ({"page": -1}, "page: -1 (expected 0 or more; the first page is 0)")]:
        refused = client.get("/api/runs/finished/agents", params=params)
        assert (refused.status_code, refused.json()) == (400, {"error": why})


def test_bad_agent_filters_get_one_line_errors(client: TestClient) -> None:
    r = client.get("/api/runs/finished/agents", params={"attribute": "salary", "value": "1"})
    assert r.status_code == 400 and r.json()["error"].startswith("no attribute 'salary'")
    r = client.get("/api/runs/finished/agents", params={"attribute": "group", "value": "x"})
    assert r.status_code == 400 and "numbers" in r.json()["error"]


def test_columns_list_the_values_of_categories(client: TestClient) -> None:
    info = client.get("/api/runs/finished/columns").json()
    assert info["table"] == "profiles" and info["step"] is None
    assert [(t["name"], t["steps"]) for t in info["tables"]] == [("profiles", []),
                                                                ("responses", [1, 2])]
    columns = {c["name"]: c for c in info["columns"]}
    assert columns["profession"]["values"] == ["artist", "economist", "writer"]
    assert "values" not in columns["agent_id"]


def test_a_per_step_table_is_searched_at_one_step(client: TestClient) -> None:
    info = client.get("/api/runs/finished/columns", params={"table": "responses"}).json()
    assert (info["table"], info["step"]) == ("responses", 2)  # the last step by default
    assert "round" not in [c["name"] for c in info["columns"]]
    first = client.get("/api/runs/finished/agents",
                       params={"table": "responses", "step": 1, "agent_id": 3}).json()
    assert (first["table"], first["step"], first["total"]) == ("responses", 1, 1)
    assert first["columns"][0] == "agent_id" and "raw" in first["columns"]
    missing = client.get("/api/runs/finished/agents", params={"table": "responses", "step": 9})
    assert missing.status_code == 400 and "no step 9" in missing.json()["error"]
    unknown = client.get("/api/runs/finished/agents", params={"table": "nope"})
    assert unknown.status_code == 400 and "no table of agents" in unknown.json()["error"]


def test_one_agent_shows_its_profile_and_every_row(client: TestClient,
                                                   workspace: Path) -> None:
    # What the page shows of agent 4 is exactly what the run wrote of it.
    run = workspace / "runs" / "finished"
    a = client.get("/api/runs/finished/agents/4").json()
    [profile] = [r for r in read_table(run, "profiles").to_pylist() if r["agent_id"] == 4]
    assert a["profile"] == profile
    assert a["tables"] == ["responses"]
    written = [r for r in read_table(run, "responses").to_pylist() if r["agent_id"] == 4]
    assert [st["step"] for st in a["steps"]] == [r["round"] for r in written] == [1, 2]
    summary = read_summary(run)
    for st, row, entry in zip(a["steps"], written, summary["steps"], strict=True):
        assert st["rows"]["responses"] == [
            {k: v for k, v in row.items() if k not in ("round", "agent_id")}]
        # what everyone was told after that step
        assert st["metrics"]["winner_number"] == entry["winner_number"]
    missing = client.get("/api/runs/finished/agents/300")
    assert missing.status_code == 404 and missing.json()["error"] == "no agent 300 in this run"


# -- management ----------------------------------------------------------------------------------
def test_configs_are_listed_from_the_allowed_root_only(client: TestClient) -> None:
    assert client.get("/api/configs").json() == ["experiments/slow.yaml", "tiny.yaml"]


@pytest.mark.parametrize(("config", "message"), [
    ("../outside.yaml", "no such run file"),
    ("/etc/passwd", "no such run file"),
    ("missing.yaml", "no such run file"),
    ("runs/finished/summary.json", "must be .yaml"),
    ("", "give a run file"),
])
def test_starting_refuses_files_outside_the_root(client: TestClient, config: str,
                                                 message: str, workspace: Path) -> None:
    r = client.post("/api/runs", json={"config": config})
    assert r.status_code == 400 and message in r.json()["error"]
    assert "\n" not in r.json()["error"]
    absolute = client.post("/api/runs", json={"config": str(workspace.parent / "outside.yaml")})
    assert absolute.status_code == 400


def test_starting_validates_like_populace_run(client: TestClient, workspace: Path) -> None:
    (workspace / "broken.yaml").write_text("scenario: guess_number\nname: b\nagents: 10\n"
                                           "models: {}\nmodel: gpt9\n")
    r = client.post("/api/runs", json={"config": "broken.yaml"})
    assert r.status_code == 400
    assert r.json()["error"].startswith(f"{workspace / 'broken.yaml'}: ")
    assert client.post("/api/runs", json={"config": "tiny.yaml", "agents": 0}).status_code == 400
    assert client.post("/api/runs", json={"config": "notes.yaml"}).status_code == 400


def test_a_run_started_here_goes_live_and_finishes(client: TestClient, runs: Runs,
                                                   wait_for: Wait) -> None:
    r = client.post("/api/runs", json={"config": "tiny.yaml", "agents": 500, "steps": 3})
    assert r.status_code == 200, r.text
    run_id = r.json()["id"]
    assert run_id.startswith("tiny-")
    live = runs.live(run_id)
    assert live is not None
    wait_for(lambda: live.monitor.finished)
    snap = client.get(f"/api/runs/{run_id}").json()
    assert (snap["status"], snap["live"], snap["agents"], snap["steps_done"]) == \
        ("completed", True, 500, 3)
    summary = read_summary(runs.runs_dir / run_id)
    assert summary["status"] == "completed" and len(summary["steps"]) == 3
    ids = [row["id"] for row in client.get("/api/runs").json()]
    assert set(ids) == {run_id, "finished"}
    # The form's older name for steps still works.
    r = client.post("/api/runs", json={"config": "tiny.yaml", "agents": 50, "rounds": 1})
    live = runs.live(r.json()["id"])
    assert live is not None
    wait_for(lambda: live.monitor.finished)
    assert live.monitor.snapshot().steps_done == 1


def test_a_run_is_stopped_cleanly_and_keeps_its_finished_steps(client: TestClient,
                                                               runs: Runs,
                                                               wait_for: Wait) -> None:
    run_id = client.post("/api/runs", json={"config": "experiments/slow.yaml"}).json()["id"]
    live = runs.live(run_id)
    assert live is not None
    again = client.post("/api/runs", json={"config": "tiny.yaml"})
    assert again.status_code == 400 and "still going" in again.json()["error"]
    wait_for(lambda: live.monitor.snapshot().steps_done >= 1)
    with client.stream("GET", f"/api/runs/{run_id}/events") as response:
        for line in response.iter_lines():
            if line.startswith("data:"):
                assert json.loads(line[5:])["status"] == "running"
                break
    assert client.post(f"/api/runs/{run_id}/stop").json()["status"] == "stopping"
    wait_for(lambda: live.monitor.finished)
    assert client.get(f"/api/runs/{run_id}").json()["status"] == "stopped"
    path = runs.runs_dir / run_id
    summary = read_summary(path)
    assert summary["status"] == "stopped"
    done = len(summary["steps"])
    assert 1 <= done < 5
    assert read_table(path).num_rows == 300 * done
    assert (path / "checkpoints").is_dir()
    assert client.post("/api/runs/finished/stop").status_code == 400  # not running here
    assert client.post("/api/runs/nope/stop").status_code == 404


def test_a_run_that_fails_shows_why(client: TestClient, workspace: Path, runs: Runs,
                                    wait_for: Wait) -> None:
    (workspace / "offline.yaml").write_text(
        "scenario: guess_number\nname: offline\nagents: 10\nmodels:\n"
        "  m: {provider: openai, model: x, "
        "base_urls: ['http://127.0.0.1:9/v1'], max_retries: 0, timeout: 2}\n")
    run_id = client.post("/api/runs", json={"config": "offline.yaml"}).json()["id"]
    live = runs.live(run_id)
    assert live is not None
    wait_for(lambda: live.monitor.finished)
    snap = client.get(f"/api/runs/{run_id}").json()
    assert snap["status"] == "failed" and "127.0.0.1:9" in snap["error"]


# -- any scenario --------------------------------------------------------------------------------
COINS = Path(__file__).resolve().parent / "coins.py"
OPINIONS = Path(__file__).resolve().parents[2] / "examples" / "opinions" / "opinions.py"


def test_a_scenario_is_started_shows_its_metrics_and_its_agents(
        client: TestClient, workspace: Path, runs: Runs, wait_for: Wait) -> None:
    shutil.copy(COINS, workspace / "coins.py")
    (workspace / "coins.yaml").write_text(
        "scenario: coins.py:Coins\nagents: 200\nsteps: 3\nworkers: 2\nsettings: {bias: 0.3}\n")
    r = client.post("/api/runs", json={"config": "coins.yaml", "steps": 4, "agents": 120})
    assert r.status_code == 200, r.text
    run_id = r.json()["id"]
    live = runs.live(run_id)
    assert run_id.startswith("coins-") and live is not None
    wait_for(lambda: live.monitor.finished)
    snap = client.get(f"/api/runs/{run_id}").json()
    assert (snap["status"], snap["agents"], snap["steps_done"]) == ("completed", 120, 4)
    summary = read_summary(runs.runs_dir / run_id)
    series = snap["series"]
    assert series["steps"] == [1, 2, 3, 4]
    assert series["metrics"]["total_heads"] == [e["total_heads"] for e in summary["steps"]]
    assert series["metrics"]["leader"][-1].startswith("agent ")
    heads = snap["distributions"]["heads_so_far"]
    assert (heads["step"], sum(heads["counts"])) == (4, 120)

    # The agent browser works on its per-agent table; it has no profiles.
    [row] = [r for r in client.get("/api/runs").json() if r["id"] == run_id]
    assert row["tables"] == ["flips"] and row["steps_done"] == 4
    info = client.get(f"/api/runs/{run_id}/columns").json()
    assert (info["table"], info["step"]) == ("flips", 4)
    assert [c["name"] for c in info["columns"]] == ["agent_id", "heads", "heads_so_far"]
    page = client.get(f"/api/runs/{run_id}/agents",
                      params={"step": 2, "attribute": "heads_so_far", "value": "2"}).json()
    flips = read_table(runs.runs_dir / run_id, "flips").to_pylist()
    expected = sorted(f["agent_id"] for f in flips if f["step"] == 2 and f["heads_so_far"] == 2)
    assert page["total"] == len(expected) and [r[0] for r in page["rows"]] == expected[:50]
    agent = client.get(f"/api/runs/{run_id}/agents/7").json()
    assert agent["profile"] == {"agent_id": 7} and agent["background"] is None
    assert [st["step"] for st in agent["steps"]] == [1, 2, 3, 4]
    mine = [f for f in flips if f["agent_id"] == 7]
    assert [st["rows"]["flips"][0]["heads_so_far"] for st in agent["steps"]] == \
        [f["heads_so_far"] for f in mine]
    assert agent["steps"][0]["metrics"]["total_heads"] == summary["steps"][0]["total_heads"]
    assert client.get(f"/api/runs/{run_id}/agents/120").status_code == 404


def test_an_override_a_scenario_cannot_take_is_refused(client: TestClient,
                                                        workspace: Path) -> None:
    shutil.copy(COINS, workspace / "coins.py")
    (workspace / "coins.yaml").write_text("scenario: coins.py:Coins\nsettings: {bias: heavy}\n")
    r = client.post("/api/runs", json={"config": "coins.yaml"})
    assert r.status_code == 400 and r.json()["error"].startswith(
        f"{workspace / 'coins.yaml'}: settings.bias")
    (workspace / "odd.yaml").write_text("scenario: coins.py:Nope\n")
    r = client.post("/api/runs", json={"config": "odd.yaml"})
    assert r.status_code == 400 and "no Scenario class 'Nope'" in r.json()["error"]


def test_the_opinions_example_is_started_watched_and_stopped(
        client: TestClient, workspace: Path, runs: Runs, wait_for: Wait) -> None:
    shutil.copy(OPINIONS, workspace / "opinions.py")
    (workspace / "town.yaml").write_text("scenario: opinions.py:Opinions\nname: town\n"
                                         "steps: 3\n")
    r = client.post("/api/runs", json={"config": "town.yaml", "agents": 300})
    assert r.status_code == 200, r.text
    run_id = r.json()["id"]
    live = runs.live(run_id)
    assert run_id.startswith("town-") and live is not None
    wait_for(lambda: live.monitor.finished)
    snap = client.get(f"/api/runs/{run_id}").json()
    assert (snap["status"], snap["agents"], snap["steps_done"]) == ("completed", 300, 3)
    assert "meetings" in snap["environment"]
    assert {"mean", "std", "meetings", "mood_west", "date"} <= set(snap["series"]["metrics"])
    assert sum(snap["distributions"]["opinion"]["counts"]) == 300
    summary = read_summary(runs.runs_dir / run_id)
    assert summary["status"] == "completed" and len(summary["steps"]) == 3

    # A long one, stopped from the studio after its first day.
    (workspace / "long.yaml").write_text("scenario: opinions.py:Opinions\nname: long\n"
                                         "steps: 500\n")
    run_id = client.post("/api/runs", json={"config": "long.yaml", "agents": 2000}).json()["id"]
    live = runs.live(run_id)
    assert live is not None
    wait_for(lambda: live.monitor.snapshot().steps_done >= 1)
    assert client.post(f"/api/runs/{run_id}/stop").json()["status"] == "stopping"
    wait_for(lambda: live.monitor.finished)
    assert client.get(f"/api/runs/{run_id}").json()["status"] == "stopped"
    summary = read_summary(runs.runs_dir / run_id)
    assert summary["status"] == "stopped" and 1 <= len(summary["steps"]) < 500


def test_a_scenario_that_breaks_shows_why(client: TestClient, workspace: Path, runs: Runs,
                                          wait_for: Wait) -> None:
    (workspace / "mine.py").write_text(
        "from populace.launch import Scenario\n\n"
        "class Mine(Scenario):\n"
        "    async def step(self, run, t):\n        raise RuntimeError('no luck')\n")
    (workspace / "fails.yaml").write_text("scenario: mine.py\nagents: 5\n")
    run_id = client.post("/api/runs", json={"config": "fails.yaml"}).json()["id"]
    live = runs.live(run_id)
    assert live is not None
    wait_for(lambda: live.monitor.finished)
    snap = client.get(f"/api/runs/{run_id}").json()
    assert (snap["status"], snap["error"]) == ("failed", "RuntimeError: no luck")
    assert "Traceback" in (runs.runs_dir / run_id / "error.txt").read_text()
    assert read_summary(runs.runs_dir / run_id)["status"] == "failed"
