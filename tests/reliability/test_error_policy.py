"""What a run does when the LLM stays down: ride it out to a deadline, or stop resumably."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from game_helpers import game_file
from populace.core import ModelError
from populace.launch import AllAnswersFailed, RunFile
from populace.llm.offline import ServerOptions, running_server
from populace.results import RunDirectory, read_summary, read_table
from populace.scenarios.guess_number import play


def config(url: str, **game: Any) -> RunFile:
    return game_file({
        "name": "policy", "agents": 30, "rounds": 2, "workers": 2, "seed": 3,
        "models": {"m": {"provider": "openai", "model": "dummy", "base_urls": [url],
                         "timeout": 5, "max_retries": 1, "max_backoff": 0.2,
                         **game.pop("model_options", {})}},
        "game": game,
    })


async def test_a_retry_deadline_rides_out_an_outage(tmp_path: Path) -> None:
    outage = ServerOptions(outage=(0.0, 1.5), retry_after=0.2)
    async with running_server(outage) as url:
        run = RunDirectory.create(tmp_path / "deadline")
        await play(config(url, model_options={"retry_deadline": 20}), run)
    table = read_table(run.path)
    assert table.num_rows == 60 and all(table.column("valid").to_pylist())
    assert sum(table.column("retries").to_pylist()) > 0

    # The same outage with two attempts and no deadline loses every answer of round 1: the
    # run fails (resumable), it does not report a round of nothing but errors.
    async with running_server(outage) as url:
        run = RunDirectory.create(tmp_path / "no-deadline")
        with pytest.raises(AllAnswersFailed, match=r"^step 1: all 30 answers failed \(most "
                                                   r"common: ModelError: HTTP 503 ×30"):
            await play(config(url), run)
    summary = read_summary(run.path)
    assert (summary["status"], summary["steps"]) == ("failed", [])
    assert summary["error"].startswith("AllAnswersFailed: step 1: all 30 answers failed")
    # What the failed step cost is kept: every request sent, every answer failed.
    failed = summary["failed_step"]
    assert failed["step"] == 1 and failed["failed"]["answers"] == 30
    (traffic,) = failed["llm"].values()
    assert traffic["requests"] == 30 and traffic["failures"] == 30
    assert traffic["sent"] == traffic["requests"] + traffic["retries"] > 30


async def test_stop_policy_stops_resumably_then_resume_finishes(tmp_path: Path) -> None:
    run = RunDirectory.create(tmp_path / "stop")
    async with running_server(ServerOptions(rate_500=0.5, seed=1)) as url:
        with pytest.raises(ModelError, match="on_model_error is 'stop'"):
            await play(config(url, on_model_error="stop", model_options={"max_retries": 0}),
                       run)
    assert read_summary(run.path)["status"] == "failed"
    assert not list((run.path / "parts").glob("*.parquet"))  # no round with holes

    async with running_server(ServerOptions()) as url:  # the server is back
        summary = await play(config(url, on_model_error="stop"), run, resume=True)
    assert summary["status"] == "completed"
    table = read_table(run.path)
    assert table.num_rows == 60 and all(table.column("valid").to_pylist())
