"""``populace estimate``: a pilot run's calls and tokens, scaled to the full run, against
what the full run then spends (the paper's education config, on the test server)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli_helpers import run_in_process
from populace.cli._estimate import show
from populace.core import ConfigError
from populace.launch import estimate, launch, load_run_file, parse_run_file
from populace.launch._cpu import (
    MAX_WAVES,
    Wave,
    combined,
    cpu_decides,
    measure,
    steady,
    wave_agents,
)
from populace.launch._estimate import (
    Estimate,
    ModelEstimate,
    _cpu_may_decide,
    _fixed_limits,
    _in_process,
    client_cores,
    ramp_s,
    wall_range,
)
from populace.llm.offline import ServerOptions, running_server
from populace.llm.offline import _server as server
from populace.results import RunDirectory

EDUCATION = Path(__file__).resolve().parents[2] / "examples" / "paper" / "education.yaml"


def _education(url: str, agents: int = 400) -> dict[str, Any]:
    data = yaml.safe_load(EDUCATION.read_text())
    data["agents"] = agents
    data["models"] = {"scripted": {
        "provider": "openai", "model": "scripted", "base_urls": [url],
        "max_concurrency": 32, "price_per_million": [0.2, 0.6]}}
    return data


async def test_the_estimate_is_within_5_percent_of_the_full_run(tmp_path: Path,
                                                                  monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)  # the background cache lives in the working directory
    async with running_server(ServerOptions(policy="scripted", models=("scripted",))) as url:
        data = _education(url)
        source = tmp_path / "education.yaml"
        source.write_text(yaml.safe_dump(data))
        guess = await estimate(data, source, pilot=40)
        # The pilot keeps its backgrounds to itself: a second estimate is the same, and the
        # full run finds none cached.
        assert not (tmp_path / ".populace-cache").exists()
        again = await estimate(data, source, pilot=40)
        assert again.backgrounds is not None and guess.backgrounds is not None
        assert (again.calls, again.backgrounds.calls) == (guess.calls, guess.backgrounds.calls)
        summary = await launch(load_run_file(source), RunDirectory.create(tmp_path / "run"))
    steps = [s["llm"]["scripted"] for s in summary["steps"]]
    full = {"calls": sum(s["requests"] for s in steps),
            "prompt_tokens": sum(s["prompt_tokens"] for s in steps),
            "completion_tokens": sum(s["completion_tokens"] for s in steps)}
    (model,) = guess.models
    assert (guess.agents, guess.steps, guess.pilot_agents) == (400, 1, 40)
    for key, value in full.items():
        assert abs(getattr(model, key) - value) <= 0.05 * value, (key, getattr(model, key))
    written = summary["backgrounds"]
    assert guess.backgrounds is not None
    assert abs(guess.backgrounds.calls - written["sent"]) <= 0.05 * written["sent"]
    assert abs(guess.backgrounds.prompt_tokens - written["prompt_tokens"]) <= \
        0.05 * written["prompt_tokens"]
    assert guess.cost is not None and guess.cost > 0
    assert model.concurrency == 32 * 2  # max_concurrency × endpoints × workers
    assert model.wall_s is not None and guess.wall_s is not None


def test_no_model_behind_a_server_is_one_line(tmp_path: Path, capsys: Any,
                                              monkeypatch: Any) -> None:
    source = tmp_path / "run.yaml"
    source.write_text("scenario: guess_number\nagents: 100\nmodels: {dummy: {provider: dummy}}\n")
    rc, _, err = run_in_process(capsys, monkeypatch, "estimate", source)
    assert rc == 2 and err.count("\n") == 1
    assert "no model behind a server" in err and str(source) in err


def test_an_unreachable_endpoint_is_one_line(tmp_path: Path, capsys: Any,
                                             monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    source = tmp_path / "run.yaml"
    source.write_text(yaml.safe_dump(_education("http://127.0.0.1:9/v1", 100)))
    rc, _, err = run_in_process(capsys, monkeypatch, "estimate", source)
    assert rc == 2 and err.count("\n") == 1 and "127.0.0.1:9" in err
    assert not list(tmp_path.glob("runs"))


def test_a_pilot_of_zero_is_refused() -> None:
    with pytest.raises(ConfigError, match="--pilot 0"):
        asyncio.run(estimate({"models": {"m": {"provider": "openai", "model": "x",
                                               "base_urls": ["http://127.0.0.1:9/v1"]}}},
                             Path("run.yaml"), pilot=0))


ARCHETYPES = Path(__file__).resolve().parents[2] / "examples" / "survey" / "archetypes.yaml"


async def test_archetype_sampling_is_estimated_by_archetypes_not_agents(
        tmp_path: Path, monkeypatch: Any) -> None:
    """A pilot of 50 meets few of the archetypes: its samples are scaled by the archetypes
    of the full population, its audited agents' calls by the agents; both within 25% of the
    full run, and what asking every agent would take is predicted too."""
    monkeypatch.chdir(tmp_path)
    async with running_server(ServerOptions(policy="scripted", models=("scripted",))) as url:
        data = yaml.safe_load(ARCHETYPES.read_text())
        data["agents"] = 6000
        data["settings"]["questionnaire"] = str(ARCHETYPES.parent / "questionnaire.yaml")
        data["models"] = {"scripted": {
            "provider": "openai", "model": "scripted", "base_urls": [url],
            "max_concurrency": 32, "sampling": {"by": ["age", "education"], "samples": 4,
                                                "audit": 0.05}}}
        source = tmp_path / "archetypes.yaml"
        source.write_text(yaml.safe_dump(data))
        guess = await estimate(data, source)
        summary = await launch(load_run_file(source), RunDirectory.create(tmp_path / "run"))
    (model,) = guess.models
    (step,) = summary["steps"]
    made = step["llm"]["scripted"]["requests"]
    assert abs(model.calls - made) <= 0.25 * made, (model.calls, made)
    assert model.individual is not None
    asked = step["sampling"]["scripted"]["individual"]["calls"]
    assert abs(model.individual["calls"] - asked) <= 0.25 * asked
    assert model.individual["calls"] > 5 * model.calls


# -- the arithmetic of wall time (issue 28) ------------------------------------------------

def test_a_wave_bound_step_is_calls_times_service_time_over_the_limit() -> None:
    # 4000 calls of 0.1 s, 128 at once: 3.125 s on the wire; 0.8 s of CPU hide inside it
    assert wall_range(4000, 2, 0.1, 128, 0.0002) == pytest.approx((3.125, 3.125, 3.925))


def test_a_cpu_bound_step_is_calls_times_cpu_per_call() -> None:
    # 512 at once would take 4 s, but the client needs 8 s of CPU for the calls
    assert wall_range(16_384, 10, 0.125, 512, 2**-11) == (4.0, 8.0, 12.0)
    # 2 s waiting for a core (as the pilot's waves did): the high end only
    assert wall_range(16_384, 10, 0.125, 512, 2**-11, 2**-13) == (4.0, 8.0, 14.0)


def test_a_chain_of_calls_bounds_a_small_step() -> None:
    # 10 agents × 3 calls in a row, 64 at once: the chain (3 × 0.2 s), not 30 / 64 waves
    assert wall_range(30, 3, 0.2, 64, 0.0)[1] == pytest.approx(0.6)
    assert wall_range(30, 3, 0.2, None, 0.0)[1] == pytest.approx(0.6)


def test_slow_start_costs_the_round_trips_below_the_ceiling() -> None:
    # 8, 16, 32 in three round trips (56 calls) that a limit of 64 does in 56/64 of one
    assert ramp_s(0.1, 64, 8, 10_000) == pytest.approx(0.1 * (3 - 56 / 64))
    assert ramp_s(0.1, 64, 64, 10_000) == 0.0  # a fixed limit starts at its ceiling
    assert ramp_s(0.1, 64, 8, 20) == pytest.approx(0.1 * (1 - 8 / 64))  # never reaches it
    assert ramp_s(0.1, 8, 8, 10_000) == 0.0


def test_the_pilot_runs_its_servers_at_fixed_limits() -> None:
    data = {"agents": 9, "models": {
        "a": {"provider": "openai", "model": "x", "base_urls": ["http://h/v1"]},
        "b": {"provider": "scripted"}}}
    fixed = _fixed_limits(data)
    assert fixed["models"]["a"]["adaptive"] is False
    assert fixed["models"]["b"] == {"provider": "scripted"}
    assert "adaptive" not in data["models"]["a"]  # the run file's data is left alone


def _model(name: str, wall: float, span: tuple[float, float]) -> ModelEstimate:
    return ModelEstimate(name, 1, 1, 1, None, 0.1, 8, wall, None, span)


def test_backgrounds_come_before_the_slowest_model_of_the_steps() -> None:
    guess = Estimate(100, 1, 10, 1, 1.0, (_model("a", 2.0, (1.0, 3.0)),
                                          _model("b", 5.0, (4.0, 6.0))),
                     _model("a (backgrounds)", 10.0, (9.0, 12.0)))
    assert guess.wall_s == 15.0
    assert guess.wall_range == (13.0, 18.0)
    assert guess.as_dict()["wall_range"] == (13.0, 18.0)


# -- a cold server, the client's cores (issue 28) -------------------------------------------

async def test_a_cold_server_is_warmed_before_the_pilot_is_timed(tmp_path: Path,
                                                                  monkeypatch: Any) -> None:
    """A server whose first answer takes 3 s (as serve-llm's did, loading its rules in the
    first request): the pilot's one wave of backgrounds would take it as every wave's time
    (two waves of 32: 1.6 s each; 2,000 agents: 63 of them). Warmed first, the first
    estimate is the second's."""
    monkeypatch.chdir(tmp_path)
    answer, cold = server._answer, [True]

    def first_slow(*args: Any, **kwargs: Any) -> str:
        if cold:
            cold.clear()
            time.sleep(3.0)  # blocks the server's loop, as an import there does
        return answer(*args, **kwargs)

    monkeypatch.setattr(server, "_answer", first_slow)
    async with running_server(ServerOptions(policy="scripted", models=("scripted",),
                                            latency=0.1)) as url:
        data = _education(url, 2000)
        source = tmp_path / "education.yaml"
        source.write_text(yaml.safe_dump(data))
        first = await estimate(data, source)
        second = await estimate(data, source)
    assert not cold  # the server was cold, once
    waves = [e.backgrounds.latency_s for e in (first, second) if e.backgrounds is not None]
    assert len(waves) == 2 and all(w is not None for w in waves)
    assert waves[0] < 0.75 and waves[0] < 3 * waves[1], waves  # cold: 1.6 s


