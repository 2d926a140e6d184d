"""More values that would make nonsense, found by a hostile tester: each is one line on
stderr naming the file (or the flag) and the key, exit status 2, before anything runs."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

import forkserver
from cli_helpers import run_in_process
from populace._strict import StrictModel
from populace.launch import ScenarioSettings

Cap = pytest.CaptureFixture[str]
Patch = pytest.MonkeyPatch

#: A short run file of each scenario; a case's line is appended to it.
SHORT = ("scenario: guess_number\nname: short\nseed: 1\nagents: 50\nrounds: 1\n"
         "models: {dummy: {provider: dummy, latency: 0.01}}\n")
SURVEY = ("scenario: survey\nname: short\nseed: 1\nagents: 50\n"
          "models: {dummy: {provider: dummy, latency: 0.01}}\n"
          "population:\n  aspects:\n    gender: {template: gender}\n"
          "    age: {distribution: uniform, low: 18, high: 90, round: 0}\n")
SOCIAL = ("scenario: social\nname: short\nseed: 1\nagents: 200\nsteps: 1\n"
          "models: {dummy: {provider: dummy, latency: 0.01}}\n"
          "population:\n  aspects:\n    politics: {values: [left, right]}\n")
QUESTIONNAIRE = """\
instructions: A short survey.
questions:
  - {id: voted, type: single_choice, text: "Did you vote?", options: ["yes", "no"]}
