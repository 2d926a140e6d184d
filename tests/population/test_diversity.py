"""The diversity report: background variety and marginals against targets."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from populace.population import PopulationConfig, diversity_report, sample_population


def config() -> PopulationConfig:
    return PopulationConfig.model_validate({
        "size": 1000,
        "aspects": {
            "edu": {"template": "education"},
            "job": {"given": "edu", "weights": {
                "primary school": {"farmer": 1.0},
                "high school": {"farmer": 0.5, "clerk": 0.5},
                "bachelor's degree": {"clerk": 1.0},
                "master's degree": {"clerk": 1.0},
                "doctorate": {"clerk": 1.0},
            }},
            "age": {"distribution": "normal", "mean": 40, "std": 10, "min": 18, "round": 0},
        },
        "groups": {"by": "edu"},
    })


def backgrounds(texts: list[str | None]) -> pa.Table:
    return pa.table({"agent_id": list(range(len(texts))), "background": texts})


def test_marginals_match_targets_for_an_exact_sample() -> None:
    cfg = config()
    report = diversity_report(sample_population(cfg, 1), cfg)
    json.dumps(report)  # JSON-ready
    edu = report["marginals"]["edu"]
    assert edu["kind"] == "categorical" and edu["max_abs_diff"] < 1e-12 and edu["chi2"] < 1e-9
    assert edu["values"]["high school"] == {"target": 0.4, "observed": 0.4, "count": 400}
    job = report["marginals"]["job"]
    assert job["kind"] == "conditional" and job["given"] == "edu"
    assert job["values"]["farmer"]["target"] == pytest.approx(0.5)
    assert job["values"]["farmer"]["count"] == 500
    age = report["marginals"]["age"]
    assert age["kind"] == "numeric" and age["min"] >= 18 and abs(age["mean"] - 40) < 1.5
    assert report["groups"] == {"0": 300, "1": 400, "2": 200, "3": 80, "4": 20}
    assert "backgrounds" not in report


def test_marginals_flag_a_table_that_misses_its_targets() -> None:
    cfg = config()
    table = sample_population(cfg, 1)
    skewed = table.set_column(1, "edu", pa.array(["doctorate"] * 1000))
    edu = diversity_report(skewed, cfg)["marginals"]["edu"]
    assert edu["max_abs_diff"] == pytest.approx(0.98) and edu["chi2"] > 1000


def test_identical_backgrounds_score_as_such() -> None:
    cfg = config()
    report = diversity_report(sample_population(cfg, 1), cfg,
                              backgrounds(["You are Ana, a baker in Porto."] * 1000))["backgrounds"]
    assert report["distinct"] == 1 and report["distinct_ratio"] == pytest.approx(0.001)
    assert report["mean_similarity"] == 1.0 and report["similarity_pairs"] == 5000


def test_varied_backgrounds_score_low_and_missing_ones_are_counted() -> None:
    cfg = config()
    texts: list[str | None] = [f"You are person {i}, who likes {i * 7 % 13} cats and "
                               f"{i * 3 % 11} dogs in town {i}." for i in range(999)]
    report = diversity_report(sample_population(cfg, 1), cfg, backgrounds([*texts, None]),
                              pairs=2000, seed=3)["backgrounds"]
    assert report["missing"] == 1 and report["backgrounds"] == 999
    assert report["distinct_ratio"] == 1.0
    assert 0 < report["mean_similarity"] < 0.4
    assert report["similarity_pairs"] == 2000
    few = diversity_report(sample_population(cfg, 1), cfg,
                           backgrounds(["a b c d", "a b c e", None]))
    assert few["backgrounds"]["similarity_pairs"] == 1  # all pairs when there are few
    assert few["backgrounds"]["mean_similarity"] == pytest.approx(1 / 3)
