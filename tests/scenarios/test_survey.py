"""The survey scenario: questionnaire checks, arm assignment, ask_if, reply parsing, and whole
runs with the dummy model (skip logic, exact arms, waves, determinism, Ray, resume, report)."""

from __future__ import annotations

import copy
import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import yaml

from cli_helpers import kill_9_after, populace, run_in_process
from populace.results import read_summary, read_table
from populace.scenarios.survey import ANSWER_SCHEMA, Treatments, assign_arms
from populace.scenarios.survey._prompts import parse_choice, parse_multi, parse_numeric
from populace.scenarios.survey._questionnaire import compile_condition, holds

VOTED = {"id": "voted", "type": "single_choice", "text": "Did you vote?",
         "options": ["yes", "no"]}
WHY_NOT = {"id": "why_not", "type": "open", "text": "Why not?", "ask_if": 'voted == "no"',
           "code_into": ["time", "interest", "other"]}
TRUST = {"id": "trust", "type": "likert", "text": "How much do you trust elections?",
         "scale": ["none", "little", "some", "a lot", "complete"]}
NEWS = {"id": "news", "type": "multi_choice", "text": "Where do you get news?",
        "options": ["tv", "radio", "web", "paper"]}
AGE = {"id": "age", "type": "numeric", "text": "How old are you?", "range": [18, 99],
       "unit": "years"}
QUESTIONNAIRE = {"instructions": "You are taking part in a survey about public life.",
                 "questions": [VOTED, WHY_NOT, TRUST, NEWS, AGE]}
OPTIONS = {q["id"]: q.get("options") or q.get("scale") or q.get("code_into")
           for q in QUESTIONNAIRE["questions"]}
EDUCATION = {"aspects": {"education": {"weights": {
    "primary": 0.35, "secondary": 0.35, "tertiary": 0.3}}}}  # 105/105/90: odd strata
TREATMENTS = {"stratify_by": "education", "arms": {
    "control": {"share": 0.5},
    "info": {"share": 0.5, "message": "Studies show voting is safe and effective.",
             "before": ["trust"]}}}
RUN = {"scenario": "survey", "agents": 300, "seed": 1,
       "models": {"dummy": {"provider": "dummy", "latency": 0.0}},
       "population": EDUCATION,
       "settings": {"questionnaire": "q.yaml", "treatments": TREATMENTS}}


def write(directory: Path, questionnaire: dict[str, Any] | None = None,
          **changes: Any) -> Path:
    """``q.yaml`` and ``run.yaml`` (RUN with top-level ``changes``) in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "q.yaml").write_text(yaml.safe_dump(questionnaire or QUESTIONNAIRE,
                                                     sort_keys=False))
    path = directory / "run.yaml"
    path.write_text(yaml.safe_dump({**copy.deepcopy(RUN), **changes}, sort_keys=False))
    return path


def run_ok(path: Path, out: Path, *flags: str) -> pa.Table:
    done = populace("run", path, "--out", out, *flags)
    assert done.returncode == 0, done.stderr
    return read_table(out, "answers")


@pytest.fixture(scope="module")
def survey(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The standard run (300 agents, 5 questions, 2 arms stratified by education)."""
    base = tmp_path_factory.mktemp("survey")
    run_ok(write(base), base / "out")
    return base / "out"


# -- 1. questionnaire and settings checks ---------------------------------------------------
def _question(i: int, **fields: Any) -> Callable[[dict[str, Any]], None]:
    def change(q: dict[str, Any]) -> None:
        for key, value in fields.items():
            if value is None:
                q["questions"][i].pop(key, None)
            else:
                q["questions"][i][key] = value
    return change


