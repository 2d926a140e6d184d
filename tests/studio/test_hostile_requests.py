"""Hostile requests to the studio's management endpoints (issue 33): what the command line
refuses in one line is a 4xx with one line here, never ``500 internal error``, and an
environment change for an environment the live run does not have is refused on receipt."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from populace.studio import Runs

Wait = Callable[..., None]


@pytest.mark.parametrize(("where", "says"), [
    ("~" * 1900 + "profession", "nested too deeply"),
    ("profession == " + "-" * 1900 + "1", "nested too deeply"),
    ("profession == " + "9" * 1500, "a number of 1,500 digits is too large"),
    ('profession == "\udc80"', "surrogate"),
], ids=["tilde", "minus", "1500-digits", "surrogate"])
def test_a_hostile_query_is_a_400(client: TestClient, where: str, says: str) -> None:
    body = json.dumps({"question": "Why?", "where": where}).encode()  # \udc80 as an escape
    r = client.post("/api/runs/finished/interviews", content=body,
                    headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert says in r.json()["error"] and "\n" not in r.json()["error"]


def test_a_question_that_is_not_utf8_is_a_400(client: TestClient) -> None:
    r = client.post("/api/runs/finished/interviews",
                    content=b'{"question": "why \\udced?", "agents": [1]}',
                    headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text


def test_damaged_management_files_are_4xx(client: TestClient, runs: Runs) -> None:
    run = runs.runs_dir / "finished"
    (run / "interviews.parquet").write_bytes(b"PAR1 garbage")
    (run / "interventions.jsonl").write_bytes(b'{"step": 1, "kind": "message", '
                                              b'"text": "h\xe9"}\n')
    for method, path, body in [
            ("get", "/api/runs/finished/interviews", None),
            ("post", "/api/runs/finished/interviews", {"question": "Why?", "agents": [1]}),
            ("get", "/api/runs/finished/interventions", None)]:
        r = client.request(method, path, json=body)
        assert 400 <= r.status_code < 500, (path, r.status_code, r.text)
        error = r.json()["error"]
        assert str(run) in error and "\n" not in error, error


def test_an_environment_the_live_run_does_not_have_is_refused(
        client: TestClient, runs: Runs, wait_for: Wait) -> None:
    run_id = client.post("/api/runs", json={"config": "experiments/slow.yaml"}).json()["id"]
    live = runs.live(run_id)
    assert live is not None and live.control is not None
    wait_for(lambda: live.control.live)  # type: ignore[union-attr]
    r = client.post(f"/api/runs/{run_id}/interventions",
                    json={"kind": "environment", "key": "mood", "value": 1, "env": "nope"})
    assert r.status_code == 400, r.text
    assert "env 'nope': the run has no such environment" in r.json()["error"]
    r = client.post(f"/api/runs/{run_id}/interventions",
                    json={"kind": "environment", "key": "mood", "value": 1,
                          "env": "game/group-9"})
    assert r.status_code == 400 and "'game/group-9'" in r.json()["error"], r.text
    for env in ("game", None):  # the root, by its name and by default
        body = {"kind": "environment", "key": "mood", "value": 2, "env": env}
        r = client.post(f"/api/runs/{run_id}/interventions",
                        json={k: v for k, v in body.items() if v is not None})
        assert r.status_code == 200, r.text
    listed = client.get(f"/api/runs/{run_id}/interventions").json()["interventions"]
    assert [i.get("env") for i in listed] == ["game", None]
    for body in ('{"kind": "environment", "key": "k", "value": ' + "[" * 5000 + "]" * 5000
                 + "}", '{"kind": "environment", "key": "k", "value": '
                 + "[" * 40 + "]" * 40 + "}",
                 '{"kind": "message", "text": "hi", "where": "' + "~" * 1900 + 'profession"}'):
        r = client.post(f"/api/runs/{run_id}/interventions", content=body.encode(),
                        headers={"content-type": "application/json"})
        assert r.status_code == 400 and "nested too deeply" in r.json()["error"], r.text
    r = client.post(f"/api/runs/{run_id}/interviews", content=(
        '{"question": "Why?", "agents": ' + "[" * 5000 + "]" * 5000 + "}").encode(),
        headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    runs.stop(run_id)
    wait_for(lambda: live.monitor.finished, timeout=60)  # type: ignore[union-attr]
