"""The studio's hands on a run: interviews, interventions and forks over HTTP, with one-line
4xx errors for requests it cannot carry out."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from populace.results import read_summary, read_table
from populace.studio import Runs

Wait = Callable[..., None]


def test_a_finished_run_is_interviewed_from_its_checkpoint(client: TestClient,
                                                           runs: Runs) -> None:
    before = read_table(runs.runs_dir / "finished", "responses")
    r = client.post("/api/runs/finished/interviews",
                    json={"question": "How did you choose?", "agents": [1, 2]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["interview"] == 1
    assert [row["agent_id"] for row in body["rows"]] == [1, 2]
    assert all(row["answer"] and row["source"] == "checkpoint" for row in body["rows"])
    r = client.post("/api/runs/finished/interviews",
                    json={"question": "Again?", "where": 'profession == "artist"',
                          "sample": 3, "step": 1})
    assert r.status_code == 200, r.text
    assert len(r.json()["rows"]) == 3 and {x["step"] for x in r.json()["rows"]} == {1}
    listed = client.get("/api/runs/finished/interviews").json()
    assert listed["total"] == 5 and listed["rows"][0]["question"] == "Again?"
    assert read_table(runs.runs_dir / "finished", "responses").equals(before)


@pytest.mark.parametrize(("body", "status", "says"), [
    ({"question": "Why?", "agents": [99999]}, 400, "no such agent"),
    ({"question": "Why?", "where": "salary > 3"}, 400, "no profile column 'salary'"),
    ({"question": "Why?", "agents": [1], "step": 7}, 400, "step 7 has no checkpoint"),
    ({"question": "Why?"}, 400, "choose whom to ask"),
    ({"question": "", "agents": [1]}, 400, "question"),
    ({"question": "Why?", "agents": [1], "extra": 1}, 400, "extra"),
])
def test_bad_interviews_are_one_line_errors(client: TestClient, body: dict, status: int,
                                            says: str) -> None:
    r = client.post("/api/runs/finished/interviews", json=body)
    assert r.status_code == status, r.text
    assert says in r.json()["error"] and "\n" not in r.json()["error"]


def test_a_run_that_is_not_live_takes_no_intervention(client: TestClient) -> None:
    r = client.post("/api/runs/finished/interventions",
                    json={"kind": "message", "text": "Storm!"})
    assert r.status_code == 409 and "fork it" in r.json()["error"]
    assert client.get("/api/runs/finished/interventions").json()["interventions"] == []
    assert client.post("/api/runs/nope/interventions", json={}).status_code == 404


def test_a_fork_starts_a_live_run_from_a_past_step(client: TestClient, runs: Runs,
                                                   wait_for: Wait) -> None:
    r = client.post("/api/runs/finished/fork", json={"step": 1})
    assert r.status_code == 200, r.text
    fork_id = r.json()["id"]
    live = runs.live(fork_id)
    assert live is not None and fork_id.startswith("finished-fork1-")
    wait_for(lambda: live.monitor.finished)
    summary = read_summary(runs.runs_dir / fork_id)
    assert summary["status"] == "completed", summary.get("error")
    assert summary["forked_from"]["step"] == 1
    a = read_table(runs.runs_dir / fork_id, "responses").drop_columns(["latency_s"])
    b = read_table(runs.runs_dir / "finished", "responses").drop_columns(["latency_s"])
    assert a.equals(b)


@pytest.mark.parametrize(("body", "says"), [
    ({"step": 9}, "step 9 has no checkpoint"),
    ({"step": 1, "set": {"game.nope": 1}}, "unknown setting 'nope'"),
    ({"step": 1, "set": {"agents": 5}}, "keeps the run's agents"),
    ({"step": 0}, "step"),
])
def test_bad_forks_are_one_line_errors(client: TestClient, body: dict, says: str) -> None:
    r = client.post("/api/runs/finished/fork", json=body)
    assert r.status_code == 400, r.text
    assert says in r.json()["error"]


def test_a_live_run_is_interviewed_and_intervened_on(client: TestClient, runs: Runs,
                                                     wait_for: Wait) -> None:
    run_id = client.post("/api/runs", json={"config": "experiments/slow.yaml"}).json()["id"]
    live = runs.live(run_id)
    assert live is not None and live.control is not None
    wait_for(lambda: live.control.live)  # type: ignore[union-attr]
    r = client.post(f"/api/runs/{run_id}/interventions",
                    json={"kind": "message", "text": "A storm is coming.",
                          "where": 'profession == "artist"'})
    assert r.status_code == 200, r.text
    step = r.json()["intervention"]["step"]
    assert step >= 1 and "artist" in r.json()["intervention"]["what"]
    bad = client.post(f"/api/runs/{run_id}/interventions",
                      json={"kind": "message", "text": "x", "where": "salary > 1"})
    assert bad.status_code == 400 and "salary" in bad.json()["error"]
    listed = client.get(f"/api/runs/{run_id}/interventions").json()
    assert [i["step"] for i in listed["interventions"]] == [step]
    r = client.post(f"/api/runs/{run_id}/interviews",
                    json={"question": "How is it going?", "sample": 4})
    assert r.status_code == 200, r.text
    assert [row["source"] for row in r.json()["rows"]] == ["live"] * 4
    wait_for(lambda: live.monitor.finished, timeout=60)
    summary = read_summary(runs.runs_dir / run_id)
    entry = summary["steps"][step - 1]
    assert entry["interventions"][0]["agents"] > 0


def test_the_manage_endpoints_exist_only_for_runs(client: TestClient, workspace: Path) -> None:
    for path in ("/api/runs/nope/interviews", "/api/runs/..%2f..%2fetc/interviews"):
        assert client.get(path).status_code == 404
    assert client.post("/api/runs/nope/fork", json={"step": 1}).status_code in (400, 404)
