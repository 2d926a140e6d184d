"""A new backend is one module and one registration (issue 30): run files, their checks and
the launcher take its name with no other change. The backend here is a local one that
counts the batches it forwards, so a test can tell it was the one used."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from populace.core import (
    BackendKind,
    LocalBackend,
    backend_names,
    expected_backends,
    make_backend,
    register_backend,
    unregister_backend,
)


class CountingBackend(LocalBackend):
    """The local backend, counting the request batches it is handed."""

    name = "counting"
    batches = 0  # class-wide: the launcher makes its own instance

    def __init__(self, address: str | None = None) -> None:
        super().__init__()
        self.address = address

    def submit(self, worker: int, requests: list[Any]) -> None:
        CountingBackend.batches += 1
        super().submit(worker, requests)


COUNTING = BackendKind(
    "counting", CountingBackend, addresses="HOST:PORT",
    address_ok=lambda a: a.rpartition(":")[2].isdigit(),
    unreachable=lambda a: "nobody there" if a.startswith("nowhere:") else None)


@pytest.fixture
def counting() -> Iterator[BackendKind]:
    register_backend(COUNTING)
    CountingBackend.batches = 0
    try:
        yield COUNTING
    finally:
        unregister_backend("counting")


GAME = {"name": "reg", "scenario": "guess_number", "seed": 3, "agents": 40, "rounds": 2,
        "workers": 2, "models": {"dummy": {"provider": "dummy", "latency": 0.0}}}


def run(tmp_path: Path, **changes: Any) -> Any:
    from populace.launch import launch, load_run_file
    from populace.results import RunDirectory, read_table

    path = tmp_path / f"{changes.get('backend', 'local')}.yaml"
    path.write_text(yaml.safe_dump({**GAME, **changes}))
    out = RunDirectory.create(tmp_path / f"out-{path.stem}")
    asyncio.run(launch(load_run_file(path), out))
    return read_table(out.path, "responses")


def test_a_registered_backend_runs_a_run_file_as_the_local_one_does(
        tmp_path: Path, counting: BackendKind) -> None:
    assert backend_names() == ("local", "ray", "counting")
    mine = run(tmp_path, backend="counting")
    assert CountingBackend.batches > 0  # it forwarded the calls, not the local backend
    theirs = run(tmp_path, backend="local")
    timing = [n for n in mine.column_names if n.endswith("_s")]  # latencies: the clock's
    assert timing and mine.drop_columns(timing).equals(theirs.drop_columns(timing))


def test_names_addresses_and_errors_follow_the_registry(tmp_path: Path,
                                                        counting: BackendKind) -> None:
    from populace.core import ConfigError
    from populace.launch import load_run_file

    assert expected_backends() == "'local', 'ray' or 'counting'"
    backend = make_backend("counting", address="here:1")
    assert isinstance(backend, CountingBackend) and backend.address == "here:1"

    def check(**changes: Any) -> str:
        path = tmp_path / "check.yaml"
        path.write_text(yaml.safe_dump({**GAME, **changes}))
        with pytest.raises(ConfigError) as e:
            load_run_file(path)
        return str(e.value)

    assert "Input should be 'local', 'ray' or 'counting'" in check(backend="slurm")
    assert "expected HOST:PORT" in check(backend="counting", address="here")
    assert "only meaningful with backend: ray or counting" in check(address="here:1")
    options = load_run_file(tmp_path / "check.yaml", {"backend": "counting",
                                                       "address": "there:7"}).options
    assert options.backend_options() == {"address": "there:7"}
    assert COUNTING.unreachable("nowhere:1") == "nobody there"


def test_unregistered_it_is_unknown_again(counting: BackendKind) -> None:
    unregister_backend("counting")
    assert backend_names() == ("local", "ray")
    with pytest.raises(ValueError, match="unknown backend 'counting'; expected 'local' or 'ray'"):
        make_backend("counting")
