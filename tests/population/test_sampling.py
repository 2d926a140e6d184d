"""Exact, seeded sampling: counts, goodness of fit, reproducibility, numeric aspects, groups."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from populace.core import ConfigError
from populace.population import (
    TEMPLATES,
    PopulationConfig,
    largest_remainder,
    sample_population,
)

N = 100_000
EDUCATION = list(TEMPLATES["education"])


def chi2_sf(stat: float, dof: int) -> float:
    """P(X >= stat) for X ~ chi-square(dof): 1 minus the regularised lower gamma (series)."""
    a, x = dof / 2.0, stat / 2.0
    if x <= 0:
        return 1.0
    term = total = 1.0 / a
    n = 0
    while abs(term) > 1e-15 * abs(total) and n < 100_000:
        n += 1
        term *= x / (a + n)
        total += term
    lower = math.exp(a * math.log(x) - x - math.lgamma(a)) * total
    return max(0.0, 1.0 - lower)


def chi_square(counts: list[int], probs: list[float]) -> tuple[float, float]:
    n = sum(counts)
    pairs = [(c, n * p) for c, p in zip(counts, probs, strict=True) if p > 0]
    stat = sum((c - e) ** 2 / e for c, e in pairs)
    return stat, chi2_sf(stat, len(pairs) - 1)


def counts_of(table: pa.Table, name: str, values: list[str]) -> list[int]:
    seen = Counter(table.column(name).to_pylist())
    assert set(seen) <= set(values)
    return [seen[v] for v in values]


def cfg(data: dict[str, Any]) -> PopulationConfig:
    return PopulationConfig.model_validate(data)


def all_templates(size: int = N) -> PopulationConfig:
    aspects: dict[str, Any] = {name: {"template": name} for name in TEMPLATES}
    aspects["job"] = {
        "given": "education",
        "weights": {
            "primary school": {"farmer": 0.6, "clerk": 0.3, "engineer": 0.1},
            "high school": {"farmer": 0.3, "clerk": 0.5, "engineer": 0.2},
            "bachelor's degree": {"farmer": 0.1, "clerk": 0.4, "engineer": 0.5},
            "master's degree": {"farmer": "1/20", "clerk": 0.25, "engineer": 0.7},
            "doctorate": {"clerk": 0.2, "engineer": 0.8},
        },
    }
    return cfg({"size": size, "aspects": aspects})


@pytest.fixture(scope="module")
def big() -> tuple[PopulationConfig, pa.Table]:
    config = all_templates()
    return config, sample_population(config, seed=2024)


def test_chi2_helper_matches_known_quantiles() -> None:
    assert chi2_sf(3.841, 1) == pytest.approx(0.05, abs=1e-3)
    assert chi2_sf(18.307, 10) == pytest.approx(0.05, abs=1e-3)
    assert chi2_sf(0.0, 4) == 1.0


def test_largest_remainder() -> None:
    assert largest_remainder(10, [0.5, 0.3, 0.2]).tolist() == [5, 3, 2]
    assert largest_remainder(10, [1 / 3] * 3).tolist() == [4, 3, 3]  # tie: first listed wins
    assert largest_remainder(1000, [0.2] * 5).tolist() == [200] * 5
    assert largest_remainder(1200, [1 / 6] * 6).tolist() == [200] * 6
    assert largest_remainder(7, [0.0, 1.0]).tolist() == [0, 7]
    assert largest_remainder(0, [0.5, 0.5]).tolist() == [0, 0]
    rng = np.random.default_rng(0)
    for _ in range(200):
        p = rng.dirichlet(np.ones(rng.integers(1, 30)))
        n = int(rng.integers(0, 10_000))
        counts = largest_remainder(n, p)
        assert counts.sum() == n
        assert (np.abs(counts - n * p) < 1).all()
    with pytest.raises(ValueError):
        largest_remainder(5, [])


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_template_counts_are_exact_and_fit(big: tuple[PopulationConfig, pa.Table],
                                          name: str) -> None:
    config, table = big
    spec = config.aspects[name].spec
    values = list(TEMPLATES[name])
    counts = counts_of(table, name, values)
    assert counts == largest_remainder(N, spec.probs).tolist()  # type: ignore[union-attr]
    stat, p = chi_square(counts, [TEMPLATES[name][v] / 100 for v in values])
    assert p > 0.99, (stat, p)


def test_conditional_counts_are_exact_in_every_stratum(
        big: tuple[PopulationConfig, pa.Table]) -> None:
    config, table = big
    spec = config.aspects["job"].spec
    education = np.asarray(table.column("education").to_pylist())
    job = np.asarray(table.column("job").to_pylist())
    values = ["farmer", "clerk", "engineer"]
    for level in EDUCATION:
        inside = job[education == level]
        row = spec.rows[level]  # type: ignore[union-attr]
        counts = [int((inside == v).sum()) for v in values]
        assert counts == largest_remainder(inside.size, row).tolist(), level
        stat, p = chi_square(counts, row.tolist())
        assert p > 0.99, (level, stat, p)
    # The marginal mixes the strata: close to the target, though not exact by construction.
    target = config.targets()["job"]
    stat, p = chi_square(counts_of(table, "job", values), [target[v] for v in values])
    assert p > 0.99, (stat, p)


def test_independent_aspects_are_independent(big: tuple[PopulationConfig, pa.Table]) -> None:
    # Exact marginals say nothing of the joint: check the shuffles are unrelated.
    _, table = big
    gender = table.column("gender").combine_chunks().indices.to_numpy()
    age = table.column("age").combine_chunks().indices.to_numpy()
    joint = np.zeros((gender.max() + 1, age.max() + 1))
    np.add.at(joint, (gender, age), 1)
    expected = np.outer(joint.sum(1), joint.sum(0)) / joint.sum()
    stat = float(((joint - expected) ** 2 / expected).sum())
    dof = (joint.shape[0] - 1) * (joint.shape[1] - 1)
    assert chi2_sf(stat, dof) > 0.001, stat


def test_table_layout(big: tuple[PopulationConfig, pa.Table]) -> None:
    _, table = big
    assert table.column_names == ["agent_id", *TEMPLATES, "job", "group"]
    assert table.column("agent_id").to_pylist() == list(range(N))
    assert table.schema.field("agent_id").type == pa.int64()
    assert pa.types.is_dictionary(table.schema.field("education").type)
    assert table.schema.field("group").type == pa.int32()
    assert set(table.column("group").to_pylist()) == {0}


def test_same_seed_same_population_and_different_seeds_differ() -> None:
    config = all_templates(5000)
    a, b = sample_population(config, seed=7), sample_population(config, seed=7)
    assert a.equals(b)
    c = sample_population(config, seed=8)
    for name in config.aspects:
        assert a.column(name).to_pylist() != c.column(name).to_pylist(), name
        assert sorted(a.column(name).to_pylist()) == sorted(c.column(name).to_pylist()), name


def test_seed_defaults_to_config_seed_then_zero() -> None:
    data = {"size": 500, "aspects": {"edu": {"template": "education"}}}
    assert sample_population(cfg({**data, "seed": 5})).equals(sample_population(cfg(data), 5))
    assert sample_population(cfg(data)).equals(sample_population(cfg(data), 0))


def test_aspects_are_keyed_by_name_not_position() -> None:
    # Adding or reordering aspects does not reshuffle the others.
    one = cfg({"size": 1000, "aspects": {"edu": {"template": "education"}}})
    two = cfg({"size": 1000, "aspects": {"gender": {"template": "gender"},
                                         "edu": {"template": "education"}}})
    assert sample_population(one, 3).column("edu").equals(sample_population(two, 3).column("edu"))


def test_size_argument_and_missing_size() -> None:
    config = cfg({"aspects": {"edu": {"template": "education"}}})
    assert sample_population(config, 1, size=10).num_rows == 10
    with pytest.raises(ConfigError, match="size"):
        sample_population(config, 1)


def test_accepts_mapping_and_path(tmp_path: Path) -> None:
    data = {"size": 30, "aspects": {"coin": {"values": ["heads", "tails"]}}}
    from_dict = sample_population(data, 4)
    path = tmp_path / "pop.yaml"
    path.write_text("size: 30\naspects:\n  coin: {values: [heads, tails]}\n")
    assert sample_population(path, 4).equals(from_dict)
    assert sample_population(str(path), 4).equals(from_dict)
    with pytest.raises(ConfigError, match=r"^population: aspects\.coin\.values"):
        sample_population({"size": 3, "aspects": {"coin": {"values": ["a", "a"]}}})


@pytest.mark.parametrize("spec,low,high", [
    ({"distribution": "normal", "mean": 40, "std": 15, "min": 18, "max": 90, "round": 0},
     18, 90),
    ({"distribution": "uniform", "low": 0, "high": 1, "round": 2}, 0, 1),
    ({"distribution": "lognormal", "mu": 10, "sigma": 0.8, "min": 5000, "max": 100000.5,
      "round": 0}, 5000, 100000),
    ({"distribution": "normal", "mean": 0, "std": 1, "min": 2.5, "max": 3.25, "round": 1},
     2.5, 3.2),
])
def test_numeric_aspects_stay_in_bounds_and_are_rounded(spec: dict[str, Any], low: float,
                                                        high: float) -> None:
    table = sample_population(cfg({"size": 20_000, "aspects": {"x": spec}}), 11)
    x = table.column("x").to_numpy()
    assert x.min() >= low and x.max() <= high
    decimals = spec["round"]
    if decimals == 0:
        assert table.schema.field("x").type == pa.int64()
    else:
        assert np.allclose(x, np.round(x, decimals))
    assert len(np.unique(x)) > 5


def test_numeric_bounds_truncate_rather_than_clip() -> None:
    spec = {"distribution": "normal", "mean": 0, "std": 1, "min": -1, "max": 1}
    x = sample_population(cfg({"size": 50_000, "aspects": {"x": spec}}), 1).column("x").to_numpy()
    assert x.min() >= -1 and x.max() <= 1
    assert (np.abs(x) == 1).sum() == 0  # clipping would pile ~32 % of agents onto the bounds
    assert abs(x.mean()) < 0.02 and 0.5 < x.std() < 0.6  # truncated N(0,1) on [-1,1]: sd 0.54


def test_numeric_moments() -> None:
    spec = {"distribution": "normal", "mean": 50, "std": 10}
    x = sample_population(cfg({"size": 50_000, "aspects": {"x": spec}}), 2).column("x").to_numpy()
    assert x.dtype == np.float64
    assert abs(x.mean() - 50) < 0.2 and abs(x.std() - 10) < 0.2


def test_groups_by_aspect_and_by_count() -> None:
    by = cfg({"size": 1000, "aspects": {"edu": {"values": ["a", "b", "c", "d"]}},
              "groups": {"by": "edu"}})
    table = sample_population(by, 1)
    for value, group in zip(table.column("edu").to_pylist(), table.column("group").to_pylist(),
                            strict=True):
        assert group == "abcd".index(value)
    counted = cfg({"size": 1003, "aspects": {}, "groups": {"count": 10}})
    groups = sample_population(counted, 1).column("group").to_pylist()
    assert sorted(Counter(groups).values()) == [100] * 7 + [101] * 3
    assert groups != sorted(groups)


def test_examples_give_exactly_200_per_level() -> None:
    from populace.population import load_population_config

    root = Path(__file__).resolve().parents[2] / "examples" / "population"
    for name, column, k in [("education_200x5.yaml", "education", 5),
                            ("professions_200x6.yaml", "profession", 6)]:
        table = sample_population(load_population_config(root / name))
        assert table.num_rows == 200 * k
        assert sorted(Counter(table.column(column).to_pylist()).values()) == [200] * k
        assert sorted(Counter(table.column("group").to_pylist()).items()) == [
            (g, 200) for g in range(k)]


@pytest.mark.slow
def test_a_million_agents() -> None:
    # how fast: benchmarks/population.py (a million agents by default)
    table = sample_population(all_templates(1_000_000), 1)
    assert table.num_rows == 1_000_000
