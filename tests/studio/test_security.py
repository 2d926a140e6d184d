"""Who may talk to the studio: tokens beyond loopback, Host and Origin checks.

No test binds a non-loopback address or sends traffic to one: the app is built as it would
be for ``--host 0.0.0.0`` and driven in-process; real servers listen on 127.0.0.1 only.
"""

from __future__ import annotations

import socket

import httpx
import pytest
from fastapi.testclient import TestClient

from populace.studio import Runs, StudioServer, create_app, is_loopback, new_token

PUBLIC = "http://192.0.2.10:8765"  # what a remote browser would send (TEST-NET, never reached)


def test_binding_beyond_loopback_requires_a_token(runs: Runs) -> None:
    with pytest.raises(ValueError, match="needs a token"):
        create_app(runs, host="0.0.0.0")
    with pytest.raises(ValueError, match="needs a token"):
        create_app(runs, host="192.168.1.5", token="")
    create_app(runs, host="127.0.0.1")  # loopback: no token needed


@pytest.mark.parametrize("path", ["/", "/api/runs", "/api/runs/finished",
                                  "/api/runs/finished/events", "/static/app.js",
                                  "/api/runs/finished/agents/1", "/api/configs"])
def test_requests_without_the_token_are_refused(runs: Runs, path: str) -> None:
    client = TestClient(create_app(runs, host="0.0.0.0", token="s3cret"), base_url=PUBLIC)
    r = client.get(path)
    assert r.status_code == 401 and "token" in r.json()["error"]
    assert client.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get(path, params={"token": "s3cre"}).status_code == 401
    assert client.get(path, headers={"Cookie": "populace_studio=nope"}).status_code == 401
    assert client.post("/api/runs", json={"config": "tiny.yaml"}).status_code == 401


def test_the_token_opens_every_door(runs: Runs) -> None:
    client = TestClient(create_app(runs, host="0.0.0.0", token="s3cret"), base_url=PUBLIC)
    bearer = {"Authorization": "Bearer s3cret"}
    assert client.get("/api/runs", headers=bearer).status_code == 200
    # The first page load carries ?token=; the studio answers with a cookie for the rest.
    first = client.get("/", params={"token": "s3cret"})
    assert first.status_code == 200 and "<title>Populace Studio</title>" in first.text
    cookie = first.headers["set-cookie"]
    assert cookie.startswith("populace_studio=s3cret;") and "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie
    assert client.get("/api/runs").status_code == 200  # the cookie now
    assert client.get("/static/app.js").status_code == 200
    with client.stream("GET", "/api/runs/finished/events") as events:
        assert events.status_code == 200


def test_a_loopback_studio_answers_only_to_loopback_host_names(runs: Runs) -> None:
    app = create_app(runs)
    for host in ("127.0.0.1:8765", "localhost:8765", "localhost", "[::1]:8765", "127.0.0.2"):
        assert TestClient(app, base_url=f"http://{host}").get("/api/runs").status_code == 200
    for host in ("evil.example", "evil.example:8765", "192.0.2.1:8765", "127.0.0.1.evil.example"):
        r = TestClient(app, base_url=f"http://{host}").get("/api/runs")
        assert r.status_code == 403, host  # DNS rebinding: another site's name for 127.0.0.1


def test_cross_site_posts_are_refused(client: TestClient) -> None:
    r = client.post("/api/runs/finished/stop", headers={"Origin": "http://evil.example"})
    assert r.status_code == 403
    r = client.post("/api/runs", json={"config": "tiny.yaml"},
                    headers={"Origin": "http://127.0.0.1:9999"})
    assert r.status_code == 403
    same = client.post("/api/runs/finished/stop", headers={"Origin": "http://127.0.0.1:8765"})
    assert same.status_code == 400  # allowed through; refused for its own reason


def test_loopback_helpers() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "localhost", "::1", "[::1]", "127.1.2.3"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "192.168.0.1", "example.com", ""))
    a, b = new_token(), new_token()
    assert a != b and len(a) >= 32


def test_a_real_server_with_a_token_refuses_requests_without_it(runs: Runs) -> None:
    server = StudioServer(runs, port=0, token="t0ken")
    server.start()
    try:
        assert server.url.endswith("/?token=t0ken") and server.url.startswith("http://127.0.0.1:")
        base = f"http://127.0.0.1:{server.port}"
        assert httpx.get(f"{base}/api/runs").status_code == 401
        ok = httpx.get(f"{base}/api/runs", headers={"Authorization": "Bearer t0ken"})
        assert ok.status_code == 200 and ok.json()[0]["id"] == "finished"
    finally:
        server.stop()


def test_a_studio_bound_beyond_loopback_generates_a_token(runs: Runs) -> None:
    # Bind to loopback while the server believes it serves 0.0.0.0: nothing is exposed.
    server = StudioServer(runs, host="0.0.0.0", port=0,
                          sock=socket.create_server(("127.0.0.1", 0)))
    try:
        assert server.token and len(server.token) >= 32
        assert server.url.endswith(f"/?token={server.token}")
    finally:
        server.stop()