"""
USER = '''\
from populace.launch import Scenario, ScenarioSettings


class Contacts(Scenario):
    name = "contacts"

    class Settings(ScenarioSettings):
        contacts: int = 3
        rate: float = 0.5
        pair: tuple[float, float] = (1.0, 2.0)

    async def step(self, run, t):
        run.metric("x", 1)
'''


def refused(tmp_path: Path, capsys: Cap, monkeypatch: Patch, text: str,
            *flags: str | Path) -> str:
    """Run ``text`` as a run file: the one line it is refused with (after ``error: FILE: ``)."""
    (tmp_path / "questionnaire.yaml").write_text(QUESTIONNAIRE)
    (tmp_path / "contacts.py").write_text(USER)
    path = tmp_path / "run.yaml"
    path.write_text(text)
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", path, "--out", tmp_path / "o",
                                     *flags)
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1, stderr
    assert lines[0].startswith(f"error: {path}: "), stderr
    assert not (tmp_path / "o").exists()
    return lines[0].removeprefix(f"error: {path}: ")


def refused_flags(capsys: Cap, monkeypatch: Patch, *args: str | Path) -> str:
    code, _, stderr = run_in_process(capsys, monkeypatch, *args)
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0].removeprefix("error: ")


# -- 1. a template that cannot be filled ------------------------------------------------------
@pytest.mark.parametrize(("text", "message"), [
    (SURVEY + "settings: {questionnaire: questionnaire.yaml, persona: '{age'}\n",
     "settings.persona: malformed template: expected '}' before end of string"),
    (SURVEY + "settings: {questionnaire: questionnaire.yaml, persona: '{age!x}'}\n",
     "settings.persona: cannot fill the template: Unknown conversion specifier x"),
    (SURVEY + "settings: {questionnaire: questionnaire.yaml, persona: '{gender:d}'}\n",
     "settings.persona: cannot fill the template: Unknown format code 'd'"),
    (SHORT + "game: {prompt: 'Pick {{x}} {instruction} {a}'}\n"
             "population: {aspects: {a: {values: [p, q]}}}\n",
     "game.prompt: cannot fill the template for each agent: KeyError 'x'"),
], ids=["persona-unclosed", "persona-conversion", "persona-format-spec", "prompt-twice"])
def test_a_template_that_cannot_be_filled_is_refused(
        tmp_path: Path, capsys: Cap, monkeypatch: Patch, text: str, message: str) -> None:
    assert refused(tmp_path, capsys, monkeypatch, text).startswith(message)


def test_a_background_template_that_fails_on_an_agent_is_one_line(
        tmp_path: Path, capsys: Cap, monkeypatch: Patch) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(SHORT + "population:\n  aspects: {education: {values: [a, b]}}\n"
                    "  backgrounds: {model: dummy, template: 'Write {{ education + 1 }}'}\n")
    monkeypatch.chdir(tmp_path)
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", path, "--out", tmp_path / "o")
    assert (code, stderr.strip()) == (2, "error: backgrounds.template: cannot render for agent "
                                         "0: TypeError: can only concatenate str (not \"int\") "
                                         "to str")


# -- 2. a boolean where a number is expected -------------------------------------------------
@pytest.mark.parametrize(("text", "message"), [
    (SHORT + "game: {high: true}\n", "game.high: Input should be a valid number"),
    (SHORT + "game: {offset: true}\n", "game.offset: Input should be a valid number"),
    (SHORT + "game: {max_tokens: true}\n", "game.max_tokens: Input should be a valid integer"),
    (SHORT + "game: {memory_rounds: true}\n",
     "game.memory_rounds: Input should be a valid integer"),
    (SHORT + "game: {groups: true}\n", "game.groups: Input should be a valid integer"),
    (SHORT + "game: {temperature: false}\n", "game.temperature: Input should be a valid number"),
    (SHORT.replace("latency: 0.01", "latency: true"),
     "models.dummy.latency: Input should be a valid number"),
    (SURVEY + "settings: {questionnaire: questionnaire.yaml, batch: true}\n",
     "settings.batch: Input should be a valid integer"),
    (SURVEY + "settings: {questionnaire: questionnaire.yaml, temperature: true}\n",
     "settings.temperature: Input should be a valid number"),
    (SURVEY + "settings: {questionnaire: questionnaire.yaml, targets: {gender: {male: true}}}\n",
     "settings.targets.gender.male: Input should be a valid number"),
    (SHORT + "population: {size: true, aspects: {a: {values: [p]}}}\n",
     "population.size: Input should be a valid integer"),
    (SOCIAL + "settings: {graph: {mean_degree: true}}\n",
     "settings.graph.mean_degree: Input should be a valid number"),
    (SOCIAL + "settings: {feed: {k: true}}\n", "settings.feed.k: Input should be a valid integer"),
    ("scenario: contacts.py\nagents: 5\ncontacts: true\n",
     "contacts: Input should be a valid integer"),
    ("scenario: contacts.py\nagents: 5\nsettings: {rate: false, contacts: 2}\n",
     "settings.rate: Input should be a valid number"),
    ("scenario: contacts.py\nagents: 5\nsettings: {pair: [1, true]}\n",
     "settings.pair.1: Input should be a valid number"),
], ids=["game-high", "game-offset", "game-max_tokens", "game-memory_rounds", "game-groups",
        "game-temperature", "dummy-latency", "survey-batch", "survey-temperature",
        "survey-target", "population-size", "social-mean_degree", "social-feed-k",
        "user-int", "user-float", "user-tuple"])
def test_a_boolean_for_a_number_is_refused(
        tmp_path: Path, capsys: Cap, monkeypatch: Patch, text: str, message: str) -> None:
    assert refused(tmp_path, capsys, monkeypatch, text).startswith(message)


def test_every_config_model_refuses_a_boolean_for_a_number_through_one_base() -> None:
    class Inner(ScenarioSettings):
        x: float = 0.0

    class Settings(ScenarioSettings):
        n: int = 1
        shares: dict[str, dict[str, float]] = {}
        maybe: int | None = None
        inner: Inner = Inner()
        many: list[Inner] = []

    for data, loc in [({"n": True}, ("n",)),
                      ({"shares": {"a": {"b": False}}}, ("shares", "a", "b")),
                      ({"maybe": True}, ("maybe",)), ({"inner": {"x": True}}, ("inner", "x")),
                      ({"many": [{"x": True}]}, ("many", 0, "x"))]:
        with pytest.raises(ValidationError) as e:
            Settings.model_validate(data)
        assert e.value.errors()[0]["loc"] == loc
    # numbers written as YAML reads them still are numbers: 1e-3 is text to YAML 1.1
    assert Settings.model_validate({"n": 2, "inner": {"x": "1e-3"}}).inner.x == 0.001
    import populace.launch as launch
    import populace.llm as llm
    import populace.population as population
    import populace.scenarios.guess_number as game
    import populace.scenarios.social as social
    import populace.scenarios.survey as survey

    configs = [launch.RunOptions, llm.DummyConfig, llm.OpenAIConfig, llm.ScriptedConfig,
               llm.BatchConfig, llm.PythonConfig, population.PopulationConfig,
               population.AspectConfig, population.GroupsConfig, population.BackgroundConfig,
               game.GuessNumber.Settings, game.GameConfig, social.News, social.Social.Settings,
               survey.Survey.Settings, survey.Question, survey.Treatments, survey.Arm]
    assert [c for c in configs if not issubclass(c, StrictModel)] == []
    assert not issubclass(StrictModel, ScenarioSettings) and issubclass(ScenarioSettings,
                                                                        StrictModel)
    assert BaseModel in StrictModel.__mro__


# -- 3. more than the population holds -------------------------------------------------------
@pytest.mark.parametrize(("text", "message"), [
    (SHORT + "game: {groups: 1000}\n", "game.groups: 1000 groups for 50 agents (expected at "
                                       "most 50)"),
    (SOCIAL + "settings: {graph: {mean_degree: 5000}}\n",
     "settings.graph.mean_degree: 5000 follows per agent for 200 agents (expected at most "
     "99.5"),
    (SOCIAL + "settings: {news: [{step: 1, label: a, text: t, authors: 100000}]}\n",
     "settings.news.0.authors: 100000 authors for 200 agents (expected at most 200)"),
    (SOCIAL + "settings: {news: [{step: 1, label: a, text: t, authors: 101, "
              "where: {politics: left}}]}\n",
     "settings.news.0.authors: 101 authors for 100 agents with politics: left (expected at "
     "most 100)"),
    (SURVEY.replace("agents: 50", "agents: 100").replace("population:\n",
                                                          "population:\n  size: 50\n")
     + "settings: {questionnaire: questionnaire.yaml}\n",
     "population.size (50) differs from agents (100)"),
    (SHORT + "population: {aspects: {a: {values: [p]}}, groups: {count: 51}}\n",
     "population.groups.count: 51 groups for 50 agents (expected at most 50)"),
    ("scenario: contacts.py\nagents: 5\npopulation: {aspects: {a: {values: [p]}}, "
     "groups: {count: 6}}\n",
     "population.groups.count: 6 groups for 5 agents (expected at most 5)"),
], ids=["game-groups", "social-mean-degree", "social-authors", "social-authors-where",
        "population-size", "population-groups", "user-population-groups"])
def test_more_than_the_agents_hold_is_refused(
        tmp_path: Path, capsys: Cap, monkeypatch: Patch, text: str, message: str) -> None:
    assert refused(tmp_path, capsys, monkeypatch, text).startswith(message)


def test_a_pilot_larger_than_the_run_is_refused(tmp_path: Path, capsys: Cap,
                                                monkeypatch: Patch) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("scenario: guess_number\nname: e\nagents: 50\n"
                    "models: {o: {provider: openai, model: m, "
                    "base_urls: ['http://127.0.0.1:9/v1']}}\n")
    for pilot in ("51", "99999999999999999999"):
        assert refused_flags(capsys, monkeypatch, "estimate", path, "--pilot", pilot) == (
            f"--pilot {pilot}: more agents than the run has (expected at most 50)")


def test_a_population_file_larger_than_a_run_can_be_is_refused(tmp_path: Path, capsys: Cap,
                                                               monkeypatch: Patch) -> None:
    path = tmp_path / "pop.yaml"
    path.write_text("size: 2000000000\naspects: {a: {values: [p]}}\n")
    line = refused_flags(capsys, monkeypatch, "population", "sample", path,
                         "--out", tmp_path / "p.parquet")
    assert line == (f"{path}: size: Input should be less than or equal to 1000000000 "
                    "(got 2000000000)")


# -- 4 and 5. active.shares: its values, and the path of its errors ---------------------------
@pytest.mark.parametrize(("active", "message"), [
    ("{share: 0.5, by: politics, shares: {lft: 0.2}}",
     "settings.active.shares.lft: not a value of politics (did you mean left?) (values: "
     "left, right)"),
    ("{share: 0.5, by: politics, shares: {left: .inf}}",
     "settings.active.shares.left: Input should be a finite number (got inf)"),
    (".nan", "settings.active: Input should be a finite number (got nan)"),
    ("true", "settings.active: Input should be a valid number (got True)"),
    ("{share: 0.5, by: politics, sharez: {left: 0.2}}",
     "settings.active.sharez: unknown key (did you mean share?) (expected one of: share, by, "
     "shares)"),
], ids=["misspelt-value", "inf-share", "nan", "boolean", "misspelt-key"])
def test_active_shares_are_checked_and_named(tmp_path: Path, capsys: Cap, monkeypatch: Patch,
                                             active: str, message: str) -> None:
    line = refused(tmp_path, capsys, monkeypatch, SOCIAL + f"settings: {{active: {active}}}\n")
    assert line == message
    assert "constrained-float" not in line and "function-" not in line


@pytest.mark.parametrize(("targets", "message"), [
    ("{femal: 0.5, male: 0.5}",
     "settings.targets.gender.femal: not a value of gender (did you mean female?)"),
    ("{female: 0.7, male: 0.5}",
     "settings.targets.gender: the shares add up to 1.2, expected 1 ± 0.01"),
], ids=["misspelt-value", "sum"])
def test_survey_targets_are_shares_of_values_of_their_aspect(
        tmp_path: Path, capsys: Cap, monkeypatch: Patch, targets: str, message: str) -> None:
    text = SURVEY + ("settings: {questionnaire: questionnaire.yaml, targets: "
                     f"{{gender: {targets}}}}}\n")
    assert refused(tmp_path, capsys, monkeypatch, text).startswith(message)


# -- 6. latencies and timeouts with no end ----------------------------------------------------
@pytest.mark.parametrize(("text", "message"), [
    (SHORT.replace("latency: 0.01", "latency: 1.0e+308"),
     "models.dummy.latency: Input should be less than or equal to 3600"),
    (SHORT.replace("provider: dummy, latency: 0.01", "provider: scripted, latency: 1.0e+30"),
     "models.dummy.latency: Input should be less than or equal to 3600"),
    (SHORT.replace("{provider: dummy, latency: 0.01}",
                   "{provider: openai, model: m, base_urls: ['http://127.0.0.1:9/v1'], "
                   "timeout: 1.0e+30}"),
     "models.dummy.timeout: Input should be less than or equal to 86400"),
    (SHORT + "checkpoint_minutes: 1.0e+308\n",
     "checkpoint_minutes: Input should be less than or equal to 1440"),
], ids=["dummy-latency", "scripted-latency", "openai-timeout", "checkpoint-minutes"])
def test_a_wait_without_end_is_refused(tmp_path: Path, capsys: Cap, monkeypatch: Patch,
                                       text: str, message: str) -> None:
    assert refused(tmp_path, capsys, monkeypatch, text).startswith(message)


# -- 7. a target that is not a number ---------------------------------------------------------
@pytest.mark.parametrize(("game", "message"), [
    ("{ratio: 1.0e+308}", "game.ratio: an average of 100 gives the target 1.00e+310"),
    ("{ratio: '1e400'}", "game.ratio: an average of 100 gives the target 1.00e+402"),
    ("{offset: 1.0e+16}", "game.offset: Input should be less than or equal to"),
    ("{ratio: 1/2, offset: 999999999999990}", "game.offset: an average of 100 gives the target"),
], ids=["huge-ratio", "ratio-beyond-floats", "huge-offset", "offset-and-ratio"])
def test_a_target_out_of_range_is_refused(tmp_path: Path, capsys: Cap, monkeypatch: Patch,
                                          game: str, message: str) -> None:
    assert refused(tmp_path, capsys, monkeypatch, SHORT + f"game: {game}\n").startswith(message)


# -- 8 and 9. flags beyond the limits of run files --------------------------------------------
@pytest.mark.parametrize(("args", "message"), [
    (["bench", "--agents", "10", "--latency", "0", "--workers", "99999999999"],
     "Invalid value for '--workers'"),
    (["bench", "--agents", "99999999999999999999", "--latency", "0"],
     "Invalid value for '--agents'"),
    (["bench", "--agents", "10", "--latency", "1e308"], "Invalid value for '--latency'"),
    (["bench", "--agents", "10", "--latency", "nan"], "Invalid value for '--latency'"),
    (["bench", "--agents", "10", "--latency", "0", "--backend", "mars"],
     "--backend: Input should be 'local' or 'ray'"),
    (["population", "sample", "POP", "--size", "99999999999999999999", "--out", "p.parquet"],
     "Invalid value for '--size'"),
    (["population", "sample", "POP", "--size", "2000000000", "--out", "p.parquet"],
     "Invalid value for '--size'"),
    (["population", "sample", "POP", "--seed", "-1", "--out", "p.parquet"],
     "Invalid value for '--seed'"),
    (["run-batch", "-i", "IN", "-o", "out.jsonl", "--latency", "inf"],
     "Invalid value for '--latency'"),
    (["serve-llm", "--latency", "1e308"], "Invalid value for '--latency'"),
], ids=["bench-workers", "bench-agents", "bench-latency", "bench-nan", "bench-backend",
        "sample-size-huge", "sample-size", "sample-seed", "run-batch-latency",
        "serve-llm-latency"])
def test_a_flag_beyond_the_limits_is_one_line(tmp_path: Path, capsys: Cap, monkeypatch: Patch,
                                              args: list[str], message: str) -> None:
    pop = Path(__file__).parents[2] / "examples" / "population" / "professions_200x6.yaml"
    (tmp_path / "in.jsonl").write_text('{"custom_id": "a", "method": "POST", "url": '
                                       '"/v1/chat/completions", "body": {"model": "dummy", '
                                       '"messages": []}}\n')
    monkeypatch.chdir(tmp_path)
    args = [str(pop) if a == "POP" else "in.jsonl" if a == "IN" else a for a in args]
    assert refused_flags(capsys, monkeypatch, *args).startswith(message)
    assert not (tmp_path / "p.parquet").exists() and not (tmp_path / "out.jsonl").exists()


# -- 10. run-batch's files --------------------------------------------------------------------
def test_run_batch_names_its_files_as_given(tmp_path: Path, capsys: Cap,
                                            monkeypatch: Patch) -> None:
    good = tmp_path / "in.jsonl"
    good.write_text('{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", '
                    '"body": {"model": "dummy", "messages": []}}\n')
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "afile").write_text("")
    out = tmp_path / "out.jsonl"
    for args, message in [
        (["-i", "/dev/zero", "-o", out], "--input-file /dev/zero: not a regular file"),
        (["-i", fifo, "-o", out], f"--input-file {fifo}: not a regular file"),
        (["-i", tmp_path / "none.jsonl", "-o", out],
         f"--input-file {tmp_path / 'none.jsonl'}: no such file"),
        (["-i", good, "-o", tmp_path], f"--output-file {tmp_path}: is a directory"),
        (["-i", good, "-o", tmp_path / "afile" / "x.jsonl"],
         f"--output-file {tmp_path / 'afile' / 'x.jsonl'}: {tmp_path / 'afile'} is not a "
         "directory"),
    ]:
        assert refused_flags(capsys, monkeypatch, "run-batch", *args) == message
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_a_batch_output_that_cannot_be_written_names_the_file(tmp_path: Path) -> None:
    import asyncio

    from populace.llm.offline import ServerOptions, run_batch

    good = tmp_path / "in.jsonl"
    good.write_text('{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", '
                    '"body": {"model": "dummy", "messages": []}}\n')
    (tmp_path / "afile").write_text("")
    for target in (tmp_path, tmp_path / "afile" / "x.jsonl"):
        with pytest.raises(OSError) as e:
            asyncio.run(run_batch(good, target, ServerOptions()))
        assert e.value.filename == str(target)  # not the temporary file beside it


# -- 11. the studio ---------------------------------------------------------------------------
def test_the_studio_refuses_a_missing_runs_directory_and_an_empty_token(
        tmp_path: Path, capsys: Cap, monkeypatch: Patch) -> None:
    missing = tmp_path / "nonexistent"
    assert refused_flags(capsys, monkeypatch, "studio", "--runs", missing) == (
        f"--runs {missing}: no such directory")
    assert refused_flags(capsys, monkeypatch, "studio", "--runs", tmp_path, "--token", " ") == (
        "--token: empty (give a token, or leave --token and POPULACE_STUDIO_TOKEN unset)")
    assert not missing.exists()


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["SIGINT", "SIGTERM"])
def test_a_studio_stopped_by_a_signal_exits_as_populace_run_does(
        tmp_path: Path, sig: signal.Signals, code: int) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR")}
    env.update(NO_COLOR="1", PYTHONUNBUFFERED="1", POPULACE_STUDIO_TOKEN="")
    proc = forkserver.spawn([sys.executable, "-m", "populace.cli", "studio", "--port", "0",
                             "--runs", str(tmp_path)], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 20
        while not re.search(r"http://127\.0\.0\.1:\d+/", proc.stdout.readline()):
            assert time.monotonic() < deadline and proc.poll() is None
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, err
    assert "studio stopped" in out and "Traceback" not in err


async def test_a_pilot_follows_a_population_size_given_for_the_full_run(
        tmp_path: Path, monkeypatch: Patch) -> None:
    from populace.launch import estimate
    from populace.llm.offline import ServerOptions, running_server

    monkeypatch.chdir(tmp_path)
    (tmp_path / "questionnaire.yaml").write_text(QUESTIONNAIRE)
    async with running_server(ServerOptions(policy="scripted", models=("m",))) as url:
        data = {"scenario": "survey", "agents": 300, "seed": 1,
                "models": {"m": {"provider": "openai", "model": "m", "base_urls": [url]}},
                "population": {"size": 300, "aspects": {"gender": {"template": "gender"}}},
                "settings": {"questionnaire": "questionnaire.yaml"}}
        guess = await estimate(data, tmp_path / "run.yaml")
    assert (guess.agents, guess.pilot_agents) == (300, 50)


# -- seeds beyond 64 bits (issue 33) ----------------------------------------------------------
# Every draw mixes the seed as a 64-bit integer: 2**64 ran as seed 0, 2**64 + 1 as seed 1.
@pytest.mark.parametrize("text", [
    SHORT.replace("seed: 1", f"seed: {2**64}"),
    SHORT.replace("seed: 1", f"seed: {2**64 + 1}"),  # SHORT names its scenario
    SURVEY.replace("seed: 1", f"seed: {2**64}") + "settings: {questionnaire: questionnaire.yaml}\n",
    SOCIAL + f"  seed: {2**70}\n",
], ids=["game", "game-named", "survey", "population"])
def test_a_seed_beyond_64_bits_is_refused(tmp_path: Path, capsys: Cap, monkeypatch: Patch,
                                          text: str) -> None:
    line = refused(tmp_path, capsys, monkeypatch, text)
    assert re.match(r"(population\.)?seed: Input should be less than or equal to "
                    r"18446744073709551615", line), line


@pytest.mark.parametrize("args", [
    ["run", "RUN", "--seed", str(2**64), "--out", "o"],
    ["population", "sample", "RUN", "--seed", str(2**64), "--out", "p.parquet"],
    ["backgrounds", "RUN", "--seed", str(2**64 + 1)],
], ids=["run", "sample", "backgrounds"])
def test_a_seed_flag_beyond_64_bits_is_refused(tmp_path: Path, capsys: Cap,
                                               monkeypatch: Patch, args: list[str]) -> None:
    (tmp_path / "run.yaml").write_text(SHORT)
    monkeypatch.chdir(tmp_path)
    line = refused_flags(capsys, monkeypatch, *["run.yaml" if a == "RUN" else a for a in args])
    assert "--seed" in line and "less than or equal to 18446744073709551615" in line, line
    assert not (tmp_path / "o").exists() and not (tmp_path / "p.parquet").exists()


def test_the_largest_seed_runs(tmp_path: Path, capsys: Cap, monkeypatch: Patch) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(SHORT.replace("seed: 1", f"seed: {2**64 - 1}"))
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", path, "--out", tmp_path / "o")
    assert (code, stderr) == (0, "")
