"""The studio's JSON API over TestClient: runs, live updates, agents, start and stop, paths."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from populace.results import read_summary, read_table
from populace.studio import Runs

Wait = Callable[..., None]


# -- runs on disk --------------------------------------------------------------------------------
def test_the_runs_list_shows_finished_runs_and_links_reports(client: TestClient,
                                                             workspace: Path) -> None:
    [row] = client.get("/api/runs").json()
    assert row["id"] == "finished" and row["name"] == "tiny"
    assert (row["status"], row["live"], row["agents"]) == ("done", False, 300)
    assert (row["rounds_done"], row["rounds_planned"]) == (2, 2)
    assert row["report"] is False and row["profiles"] is True
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


def test_a_finished_run_is_rebuilt_from_disk(client: TestClient) -> None:
    snap = client.get("/api/runs/finished").json()
    assert (snap["status"], snap["live"], snap["finished"]) == ("done", False, True)
    assert sum(snap["histogram"]["counts"]) == snap["histogram"]["valid"] == 300
    assert [r["round"] for r in snap["rounds"]] == [1, 2]


def test_events_of_a_finished_run_send_one_snapshot_then_end(client: TestClient) -> None:
    with client.stream("GET", "/api/runs/finished/events") as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    data = [json.loads(line[5:]) for line in lines if line.startswith("data:")]
    assert data[0]["status"] == "done" and data[-1] == {}
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
    big = client.get("/api/runs/finished/agents", params={"size": 100_000}).json()
    assert big["size"] == 200 and len(big["rows"]) == 200  # pages are bounded


def test_bad_agent_filters_get_one_line_errors(client: TestClient) -> None:
    r = client.get("/api/runs/finished/agents", params={"attribute": "salary", "value": "1"})
    assert r.status_code == 400 and r.json()["error"].startswith("no attribute 'salary'")
    r = client.get("/api/runs/finished/agents", params={"attribute": "group", "value": "x"})
    assert r.status_code == 400 and "numbers" in r.json()["error"]


def test_columns_list_the_values_of_categories(client: TestClient) -> None:
    columns = {c["name"]: c for c in client.get("/api/runs/finished/columns").json()}
    assert columns["profession"]["values"] == ["artist", "economist", "writer"]
    assert "values" not in columns["agent_id"]


def test_one_agent_shows_its_profile_and_every_answer(client: TestClient) -> None:
    a = client.get("/api/runs/finished/agents/4").json()
    assert a["profile"]["profession"] in ("economist", "artist", "writer")
    assert a["profile"]["agent_id"] == 4
    assert [r["round"] for r in a["rounds"]] == [1, 2]
    for r in a["rounds"]:
        assert r["raw"] and r["valid"] and r["number"] == float(r["raw"])
        assert r["result"]["winner_number"] is not None and r["calls"] == 1
    assert "{n_players}" in a["prompt"] or "players" in a["prompt"]
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
    (workspace / "broken.yaml").write_text("name: b\nagents: 10\nmodels: {}\nmodel: gpt9\n")
    r = client.post("/api/runs", json={"config": "broken.yaml"})
    assert r.status_code == 400
    assert r.json()["error"].startswith(f"{workspace / 'broken.yaml'}: ")
    assert client.post("/api/runs", json={"config": "tiny.yaml", "agents": 0}).status_code == 422
    assert client.post("/api/runs", json={"config": "notes.yaml"}).status_code == 400


def test_a_run_started_here_goes_live_and_finishes(client: TestClient, runs: Runs,
                                                   wait_for: Wait) -> None:
    r = client.post("/api/runs", json={"config": "tiny.yaml", "agents": 500, "rounds": 3})
    assert r.status_code == 200, r.text
    run_id = r.json()["id"]
    assert run_id.startswith("tiny-")
    live = runs.live(run_id)
    assert live is not None
    wait_for(lambda: live.monitor.finished)
    snap = client.get(f"/api/runs/{run_id}").json()
    assert (snap["status"], snap["live"], snap["agents"], snap["rounds_done"]) == \
        ("done", True, 500, 3)
    summary = read_summary(runs.runs_dir / run_id)
    assert summary["status"] == "completed" and len(summary["rounds"]) == 3
    ids = [row["id"] for row in client.get("/api/runs").json()]
    assert set(ids) == {run_id, "finished"}


def test_a_run_is_stopped_cleanly_and_keeps_its_finished_rounds(client: TestClient,
                                                                runs: Runs,
                                                                wait_for: Wait) -> None:
    run_id = client.post("/api/runs", json={"config": "experiments/slow.yaml"}).json()["id"]
    live = runs.live(run_id)
    assert live is not None
    again = client.post("/api/runs", json={"config": "tiny.yaml"})
    assert again.status_code == 400 and "still going" in again.json()["error"]
    wait_for(lambda: live.monitor.snapshot()["rounds_done"] >= 1)
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
    done = len(summary["rounds"])
    assert 1 <= done < 5
    assert read_table(path).num_rows == 300 * done
    assert (path / "checkpoints").is_dir()
    assert client.post("/api/runs/finished/stop").status_code == 400  # not running here
    assert client.post("/api/runs/nope/stop").status_code == 404


def test_a_run_that_fails_shows_why(client: TestClient, workspace: Path, runs: Runs,
                                    wait_for: Wait) -> None:
    (workspace / "offline.yaml").write_text(
        "name: offline\nagents: 10\nmodels:\n  m: {provider: openai, model: x, "
        "base_urls: ['http://127.0.0.1:9/v1'], max_retries: 0, timeout: 2}\n")
    run_id = client.post("/api/runs", json={"config": "offline.yaml"}).json()["id"]
    live = runs.live(run_id)
    assert live is not None
    wait_for(lambda: live.monitor.finished)
    snap = client.get(f"/api/runs/{run_id}").json()
    assert snap["status"] == "failed" and "127.0.0.1:9" in snap["error"]


OPINIONS = Path(__file__).resolve().parents[2] / "examples" / "opinions" / "opinions.py"


def test_a_scenario_file_is_started_watched_and_stopped(client: TestClient, workspace: Path,
                                                         runs: Runs, wait_for: Wait) -> None:
    shutil.copy(OPINIONS, workspace / "opinions.py")
    (workspace / "town.yaml").write_text("scenario: opinions.py\nname: town\ndays: 3\n")
    r = client.post("/api/runs", json={"config": "town.yaml", "agents": 300})
    assert r.status_code == 200, r.text
    run_id = r.json()["id"]
    live = runs.live(run_id)
    assert run_id.startswith("town-") and live is not None
    wait_for(lambda: live.monitor.finished)
    snap = client.get(f"/api/runs/{run_id}").json()
    assert (snap["status"], snap["agents"], snap["rounds_done"]) == ("done", 300, 3)
    assert "meetings" in snap["environment"]
    summary = read_summary(runs.runs_dir / run_id)
    assert summary["status"] == "completed" and len(summary["result"]["days"]) == 3

    # A long one, stopped from the studio after its first day.
    (workspace / "long.yaml").write_text("scenario: opinions.py\nname: long\ndays: 500\n")
    run_id = client.post("/api/runs", json={"config": "long.yaml", "agents": 2000}).json()["id"]
    live = runs.live(run_id)
    assert live is not None
    wait_for(lambda: live.monitor.snapshot()["rounds_done"] >= 1)
    assert client.post(f"/api/runs/{run_id}/stop").json()["status"] == "stopping"
    wait_for(lambda: live.monitor.finished)
    assert client.get(f"/api/runs/{run_id}").json()["status"] == "stopped"
    summary = read_summary(runs.runs_dir / run_id)
    assert summary["status"] == "stopped" and 1 <= len(summary["result"]["days"]) < 500


def test_a_scenario_file_is_checked_and_its_failure_shown(client: TestClient, workspace: Path,
                                                         runs: Runs, wait_for: Wait) -> None:
    (workspace / "mine.py").write_text(
        "DEFAULTS = {'agents': 10, 'speed': 1.5}\n\n"
        "async def run(config):\n    raise RuntimeError('no luck')\n")
    (workspace / "bad.yaml").write_text("scenario: mine.py\nspeed: fast\n")
    r = client.post("/api/runs", json={"config": "bad.yaml"})
    assert r.status_code == 400
    assert r.json()["error"] == (f"{workspace / 'bad.yaml'}: speed: expected a number (like "
                                 "the default 1.5), got 'fast'")
    (workspace / "fails.yaml").write_text("scenario: mine.py\n")
    run_id = client.post("/api/runs", json={"config": "fails.yaml"}).json()["id"]
    live = runs.live(run_id)
    assert live is not None
    wait_for(lambda: live.monitor.finished)
    snap = client.get(f"/api/runs/{run_id}").json()
    assert (snap["status"], snap["error"]) == ("failed", "RuntimeError: no luck")
    assert "Traceback" in (runs.runs_dir / run_id / "error.txt").read_text()
