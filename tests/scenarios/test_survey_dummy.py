"""The dummy model's survey answers are what docs/survey.md says: uniform over the options
(and the non-empty subsets of a multiple choice), and over a numeric question's whole range.

Each question is answered by 100,000 respondents through ``Respondent.answer`` (the path a
run takes), and the counts get a chi-square test. The seeds are fixed, so the p-values are
too: a threshold of 1e-3 is no flaky test, and the old ``number mod n_options`` rule fails
it by many orders of magnitude (p = 2e-15 on a 5-point scale).
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from scipy.stats import chisquare

from populace.core import derive_seed
from populace.llm.offline import DummyModel
from populace.scenarios.survey import Plan, Questionnaire, Respondent
from populace.scenarios.survey._scenario import ROW_DTYPE

N = 100_000
QUESTIONS = [
    {"id": "scale5", "type": "likert", "text": "How much?",
     "scale": ["1", "2", "3", "4", "5"]},
    {"id": "pick11", "type": "single_choice", "text": "Which?",
     "options": [f"o{i}" for i in range(11)]},
    {"id": "several", "type": "multi_choice", "text": "Which ones?",
     "options": ["a", "b", "c", "d"]},
    {"id": "count", "type": "numeric", "text": "How many?", "range": [10, 1010]},
    {"id": "share", "type": "numeric", "text": "What share?", "range": [0.5, 1.5]},
    {"id": "why", "type": "open", "text": "Why?", "code_into": ["x", "y", "z"]},
]


@pytest.fixture(scope="module")
def rows() -> np.ndarray:
    """The answer rows of 100,000 respondents of the dummy model (see ROW_DTYPE)."""
    questionnaire = Questionnaire.model_validate({"questions": QUESTIONS})
    wave = questionnaire.plan[0]
    plan = Plan(questionnaire=questionnaire, model="dummy",
                bases=(tuple(derive_seed(33, 1, i) for i in range(len(wave))),))
    models = {"dummy": DummyModel(latency=0)}

    async def answer_all() -> bytes:
        rows = []
        for i in range(N):
            packed, _, errors = await Respondent(i, models=models, plan=plan).answer(0)
            assert errors is None
            rows.append(packed)
        return b"".join(rows)

    rows = np.frombuffer(asyncio.run(answer_all()), ROW_DTYPE)
    assert rows["valid"].all()
    return rows


def by_question(rows: np.ndarray, column: str) -> dict[str, np.ndarray]:
    return {q["id"]: rows[column][rows["question"] == j] for j, q in enumerate(QUESTIONS)}


@pytest.fixture(scope="module")
def codes(rows: np.ndarray) -> dict[str, np.ndarray]:
    """question id → the 100,000 codes answered."""
    return by_question(rows, "code")


@pytest.fixture(scope="module")
def positions(rows: np.ndarray) -> dict[str, np.ndarray]:
    """question id → where the chosen option was shown, 1-based."""
    return by_question(rows, "position")


def counts(values: np.ndarray, categories: np.ndarray) -> np.ndarray:
    assert np.isin(values, categories).all(), "an answer outside the question's answers"
    return np.array([(values == c).sum() for c in categories])


@pytest.mark.parametrize(("qid", "categories"), [
    ("scale5", np.arange(1, 6)),
    ("pick11", np.arange(1, 12)),
    ("several", np.arange(1, 16)),  # bitmasks of the 15 non-empty subsets of 4 options
    ("count", np.arange(10, 1011)),  # every integer of the range, not only 10..110
    ("share", 0.5 + np.arange(101) / 100),  # the grid of 101 points, both ends included
    ("why", np.arange(1, 4)),
])
def test_dummy_answers_are_uniform_by_chi_square(codes: dict[str, np.ndarray], qid: str,
                                                 categories: np.ndarray) -> None:
    values = codes[qid]
    assert len(values) == N
    if qid == "share":
        values = np.round(values, 9)
        categories = np.round(categories, 9)
    observed = counts(values, categories)
    assert observed.sum() == N
    p = chisquare(observed).pvalue
    assert p > 1e-3, f"{qid}: not uniform (p = {p:.3g}, shares {observed[:6] / N} …)"


def test_dummy_answers_are_uniform_over_the_positions_shown(
        positions: dict[str, np.ndarray]) -> None:
    """A shuffled question hides a bias in the codes: where the chosen option was shown
    must be uniform too (the old rule picked the first positions more often)."""
    for qid, k in (("pick11", 11), ("scale5", 5)):
        observed = counts(positions[qid], np.arange(1, k + 1))
        p = chisquare(observed).pvalue
        assert p > 1e-3, f"{qid}: positions not uniform (p = {p:.3g})"


def test_dummy_numeric_answers_reach_both_ends_of_the_range(
        codes: dict[str, np.ndarray]) -> None:
    assert codes["count"].min() == 10 and codes["count"].max() == 1010
    assert codes["share"].min() == 0.5 and codes["share"].max() == 1.5