def test_the_cpu_term_is_shared_by_the_processes_of_the_workers() -> None:
    assert client_cores("local", None, 8) == 1  # one process, one event loop
    assert client_cores("ray", "auto", 8) == 8  # a cluster: a process per worker
    assert client_cores("ray", None, 10_000) == len(os.sched_getaffinity(0))  # this machine


def test_the_pilot_runs_in_this_process() -> None:
    data = {"agents": 9, "workers": 4, "backend": "ray", "address": "auto"}
    assert _in_process(data) == {"agents": 9, "workers": 4, "backend": "local"}
    assert data["backend"] == "ray"  # the run file's data is left alone


# -- the client's CPU per call, measured until steady (issue 28) ----------------------------

def _waves(*waves: Wave) -> Any:
    """A wave runner that plays ``waves`` in turn."""
    played = iter(waves)

    async def wave() -> Wave:
        return next(played)

    return wave


def test_cpu_waves_go_on_until_a_second_of_cpu_and_two_waves_agree() -> None:
    # 0.3 s of CPU a wave, the same κ each time: agreeing from the second, 1 s at the fourth
    same = [Wave(0.3, 0.0, 1000, 1.0)] * 10
    assert len(asyncio.run(measure(_waves(*same), budget_s=100))) == 4
    # 2 s a wave, but one wave is no precision: a second one agreeing
    big = [Wave(2.0, 0.0, 5000, 2.0)] * 10
    assert len(asyncio.run(measure(_waves(*big), budget_s=100))) == 2
    assert steady([Wave(0.6, 0.0, 2000, 1.0), Wave(0.6, 0.0, 2000, 1.0)])
    assert not steady([Wave(2.0, 0.0, 5000, 1.0)])  # one wave: no spread to judge
    assert not steady([Wave(1.0, 0.0, 4000, 1.0), Wave(1.4, 0.0, 4000, 1.0)])  # 0.25, 0.35


