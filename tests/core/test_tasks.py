"""TaskOwner: background tasks held, their failures seen, the rest cancelled on close."""

from __future__ import annotations

import asyncio
import gc
import logging
from typing import Any

import pytest

from populace.core import TaskOwner


class Bug(Exception):
    pass


async def test_a_failure_is_logged_handed_on_and_raised_by_the_next_call(
        caplog: pytest.LogCaptureFixture) -> None:
    seen: list[BaseException] = []
    owner = TaskOwner("the poller", on_error=seen.append)

    async def poll() -> None:
        await asyncio.sleep(0)
        raise Bug("unexpected")

    task = owner.start(poll(), name="poll 3")
    assert len(owner) == 1
    with pytest.raises(Bug):
        await task
    await asyncio.sleep(0)  # the owner's done callback
    assert len(owner) == 0
    assert [str(e) for e in seen] == ["unexpected"]
    assert owner.failure is seen[0]
    assert "the poller: background task poll 3 failed" in caplog.text
    assert "Bug: unexpected" in caplog.text  # with its traceback
    with pytest.raises(Bug, match="unexpected") as info:
        owner.raise_failure()
    assert "(a background task of the poller)" in info.value.__notes__
    assert "failed" in repr(owner)


async def test_then_sees_every_ending_even_a_cancel_before_the_task_ran() -> None:
    owner = TaskOwner("service")
    endings: list[str] = []

    def then(task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            endings.append("cancelled")
        elif task.exception() is not None:
            endings.append(f"error {task.exception()}")
        else:
            endings.append(f"done {task.result()}")

    async def value() -> int:
        return 1

    async def fails() -> int:
        raise Bug("its own error")

    async def forever() -> int:
        await asyncio.Event().wait()
        return 0  # pragma: no cover

    owner.start(value(), then=then)
    owner.start(fails(), then=then)  # handed on by then: not a failure of the owner
    await asyncio.sleep(0.001)
    owner.start(forever(), then=then)
    owner.start(forever(), then=then)
    await owner.aclose()  # one had not even started
    assert endings == ["done 1", "error its own error", "cancelled", "cancelled"]
    assert owner.failure is None
    owner.raise_failure()  # nothing to raise
    await owner.aclose()  # idempotent


async def test_then_raising_is_a_failure_and_nothing_goes_unretrieved(
        caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.get_running_loop()
    problems: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: problems.append(context))
    owner = TaskOwner("service")

    def broken(task: asyncio.Task[Any]) -> None:
        raise Bug("bookkeeping")

    async def fails() -> None:
        raise Bug("no then")

    async def fine() -> None:
        pass

    owner.start(fine(), then=broken)
    owner.start(fails())
    await asyncio.sleep(0.001)
    assert len(owner) == 0
    await asyncio.sleep(0.001)
    gc.collect()  # an unretrieved task exception is reported when the task is collected
    await asyncio.sleep(0)
    assert str(owner.failure) == "bookkeeping"
    assert problems == []
    assert [r.levelno for r in caplog.records] == [logging.ERROR, logging.ERROR]
