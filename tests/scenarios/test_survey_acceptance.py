"""Acceptance tests of the survey scenario with the scripted model: a known treatment shift
and a known demographic gap are recovered by the analysis; the structured path through an
OpenAI-compatible server, its replay, and plain text; kill -9 against a server, then
resume; the fallback of ``structured: auto``; and the ask_if checks on value types."""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import yaml

import forkserver
from cli_helpers import environment, populace, run_in_process
from populace.core import ModelError, derive_seed, seed_for
from populace.launch import launch, load_run_file
from populace.llm import Completion, ModelStats
from populace.llm.offline import ScriptedParams, ServerOptions, running_server
from populace.population import EDUCATION_STEPS
from populace.results import RunDirectory, read_summary, read_table
from populace.scenarios.survey import (
    Plan,
    Questionnaire,
    Respondent,
    crosstab,
    decode,
    treatment_effects,
)
from populace.scenarios.survey._scripted import survey_reply

INSTRUCTIONS = "You are taking part in a survey about health."
LEVELS = ("doctorate", "master's degree", "bachelor's degree", "high school", "primary school")
POPULATION = {"aspects": {"education": {"weights": dict.fromkeys(LEVELS, 0.2)}}}
SCALE = ["Very unlikely", "Unlikely", "Somewhat unlikely", "Unsure", "Somewhat likely",
         "Likely", "Very likely"]
VACCINE = {"id": "vaccine", "type": "likert",
           "text": "How likely are you to get a flu vaccine this winter?", "scale": SCALE}
CUE = "Independent studies show that flu vaccines are safe."  # one positive word: "safe"
NEUTRAL = "Please read the next question carefully before you answer it."  # no cue word
LIKERT_END = "Reply with the number of one option on this scale."
SEED = 11
N = 2000


def write_run(directory: Path, questionnaire: dict[str, Any], **run: Any) -> Path:
    """``q.yaml`` and ``run.yaml`` (a survey of ``questionnaire``; ``run`` is merged in,
    ``settings`` included) in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "q.yaml").write_text(yaml.safe_dump(questionnaire, sort_keys=False))
    settings = {"questionnaire": "q.yaml", **run.pop("settings", {})}
    data = {"scenario": "survey", "agents": N, "seed": SEED,
            "models": {"scripted": {"provider": "scripted"}}, "population": POPULATION,
            **run, "settings": settings}
    path = directory / "run.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


async def launched(path: Path, out: Path, **kwargs: Any) -> dict[str, Any]:
    summary = await launch(load_run_file(path), RunDirectory.create(out), **kwargs)
    assert summary["status"] == "completed", summary.get("error")
    return summary


def questions_of(run_dir: Path) -> tuple[Any, ...]:
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    return Questionnaire.model_validate(config["settings"]["questionnaire"]).questions


def expected_position(centre: float, k: int, sd: float = 0.8) -> float:
    """The rule's exact mean position: round half up of N(centre, sd²), clamped to 1..k."""
    def below(x: float) -> float:
        return 0.5 * (1 + math.erf((x - centre) / (sd * math.sqrt(2))))

    edges = [0.0, *(below(j + 0.5) for j in range(1, k)), 1.0]
    return sum(j * (edges[j] - edges[j - 1]) for j in range(1, k + 1))


def steps(education: str) -> float:
    return next(s for key, s in EDUCATION_STEPS if key in education)


# -- 1. a known treatment shift is recovered ----------------------------------------------
def likert_message(text: str, note: str | None) -> str:
    """The question as docs/survey.md and docs/scripted-model.md describe it (written
    here, not with the scenario's own code)."""
    head = ["Before this question, please read the following.", note, ""] if note else []
    return "\n".join([*head, f"Question 1 of 1: {text}", "Options:",
                      *(f"{i}. {label}" for i, label in enumerate(SCALE, 1)), LIKERT_END])


def reproduced(agent: int, education: str, text: str, note: str | None) -> int:
    """The position respondent ``agent`` gets from the rule for the first question of the
    first wave: seed ``seed_for(derive_seed(run seed, 1, 0), agent)``; system message the
    instructions, a blank line and "About you: education: V."."""
    seed = seed_for(derive_seed(SEED, 1, 0), agent)
    messages = [{"role": "system",
                 "content": f"{INSTRUCTIONS}\n\nAbout you: education: {education}."},
                {"role": "user", "content": likert_message(text, note)}]
    reply = survey_reply(messages, seed=seed, response_format=None, params=ScriptedParams())
    found = re.fullmatch(r"I would pick option (\d)\.", reply or "")
    assert found is not None, reply
    return int(found.group(1))


