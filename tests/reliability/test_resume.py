"""Resume semantics, in this process: damaged checkpoints, the crash window between a
checkpoint and the summary, recorded LLM calls answered from the recording, refusals."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pyarrow as pa
import pytest
import yaml

from cli_helpers import run_in_process
from game_helpers import game_file
from populace.launch import (
    AllAnswersFailed,
    checkpointed_steps,
    fork,
    load_run_file,
    scenario_of,
)
from populace.llm.offline import ServerOptions, running_server
from populace.results import RunDirectory, read_agent_state, read_summary, read_table
from populace.scenarios.guess_number import GuessNumber, play

FAST = {"name": "resume", "seed": 21, "agents": 200, "rounds": 3, "workers": 2,
        "models": {"dummy": {"provider": "dummy", "latency": 0.0}}}


async def fresh(run_dir: Path, data: dict[str, Any], **options: Any) -> dict[str, Any]:
    return await play(game_file(data), RunDirectory.create(run_dir), **options)


async def resumed(run_dir: Path, **options: Any) -> dict[str, Any]:
    return await play(load_run_file(run_dir / "config.yaml"), RunDirectory(run_dir),
                      resume=True, **options)


def rows(table: pa.Table) -> list[dict[str, Any]]:
    keep = ["round", "agent_id", "number", "valid", "raw", "error"]
    return table.select(keep).sort_by([("round", "ascending"), ("agent_id", "ascending")]
                                      ).to_pylist()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[dict[str, Any]]]:
    import asyncio

    path = tmp_path_factory.mktemp("reference")
    asyncio.run(fresh(path, FAST))
    yield rows(read_table(path))


async def test_a_damaged_checkpoint_falls_back_to_the_one_before(
    tmp_path: Path, reference: list[dict[str, Any]],
) -> None:
    await fresh(tmp_path, FAST)
    newest = tmp_path / "checkpoints" / "step-00003.ckpt"
    data = bytearray(newest.read_bytes())
    data[-10] ^= 0xFF  # one flipped byte: the checksum no longer matches
    newest.write_bytes(bytes(data))
    summary = await resumed(tmp_path)
    assert summary["resumed_from_step"] == 2  # round 3 was played again
    assert [r["round"] for r in summary["steps"]] == [1, 2, 3]
    assert rows(read_table(tmp_path)) == reference


async def test_a_crash_between_checkpoint_and_summary(
    tmp_path: Path, reference: list[dict[str, Any]],
) -> None:
    await fresh(tmp_path, {**FAST, "rounds": 2})
    # As a kill -9 right after the checkpoint of round 2 leaves it: round 2's rows and
    # checkpoint are on disk, the summary still says one round.
    summary = read_summary(tmp_path)
    summary["status"], summary["steps"] = "running", summary["steps"][:1]
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "responses.parquet").unlink()
    done = await resumed(tmp_path)
    assert done["resumed_from_step"] == 1
    assert rows(read_table(tmp_path)) == [r for r in reference if r["round"] <= 2]


def as_older_versions_wrote_it(run_dir: Path) -> None:
    """Checkpoints named and headed as before the rename: ``round-NNNNN.ckpt``, ``"round"``
    (the checksum covers the body only)."""
    for path in (run_dir / "checkpoints").glob("step-*.ckpt"):
        line, body = path.read_bytes().split(b"\n", 1)
        header = json.loads(line)
        header["round"] = header.pop("step")
        older = path.with_name(path.name.replace("step-", "round-"))
        older.write_bytes(json.dumps(header).encode() + b"\n" + body)
        path.unlink()


async def test_an_older_versions_run_resumes_and_forks_to_the_same_tables(
    tmp_path: Path, reference: list[dict[str, Any]],
) -> None:
    old = tmp_path / "old"
    await fresh(old, FAST)
    summary = read_summary(old)  # interrupted after step 1, by an older version
    summary["status"], summary["steps"] = "interrupted", summary["steps"][:1]
    (old / "summary.json").write_text(json.dumps(summary))
    (old / "responses.parquet").unlink()
    for later in (2, 3):
        (old / "checkpoints" / f"step-{later:05d}.ckpt").unlink()
    as_older_versions_wrote_it(old)
    assert checkpointed_steps(old) == [1]
    assert read_agent_state(old, 7) is not None
    fork(old, 1, {}, tmp_path / "fork")  # before the resume: from the older checkpoint
    done = await resumed(old)
    assert done["resumed_from_step"] == 1
    assert rows(read_table(old)) == reference
    assert sorted(p.name for p in (old / "checkpoints").iterdir()) == [
        "round-00001.ckpt", "step-00002.ckpt", "step-00003.ckpt"]
    await resumed(tmp_path / "fork")
    assert rows(read_table(tmp_path / "fork")) == reference


#: ``config.yaml`` of FAST as the game wrote it before the run options had one owner (its own
#: RunConfig, flat: rounds, model, assign and game beside the options).
RUN_CONFIG_YAML = """\
scenario: guess_number
name: resume
seed: 21
agents: 200
rounds: 3
workers: 2
backend: local
address: null
models:
  dummy:
    provider: dummy
    latency: 0.0
    jitter: 0.0
    low: 0
    high: 100
