"""Every error the studio answers is ``{"error": "one line"}`` with a documented status; no
request, however odd, gets a 500 with a traceback in the log."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from populace.studio import AgentBrowser, AgentQueryError, NotFound, Refused, Runs, UnknownAgent
from populace.studio._runs import Damaged

BEYOND_INT64 = "99999999999999999999999"


def _error(response: Any, status: int) -> str:
    """The one-line message of a JSON error answered with ``status``."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert list(body) == ["error"] and isinstance(body["error"], str)
    assert body["error"] and "\n" not in body["error"]
    return str(body["error"])


@pytest.fixture
def quiet(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """The log records of a test; it checks none is an error (a traceback) at the end."""
    caplog.set_level(logging.INFO)
    return caplog


def _no_errors_logged(caplog: pytest.LogCaptureFixture) -> None:
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not bad, [r.getMessage() for r in bad]


@pytest.mark.parametrize("path", [
    "/runs/finished/report/%00.html",                      # a NUL in a path
    "/runs/finished/report/figures%00/a.png",
    "/runs/finished/report/" + "a" * 300 + ".html",        # a name the system refuses
    "/runs/finished/report/" + "a/" * 3000 + "x.html",
    f"/api/runs/finished/agents/{BEYOND_INT64}",           # ids beyond int64
    f"/api/runs/finished/agents/-{BEYOND_INT64}",
    "/api/runs/finished/agents/abc",                       # no agent can have that id
    "/api/runs/finished/agents/%00",
    "/api/nothing-here",                                   # no such endpoint
    "/static/missing.js",
])
def test_odd_paths_are_json_404s(client: TestClient, quiet: pytest.LogCaptureFixture,
                                 path: str) -> None:
    _error(client.get(path), 404)
    _no_errors_logged(quiet)


def test_an_agent_beyond_int64_is_unknown(client: TestClient) -> None:
    assert _error(client.get(f"/api/runs/finished/agents/{BEYOND_INT64}"), 404) == \
        f"no agent {BEYOND_INT64} in this run"


@pytest.mark.parametrize("params", [
    {"agent_id": BEYOND_INT64},
    {"group": BEYOND_INT64},
    {"group": f"-{BEYOND_INT64}"},
    {"attribute": "group", "value": BEYOND_INT64},
    {"attribute": "agent_id", "value": f"-{BEYOND_INT64}"},
    {"attribute": "group", "value": "1" * 400},            # too big for a float too
    {"attribute": "group", "value": "1" * 5000},           # too long for int()
    {"table": "responses", "attribute": "number", "value": "1" * 400},  # a float column
    {"page": "two"},
    {"size": "1e3"},
    {"step": "last"},
])
def test_odd_agent_queries_are_json_400s(client: TestClient, quiet: pytest.LogCaptureFixture,
                                         params: dict[str, str]) -> None:
    _error(client.get("/api/runs/finished/agents", params=params), 400)
    _no_errors_logged(quiet)


def test_an_out_of_range_filter_says_so(client: TestClient) -> None:
    message = _error(client.get("/api/runs/finished/agents", params={"group": BEYOND_INT64}),
                     400)
    assert message == f"group: {BEYOND_INT64} is out of range"
    message = _error(client.get("/api/runs/finished/agents", params={"page": "two"}), 400)
    assert message.startswith("page: ") and "integer" in message


@pytest.mark.parametrize(("params", "message"), [
    ({"size": BEYOND_INT64}, f"size: {BEYOND_INT64} (expected 1 to 200 rows per page)"),
    ({"size": "0"}, "size: 0 (expected 1 to 200 rows per page)"),
    ({"page": "-5"}, "page: -5 (expected 0 or more; the first page is 0)"),
])
def test_a_page_out_of_range_is_a_400_not_clamped(client: TestClient, params: dict[str, str],
                                                  message: str) -> None:
    assert _error(client.get("/api/runs/finished/agents", params=params), 400) == message


@pytest.mark.parametrize("params", [
    {"step": BEYOND_INT64}, {"page": BEYOND_INT64}, {"attribute": "group", "value": "1e999"},
    {"attribute": "group", "value": "NaN"},
    {"table": "responses", "attribute": "number", "value": str(2**63 - 1)},  # a float column
])
def test_lenient_agent_queries_still_answer(client: TestClient, params: dict[str, str]) -> None:
    r = client.get("/api/runs/finished/agents", params=params)
    assert r.status_code == 200 and r.json()["total"] in (0, 300)


def test_the_browser_refuses_ids_beyond_int64_itself(workspace: Path) -> None:
    browser, run = AgentBrowser(), workspace / "runs" / "finished"
    with pytest.raises(UnknownAgent):
        browser.agent(run, 2**63)
    with pytest.raises(AgentQueryError, match="out of range"):
        browser.search(run, agent_id=-(2**63) - 1)
    assert browser.search(run, agent_id=2**63 - 1)["total"] == 0


@pytest.mark.parametrize(("body", "where"), [
    (b"{bad", "request body"),                              # not JSON
    (b"", "request body"),
    (b"\xff\xfe{}", "request body"),                        # not UTF-8
    (b"[1, 2]", "request body"),                            # JSON of the wrong type
    (b'"tiny.yaml"', "request body"),
    (b"null", "request body"),
    (b'{"config": 5}', "config"),
    (b'{"config": ["tiny.yaml"]}', "config"),
    (b'{"agents": 10}', "config"),                          # missing
    (b'{"config": "tiny.yaml", "agents": "many"}', "agents"),
    (b'{"config": "tiny.yaml", "agents": 1.5}', "agents"),
    (b'{"config": "tiny.yaml", "agents": true}', "agents"),
    (b'{"config": "tiny.yaml", "agents": 0}', "agents"),
    (b'{"config": "tiny.yaml", "steps": -1}', "steps"),
    (b'{"config": "tiny.yaml", "agnets": 10}', "agnets"),   # a misspelt field
    (b'{"config": "' + b"a" * 2000 + b'.yaml"}', "config"),
])
def test_bad_start_bodies_are_json_400s(client: TestClient, runs: Runs,
                                        quiet: pytest.LogCaptureFixture, body: bytes,
                                        where: str) -> None:
    r = client.post("/api/runs", content=body, headers={"content-type": "application/json"})
    assert _error(r, 400).startswith(f"{where}: ")
    assert runs.listing()[0]["id"] == "finished"  # nothing started
    _no_errors_logged(quiet)


def test_a_huge_start_body_is_refused_unread(client: TestClient) -> None:
    body = b'{"config": "tiny.yaml", "pad": "' + b"x" * (1 << 20) + b'"}'
    assert "64 KiB" in _error(client.post("/api/runs", content=body), 400)

    def chunks() -> Iterator[bytes]:
        yield b'{"config": "'
        for _ in range(100):
            yield b"x" * 65536

    assert "64 KiB" in _error(client.post("/api/runs", content=chunks()), 400)  # no length


@pytest.mark.parametrize(("config", "where"), [
    ("a" * 300 + ".yaml", "no such run file"),              # a name the system refuses
    ("a/" * 400 + "x.yaml", "no such run file"),
])
def test_unusable_run_file_names_are_refused(client: TestClient, quiet: pytest.LogCaptureFixture,
                                             config: str, where: str) -> None:
    assert where in _error(client.post("/api/runs", json={"config": config}), 400)
    _no_errors_logged(quiet)


def test_a_method_an_endpoint_does_not_take_is_a_json_405(client: TestClient) -> None:
    r = client.put("/api/runs")
    _error(r, 405)
    assert "GET" in r.headers["allow"]


def test_an_unexpected_error_is_one_log_line_and_a_json_500(
        client: TestClient, runs: Runs, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> list[object]:
        raise RuntimeError("disk on fire\nsecond line")

    monkeypatch.setattr(runs, "listing", broken)  # the client re-raises what reaches uvicorn
    with caplog.at_level(logging.ERROR, logger="populace.studio"):
        r = client.get("/api/runs")
    assert r.status_code == 500 and r.json() == {"error": "internal error"}
    [record] = [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
    message = record.getMessage()
    assert record.exc_info is None and "\n" not in message
    assert "GET '/api/runs'" in message and "RuntimeError: disk on fire" in message


def test_a_slashed_path_is_a_json_404_not_a_redirect(client: TestClient) -> None:
    for path in ("/api/runs/", "/api/runs/..%2f", "/api/runs/finished/"):
        r = client.get(path, follow_redirects=False)
        assert r.status_code == 404 and "error" in r.json(), (path, r.status_code, r.text)


@pytest.mark.parametrize(("error", "status", "line"), [
    (NotFound("x" * 120), 404, "no run or file named '" + "x" * 100 + "…'"),
    (UnknownAgent("no agent 3 in this run"), 404, "no agent 3 in this run"),
    (FileNotFoundError("report.html: no such file"), 404, "report.html: no such file"),
    (Refused("not a run file the studio lists"), 400, "not a run file the studio lists"),
    (AgentQueryError("unknown column 'nope'"), 400, "unknown column 'nope'"),
    (Damaged("summary.json: not JSON"), 409, "summary.json: not JSON"),
], ids=lambda v: type(v).__name__ if isinstance(v, Exception) else None)
def test_each_expected_error_has_its_status_and_line(
        client: TestClient, error: Exception, status: int, line: str) -> None:
    def fail() -> None:
        raise error

    client.app.app.add_api_route("/api/fails", fail)  # type: ignore[attr-defined]  # in Guard
    assert _error(client.get("/api/fails"), status) == line