def _settings(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda r: r["settings"].update(fields)


def _arm(name: str, **fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda r: r["settings"]["treatments"]["arms"][name].update(fields)


def _treatments(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda r: r["settings"]["treatments"].update(fields)


BAD: dict[str, tuple[str, Callable[[dict[str, Any]], None] | None,
                     Callable[[dict[str, Any]], None] | None, tuple[str, ...]]] = {
    # name: (file blamed, change to q.yaml, change to run.yaml, what the line must name)
    "unknown type": ("q.yaml", _question(0, type="ranking"), None,
                     ("questions.0.type", "'ranking'")),
    "ask_if missing question": ("q.yaml", _question(1, ask_if='voter == "no"'), None,
                                ("why_not", "ask_if", "'voter'")),
    "ask_if later question": ("q.yaml", _question(1, ask_if='trust == "some"'), None,
                              ("why_not", "ask_if", "'trust'")),
    "ask_if not an option": ("q.yaml", _question(1, ask_if='voted == "nope"'), None,
                             ("why_not", "ask_if", "'nope'", "voted")),
    "single_choice without options": ("q.yaml", _question(0, options=None), None,
                                      ("questions.0", "options")),
    "single_choice one option": ("q.yaml", _question(0, options=["yes"]), None,
                                 ("questions.0", "options")),
    "likert without scale": ("q.yaml", _question(2, scale=None), None,
                             ("questions.2", "scale")),
    "numeric without range": ("q.yaml", _question(4, range=None), None,
                              ("questions.4", "range")),
    "numeric low above high": ("q.yaml", _question(4, range=[99, 18]), None,
                               ("questions.4", "range")),
    "numeric low equals high": ("q.yaml", _question(4, range=[18, 18]), None,
                                ("questions.4", "range")),
    "duplicate id": ("q.yaml", _question(3, id="trust"), None, ("questions", "'trust'")),
    "wave names unknown question": (
        "q.yaml", lambda q: q.update(waves=[["voted", "why_not"], ["trust", "newz"]]), None,
        ("waves.1", "'newz'")),
    "shares do not sum to 1": ("run.yaml", None, _arm("info", share=0.4),
                               ("settings.treatments", "shares")),
    "control names no arm": ("run.yaml", None, _treatments(control="placebo"),
                             ("control", "'placebo'")),
    "stratify_by not an aspect": ("run.yaml", None, _treatments(stratify_by="income"),
                                  ("stratify_by", "'income'")),
    "before names unknown question": ("run.yaml", None, _arm("info", before=["trsut"]),
                                      ("before", "'trsut'")),
    "questionnaire file missing": ("run.yaml", None, _settings(questionnaire="missing.yaml"),
                                   ("settings.questionnaire", "missing.yaml")),
    "steps for a 1-wave questionnaire": ("run.yaml", None, lambda r: r.update(steps=3),
                                         ("steps",)),
    "model not configured": ("run.yaml", None, _settings(model="gpt"), ("model", "'gpt'")),
    "inline questionnaire": ("run.yaml", None, _settings(questionnaire={
        "questions": [VOTED, {**NEWS, "type": "slider"}]}),
        ("settings.questionnaire", "questions.1.type")),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_questionnaire_or_setting_is_one_line_and_exit_2(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    blamed, change_q, change_run, named = BAD[case]
    q, run = copy.deepcopy(QUESTIONNAIRE), copy.deepcopy(RUN)
    if change_q:
        change_q(q)
    if change_run:
        change_run(run)
    (tmp_path / "q.yaml").write_text(yaml.safe_dump(q))
    path, out = tmp_path / "run.yaml", tmp_path / "out"
    path.write_text(yaml.safe_dump(run))
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", path, "--out", out)
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    line = lines[0]
    assert line.startswith(f"error: {tmp_path / blamed}: "), line
    for word in named:
        assert word in line, (word, line)
    assert not out.exists()


def test_the_valid_questionnaire_passes_the_same_checks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cases above fail because of their change, not because the base is wrong."""
    path = write(tmp_path, agents=20)
    code, stdout, stderr = run_in_process(capsys, monkeypatch, "run", path, "--out",
                                          tmp_path / "out")
    assert code == 0, stderr
    assert "step 1/1:" in stdout


# -- 2. assign_arms -------------------------------------------------------------------------
def treatments(*shares: float) -> Treatments:
    return Treatments.model_validate({"arms": {f"a{i}": {"share": s}
                                               for i, s in enumerate(shares)}})


def test_assign_arms_gives_exact_counts_by_largest_remainder() -> None:
    arms = assign_arms(treatments(0.5, 0.3, 0.2), 1001, np.random.default_rng(3))
    assert arms.shape == (1001,)
    # 500.5, 300.3, 200.2: the one left over goes to the largest remainder
    assert np.bincount(arms, minlength=3).tolist() == [501, 300, 200]
    arms = assign_arms(treatments(0.2, 0.3, 0.5), 1001, np.random.default_rng(3))
    assert np.bincount(arms, minlength=3).tolist() == [200, 300, 501]
    arms = assign_arms(treatments(0.25, 0.25, 0.25, 0.25), 1002, np.random.default_rng(3))
    assert np.bincount(arms, minlength=4).tolist() == [251, 251, 250, 250]  # ties: earlier


def test_assign_arms_is_exact_within_each_stratum() -> None:
    strata = np.repeat(np.array(["a", "b", "c"]), [500, 301, 200])
    np.random.default_rng(0).shuffle(strata)
    arms = assign_arms(treatments(0.5, 0.3, 0.2), strata.size, np.random.default_rng(5),
                       strata)
    counts = {s: np.bincount(arms[strata == s], minlength=3).tolist() for s in "abc"}
    assert counts == {"a": [250, 150, 100], "b": [151, 90, 60], "c": [100, 60, 40]}


def test_assign_arms_is_seeded_and_random() -> None:
    t = treatments(0.5, 0.3, 0.2)
    first = assign_arms(t, 1001, np.random.default_rng(7))
    assert np.array_equal(first, assign_arms(t, 1001, np.random.default_rng(7)))
    other = assign_arms(t, 1001, np.random.default_rng(8))
    assert not np.array_equal(first, other)
    assert np.bincount(other).tolist() == np.bincount(first).tolist()
    assert not np.array_equal(first, np.sort(first))  # shuffled, not in blocks


def test_assign_arms_counts_sum_to_n_for_any_accepted_shares() -> None:
    t = treatments(0.5, 0.4999991)  # sums to 1 - 9e-7: accepted
    arms = assign_arms(t, 4_000_000, np.random.default_rng(1))
    assert np.bincount(arms).sum() == 4_000_000


# -- 3. ask_if ------------------------------------------------------------------------------
def asked(source: str, **answers: Any) -> bool:
    code, names = compile_condition(source)
    return holds(code, {n: answers.get(n) for n in names})


@pytest.mark.parametrize(("source", "answers", "expected"), [
    ('voted == "no"', {"voted": "no"}, True),
    ('voted == "no"', {"voted": "yes"}, False),
    ('voted != "no"', {"voted": "yes"}, True),
    ('voted != "no"', {"voted": "no"}, False),
    ('voted in ["no", "maybe"]', {"voted": "maybe"}, True),
    ('voted in ("no", "maybe")', {"voted": "yes"}, False),
    ('voted not in ["no"]', {"voted": "yes"}, True),
    ('voted not in ["no"]', {"voted": "no"}, False),
    ('"tv" in news', {"news": ["tv", "web"]}, True),
    ('"radio" in news', {"news": ["tv", "web"]}, False),
    ('"radio" not in news', {"news": ["tv", "web"]}, True),
    ('voted == "no" and age >= 30', {"voted": "no", "age": 30.0}, True),
    ('voted == "no" and age >= 30', {"voted": "no", "age": 29.0}, False),
    ('voted == "no" or age > 65', {"voted": "yes", "age": 70.0}, True),
    ('voted == "no" or age > 65', {"voted": "yes", "age": 65.0}, False),
    ('not voted == "no"', {"voted": "yes"}, True),
    ('not (voted == "no" or age < 18)', {"voted": "no", "age": 40.0}, False),
    ("18 <= age < 30", {"age": 18.0}, True),
    ("18 <= age < 30", {"age": 30.0}, False),
    ("age <= 17.5", {"age": 17.5}, True),
    ("age == 42", {"age": 42.0}, True),
    # an unanswered (skipped, invalid) question is None: a comparison with it is false
    ('voted == "no"', {"voted": None}, False),
    ("age > 30", {"age": None}, False),
    ("age < 30", {"age": None}, False),
    ('voted in ["yes", "no"]', {"voted": None}, False),
    ('"tv" in news', {"news": None}, False),
    ('voted == "no" and age > 30', {"voted": "no", "age": None}, False),
])
def test_ask_if_semantics(source: str, answers: dict[str, Any], expected: bool) -> None:
    assert asked(source, **answers) is expected


def test_compile_condition_names_the_questions_it_reads_once_each() -> None:
    _, names = compile_condition('voted == "no" and age > 3 or voted == "maybe"')
    assert names == ("voted", "age")


@pytest.mark.parametrize("source", [
    "__import__('os')", "__import__('os').system('true') == 0", 'a.b == "x"',
    "a[0] == 1", "(lambda: 1)() == 1", 'len(a) > 1', "a + 1 > 2", 'a == b.c',
    "a in [b]", "voted ==", "x := 1", "[x for x in a] == []", 'f"{a}" == "b"',
])
def test_compile_condition_refuses_anything_but_comparisons(source: str) -> None:
    with pytest.raises(ValueError, match="ask_if") as e:
        compile_condition(source)
    assert "\n" not in str(e.value)


def test_an_unanswered_question_does_not_hide_the_other_side_of_or() -> None:
    assert asked('age > 30 or voted == "yes"', age=None, voted="yes") is True


@pytest.mark.parametrize("source", ['voted != "no"', 'voted not in ["no"]'])
def test_a_negative_comparison_with_an_unanswered_question_is_false(source: str) -> None:
    assert asked(source, voted=None) is False


@pytest.mark.parametrize("source", ["voted", '"no"', 'voted and trust == "some"'])
def test_a_bare_question_id_or_value_is_not_a_condition(source: str) -> None:
    with pytest.raises(ValueError, match="ask_if"):
        compile_condition(source)


# -- 4. reading replies ---------------------------------------------------------------------
AGREE = ["Strongly disagree", "Disagree", "Neutral", "Agree", "Strongly agree"]
SHOWN = [4, 2, 0, 3, 1]  # what the respondent saw: 1. Strongly agree, 2. Neutral, ...


@pytest.mark.parametrize(("text", "expected"), [
    ("3", 0), ("3.", 0), (" I pick 2. ", 2), ("Option 5", 1),
    ('{"answer": 3}', 0), ('```json\n{"answer": 1}\n```', 4), ('{"answer": "Agree"}', 3),
    ("Agree", 3), ("agree.", 3), ("Strongly agree", 4), ("I strongly agree", 4),
    ("I disagree", 1), ("Strongly disagree", 0), ("Neutral, I suppose", 2),
    ("2 or 3", None), ("3, no wait, 4", None), ("6", None), ("0", None),
    ('{"answer": 9}', None), ('{"answer": true}', None), ('{"answer": [1]}', None),
    ("", None), ("no idea", None),
])
def test_parse_choice(text: str, expected: int | None) -> None:
    assert parse_choice(text, SHOWN, AGREE) == expected


@pytest.mark.parametrize("text", ["Agree. I would never disagree with that.",
                                  "Agree or disagree, hard to say"])
def test_a_reply_naming_two_labels_is_no_answer(text: str) -> None:
    assert parse_choice(text, SHOWN, AGREE) is None


@pytest.mark.parametrize(("text", "expected"), [
    ("1, 3", {2, 3}), ("1 and 3.", {2, 3}), ("4", {1}), ("2,2", {0}),
    ('{"answer": [1, 3]}', {2, 3}), ("[1, 2, 3, 4]", {0, 1, 2, 3}),
    ('{"answer": []}', None), ('{"answer": [1, true]}', None), ("1, 5", None),
    ("0", None), ("none of them", None), ('{"answer": 2}', None),
])
def test_parse_multi(text: str, expected: set[int] | None) -> None:
    shown = [2, 0, 3, 1]
    mask = parse_multi(text, shown, ["tv", "radio", "web", "paper"])
    got = None if mask is None else {j for j in range(4) if mask >> j & 1}
    assert got == expected


@pytest.mark.parametrize(("text", "low", "high", "expected"), [
    ("42", 0, 100, 42.0), ("about 42 years", 0, 100, 42.0), ("42.", 0, 100, 42.0),
    ("1,000", 0, 5000, 1000.0), ("I earn 1,250,000 a year", 0, 1e7, 1_250_000.0),
    ("1.5", 0, 10, 1.5), ("-3", -10, 10, -3.0), ('{"answer": 42}', 0, 100, 42.0),
    ('{"answer": "about 7"}', 0, 10, 7.0), ("42, yes 42", 0, 100, 42.0),
    ("I am 42, born in 1982", 18, 99, 42.0),  # the year is out of range: not a candidate
    ("between 40 and 45", 0, 100, None), ("150", 0, 100, None), ("-5", 0, 100, None),
    ("no idea", 0, 100, None), ('{"answer": true}', 0, 100, None),
])
def test_parse_numeric(text: str, low: float, high: float, expected: float | None) -> None:
    assert parse_numeric(text, low, high) == expected


# -- 5. a whole run with the dummy model ----------------------------------------------------
def test_answers_hold_one_row_per_question_asked(survey: Path) -> None:
    answers = read_table(survey, "answers")
    assert answers.schema == ANSWER_SCHEMA
    rows = answers.to_pylist()
    by_agent: dict[int, dict[str, dict[str, Any]]] = {}
    for r in rows:
        assert r["question"] not in by_agent.setdefault(r["agent_id"], {}), r  # once each
        by_agent[r["agent_id"]][r["question"]] = r
    assert sorted(by_agent) == list(range(300))
    no = {a for a, qs in by_agent.items() if qs["voted"]["answer"] == "no"}
    assert 60 < len(no) < 240  # both answers occur
    for agent, qs in by_agent.items():
        expected = {"voted", "trust", "news", "age"} | ({"why_not"} if agent in no else set())
        assert set(qs) == expected, agent
    assert answers.num_rows == 4 * 300 + len(no)
    assert {r["step"] for r in rows} == {1} and {r["wave"] for r in rows} == {1}
    assert all(r["valid"] and r["error"] is None and r["calls"] == 1 for r in rows)


def test_codes_positions_and_answers_are_within_range(survey: Path) -> None:
    rows = read_table(survey, "answers").to_pylist()
    shuffled = Counter()
    for r in rows:
        qid, options = r["question"], OPTIONS[r["question"]]
        if qid in ("voted", "trust"):  # choice questions
            k = len(options)
            assert r["options_shown"] == k
            assert r["code"] in range(1, k + 1) and 1 <= r["position"] <= k, r
            assert r["answer"] == options[int(r["code"]) - 1]
            shuffled[qid] += r["position"] != r["code"]
        elif qid == "why_not":  # open, coded
            assert r["code"] in (1, 2, 3) and r["position"] is None
            assert r["answer"] == options[int(r["code"]) - 1]
        elif qid == "news":  # multi choice: the labels, no code
            assert r["code"] is None and r["position"] is None and r["options_shown"] == 4
            chosen = r["answer"].split("; ")
            assert chosen and len(set(chosen)) == len(chosen) and set(chosen) <= set(options)
            assert chosen == [o for o in options if o in chosen]  # canonical order
        else:  # numeric
            assert 18 <= r["code"] <= 99 and r["code"] == int(r["code"])
            assert r["answer"] == f"{r['code']:g}" and r["position"] is None
    assert shuffled["voted"] > 50  # single choice: options shuffled per respondent
    assert shuffled["trust"] == 0  # a likert scale keeps its order


def test_arms_are_exact_per_stratum_and_on_every_answer(survey: Path) -> None:
    profiles = read_table(survey, "profiles").to_pylist()
    assert [p["agent_id"] for p in profiles] == list(range(300))
    strata = Counter(p["education"] for p in profiles)
    assert strata == {"primary": 105, "secondary": 105, "tertiary": 90}
    counts = Counter((p["education"], p["arm"]) for p in profiles)
    for level, m in strata.items():  # 52.5 each: the one left over goes to the first arm
        assert (counts[level, "control"], counts[level, "info"]) == (math.ceil(m / 2),
                                                                    m // 2)
    arm = {p["agent_id"]: p["arm"] for p in profiles}
    answers = read_table(survey, "answers")
    assert all(r["arm"] == arm[r["agent_id"]]
               for r in answers.select(["agent_id", "arm"]).to_pylist())
    summary = read_summary(survey)
    assert (summary["status"], summary["steps_planned"]) == ("completed", 1)


def test_waves_are_steps_without_steps_in_the_run_file(tmp_path: Path) -> None:
    waves = {**QUESTIONNAIRE, "waves": [["voted", "trust"], ["why_not", "news", "age"]]}
    path = write(tmp_path, waves, agents=120)
    assert "steps" not in yaml.safe_load(path.read_text())
    answers = run_ok(path, tmp_path / "out")
    summary = read_summary(tmp_path / "out")
    assert (summary["status"], summary["steps_planned"]) == ("completed", 2)
    assert [e["step"] for e in summary["steps"]] == [1, 2]
    rows = answers.to_pylist()
    for r in rows:
        assert r["step"] == r["wave"] == (1 if r["question"] in ("voted", "trust") else 2), r
    voted_no = {r["agent_id"] for r in rows if r["question"] == "voted" and r["answer"] == "no"}
    # the skip logic reads an answer given in the wave before
    assert {r["agent_id"] for r in rows if r["question"] == "why_not"} == voted_no
    assert Counter(r["step"] for r in rows) == {1: 240, 2: 240 + len(voted_no)}


# -- 6. the same answers, run after run ----------------------------------------------------
def test_the_same_seed_gives_the_same_answers(survey: Path, tmp_path: Path) -> None:
    again = run_ok(survey.parent / "run.yaml", tmp_path / "again")
    assert again.equals(read_table(survey, "answers"))
    other = run_ok(survey.parent / "run.yaml", tmp_path / "other", "--seed", "2")
    assert not other.column("raw").equals(again.column("raw"))
    assert not read_table(tmp_path / "other", "profiles").column("arm").equals(
        read_table(tmp_path / "again", "profiles").column("arm"))


def test_local_and_ray_give_the_same_answers(tmp_path: Path, ray_address: str) -> None:
    path = write(tmp_path, agents=200)
    local = run_ok(path, tmp_path / "local")
    on_ray = run_ok(path, tmp_path / "ray", "--backend", "ray", "--address", ray_address,
                    "--workers", "2")
    assert read_summary(tmp_path / "ray")["backend"] == "ray"
    assert on_ray.equals(local)
    assert read_table(tmp_path / "ray", "profiles").equals(read_table(tmp_path / "local",
                                                                      "profiles"))


# -- 7. kill -9, then --resume -------------------------------------------------------------
THREE_WAVES = {
    "questions": [VOTED, TRUST, WHY_NOT, NEWS, AGE,
                  {"id": "again", "type": "single_choice", "text": "Vote next time?",
                   "options": ["yes", "no", "maybe"],
                   "ask_if": 'voted == "no" or trust == "none"'}],
    "waves": [["voted", "trust"], ["why_not", "news"], ["age", "again"]],
}


def test_kill_9_mid_wave_then_resume_equals_an_undisturbed_run(tmp_path: Path) -> None:
    slow = {"dummy": {"provider": "dummy", "latency": 0.4}}  # 0.8 s a wave
    path, out = write(tmp_path / "killed", THREE_WAVES, models=slow), tmp_path / "out"
    kill_9_after(tmp_path / "stdout.txt", "step 1/3:", 0.3,  # inside wave 2
                 "run", path, "--out", out)
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-00001.ckpt"]
    assert sorted(p.name for p in (out / "parts").iterdir()) == ["answers-r00001.parquet"]

    done = populace("run", "--resume", out)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    summary = read_summary(out)
    assert (summary["status"], summary["resumed_from_step"]) == ("completed", 1)
    assert [e["step"] for e in summary["steps"]] == [1, 2, 3]
    undisturbed = run_ok(write(tmp_path / "whole", THREE_WAVES), tmp_path / "whole-out")
    assert read_table(out, "answers").equals(undisturbed)
    assert read_table(out, "profiles").equals(read_table(tmp_path / "whole-out", "profiles"))


# -- 8. populace report ---------------------------------------------------------------------
def _report(run_dir: Path) -> None:
    pytest.importorskip("populace.scenarios.survey._analysis")
    done = populace("report", run_dir, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    html = run_dir / "report.html"
    assert html.is_file() and html.stat().st_size > 1000


def test_report_on_a_survey_without_population(tmp_path: Path) -> None:
    run = copy.deepcopy(RUN)
    del run["population"], run["settings"]["treatments"]["stratify_by"]
    path = write(tmp_path, agents=100, population=None, settings=run["settings"])
    run_ok(path, tmp_path / "out")
    _report(tmp_path / "out")


def test_report_on_a_survey_with_population_and_arms(survey: Path) -> None:
    _report(survey)