model: null
assign: null
game:
  ratio: 2/3
  offset: 0.0
  low: 0.0
  high: 100.0
  level: P1
  famous_note: false
  protocol: auto
  extract: always
  prompt: You are one of {n_players} players in a number game.{composition} Every
    player privately chooses a real number between {low} and {high}, inclusive. {target_rule}
    The player whose number is closest to the target wins.{famous_note}{group_note}
    {instruction}
  layout: shared_first
  feedback: true
  memory_rounds: 5
  temperature: null
  max_tokens: null
  groups: 1
  on_model_error: continue
  colocate_groups: false
  group_play: false
checkpoint_minutes: 5.0
keep_checkpoints: all
population: null
"""


def test_a_run_the_games_run_config_wrote_resumes_to_the_same_table(
    tmp_path: Path, reference: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import asyncio

    asyncio.run(fresh(tmp_path, FAST))
    summary = read_summary(tmp_path)  # interrupted after step 1
    summary["status"], summary["steps"] = "interrupted", summary["steps"][:1]
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "responses.parquet").unlink()
    for later in (2, 3):
        (tmp_path / "checkpoints" / f"step-{later:05d}.ckpt").unlink()
    (tmp_path / "config.yaml").write_text(RUN_CONFIG_YAML)  # by hand, as it was written
    assert scenario_of(tmp_path) is GuessNumber
    code, err = run_cli(monkeypatch, capsys, "run", "--resume", tmp_path)
    assert (code, err) == (0, [])
    assert read_summary(tmp_path)["resumed_from_step"] == 1
    assert rows(read_table(tmp_path)) == reference


async def test_resuming_a_finished_run_changes_nothing(
    tmp_path: Path, reference: list[dict[str, Any]],
) -> None:
    await fresh(tmp_path, FAST)
    before = files(tmp_path)
    summary = await resumed(tmp_path)
    assert summary["status"] == "completed" and summary["already_complete"] is True
    assert "resumed_from_step" not in summary  # nothing was resumed
    assert files(tmp_path) == before  # not a byte rewritten: summary.json keeps its wall time
    assert rows(read_table(tmp_path)) == reference


# -- recorded LLM calls ----------------------------------------------------------------------------
class StopInRound:
    """A reporter that aborts the run once ``after`` answers of round ``round_no`` are in."""

    def __init__(self, round_no: int, after: int) -> None:
        self.round_no, self.after = round_no, after

    def round_started(self, round_no: int, total: int) -> None:
        pass

    def round_progress(self, round_no: int, done: int, total: int) -> None:
        if round_no == self.round_no and done >= self.after:
            raise RuntimeError("pulled the plug")

    def round_finished(self, outcome: Any, wall_s: float) -> None:
        pass


def llm_run(url: str, **changes: Any) -> dict[str, Any]:
    return {"name": "recorded", "seed": 8, "agents": 60, "rounds": 2, "workers": 2,
            "models": {"llm": {"provider": "openai", "model": "dummy", "base_urls": [url],
                               "timeout": 10}},
            "game": {"protocol": "direct"}, **changes}


async def requests_served(url: str) -> int:
    async with aiohttp.ClientSession() as session, \
            session.get(url.removesuffix("/v1") + "/stats") as resp:
        return (await resp.json())["requests"]  # type: ignore[no-any-return]


def recorded_lines(run_dir: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in (run_dir / "llm_calls").glob("*.jsonl"))


async def test_calls_made_before_the_interruption_are_not_asked_again(tmp_path: Path) -> None:
    options = ServerOptions(policy="reasoning", latency=(0.0, 0.5))
    async with running_server(options) as url:
        interrupted = tmp_path / "interrupted"
        with pytest.raises(RuntimeError, match="pulled the plug"):
            await fresh(interrupted, llm_run(url), reporter=StopInRound(2, after=15))
        asked = await requests_served(url)
        answered = recorded_lines(interrupted)  # flushed by the clean stop
        assert 60 + 15 <= answered < 120 <= asked + 60
        await resumed(interrupted)
        # Only the calls with no recorded answer went to the server again.
        assert await requests_served(url) - asked == 120 - answered
    async with running_server(ServerOptions(policy="reasoning")) as url:
        await fresh(tmp_path / "clean", llm_run(url))
    assert rows(read_table(interrupted)) == rows(read_table(tmp_path / "clean"))


async def test_replay_with_resume_never_asks_the_model(tmp_path: Path) -> None:
    async with running_server(ServerOptions(policy="reasoning")) as url:
        await fresh(tmp_path / "recorded", llm_run(url))  # rounds 1 and 2
        replayed = tmp_path / "replayed"
        data = llm_run(url, rounds=3)  # round 3 was never recorded
        with pytest.raises(RuntimeError, match="pulled the plug"):
            await fresh(replayed, data, replay=tmp_path / "recorded",
                        reporter=StopInRound(2, after=1))
        asked = await requests_served(url)
        # Round 3 is in no recording: every answer fails, and so does the run (a replay that
        # does not fit is never a "completed" run of invalid rows).
        with pytest.raises(AllAnswersFailed, match=r"step 3: all 60 answers failed .*not in "
                                                   r"the recording"):
            await resumed(replayed, replay=tmp_path / "recorded")
        assert await requests_served(url) == asked  # --replay asks no model, even resuming
    table = read_table(replayed)
    assert table.num_rows == 120 and set(table.column("round").to_pylist()) == {1, 2}
    assert read_summary(replayed)["status"] == "failed"


# -- refusals ----------------------------------------------------------------------------------
def run_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
            *args: str | Path) -> tuple[int, list[str]]:
    """Exit status and the non-empty stderr lines of ``populace ARGS``."""
    code, _, err = run_in_process(capsys, monkeypatch, *args)
    return code, [line for line in err.splitlines() if line.strip()]


@pytest.mark.parametrize("change", [["--agents", "201"], ["--seed", "1"], ["--rounds", "4"]])
def test_resume_refuses_to_change_what_the_checkpoint_fits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    change: list[str],
) -> None:
    import asyncio

    asyncio.run(fresh(tmp_path, {**FAST, "rounds": 1}))
    before = (tmp_path / "config.yaml").read_text()
    code, err = run_cli(monkeypatch, capsys, "run", "--resume", tmp_path, *change)
    assert code == 2
    assert err == ["error: --resume continues the run as it was configured; --agents, "
                   "--rounds and --seed cannot change"]
    assert (tmp_path / "config.yaml").read_text() == before


def test_resume_refuses_a_config_edited_since(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    import asyncio

    asyncio.run(fresh(tmp_path, {**FAST, "rounds": 1}))
    edited = yaml.safe_load((tmp_path / "config.yaml").read_text())
    edited["agents"] = 300
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(edited))
    code, err = run_cli(monkeypatch, capsys, "run", "--resume", tmp_path)
    assert code == 2
    assert err == [f"error: {tmp_path}: cannot resume with agents 300: the run was made with "
                   "agents 200"]
    assert len(read_table(tmp_path)) == 200  # nothing was touched


# -- truncated files ---------------------------------------------------------------------------
VOTES = Path(__file__).parents[1] / "launch" / "votes.py"


def interrupted_after_step_2(tmp_path: Path) -> RunDirectory:
    """A votes run of 3 steps as a kill after step 2 leaves it."""
    import asyncio

    from populace.launch import launch, load_run_file

    path = tmp_path / "votes.yaml"
    path.write_text(yaml.safe_dump({"scenario": f"{VOTES}:Votes", "agents": 30, "steps": 3}))
    run_dir = RunDirectory.create(tmp_path / "out")
    asyncio.run(launch(load_run_file(path), run_dir))
    summary = read_summary(run_dir.path)
    summary.update(status="interrupted", steps=summary["steps"][:2])
    run_dir.write_summary(summary)
    for gone in ("votes.parquet", "parts/votes-r00003.parquet", "checkpoints/step-00003.ckpt"):
        (run_dir.path / gone).unlink()
    return run_dir


def files(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file()}


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def test_a_truncated_step_file_is_refused_on_resume_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    run_dir = interrupted_after_step_2(tmp_path)
    truncate(run_dir.path / "parts" / "votes-r00001.parquet")
    before = files(run_dir.path)
    code, err = run_cli(monkeypatch, capsys, "run", "--resume", run_dir.path)
    assert code == 2
    assert err == [f"error: {run_dir.path}: cannot resume: parts/votes-r00001.parquet "
                   "(damaged) changed since step 2 was checkpointed; restore the file(s), or "
                   "start the run again"]
    assert files(run_dir.path) == before


def test_a_truncated_partial_file_is_refused_on_resume_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    run_dir = interrupted_after_step_2(tmp_path)
    partial = run_dir.write_partial("votes", 3, pa.table({"step": [3] * 5,
                                                          "agent_id": list(range(5))}))
    truncate(partial)
    before = files(run_dir.path)
    code, err = run_cli(monkeypatch, capsys, "run", "--resume", run_dir.path)
    assert code == 2
    assert err == [f"error: {run_dir.path}: cannot resume: partial/votes-r00003.parquet is "
                   "damaged (not a readable Parquet file); restore it, or delete it to play "
                   "step 3 again from its start"]
    assert files(run_dir.path) == before
