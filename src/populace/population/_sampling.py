"""Exact, seeded sampling of a population into one Arrow table.

Categorical aspects are not drawn agent by agent: the counts are fixed first (the largest
remainder rounding of ``N * p``), then the column of values is shuffled. So a 20 % share of
1,000 agents is exactly 200 agents, and only the assignment is random. A conditional aspect
is sampled the same way inside each stratum of the aspect it depends on.

Every aspect shuffles with its own generator, seeded from the population seed and the
aspect's *name*, so adding, removing or reordering aspects leaves the others unchanged.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from populace.core import ConfigError, derive_seed

from ._config import PopulationConfig, load_population_config, parse_population
from ._specs import Categorical, Conditional, Numeric

# Salts that keep the generators of different uses apart.
_ASPECT, _GROUPS = 0x61737065, 0x67727570


def largest_remainder(n: int, probs: Any) -> np.ndarray:
    """Integer counts summing to ``n``, each ``floor(n * p)`` or one more.

    The units left after flooring go to the largest fractional parts; ties go to the value
    listed first, so the result is deterministic.

    >>> largest_remainder(10, [0.5, 0.3, 0.2]).tolist()
    [5, 3, 2]
    >>> largest_remainder(10, [1/3, 1/3, 1/3]).tolist()
    [4, 3, 3]
    """
    p = np.asarray(probs, dtype=np.float64)
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if p.ndim != 1 or p.size == 0 or (p < 0).any() or p.sum() <= 0:
        raise ValueError("probs must be a non-empty 1-d array of non-negative weights")
    quota = n * (p / p.sum())
    counts = np.floor(quota + 1e-9).astype(np.int64)  # 199.99999999 is 200
    left = n - int(counts.sum())
    if left > 0:
        order = np.argsort(-(quota - counts), kind="stable")
        counts[order[:left]] += 1
    return counts


def _aspect_rng(seed: int, name: str) -> np.random.Generator:
    key = int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little")
    return np.random.default_rng(derive_seed(seed, _ASPECT, key))


def _index_dtype(k: int) -> type[np.integer[Any]]:
    if k <= np.iinfo(np.int8).max:
        return np.int8
    return np.int16 if k <= np.iinfo(np.int16).max else np.int32


def _exact(n: int, probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A shuffled array of value indices with the largest-remainder counts."""
    counts = largest_remainder(n, probs)
    column = np.repeat(np.arange(len(counts), dtype=_index_dtype(len(counts))), counts)
    rng.shuffle(column)
    return column


def _conditional(spec: Conditional, parent: np.ndarray, parent_values: tuple[str, ...],
                 rng: np.random.Generator) -> np.ndarray:
    out = np.empty(parent.size, dtype=_index_dtype(len(spec.values)))
    order = np.argsort(parent, kind="stable")
    sizes = np.bincount(parent, minlength=len(parent_values))
    start = 0
    for j, value in enumerate(parent_values):
        stop = start + int(sizes[j])
        out[order[start:stop]] = _exact(stop - start, spec.rows[value], rng)
        start = stop
    return out


def _groups(config: PopulationConfig, n: int, indices: dict[str, np.ndarray],
            seed: int) -> np.ndarray:
    groups = config.groups
    if groups is None:
        return np.zeros(n, dtype=np.int32)
    if groups.by is not None:
        return indices[groups.by].astype(np.int32)
    assert groups.count is not None
    rng = np.random.default_rng(derive_seed(seed, _GROUPS))
    column = np.repeat(np.arange(groups.count, dtype=np.int32),
                       largest_remainder(n, np.ones(groups.count)))
    rng.shuffle(column)
    return column


def _as_config(config: PopulationConfig | Mapping[str, Any] | str | Path) -> PopulationConfig:
    if isinstance(config, PopulationConfig):
        return config
    if isinstance(config, str | Path):
        return load_population_config(config)
    return parse_population(dict(config))


def sample_population(config: PopulationConfig | Mapping[str, Any] | str | Path,
                      seed: int | None = None, *, size: int | None = None) -> pa.Table:
    """Sample the population ``config`` describes: one row per agent.

    ``config`` is a :class:`PopulationConfig`, a mapping of the same keys, or the path of a
    population (or run) file. ``seed`` defaults to the config's ``seed`` (else 0) and
    ``size`` to its ``size``. Columns: ``agent_id`` (int64, 0..N-1), one per aspect
    (categorical: dictionary-encoded strings; numeric: float64, or int64 with ``round: 0``)
    and ``group`` (int32). Same config and seed, same table.

    >>> table = sample_population({"size": 10, "aspects": {"coin": {"values": ["h", "t"]}}}, 1)
    >>> sorted(table.column("coin").to_pylist()).count("h")
    5
    """
    cfg = _as_config(config)
    n = size if size is not None else cfg.size
    if n is None or n < 1:
        raise ConfigError("population size is not set: give size: in the population config")
    seed = seed if seed is not None else (cfg.seed or 0)
    indices: dict[str, np.ndarray] = {}
    columns: dict[str, pa.Array] = {}
    for name in cfg.sampling_order:
        spec = cfg.aspects[name].spec
        rng = _aspect_rng(seed, name)
        if isinstance(spec, Numeric):
            columns[name] = pa.array(spec.sample(rng, n))
            continue
        if isinstance(spec, Categorical):
            idx = _exact(n, spec.probs, rng)
        else:
            idx = _conditional(spec, indices[spec.given], cfg.values(spec.given), rng)
        indices[name] = idx
        columns[name] = pa.DictionaryArray.from_arrays(idx, pa.array(spec.values, pa.string()))
    table: dict[str, pa.Array] = {"agent_id": pa.array(np.arange(n, dtype=np.int64))}
    table.update((name, columns[name]) for name in cfg.aspects)  # config order
    table["group"] = pa.array(_groups(cfg, n, indices, seed))
    return pa.table(table)
