"""The backend seam: what a backend declares, and services placed by the local backend."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

import populace.core._ray as ray_module
from populace.core import Backend, LocalBackend, ServiceLost, Simulation
from populace.core._backend import LocalServiceHandle
from populace.core._worker import RemoteRef


class Counter:
    def __init__(self, start: int) -> None:
        self.value = start
        self.closed = False

    def add(self, n: int) -> int:
        self.value += n
        return self.value

    async def add_later(self, n: int, delay: float) -> int:
        await asyncio.sleep(delay)
        return self.add(n)

    def fail(self) -> None:
        raise KeyError("no such thing")


def test_the_protocol_declares_what_runtime_and_environment_use() -> None:
    class Partial:  # every member but `remote`
        name = "partial"
        n_workers = 0

        async def start(self, *a: Any) -> None: ...
        async def create(self, *a: Any) -> int: return 0
        def submit(self, *a: Any) -> None: ...
        def statistics(self) -> list[Any]: return []
        def worker_info(self) -> list[dict[str, Any]]: return []
        async def place(self, *a: Any) -> Any: ...
        async def stop(self) -> None: ...

    assert not isinstance(Partial(), Backend)
    Partial.remote = False  # type: ignore[attr-defined]
    assert isinstance(Partial(), Backend)
    del Partial.worker_info
    assert not isinstance(Partial(), Backend)
    assert LocalBackend.remote is False and ray_module.RayBackend.remote is True


async def test_local_worker_info_has_the_shape_of_ray_s() -> None:
    async with Simulation(workers=3) as sim:
        info = sim.backend.worker_info()
    assert len(info) == 3
    assert all(set(w) == {"pid", "node"} and w["pid"] == os.getpid() and w["node"]
               for w in info)


async def test_a_placed_local_service_is_the_object_itself_called_by_name() -> None:
    backend = LocalBackend()
    counter = Counter(1)

    class Holder:
        def __init__(self, inner: Counter) -> None:
            self.inner = inner

        def add(self, n: int) -> int:
            return self.inner.add(n)

    handle = await backend.place(Holder, counter)
    assert isinstance(handle, LocalServiceHandle)
    assert handle.info == {"pid": os.getpid(), "node": handle.info["node"]}
    assert await handle.call("add", 2) == 3
    assert counter.value == 3  # in-process: shared, not copied
    other = await backend.place(Counter, 10)
    assert await asyncio.gather(other.call("add_later", 1, 0.01), other.call("add", 5)) \
        == [16, 15]
    with pytest.raises(KeyError, match="no such thing"):
        await other.call("fail")
    with pytest.raises(AttributeError):
        await other.call("nope")


async def test_a_killed_local_service_fails_pending_and_later_calls_with_service_lost() -> None:
    backend = LocalBackend()
    handle = await backend.place(Counter, 0)
    pending = handle.call("add_later", 1, 60)
    handle.kill()
    handle.kill()  # idempotent
    with pytest.raises(ServiceLost, match=r"Counter \(in-process\) was killed"):
        await pending
    with pytest.raises(ServiceLost, match=r"Counter \(in-process\) was killed"):
        await handle.call("add", 1)
    assert "killed" in repr(handle)


async def test_stopping_the_backend_kills_the_services_it_placed() -> None:
    async with Simulation(workers=1) as sim:
        handle = await sim.backend.place(Counter, 0)
        pending = handle.call("add_later", 1, 60)
    with pytest.raises(ServiceLost):
        await pending


def test_remote_ref_is_a_worker_wire_type() -> None:
    assert ray_module.RemoteRef is RemoteRef  # the old import path keeps working
    assert RemoteRef.__module__ == "populace.core._worker"
    assert RemoteRef(1, 2) == RemoteRef(owner=1, call_id=2)
