"""The survey's analysis and figures, on answer tables built by hand."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from scipy import stats

from populace.core import ConfigError
from populace.scenarios.survey._analysis import (
    compare_reference,
    crosstab,
    marginals,
    numeric_summary,
    position_bias,
    rake,
    read_reference,
    report_tables,
    treatment_effects,
)
from populace.scenarios.survey._figures import figures


@dataclass(frozen=True)
class Q:
    id: str
    type: str
    options: tuple[str, ...] = ()
    range: tuple[float, float] | None = None


TRUST = Q("trust", "likert", ("none", "little", "some", "much", "full"))
PARTY = Q("party", "single_choice", ("red", "green", "blue"))
TOPICS = Q("topics", "multi_choice", ("jobs", "health", "climate"))
YEARS = Q("years", "numeric", range=(0.0, 100.0))
WHY = Q("why", "open", ("economy", "other"))
QUESTIONS = [TRUST, PARTY, TOPICS, YEARS, WHY]

SCHEMA = pa.schema([
    ("step", pa.int32()), ("wave", pa.int16()), ("agent_id", pa.int64()),
    ("question", pa.string()), ("answer", pa.string()), ("code", pa.float64()),
    ("position", pa.int16()), ("options_shown", pa.int16()), ("valid", pa.bool_()),
    ("raw", pa.string()), ("arm", pa.string()), ("prompt_tokens", pa.int32()),
    ("completion_tokens", pa.int32()), ("calls", pa.int8()), ("error", pa.string()),
])


def table(rows: list[dict[str, Any]]) -> pa.Table:
    defaults = {"step": 0, "wave": 0, "position": None, "options_shown": None, "valid": True,
                "raw": "", "arm": None, "prompt_tokens": 10, "completion_tokens": 2,
                "calls": 1, "error": None, "answer": None, "code": None}
    full = [{**defaults, **r} for r in rows]
    if any(not r["valid"] for r in full):
        full = [{**r, "answer": None, "code": None, "position": None} if not r["valid"] else r
                for r in full]
    return pa.Table.from_pylist(full, schema=SCHEMA)


def survey(seed: int = 1, agents: int = 60, waves: int = 2) -> tuple[pa.Table, pa.Table]:
    """Every question to every agent in every wave; shuffled choice options; some invalid
    answers; likert option 'full' never chosen (a zero to keep)."""
    rng = random.Random(seed)
    education = ["school", "college", "doctorate"]
    profiles = pa.table({"agent_id": pa.array(range(agents), pa.int64()),
                         "education": [education[i % 3] for i in range(agents)],
                         "age": [20 + i for i in range(agents)]})
    rows: list[dict[str, Any]] = []
    for wave in range(waves):
        for a in range(agents):
            base = {"wave": wave, "step": wave, "agent_id": a}
            code = rng.randint(1, 4)
            rows.append({**base, "question": "trust", "answer": TRUST.options[code - 1],
                         "code": code, "position": code, "options_shown": 5,
                         "valid": rng.random() > 0.1})
            order = rng.sample(range(3), 3)
            code = rng.randint(1, 3)
            rows.append({**base, "question": "party", "answer": PARTY.options[code - 1],
                         "code": code, "position": order.index(code - 1) + 1,
                         "options_shown": 3, "valid": rng.random() > 0.1})
            chosen = [o for o in TOPICS.options if rng.random() < 0.5]
            rows.append({**base, "question": "topics", "answer": "; ".join(chosen),
                         "options_shown": 3, "valid": rng.random() > 0.1})
            rows.append({**base, "question": "years", "answer": "x",
                         "code": float(rng.randint(0, 80)), "valid": rng.random() > 0.1})
            coded = rng.random() < 0.7
            code = rng.randint(1, 2)
            rows.append({**base, "question": "why",
                         "answer": WHY.options[code - 1] if coded else "some text",
                         "code": code if coded else None})
    return table(rows), profiles


def plain_counts(answers: pa.Table, key: Any = None) -> tuple[Counter, Counter]:
    """(wave, question, group, option) chosen counts and (wave, question, group) totals."""
    chosen: Counter = Counter()
    total: Counter = Counter()
    for r in answers.to_pylist():
        if not r["valid"] or r["question"] == "years":
            continue
        g = None if key is None else key(r["agent_id"])
        cell = (r["wave"], r["question"], g)
        if r["question"] == "topics":
            total[cell] += 1
            for label in filter(None, r["answer"].split("; ")):
                chosen[(*cell, label)] += 1
        elif r["code"] is not None:
            options = {q.id: q.options for q in QUESTIONS}[r["question"]]
            total[cell] += 1
            chosen[(*cell, options[int(r["code"]) - 1])] += 1
    return chosen, total


# -- marginals and cross-tabs -----------------------------------------------------------------
def test_marginals_match_a_plain_count() -> None:
    answers, _ = survey()
    got = marginals(answers, QUESTIONS)
    chosen, total = plain_counts(answers)
    rows = got.to_pylist()
    assert got.column_names == ["wave", "question", "option", "n", "share"]
    expected_rows = sum(len(q.options) for q in QUESTIONS) * 2  # every option, both waves
    assert len(rows) == expected_rows
    for r in rows:
        cell = (r["wave"], r["question"], None)
        assert r["n"] == chosen[(*cell, r["option"])]
        assert r["share"] == pytest.approx(chosen[(*cell, r["option"])] / total[cell])
    assert {r["n"] for r in rows if r["option"] == "full"} == {0}  # zeros kept
    assert "years" not in got["question"].to_pylist()


def test_marginals_weighted_share() -> None:
    answers, profiles = survey()
    weights = pa.table({"agent_id": profiles["agent_id"],
                        "weight": [1.0 + (i % 4) for i in range(profiles.num_rows)]})
    w = dict(zip(weights["agent_id"].to_pylist(), weights["weight"].to_pylist(), strict=True))
    got = {(r["wave"], r["question"], r["option"]): r["weighted_share"]
           for r in marginals(answers, QUESTIONS, weights=weights).to_pylist()}
    num: Counter = Counter()
    den: Counter = Counter()
    for r in answers.filter(pc.equal(answers["question"], "party")).to_pylist():
        if r["valid"]:
            den[r["wave"]] += w[r["agent_id"]]
            num[(r["wave"], r["answer"])] += w[r["agent_id"]]
    for (wave, option), value in num.items():
        assert got[(wave, "party", option)] == pytest.approx(value / den[wave])
    with pytest.raises(ConfigError, match="without a weight"):
        marginals(answers, QUESTIONS, weights=weights.slice(0, 10))


def test_crosstab_matches_a_plain_count() -> None:
    answers, profiles = survey()
    edu = dict(zip(profiles["agent_id"].to_pylist(), profiles["education"].to_pylist(),
                   strict=True))
    chosen, total = plain_counts(answers, edu.__getitem__)
    rows = crosstab(answers, profiles, QUESTIONS, "education").to_pylist()
    assert len(rows) == sum(len(q.options) for q in QUESTIONS) * 2 * 3
    for r in rows:
        cell = (r["wave"], r["question"], r["value"])
        assert r["n"] == chosen[(*cell, r["option"])]
        assert r["share"] == pytest.approx(chosen[(*cell, r["option"])] / total[cell])
    ages = crosstab(answers, profiles, QUESTIONS, "age")  # numbers: values as text
    assert "20" in ages["value"].to_pylist()
    with pytest.raises(ConfigError, match="'height' is not a profile column"):
        crosstab(answers, profiles, QUESTIONS, "height")


def test_numeric_summary_against_numpy() -> None:
    answers, _ = survey()
    rows = numeric_summary(answers, QUESTIONS).to_pylist()
    assert [(r["wave"], r["question"]) for r in rows] == [(0, "years"), (1, "years")]
    for r in rows:
        values = [a["code"] for a in answers.to_pylist()
                  if a["question"] == "years" and a["valid"] and a["wave"] == r["wave"]]
        assert r["n"] == len(values)
        assert r["mean"] == pytest.approx(np.mean(values))
        assert r["sd"] == pytest.approx(np.std(values, ddof=1))
        assert r["median"] == pytest.approx(np.median(values))
        low, high = stats.t.interval(0.95, len(values) - 1, loc=np.mean(values),
                                     scale=stats.sem(values))
        assert (r["ci_low"], r["ci_high"]) == pytest.approx((low, high))


# -- treatment effects -------------------------------------------------------------------------
def test_treatment_effects_recover_a_known_shift() -> None:
    rng = np.random.default_rng(7)
    rows = []
    for i in range(600):
        arm = ("control", "nudge", "other")[i % 3]
        value = rng.normal(40.0 + (1.0 if arm == "nudge" else 0.0), 1.0)
        rows.append({"agent_id": i, "question": "years", "code": value, "arm": arm})
        p = 0.6 if arm == "nudge" else 0.3
        code = 1 if rng.random() < p else 2
        rows.append({"agent_id": i, "question": "party", "code": code, "arm": arm,
                     "answer": PARTY.options[code - 1], "position": code, "options_shown": 3})
    answers = table(rows)
    got = treatment_effects(answers, QUESTIONS, control="control").to_pylist()
    mean = {r["arm"]: r for r in got if r["measure"] == "mean"}
    nudge = mean["nudge"]
    assert nudge["ci_low"] < 1.0 < nudge["ci_high"]
    assert abs(nudge["estimate"] - 1.0) < 0.3
    assert abs(mean["other"]["estimate"]) < 0.3
    values = {arm: [r["code"] for r in rows if r["question"] == "years" and r["arm"] == arm]
              for arm in ("control", "nudge")}
    test = stats.ttest_ind(values["nudge"], values["control"], equal_var=False)
    ci = test.confidence_interval(0.95)
    assert (nudge["ci_low"], nudge["ci_high"]) == pytest.approx((ci.low, ci.high), rel=1e-9)
    assert nudge["p_value"] == pytest.approx(test.pvalue, rel=1e-6)
    assert (nudge["n_arm"], nudge["n_control"]) == (200, 200)
    # a share is a mean of 0/1: the same Welch interval
    red = next(r for r in got if r["arm"] == "nudge" and r["measure"] == "share: red")
    chose = {arm: [float(r["code"] == 1) for r in rows
                   if r["question"] == "party" and r["arm"] == arm]
             for arm in ("control", "nudge")}
    test = stats.ttest_ind(chose["nudge"], chose["control"], equal_var=False)
    assert red["estimate"] == pytest.approx(np.mean(chose["nudge"]) - np.mean(chose["control"]))
    assert (red["ci_low"], red["ci_high"]) == pytest.approx(tuple(test.confidence_interval()))
    assert red["p_value"] == pytest.approx(test.pvalue)
    assert {r["measure"] for r in got if r["question"] == "party"} == {
        "share: red", "share: green", "share: blue"}
    with pytest.raises(ConfigError, match="control arm 'placebo'"):
        treatment_effects(answers, QUESTIONS, control="placebo")


# -- position bias -----------------------------------------------------------------------------
def test_position_bias_against_scipy_chisquare() -> None:
    rng = random.Random(3)
    rows = []
    for i in range(300):
        code = rng.randint(1, 3)
        position = 1 if rng.random() < 0.5 else rng.randint(1, 3)  # favours the first shown
        rows.append({"agent_id": i, "question": "party", "code": code,
                     "answer": PARTY.options[code - 1], "position": position,
                     "options_shown": 3})
        code = rng.randint(1, 5)  # likert in fixed order: not tested
        rows.append({"agent_id": i, "question": "trust", "code": code,
                     "answer": TRUST.options[code - 1], "position": code, "options_shown": 5})
    got = position_bias(table(rows), QUESTIONS).to_pylist()
    assert {r["question"] for r in got} == {"party"}
    observed = Counter(r["position"] for r in rows if r["question"] == "party")
    assert [r["n"] for r in got] == [observed[p] for p in (1, 2, 3)]
    assert [r["expected"] for r in got] == pytest.approx([1 / 3] * 3)
    test = stats.chisquare([observed[p] for p in (1, 2, 3)])
    assert got[0]["chi2"] == pytest.approx(test.statistic)
    assert got[0]["p_value"] == pytest.approx(test.pvalue)
    assert got[0]["p_value"] < 0.001


def test_position_bias_with_varying_option_counts() -> None:
    rows = [{"agent_id": i, "question": "party", "code": 1, "answer": "red",
             "position": 1 + i % 2, "options_shown": 2 if i < 10 else 4} for i in range(20)]
    got = position_bias(table(rows), QUESTIONS).to_pylist()
    # 10 answers shown 2 options (1/2 each on positions 1-2), 10 shown 4 (1/4 on 1-4)
    assert [r["expected"] for r in got] == pytest.approx([0.375, 0.375, 0.125, 0.125])
    assert sum(r["share"] for r in got) == pytest.approx(1.0)


# -- reference data ----------------------------------------------------------------------------
def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_read_reference_reads_csv_and_parquet(tmp_path: Path) -> None:
    text = ("question,option,share,aspect,value\n"
            "party,red,0.5,,\nparty,green,0.3,,\n\nparty,blue,0.2,,\n"
            "party,red,1.0,education,doctorate\n")
    ref = read_reference(write(tmp_path / "ref.csv", text))
    assert ref.column_names == ["question", "option", "share", "aspect", "value"]
    assert ref.num_rows == 4
    assert ref["aspect"].to_pylist() == [None, None, None, "education"]
    pq.write_table(ref, tmp_path / "ref.parquet")
    assert read_reference(tmp_path / "ref.parquet").equals(ref)
    plain = read_reference(write(tmp_path / "plain.csv", "question,option,share\nwhy,other,1\n"))
    assert plain["value"].to_pylist() == [None]


@pytest.mark.parametrize(("name", "text", "where"), [
    ("nofile.csv", None, "no such file"),
    ("ref.xlsx", "x", "unknown extension '.xlsx'"),
    ("ref.csv", "question,share\nparty,1\n", "line 1, column 'option': missing"),
    ("ref.csv", "question,option,share\nparty,red,0.5\nparty,blue,lots\n",
     "line 3, column 'share': expected a number in [0, 1], got 'lots'"),
    ("ref.csv", "question,option,share\nparty,red,1.5\n",
     "line 2, column 'share': expected a number in [0, 1]"),
    ("ref.csv", "question,option,share\nparty,red,0.5\nparty,blue,0.3\ntrust,none,1\n",
     "lines 2, 3, column 'share': the shares of question 'party' sum to 0.8"),
    ("ref.csv", "question,option,share,aspect,value\nparty,red,1,education,\n",
     "line 2, column 'value': empty, but aspect is 'education'"),
    ("ref.csv", "question,option,share,aspect\nparty,red,1,education\n",
     "line 1, column 'value': missing"),
    ("ref.csv", "question,option,share\nparty,,1\n", "line 2, column 'option'"),
    ("ref.csv", "question,option,share\nparty,red,0.5\nparty,red,0.5\n",
     "line 3, column 'option': 'red' of question 'party' given again"),
])
def test_read_reference_errors_are_one_line(tmp_path: Path, name: str, text: str | None,
                                            where: str) -> None:
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(ConfigError) as info:
        read_reference(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(str(path))
    assert where in message


def test_read_reference_parquet_errors_name_the_row(tmp_path: Path) -> None:
    pq.write_table(pa.table({"question": ["party", "party"], "option": ["red", "blue"],
                             "share": [0.5, -0.5]}), tmp_path / "ref.parquet")
    with pytest.raises(ConfigError, match=r"ref\.parquet: row 2, column 'share'"):
        read_reference(tmp_path / "ref.parquet")


def reference(rows: list[tuple[str, str, float, str | None, str | None]]) -> pa.Table:
    return pa.table({k: [r[i] for r in rows] for i, k in
                     enumerate(("question", "option", "share", "aspect", "value"))},
                    schema=pa.schema([("question", pa.string()), ("option", pa.string()),
                                      ("share", pa.float64()), ("aspect", pa.string()),
                                      ("value", pa.string())]))


def test_compare_reference_against_a_hand_computation() -> None:
    answers, profiles = survey(waves=1)
    ref = reference([("party", "red", 0.5, None, None), ("party", "green", 0.3, None, None),
                     ("party", "blue", 0.2, None, None),
                     ("trust", "none", 0.25, "education", "doctorate"),
                     ("trust", "little", 0.75, "education", "doctorate")])
    got = {(r["question"], r["aspect"]): r
           for r in compare_reference(answers, profiles, QUESTIONS, ref).to_pylist()}
    assert set(got) == {("party", None), ("trust", "education")}
    chosen, total = plain_counts(answers)
    obs = np.array([chosen[(0, "party", None, o)] for o in PARTY.options], dtype=float)
    q = np.array([0.5, 0.3, 0.2])
    row = got[("party", None)]
    assert row["n"] == total[(0, "party", None)]
    assert row["tvd"] == pytest.approx(0.5 * np.abs(obs / obs.sum() - q).sum())
    test = stats.chisquare(obs, f_exp=obs.sum() * q)
    assert (row["chi2"], row["p_value"], row["df"]) == pytest.approx(
        (test.statistic, test.pvalue, 2))
    assert row["outside"] == 0
    # options of reference share 0 ('some', 'much', 'full'): in the TVD, not in the test
    edu = dict(zip(profiles["agent_id"].to_pylist(), profiles["education"].to_pylist(),
                   strict=True))
    chosen, total = plain_counts(answers, edu.__getitem__)
    obs = np.array([chosen[(0, "trust", "doctorate", o)] for o in TRUST.options], dtype=float)
    q = np.array([0.25, 0.75, 0, 0, 0])
    row = got[("trust", "education")]
    assert row["value"] == "doctorate"
    assert row["tvd"] == pytest.approx(0.5 * np.abs(obs / obs.sum() - q).sum())
    test = stats.chisquare(obs[:2], f_exp=obs[:2].sum() * q[:2])
    assert (row["chi2"], row["p_value"], row["df"]) == pytest.approx(
        (test.statistic, test.pvalue, 1))
    assert row["outside"] == obs[2:].sum() > 0


@pytest.mark.parametrize(("rows", "match"), [
    ([("party", "purple", 1.0, None, None)], "question 'party' has no option 'purple'"),
    ([("mood", "good", 1.0, None, None)], "reference question 'mood' is not in the"),
    ([("topics", "jobs", 1.0, None, None)], "'topics' is multi_choice"),
    ([("party", "red", 1.0, "education", "none")], "no respondent has education = 'none'"),
    ([("party", "red", 1.0, "height", "tall")], "'height' is not a profile column"),
])
def test_compare_reference_errors(rows: list[Any], match: str) -> None:
    answers, profiles = survey(waves=1)
    with pytest.raises(ConfigError, match=match):
        compare_reference(answers, profiles, QUESTIONS, reference(rows))


# -- weights -----------------------------------------------------------------------------------
def test_rake_meets_the_targets() -> None:
    rng = random.Random(5)
    n = 1000
    profiles = pa.table({"agent_id": list(range(n)),
                         "gender": [rng.choice(["f", "m", "m"]) for _ in range(n)],
                         "education": [rng.choice(["school", "school", "college", "phd"])
                                       for _ in range(n)]})
    targets = {"gender": {"f": 0.52, "m": 0.48},
               "education": {"school": 0.4, "college": 0.45, "phd": 0.15}}
    w = rake(profiles, targets)
    assert w.shape == (n,) and w.mean() == pytest.approx(1.0)
    for aspect, shares in targets.items():
        column = np.array(profiles[aspect].to_pylist())
        for value, share in shares.items():
            assert w[column == value].sum() / w.sum() == pytest.approx(share, abs=1e-6)


def test_rake_keeps_a_population_at_its_targets() -> None:
    profiles = pa.table({"agent_id": list(range(8)), "gender": ["f", "m"] * 4,
                         "age": [30, 30, 40, 40, 30, 30, 40, 40]})
    w = rake(profiles, {"gender": {"f": 0.5, "m": 0.5}, "age": {"30": 0.5, "40": 0.5}})
    assert w.tolist() == [1.0] * 8


@pytest.mark.parametrize(("targets", "match"), [
    ({"height": {"tall": 1.0}}, "aspect 'height' is not a profile column"),
    ({"gender": {"f": 0.5, "x": 0.5}}, "gender = 'x' is not in the population"),
    ({"gender": {"f": 0.5, "m": 0.4}}, "shares of 'gender' sum to 0.9"),
])
def test_rake_errors(targets: dict[str, dict[str, float]], match: str) -> None:
    profiles = pa.table({"agent_id": list(range(4)), "gender": ["f", "m", "f", "m"]})
    with pytest.raises(ConfigError, match=match) as info:
        rake(profiles, targets)
    assert "\n" not in str(info.value)


def test_rake_that_cannot_converge_is_an_error() -> None:
    # gender and group coincide: 70% women and 30% group a cannot both hold
    profiles = pa.table({"agent_id": list(range(4)), "gender": ["f", "f", "m", "m"],
                         "group": ["a", "a", "b", "b"]})
    with pytest.raises(ConfigError, match="did not converge in 50 iterations"):
        rake(profiles, {"gender": {"f": 0.7, "m": 0.3}, "group": {"a": 0.3, "b": 0.7}},
             max_iter=50)


# -- report tables and figures -----------------------------------------------------------------
def treated(seed: int = 2) -> tuple[pa.Table, pa.Table]:
    answers, profiles = survey(seed, waves=1)
    arms = pa.array(["control" if a % 2 else "nudge" for a in answers["agent_id"].to_pylist()])
    return answers.set_column(answers.schema.get_field_index("arm"), "arm", arms), profiles


def test_report_tables_are_text() -> None:
    answers, profiles = treated()
    ref = reference([("party", "red", 0.5, None, None), ("party", "blue", 0.5, None, None)])
    tables = report_tables(answers, profiles, QUESTIONS, control="control", reference=ref,
                           targets={"education": {"school": 0.2, "college": 0.3,
                                                  "doctorate": 0.5}})
    titles = [t["title"] for t in tables]
    assert titles[:3] == ["Answers per question", "Numeric answers", "Answers by education"]
    assert any(t.startswith("Treatment effects") for t in titles)
    assert "Model against reference" in titles
    assert not any("by age" in t for t in titles)  # 60 values: no cross-tab
    assert tables[0]["head"][-1] == "weighted share"
    for t in tables:
        assert t["rows"] and all(len(r) == len(t["head"]) for r in t["rows"])
        assert all(isinstance(c, str) for r in t["rows"] for c in r)


def test_figures_draw_and_save(tmp_path: Path) -> None:
    answers, profiles = treated()
    ref = reference([("party", "red", 0.5, None, None), ("party", "blue", 0.5, None, None),
                     ("trust", "none", 1.0, "education", "college")])
    drawn = figures(answers, profiles, QUESTIONS, control="control", reference=ref,
                    targets={"education": {"school": 0.2, "college": 0.3, "doctorate": 0.5}})
    assert set(drawn) == {"marginals", "by_education", "treatment_effects", "position_bias",
                          "reference"}
    assert len(drawn["marginals"].axes) == len(QUESTIONS)
    assert len(drawn["reference"].axes) == 2
    for name, fig in drawn.items():
        assert fig.axes and all(ax.has_data() for ax in fig.axes)
        fig.savefig(tmp_path / f"{name}.png")
        assert (tmp_path / f"{name}.png").stat().st_size > 1000
        fig.clear()


def test_figures_skip_what_has_no_data() -> None:
    answers, profiles = survey(waves=1)
    drawn = figures(answers.slice(0, 0), profiles, QUESTIONS)
    assert drawn == {}
    only_years = answers.filter(pc.equal(answers["question"], "years"))
    assert set(figures(only_years, profiles.select(["agent_id"]), QUESTIONS)) == {"marginals"}
    assert set(figures(only_years, None, QUESTIONS)) == {"marginals"}  # a run without profiles
    assert [t["title"] for t in report_tables(only_years, None, QUESTIONS)] == [
        "Numeric answers"]