async def treatment_run(base: Path, text: str, message: str) -> dict[str, Any]:
    """A 2,000-respondent run of one 7-point question, half shown ``message`` before it;
    with every respondent's position in both arms, reproduced from the rule."""
    q = {"instructions": INSTRUCTIONS, "questions": [{**VACCINE, "text": text}]}
    path = write_run(base, q, settings={"treatments": {"stratify_by": "education", "arms": {
        "control": {"share": 0.5},
        "cue": {"share": 0.5, "message": message, "before": ["vaccine"]}}}})
    await launched(path, base / "out")
    out = base / "out"
    answers, profiles = read_table(out, "answers"), read_table(out, "profiles")
    people = profiles.select(["agent_id", "education", "arm"]).to_pylist()
    assert [p["agent_id"] for p in people] == list(range(N))
    both = np.array([[reproduced(p["agent_id"], p["education"], text, note)
                      for note in (None, message)] for p in people])
    return {"out": out, "answers": answers, "profiles": profiles, "people": people,
            "both": both}


@pytest.fixture(scope="module")
def cued(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The cue run, shared by the treatment and the demographic tests."""
    return asyncio.run(treatment_run(tmp_path_factory.mktemp("cued"), VACCINE["text"], CUE))


def effect_row(run: dict[str, Any]) -> dict[str, Any]:
    effects = treatment_effects(run["answers"], questions_of(run["out"]), control="control")
    rows = effects.to_pylist()
    assert [(r["question"], r["arm"], r["measure"]) for r in rows] == [("vaccine", "cue",
                                                                        "mean")]
    return rows[0]


def check_reproduction(run: dict[str, Any]) -> None:
    """What the run recorded is the reproduced position of each respondent's own arm: the
    counterfactual of the other arm is then the scenario's too."""
    answers = run["answers"].to_pylist()
    assert [r["agent_id"] for r in answers] == list(range(N))
    assert all(r["valid"] and r["error"] is None and r["calls"] == 1 for r in answers)
    arm = [p["arm"] for p in run["people"]]
    own = run["both"][np.arange(N), [int(a == "cue") for a in arm]]
    assert [int(r["code"]) for r in answers] == own.tolist()
    assert [r["arm"] for r in answers] == arm
    assert abs(arm.count("cue") - arm.count("control")) <= len(LEVELS)  # exact per stratum


def analytic_effect(people: Sequence[dict[str, Any]], cue: int) -> float:
    """The population effect of a cue of ``cue`` words, from the rule's exact means."""
    return float(np.mean([
        expected_position(4 + 0.5 * steps(p["education"]) + cue, 7)
        - expected_position(4 + 0.5 * steps(p["education"]), 7) for p in people]))


async def test_a_known_treatment_shift_is_recovered(cued: dict[str, Any]) -> None:
    check_reproduction(cued)
    per_person = cued["both"][:, 1] - cued["both"][:, 0]
    assert set(per_person.tolist()) <= {0, 1}  # +1, or 0 where the clamp at 7 cuts it off
    true_effect = float(per_person.mean())
    assert abs(true_effect - analytic_effect(cued["people"], 1)) < 0.03
    assert 0.85 < true_effect < 1.0
    row = effect_row(cued)
    arms = [p["arm"] for p in cued["people"]]
    assert (row["n_arm"], row["n_control"]) == (arms.count("cue"), arms.count("control"))
    assert row["ci_low"] <= true_effect <= row["ci_high"], (row, true_effect)
    assert abs(row["estimate"] - 1) < 0.15, row
    assert row["p_value"] < 1e-6
    # the arms' means are the rule's: a cue of 1 in one, none in the other
    codes = pc.cast(cued["answers"]["code"], pa.float64()).to_numpy()
    cue_arm = np.array([p["arm"] == "cue" for p in cued["people"]])
    for treated, c in ((True, 1), (False, 0)):
        people = [p for p, t in zip(cued["people"], cue_arm, strict=True) if t == treated]
        expected = np.mean([expected_position(4 + 0.5 * steps(p["education"]) + c, 7)
                            for p in people])
        assert abs(codes[cue_arm == treated].mean() - expected) < 0.1, (treated, expected)


async def test_a_cue_word_in_the_question_itself_is_no_treatment(tmp_path: Path) -> None:
    text = "Flu vaccines are safe for most adults. How likely are you to get one this winter?"
    run = await treatment_run(tmp_path, text, NEUTRAL)
    check_reproduction(run)
    assert (run["both"][:, 0] == run["both"][:, 1]).all()  # no respondent is moved
    row = effect_row(run)
    assert row["ci_low"] <= 0 <= row["ci_high"], row
    assert abs(row["estimate"]) < 0.15
    # and the question's "safe" does not move anyone either: the means are those of c = 0
    codes = pc.cast(run["answers"]["code"], pa.float64()).to_numpy()
    expected = np.mean([expected_position(4 + 0.5 * steps(p["education"]), 7)
                        for p in run["people"]])
    assert abs(codes.mean() - expected) < 0.08, (codes.mean(), expected)


# -- 2. demographic effects ------------------------------------------------------------------
async def test_doctorates_answer_higher_than_primary_school_by_the_rule(
        cued: dict[str, Any]) -> None:
    table = crosstab(cued["answers"], cued["profiles"], questions_of(cued["out"]), "education")
    mean: dict[str, float] = {}
    for row in table.to_pylist():
        mean[row["value"]] = mean.get(row["value"], 0.0) + row["share"] * (
            SCALE.index(row["option"]) + 1)
    assert set(mean) == set(LEVELS)
    # the same from answers and profiles directly
    codes = pc.cast(cued["answers"]["code"], pa.float64()).to_numpy()
    education = np.array([p["education"] for p in cued["people"]])
    for level in LEVELS:
        assert mean[level] == pytest.approx(codes[education == level].mean(), abs=1e-9)
    gap = mean["doctorate"] - mean["primary school"]
    assert gap > 0.6, mean
    # the rule's gap: 0.5 × (2.0 − 0.0) before the clamp, averaged over both arms
    expected = np.mean([expected_position(5 + c, 7) - expected_position(4 + c, 7)
                        for c in (0, 1)])
    assert abs(gap - expected) < 0.25, (gap, expected)
    assert sorted(LEVELS, key=mean.__getitem__) == sorted(LEVELS, key=steps)


# -- 3. through an OpenAI-compatible server: structured, replayed, plain ---------------------
SERVED = {"instructions": INSTRUCTIONS, "questions": [
    VACCINE,
    {"id": "transport", "type": "single_choice", "text": "How do you usually get to work?",
     "options": ["Car", "Bus", "Bicycle", "Walking", "Train"]},
    {"id": "news", "type": "multi_choice", "text": "Where do you get your news?",
     "options": ["Television", "Radio", "Newspapers", "Websites", "Social media"]},
    {"id": "hours", "type": "numeric", "text": "How many hours a week do you exercise?",
     "range": [0, 40], "unit": "hours"},
]}
PLAIN_REPLY = re.compile(r"I would pick option \d\.|Options? \d(, \d)*\.|My answer is \d+\.")


def served_run(directory: Path, url: str, structured: bool) -> Path:
    models = {"served": {"provider": "openai", "model": "scripted", "base_urls": [url],
                         "max_retries": 0, "max_concurrency": 300}}
    return write_run(directory, SERVED, agents=300, models=models,
                     settings={"structured": structured})


async def test_through_serve_llm_structured_then_replayed_then_plain(tmp_path: Path) -> None:
    options = ServerOptions(models=("scripted",), policy="scripted")
    async with running_server(options) as url:
        path = served_run(tmp_path / "json", url, structured=True)
        await launched(path, tmp_path / "rec")
    answers = read_table(tmp_path / "rec", "answers")
    rows = answers.to_pylist()
    assert len(rows) == 4 * 300
    assert all(r["valid"] and r["error"] is None and r["calls"] == 1 for r in rows)
    kinds = {"vaccine": int, "transport": int, "news": list, "hours": int | float}
    for r in rows:
        reply = json.loads(r["raw"])
        assert list(reply) == ["answer"], r
        assert isinstance(reply["answer"], kinds[r["question"]]), r
        if r["question"] in ("vaccine", "transport"):
            assert reply["answer"] == r["position"]
        elif r["question"] == "hours":
            assert reply["answer"] == r["code"]
    assert list((tmp_path / "rec" / "llm_calls").glob("served-*.jsonl"))  # recorded

    # the server is gone: the recording answers every call
    replayed = await launched(path, tmp_path / "rep", replay=tmp_path / "rec")
    assert replayed["steps"][0]["respondents"] == 300
    assert read_table(tmp_path / "rep", "answers").equals(answers)
    assert read_table(tmp_path / "rep", "profiles").equals(read_table(tmp_path / "rec",
                                                                     "profiles"))

    async with running_server(options) as url:
        plain = served_run(tmp_path / "plain", url, structured=False)
        await launched(plain, tmp_path / "text")
    text = read_table(tmp_path / "text", "answers")
    rows = text.to_pylist()
    assert len(rows) == 4 * 300
    assert all(r["valid"] and r["error"] is None and r["calls"] == 1 for r in rows)
    assert all(PLAIN_REPLY.fullmatch(r["raw"]) for r in rows), [
        r["raw"] for r in rows if not PLAIN_REPLY.fullmatch(r["raw"])][:3]
    # the rule decides the same answers whatever format it replies in
    for column in ("agent_id", "question", "answer", "code", "position"):
        assert text[column].equals(answers[column]), column


# -- 4. kill -9 mid-wave against serve-llm, then resume -------------------------------------
TWO_WAVES = {"instructions": INSTRUCTIONS, "questions": [
    *SERVED["questions"],
    {"id": "again", "type": "single_choice", "text": "Would you get one next year?",
     "options": ["Yes", "No"], "ask_if": 'vaccine in ["Very likely", "Likely"]'},
], "waves": [["vaccine", "transport"], ["news", "hours", "again"]]}


def wait_for(what: str, ready: Any, proc: subprocess.Popen[Any], log: Path,
             timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, f"exited before {what}: {log.read_text()[-2000:]}"
        assert time.monotonic() < deadline, f"no {what}: {log.read_text()[-2000:]}"
        time.sleep(0.02)


def stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)


def test_kill_9_mid_wave_against_serve_llm_then_resume(tmp_path: Path) -> None:
    server_log = tmp_path / "server.txt"
    with server_log.open("w") as stdout:
        server = forkserver.spawn(
            [sys.executable, "-m", "populace.cli", "serve-llm", "--port", "0", "--policy",
             "scripted", "--model", "scripted", "--latency", "0.4"],
            stdout=stdout, stderr=subprocess.STDOUT, env=environment())
    try:
        def url() -> str | None:
            found = re.search(r"http://127\.0\.0\.1:\d+/v1", server_log.read_text())
            return found.group(0) if found else None

        wait_for("server", url, server, server_log)
        models = {"served": {"provider": "openai", "model": "scripted",
                             "base_urls": [url()], "max_concurrency": 256}}
        path = write_run(tmp_path / "killed", TWO_WAVES, agents=200, models=models,
                         settings={"structured": True})
        out, log = tmp_path / "out", tmp_path / "run.txt"
        with log.open("w") as stdout:  # 0.8 s a wave and more: two calls of 0.4 s each
            proc = forkserver.spawn([sys.executable, "-m", "populace.cli", "run", str(path),
                                     "--out", str(out)], stdout=stdout,
                                    stderr=subprocess.STDOUT, env=environment())
        try:
            first = out / "parts" / "answers-r00001.parquet"
            checkpoint = out / "checkpoints" / "step-00001.ckpt"
            wait_for("wave 1", lambda: first.exists() and checkpoint.exists(), proc, log)
            time.sleep(0.3)  # inside wave 2
            os.kill(proc.pid, signal.SIGKILL)
            assert proc.wait(timeout=30) == -signal.SIGKILL
        finally:
            stop(proc)
        assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-00001.ckpt"]
        assert sorted(p.name for p in (out / "parts").iterdir()) == ["answers-r00001.parquet"]

        done = populace("run", "--resume", out)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        summary = read_summary(out)
        assert (summary["status"], summary["resumed_from_step"]) == ("completed", 1)
        assert [e["step"] for e in summary["steps"]] == [1, 2]
        whole = populace("run", path, "--out", tmp_path / "whole")
        assert whole.returncode == 0, whole.stderr
    finally:
        stop(server)
    answers, undisturbed = read_table(out, "answers"), read_table(tmp_path / "whole", "answers")
    assert answers.num_rows > 4 * 200
    assert pc.all(answers["valid"]).as_py()
    assert answers.equals(undisturbed)  # prompt tokens too: the conversation was restored
    assert read_table(out, "profiles").equals(read_table(tmp_path / "whole", "profiles"))


# -- 5. structured: auto falls back to plain text --------------------------------------------
REFUSED = ("model 'x': HTTP 400: response_format not supported from "
           "http://127.0.0.1:9/v1 (after 1 attempt)")


class Refuser:
    """A model that refuses any ``response_format`` (HTTP 400) and otherwise picks option
    2; ``error`` replaces the refusal's text."""

    name = "m"

    def __init__(self, error: str = REFUSED) -> None:
        self.error = error
        self.calls: list[dict[str, Any] | None] = []

    async def complete(self, messages: Sequence[Any], *, temperature: float | None = None,
                       top_p: float | None = None, seed: int | None = None,
                       max_tokens: int | None = None,
                       response_format: dict[str, Any] | None = None) -> Completion:
        self.calls.append(response_format)
        if response_format is not None:
            raise ModelError(self.error)
        reply = ("Mostly it comes down to cost." if "sentences" in messages[-1]["content"]
                 else "I would pick option 2.")
        return Completion(reply, self.name, prompt_tokens=5, completion_tokens=5)

    def statistics(self) -> ModelStats:
        return ModelStats(self.name, len(self.calls), 0, 0, 0, 0)

    async def aclose(self) -> None:
        return None


STUB = Questionnaire.model_validate({"instructions": INSTRUCTIONS, "questions": [
    VACCINE, {"id": "why", "type": "open", "text": "Why?"}]})


def plan(structured: bool | str, questionnaire: Questionnaire = STUB) -> Plan:
    wave = questionnaire.plan[0]
    return Plan(questionnaire=questionnaire, model="m",
                bases=(tuple(derive_seed(SEED, 1, i) for i in range(len(wave))),),
                structured=structured, attributes=("education",))


def respondent(i: int, p: Plan, model: Refuser) -> Respondent:
    return Respondent(i, {"education": "doctorate"}, models={"m": model}, plan=p)


async def test_structured_auto_falls_back_to_plain_text_for_the_worker() -> None:
    model, shared = Refuser(), plan("auto")
    first = await respondent(0, shared, model).answer(0)
    assert shared.learnt.get("plain") is True
    table = decode(STUB, 0, np.array([0]), [first], None, []).to_pylist()
    vaccine, why = table
    assert vaccine["question"] == "vaccine" and vaccine["valid"], vaccine
    assert (vaccine["answer"], vaccine["code"], vaccine["error"]) == (SCALE[1], 2.0, None)
    assert vaccine["raw"] == "I would pick option 2."
    assert vaccine["calls"] == 2  # the refused call counts
    assert why["valid"] and why["error"] is None and why["raw"].startswith("Mostly")
    # the JSON request was made once, then never again in this worker
    assert model.calls[0] is not None and model.calls[1:] == [None, None]
    model.calls.clear()
    second = await respondent(1, shared, model).answer(0)
    assert model.calls == [None, None]
    row = decode(STUB, 0, np.array([1]), [second], None, []).to_pylist()[0]
    assert (row["valid"], row["calls"], row["answer"]) == (True, 1, SCALE[1])


async def test_structured_true_makes_a_refusal_an_error_row() -> None:
    model, strict = Refuser(), plan(True)
    packed = await respondent(0, strict, model).answer(0)
    assert "plain" not in strict.learnt
    vaccine, why = decode(STUB, 0, np.array([0]), [packed], None, []).to_pylist()
    assert not vaccine["valid"] and vaccine["answer"] is None and vaccine["code"] is None
    assert vaccine["error"] == f"ModelError: {REFUSED}"
    assert why["valid"] and why["error"] is None  # an open question has no response_format
    # a one-question wave: the respondent answers nothing; its row carries the error (the
    # step counts failed questions: tests/reliability/test_platform_scenarios.py)
    alone = Questionnaire.model_validate({"questions": [VACCINE]})
    packed = await respondent(0, plan(True, alone), Refuser()).answer(0)
    row, = decode(alone, 0, np.array([0]), [packed], None, []).to_pylist()
    assert not row["valid"] and row["error"] == f"ModelError: {REFUSED}"


async def test_structured_auto_keeps_json_after_another_error() -> None:
    error = "model 'x': HTTP 500: internal error from http://127.0.0.1:9/v1 (after 1 attempt)"
    model, shared = Refuser(error), plan("auto")
    packed = await respondent(0, shared, model).answer(0)
    assert "plain" not in shared.learnt
    vaccine, _ = decode(STUB, 0, np.array([0]), [packed], None, []).to_pylist()
    assert not vaccine["valid"] and vaccine["error"] == f"ModelError: {error}"


# -- 6. ask_if checks on the types of the questions read ------------------------------------
TRUST = {"id": "trust", "type": "likert", "text": "How much do you trust doctors?",
         "scale": ["Not at all", "A little", "A lot"]}
MEDIA = {"id": "media", "type": "multi_choice", "text": "Where do you read about health?",
         "options": ["TV", "Radio", "Web"]}
AGE = {"id": "age", "type": "numeric", "text": "How old are you?", "range": [18, 99]}
FOLLOW = {"id": "follow", "type": "single_choice", "text": "Would you like a follow-up?",
          "options": ["Yes", "No"]}
DUMMY = {"dummy": {"provider": "dummy", "latency": 0.0}}


def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, directory: Path,
        condition: str) -> tuple[int, str, str]:
    q = {"questions": [TRUST, MEDIA, AGE, {**FOLLOW, "ask_if": condition}]}
    path = write_run(directory, q, agents=300, models=DUMMY, population=None)
    return run_in_process(capsys, monkeypatch, "run", path, "--out", directory / "out")