def test_cpu_waves_that_disagree_stop_at_the_most_waves() -> None:
    # 0.25 and 0.35 ms in turn: the mean's relative standard error is still 6% at eight
    noisy = [Wave(0.5, 0.0, 2000, 1.0), Wave(0.7, 0.0, 2000, 1.0)] * MAX_WAVES
    waves = asyncio.run(measure(_waves(*noisy), budget_s=1000))
    assert len(waves) == MAX_WAVES and not steady(waves)


def test_cpu_waves_stay_within_their_budget_but_run_once() -> None:
    slow = [Wave(0.3, 0.0, 1000, 2.0)] * 10
    assert len(asyncio.run(measure(_waves(*slow), budget_s=5.0))) == 2  # 2 + 2, not 2 + 2 + 2
    assert len(asyncio.run(measure(_waves(*slow), budget_s=0.0))) == 1


def test_a_wave_keeps_as_many_calls_in_flight_as_a_process_of_the_full_run() -> None:
    assert wave_agents(20_000, 512, 1) == 512  # the survey: 256 × 2 workers, one process
    assert wave_agents(2_000, 512, 1) == 500  # at most a quarter of the run
    assert wave_agents(20_000, 512, 4) == 128  # four processes share the limit
    assert wave_agents(20_000, None, 1) == 5_000


