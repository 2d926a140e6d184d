"""The run files the studio lists and starts: one rule for both, a bounded walk, bounded reads.

Nothing here may hang or grow without bound on the current code's weak spots: a ``*.yaml``
link to ``/dev/zero`` or a FIFO is looked at from a thread the test gives up on after 5 s.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from fastapi.testclient import TestClient

from populace.studio import Runs, create_app

HOST = "http://127.0.0.1:8765"
T = TypeVar("T")
RUN = "name: x\nagents: 5\nrounds: 1\nmodels:\n  dummy: {provider: dummy}\n"


def _within(seconds: float, call: Callable[[], T]) -> T:
    """``call()``, from a daemon thread; fails if it has not returned in ``seconds``."""
    result: list[T] = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"no answer in {seconds} s"
    assert result, "the call raised"
    return result[0]


@pytest.fixture
def fifo(workspace: Path) -> Iterator[Path]:
    """A FIFO named like a run file; whoever is left blocked opening it is released after."""
    path = workspace / "pipe.yaml"
    os.mkfifo(path)
    yield path
    try:  # a reader blocked in open() returns once a writer opens the other end
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass  # no reader left: nothing to release


def test_a_fifo_is_not_listed_and_does_not_block(client: TestClient, fifo: Path) -> None:
    r = _within(5, lambda: client.get("/api/configs"))
    assert r.status_code == 200 and r.json() == ["experiments/slow.yaml", "tiny.yaml"]
    refused = _within(5, lambda: client.post("/api/runs", json={"config": "pipe.yaml"}))
    assert refused.status_code == 400
    assert "not a regular file" in refused.json()["error"]


def test_a_link_to_a_device_is_not_listed_nor_read(client: TestClient, workspace: Path) -> None:
    (workspace / "zero.yaml").symlink_to("/dev/zero")
    (workspace / "sub").mkdir()
    (workspace / "sub" / "zero.yml").symlink_to("/dev/zero")
    r = _within(5, lambda: client.get("/api/configs"))
    assert r.status_code == 200 and r.json() == ["experiments/slow.yaml", "tiny.yaml"]
    refused = _within(5, lambda: client.post("/api/runs", json={"config": "zero.yaml"}))
    assert refused.status_code == 400


def test_a_device_inside_the_root_is_not_read(runs: Runs, workspace: Path) -> None:
    # Like a /dev/zero link, but the test cannot make a device node: a link to a FIFO in
    # the root (followed inside the root, then refused as not a regular file).
    os.mkfifo(workspace / "sub-pipe")
    (workspace / "link.yaml").symlink_to(workspace / "sub-pipe")
    try:
        assert _within(5, runs.configs) == ["experiments/slow.yaml", "tiny.yaml"]
    finally:
        try:
            os.close(os.open(workspace / "sub-pipe", os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass


def test_links_inside_the_root_are_followed_links_out_are_not(client: TestClient,
                                                               workspace: Path) -> None:
    outside = workspace.parent / "outside.yaml"  # a valid run file beyond the root
    (workspace / "out.yaml").symlink_to(outside)
    (workspace / "again.yaml").symlink_to(workspace / "tiny.yaml")
    (workspace / "elsewhere").symlink_to(workspace.parent, target_is_directory=True)
    (workspace / "mirror").symlink_to(workspace / "experiments", target_is_directory=True)
    assert client.get("/api/configs").json() == ["again.yaml", "experiments/slow.yaml",
                                                 "tiny.yaml"]
    for ref in ("out.yaml", "elsewhere/outside.yaml", "mirror/slow.yaml"):
        r = client.post("/api/runs", json={"config": ref})
        assert r.status_code == 400 and "not a run file the studio lists" in r.json()["error"]


def test_yaml_beside_the_runs_directory_is_not_listed(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    (work / "sub").mkdir(parents=True)
    (elsewhere / "runs" / "old-run").mkdir(parents=True)
    (work / "a.yaml").write_text(RUN)
    (work / "sub" / "b.yaml").write_text(RUN)
    (elsewhere / "beside.yaml").write_text(RUN)  # the runs directory's parent: not walked
    (elsewhere / "runs" / "kept.yaml").write_text(RUN)  # the runs directory's own files
    (elsewhere / "runs" / "old-run" / "config.yaml").write_text(RUN)  # a run's own copy
    monkeypatch.chdir(work)
    runs = Runs(elsewhere / "runs")
    try:
        assert runs.roots == [work.resolve(), (elsewhere / "runs").resolve()]
        assert runs.configs() == ["a.yaml", "sub/b.yaml", "kept.yaml"]
        client = TestClient(create_app(runs), base_url=HOST)
        for ref in ("beside.yaml", str(elsewhere / "beside.yaml"), "../elsewhere/beside.yaml"):
            r = client.post("/api/runs", json={"config": ref})
            assert r.status_code == 400 and "no such run file" in r.json()["error"], ref
        r = client.post("/api/runs", json={"config": "old-run/config.yaml"})
        assert r.status_code == 400 and "in run directory old-run" in r.json()["error"]
    finally:
        runs.shutdown(timeout=30)


@pytest.mark.parametrize(("path", "why"), [
    ("runs/finished/config.yaml", "in run directory finished"),  # what a run saved of itself
    ("runs/finished/deeper/x.yaml", "in run directory finished"),
    (".hidden/x.yaml", "hidden"),
    (".x.yaml", "hidden"),
    ("node_modules/pkg/x.yaml", "node_modules"),
    ("venv/x.yaml", "virtual environment"),
    ("a/b/c/d/deep.yaml", "folders deep"),
    ("notes2.yaml", "set neither agents nor scenario"),
    ("late.yaml", "set neither agents nor scenario"),
    ("big.yaml", "over 1 MiB"),
])
def test_a_run_file_the_list_hides_is_not_started(client: TestClient, workspace: Path,
                                                  path: str, why: str) -> None:
    target = workspace / path
    target.parent.mkdir(parents=True, exist_ok=True)
    if path == "runs/finished/config.yaml":
        assert target.read_text().startswith("scenario:")  # a valid run file
    elif path == "notes2.yaml":
        target.write_text("name: x\nrounds: 1\n")
    elif path == "late.yaml":  # the summary comes from the first 64 KiB only
        target.write_text("#" * 70_000 + "\n" + RUN)
    elif path == "big.yaml":
        target.write_text(RUN + "#" * (1 << 20))
    else:
        target.write_text(RUN)
    if path == "venv/x.yaml":
        (target.parent / "pyvenv.cfg").write_text("home = /usr\n")
    assert path not in client.get("/api/configs").json()
    r = client.post("/api/runs", json={"config": path})
    assert r.status_code == 400, r.text
    message = r.json()["error"]
    assert message.startswith(f"{path}: not a run file the studio lists") and why in message
    assert r.json()["error"].count("\n") == 0
    assert [row["id"] for row in client.get("/api/runs").json()] == ["finished"]


def test_the_listing_is_capped(runs: Runs, workspace: Path) -> None:
    many = workspace / "many"
    many.mkdir()
    for i in range(600):
        (many / f"r{i:03}.yaml").write_text(RUN)
    listed = runs.configs()
    assert len(listed) == 500 and listed[0] == "experiments/slow.yaml"
    assert listed[1:] == [f"many/r{i:03}.yaml" for i in range(499)]