ORDER = ("questions.3.ask_if", "'follow'", "'trust'", "likert", "numeric")
EQUALS = ("questions.3.ask_if", "'follow'", "'media'", "multi_choice", "in media")


@pytest.mark.parametrize(("condition", "named"), [
    ('trust >= "A lot"', ORDER), ('"A lot" < trust', ORDER),
    ('media == "TV"', EQUALS), ('media != ["TV"]', EQUALS),
])
def test_an_ask_if_that_cannot_fit_the_question_type_is_refused(
        condition: str, named: tuple[str, ...], tmp_path: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, stderr = cli(capsys, monkeypatch, tmp_path, condition)
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"error: {tmp_path / 'q.yaml'}: "), lines[0]
    for word in named:
        assert word in lines[0], (word, lines[0])
    assert not (tmp_path / "out").exists()


def test_a_chained_numeric_comparison_is_accepted_and_asks_exactly_those_in_range(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, stderr = cli(capsys, monkeypatch, tmp_path, "18 <= age < 30")
    assert code == 0, stderr
    rows = read_table(tmp_path / "out", "answers").to_pylist()
    age = {r["agent_id"]: r["code"] for r in rows if r["question"] == "age"}
    assert len(age) == 300 and all(r["valid"] for r in rows)
    young = {a for a, years in age.items() if 18 <= years < 30}
    assert 10 < len(young) < 150  # both sides occur (uniform on 18..99: about 45)
    assert {r["agent_id"] for r in rows if r["question"] == "follow"} == young


def test_the_questionnaire_of_the_refusals_is_otherwise_valid(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The refusals above come from the comparison, not from the rest of the file."""
    code, _, stderr = cli(capsys, monkeypatch, tmp_path,
                          'trust == "A lot" or "TV" in media or age >= 65')
    assert code == 0, stderr
    rows = read_table(tmp_path / "out", "answers").to_pylist()
    by: dict[int, dict[str, Any]] = {}
    for r in rows:
        by.setdefault(r["agent_id"], {})[r["question"]] = r["answer"]
    for agent, got in by.items():
        expected = (got["trust"] == "A lot" or "TV" in got["media"].split("; ")
                    or float(got["age"]) >= 65)
        assert ("follow" in got) == expected, (agent, got)