def test_only_a_cpu_term_that_may_decide_is_measured_again() -> None:
    assert cpu_decides(3.9, 7.4)  # the survey at 2,000: the pilot says 1.6-1.9× the wire
    assert cpu_decides(3.0, 3.0)
    assert not cpu_decides(3.85, 2.8)  # the education config: 0.44-0.73× (latency-bound)
    assert not cpu_decides(1.0, 0.0)


def test_waves_count_the_cpu_and_the_wait_for_a_core_per_call() -> None:
    cpu = combined([Wave(1.0, 0.1, 4000, 2.0), Wave(1.2, 0.1, 4000, 2.0)], 512)
    assert cpu.per_call_s == pytest.approx(2.2 / 8000)
    assert cpu.waited_per_call_s == pytest.approx(0.2 / 8000)
    assert (cpu.waves, cpu.wave_agents, cpu.calls, cpu.wall_s) == (2, 512, 8000, 4.0)
    assert cpu.rse == pytest.approx(0.0909, abs=1e-4)  # 0.25, 0.3 ms
    assert cpu.pace_s == 0.0  # waves without steps' times


def test_the_waves_pace_is_their_steps_time_per_call_less_the_wait_for_a_core() -> None:
    # busy 1.0 of 1.25 s and 1.2 of 1.5 s: 2.75 s of steps, 0.2 of them waiting, 8000 calls
    cpu = combined([Wave(1.0, 0.1, 4000, 2.0, 1.25), Wave(1.2, 0.1, 4000, 2.0, 1.5)], 512)
    assert cpu.pace_s == pytest.approx(2.55 / 8000)
    assert cpu.pace_s > cpu.per_call_s  # the idle time between the client's turns


def test_no_cpu_waves_with_a_batch_model() -> None:
    data = {"scenario": "guess_number", "agents": 2000, "models": {"m": {
        "provider": "openai", "model": "x", "base_urls": ["http://127.0.0.1:9/v1"],
        "batch": {"mode": "api"}}}}
    full = parse_run_file(data, Path("run.yaml"))
    assert not _cpu_may_decide(full, (_model("m", 80.0, (4.0, 80.0)),))
    data["models"]["m"].pop("batch")
    assert _cpu_may_decide(parse_run_file(data, Path("run.yaml")),
                           (_model("m", 80.0, (4.0, 80.0)),))


SURVEY = Path(__file__).resolve().parents[2] / "examples" / "survey" / "served.yaml"


async def test_a_cpu_bound_survey_measures_its_cpu_in_waves(tmp_path: Path, monkeypatch: Any,
                                                              capsys: Any) -> None:
    """Against a server without latency the survey is bound by the client's CPU: the
    estimate measures it again in waves of the full run's concurrency (64 × 2 workers, at
    most a quarter of 400), and the wall time counts the waves' time per call."""
    monkeypatch.chdir(tmp_path)
    async with running_server(ServerOptions(policy="scripted", models=("scripted",))) as url:
        data = yaml.safe_load(SURVEY.read_text())
        data.update(agents=400, workers=2)
        data["population"]["size"] = 400
        for key in ("questionnaire", "reference"):
            data["settings"][key] = str(SURVEY.parent / data["settings"][key])
        data["models"] = {"served": {"provider": "openai", "model": "scripted",
                                     "base_urls": [url], "max_concurrency": 64}}
        source = tmp_path / "survey.yaml"
        source.write_text(yaml.safe_dump(data))
        guess = await estimate(data, source, pilot=20)
    cpu = guess.cpu
    assert cpu is not None and cpu.waves >= 1 and cpu.wave_agents == 100
    assert cpu.calls >= cpu.waves * 100 * 10  # ten questions a respondent
    (model,) = guess.models
    assert model.wall_range is not None
    low, high = model.wall_range
    assert model.wall_s is not None and model.wall_s >= model.calls * cpu.per_call_s - 2e-3
    # at the waves' pace (the local backend: one process), or the wire's time if longer
    # (and an adaptive limit's slow start, in both)
    assert cpu.pace_s is not None and cpu.pace_s > 0
    assert model.wall_s >= max(low, model.calls * cpu.pace_s) - 2e-3
    # the range: the wire alone, to no overlap at all (and at least the estimate)
    assert high - low == pytest.approx(max(
        model.calls * (cpu.per_call_s + cpu.waited_per_call_s), model.wall_s - low),
        rel=1e-3, abs=2e-3)
    assert guess.as_dict()["cpu"]["waves"] == cpu.waves
    show(guess, source)  # `populace estimate` says how it measured the client's CPU
    assert f"measured in {cpu.waves} wave(s) of 100 agents after the pilot" in \
        capsys.readouterr().out
