"""The launcher gives any scenario the whole platform: tables, summary, checkpoints, resume,
identical results on every backend, stop requests, run options it honours or refuses."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from rich.console import Console

from populace.core import ConfigError
from populace.launch import ConsoleObserver, launch, load_run_file
from populace.results import RunDirectory, RunMonitor, read_summary, read_table


async def run_into(path: Path, out: Path, **overrides: object) -> dict:
    return await launch(load_run_file(path, overrides), RunDirectory.create(out))


async def test_a_run_writes_per_step_tables_summary_and_checkpoints(
        votes_file: Callable[..., Path], tmp_path: Path) -> None:
    summary = await run_into(votes_file(agents=300, steps=3), tmp_path / "out")
    assert summary["status"] == "completed"
    assert [e["step"] for e in summary["steps"]] == [1, 2, 3]
    assert set(summary["steps"][0]) >= {"yes_share", "yes_total", "trend", "distributions"}
    lean = summary["steps"][0]["distributions"]["lean"]
    assert sum(lean["counts"]) == lean["n"] == 300 and len(lean["edges"]) == 11
    assert summary["tables"] == ["votes"]
    assert sorted(p.name for p in (tmp_path / "out" / "parts").iterdir()) == [
        "votes-r00001.parquet", "votes-r00002.parquet", "votes-r00003.parquet"]
    votes = read_table(tmp_path / "out", "votes")
    assert votes.column_names == ["step", "agent_id", "yes", "lean"]
    assert votes.num_rows == 900
    # The metric series agree with the rows.
    for entry in summary["steps"]:
        rows = votes.filter(pa.compute.equal(votes["step"], entry["step"]))
        assert entry["yes_share"] == pytest.approx(pa.compute.mean(rows["yes"].cast("int8"))
                                                   .as_py())
    assert (tmp_path / "out" / "checkpoints" / "step-00003.ckpt").exists()
    assert read_summary(tmp_path / "out") == summary


async def test_the_shared_environment_carries_state_between_steps(
        votes_file: Callable[..., Path], tmp_path: Path) -> None:
    summary = await run_into(votes_file(agents=400, steps=3), tmp_path / "out")
    totals = [e["yes_total"] for e in summary["steps"]]
    votes = read_table(tmp_path / "out", "votes")
    assert totals[-1] == pa.compute.sum(votes["yes"].cast("int64")).as_py()
    assert totals == sorted(totals)


async def test_resume_from_a_checkpoint_equals_an_undisturbed_run(
        votes_file: Callable[..., Path], tmp_path: Path) -> None:
    path = votes_file(agents=300, steps=4)
    await run_into(path, tmp_path / "whole")
    # A run that ended after step 2 (its later steps were never written) ...
    await run_into(path, tmp_path / "cut", steps=2)
    cut = RunDirectory(tmp_path / "cut")
    summary = read_summary(cut.path)
    summary.update(status="interrupted", steps_planned=4)
    cut.write_summary(summary)
    # ... continues from its checkpoint: agents' leans, the environment, the scenario's
    # history and the per-step random streams all come back.
    resumed = await launch(load_run_file(path), cut, resume=True)
    assert resumed["resumed_from_step"] == 2
    assert read_table(cut.path, "votes").equals(read_table(tmp_path / "whole", "votes"))
    whole = read_summary(tmp_path / "whole")
    assert [{k: v for k, v in e.items() if k != "wall_s"} for e in resumed["steps"]] == \
        [{k: v for k, v in e.items() if k != "wall_s"} for e in whole["steps"]]


async def test_resume_refuses_another_seed(votes_file: Callable[..., Path],
                                           tmp_path: Path) -> None:
    await run_into(votes_file(agents=50, steps=1), tmp_path / "out")
    with pytest.raises(ConfigError, match="cannot resume with seed 9: the run was made with "
                                          "seed 0"):
        await launch(load_run_file(votes_file(agents=50, steps=2, seed=9)),
                     RunDirectory(tmp_path / "out"), resume=True)


async def test_a_stop_request_abandons_the_step_and_keeps_finished_ones(
        votes_file: Callable[..., Path], tmp_path: Path) -> None:
    monitor = RunMonitor()
    run_file = load_run_file(votes_file(agents=100, steps=5, settings={"think": 0.4}))

    class StopAfterFirst(ConsoleObserver):
        def step_progress(self, t: int, done: int, total: int) -> None:
            if t == 2:
                monitor.request_stop()  # as the studio's Stop button does, mid-step

    summary = await launch(run_file, RunDirectory.create(tmp_path / "out"), monitor=monitor,
                           observers=[StopAfterFirst(Console(quiet=True))])
    assert summary["status"] == "stopped"
    assert [e["step"] for e in summary["steps"]] == [1]
    assert read_table(tmp_path / "out", "votes").num_rows == 100


def test_a_bad_value_on_the_command_line_names_the_flag(
        votes_file: Callable[..., Path]) -> None:
    with pytest.raises(ConfigError, match=r"^--rounds 0: Input should be greater than or "
                                          r"equal to 1$"):
        load_run_file(votes_file(), {"steps": 0})
    with pytest.raises(ConfigError, match=r"^--backend slurm: Input should be 'local' or "
                                          r"'ray'$"):
        load_run_file(votes_file(), {"backend": "slurm"})


def test_an_option_the_scenario_cannot_take_is_refused(votes_file: Callable[..., Path]
                                                       ) -> None:
    path = votes_file(cls="FixedTown")
    with pytest.raises(ConfigError) as e:
        load_run_file(path, {"agents": 10})
    assert str(e.value) == ("--agents: scenario 'fixed-town' does not take agents "
                            "(it takes: address, backend, seed, steps, workers)")
    with pytest.raises(ConfigError, match="does not take agents"):
        load_run_file(votes_file(cls="FixedTown", name="b.yaml", agents=10))
    assert load_run_file(path, {"steps": 7}).options.steps == 7


@pytest.mark.parametrize(("keys", "message"), [
    ({"settings": {"think": "slow"}}, "settings.think: Input should be a valid number"),
    ({"settings": {"thinking": 1}}, "settings.thinking: unknown key (did you mean think?) "
                                    "(expected one of: start_share, think, fail_at, broken)"),
    ({"think": "slow"}, "think: Input should be a valid number"),
    ({"agents": 0}, "agents: Input should be greater than or equal to 1"),
    ({"steps": 2, "rounds": 3}, "rounds: give steps or rounds, not both"),
    ({"modls": {}}, "modls: unknown key (did you mean models?) (expected one of: scenario, "
                    "name, seed, agents, steps, workers, backend, address, models, population, "
                    "checkpoint_minutes, keep_checkpoints, confirm_above, rounds; or a "
                    "setting of votes: "
                    "start_share, think, fail_at, broken)"),
    ({"backend": "slurm"}, "backend: Input should be 'local' or 'ray'"),
])
def test_bad_run_files_are_one_line_naming_the_key(
        votes_file: Callable[..., Path], keys: dict, message: str) -> None:
    path = votes_file(**keys)
    with pytest.raises(ConfigError) as e:
        load_run_file(path)
    assert str(e.value).startswith(f"{path}: {message}")
    assert "\n" not in str(e.value)


def test_the_old_run_function_form_says_what_to_write_instead(tmp_path: Path) -> None:
    (tmp_path / "old.py").write_text("async def run(config):\n    return {}\n")
    path = tmp_path / "old.yaml"
    path.write_text("scenario: old.py\n")
    with pytest.raises(ConfigError) as e:
        load_run_file(path)
    assert str(e.value) == (f"{path}: scenario: old.py has the old `async def run(config)` "
                            "form, which is gone: write a Scenario class (see "
                            "docs/scenarios.md)")


@pytest.mark.parametrize(("ref", "message"), [
    ("nowhere.py:X", "scenario: no such file"),
    ("votes_nope", "scenario: unknown scenario 'votes_nope'"),
    ("{votes}:Nope", "scenario: votes.py has no Scenario class 'Nope'"),
    ("{votes}", "scenario: votes.py defines 2 Scenario classes (Votes, FixedTown); name one"),
])
def test_a_scenario_that_cannot_be_found_is_one_line(tmp_path: Path, ref: str,
                                                     message: str) -> None:
    import yaml

    path = tmp_path / "run.yaml"
    votes = Path(__file__).with_name("votes.py")
    path.write_text(yaml.safe_dump({"scenario": ref.format(votes=votes)}))
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_run_file(path)


def test_the_console_says_what_each_served_model_cost_and_what_caches_gave_back() -> None:
    from populace.launch._console import traffic_lines

    step = {"llm": {"qwen": {"requests": 100, "sent": 60, "prompt_tokens": 1000,
                             "cached_tokens": 250, "prefix_tokens": 300},
                    "mine": {"requests": 10, "sent": 10, "prompt_tokens": 0}}}
    lines = traffic_lines({"steps": [step, step]})
    assert lines == ["qwen: 200 calls, 120 requests sent, 2,000 prompt tokens, 25% from the "
                     "servers' prefix caches"]
    # a server that does not say: the client's estimate
    del step["llm"]["qwen"]["cached_tokens"]
    assert traffic_lines({"steps": [step]}) == [
        "qwen: 100 calls, 60 requests sent, 1,000 prompt tokens, 30% repeating a prefix "
        "already sent"]


async def test_observers_see_the_agents_being_created_batch_by_batch(
        votes_file: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from populace.core import _runtime

    monkeypatch.setattr(_runtime, "CREATE_CHUNK", 40)  # two workers: 250 agents in 8 batches
    seen: list[tuple[str, int, int]] = []

    class Counting(ConsoleObserver):
        def creating(self, name: str, done: int, total: int) -> None:
            seen.append((name, done, total))

    run_file = load_run_file(votes_file(agents=250, steps=1, workers=2))
    await launch(run_file, RunDirectory.create(tmp_path / "out"),
                 observers=[Counting(Console(quiet=True))])
    assert len(seen) == 8 and {(name, total) for name, _, total in seen} == {(seen[0][0], 250)}
    assert [done for _, done, _ in seen] == sorted(done for _, done, _ in seen)
    assert seen[-1][1] == 250
    assert read_table(tmp_path / "out", "votes").num_rows == 250  # every agent made once
