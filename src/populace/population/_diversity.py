"""How varied a population and its backgrounds are, as a JSON-ready dict.

Lexical similarity is the Jaccard index of word 3-shingle sets (the sets of three
consecutive words), averaged over random pairs of backgrounds: 0 for texts that share no
phrase, 1 for identical texts. It is cheap and catches templated, copy-paste personas; it
does not see paraphrases.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ._config import PopulationConfig
from ._specs import Conditional, Numeric

_WORD = re.compile(r"\w+")


def shingles(text: str, k: int = 3) -> frozenset[tuple[str, ...]]:
    """The set of ``k`` consecutive lower-cased words of ``text``."""
    words = _WORD.findall(text.lower())
    if len(words) < k:
        return frozenset([tuple(words)]) if words else frozenset()
    return frozenset(tuple(words[i:i + k]) for i in range(len(words) - k + 1))


def jaccard(a: frozenset[Any], b: frozenset[Any]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def _pairs(n: int, count: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    """All pairs when there are few, else ``count`` random pairs of distinct indices."""
    if n * (n - 1) // 2 <= count:
        return [(i, j) for i in range(n) for j in range(i + 1, n)]
    first = rng.integers(0, n, count)
    second = (first + rng.integers(1, n, count)) % n  # never equal to first
    return list(zip(first.tolist(), second.tolist(), strict=True))


def background_diversity(texts: list[str | None], *, pairs: int = 5000,
                         seed: int = 0) -> dict[str, Any]:
    """Distinct ratio, mean pairwise Jaccard similarity and lengths of ``texts``."""
    present = [t for t in texts if t]
    n = len(present)
    out: dict[str, Any] = {"agents": len(texts), "backgrounds": n, "missing": len(texts) - n}
    if n == 0:
        return {**out, "distinct": 0, "distinct_ratio": None, "mean_similarity": None,
                "similarity_pairs": 0, "mean_words": None}
    distinct = len({" ".join(t.lower().split()) for t in present})
    sets: dict[int, frozenset[tuple[str, ...]]] = {}

    def shingled(i: int) -> frozenset[tuple[str, ...]]:
        if i not in sets:
            sets[i] = shingles(present[i])
        return sets[i]

    chosen = _pairs(n, pairs, np.random.default_rng(seed)) if n > 1 else []
    sims = [jaccard(shingled(i), shingled(j)) for i, j in chosen]
    words = [len(_WORD.findall(t)) for t in present]
    return {**out, "distinct": distinct, "distinct_ratio": distinct / n,
            "mean_similarity": float(np.mean(sims)) if sims else None,
            "similarity_pairs": len(sims), "mean_words": float(np.mean(words))}


def _counts(column: pa.ChunkedArray) -> dict[str, int]:
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    counts = pc.value_counts(column)
    return {str(v): int(c) for v, c in zip(counts.field("values").to_pylist(),
                                           counts.field("counts").to_pylist(), strict=True)}


def marginals(profiles: pa.Table, config: PopulationConfig) -> dict[str, Any]:
    """Observed shares of every aspect against the config's targets."""
    targets = config.targets()
    n = profiles.num_rows
    out: dict[str, Any] = {}
    for name, aspect in config.aspects.items():
        if name not in profiles.column_names:
            continue
        spec = aspect.spec
        column = profiles.column(name)
        if isinstance(spec, Numeric):
            values = column.to_numpy().astype(np.float64)
            out[name] = {
                "kind": "numeric", "distribution": spec.distribution,
                "params": [spec.a, spec.b],
                "bounds": [None if math.isinf(spec.low) else spec.low,
                           None if math.isinf(spec.high) else spec.high],
                "mean": float(values.mean()), "std": float(values.std()),
                "min": float(values.min()), "max": float(values.max()),
            }
            continue
        observed = _counts(column)
        rows = {}
        chi2 = 0.0
        for value, p in targets[name].items():
            count = observed.pop(value, 0)
            expected = n * p
            if expected > 0:
                chi2 += (count - expected) ** 2 / expected
            rows[value] = {"target": p, "observed": count / n if n else 0.0, "count": count}
        entry: dict[str, Any] = {
            "kind": "conditional" if isinstance(spec, Conditional) else "categorical",
            "values": rows,
            "max_abs_diff": max(abs(r["target"] - r["observed"]) for r in rows.values()),
            "chi2": chi2,
        }
        if isinstance(spec, Conditional):
            entry["given"] = spec.given
        if observed:  # values the config does not list: the table is not from this config
            entry["unexpected"] = observed
        out[name] = entry
    return out


def diversity_report(profiles: pa.Table, config: PopulationConfig,
                     backgrounds: pa.Table | None = None, *, pairs: int = 5000,
                     seed: int = 0) -> dict[str, Any]:
    """Population marginals vs targets and, given backgrounds, how diverse they are.

    ``backgrounds`` is the table :func:`generate_backgrounds` writes. Similarity is averaged
    over ``pairs`` random pairs (all pairs when there are fewer). Everything in the result
    is JSON-serialisable.
    """
    report: dict[str, Any] = {"agents": profiles.num_rows, "marginals": marginals(profiles, config)}
    if "group" in profiles.column_names:
        report["groups"] = {str(k): v for k, v in sorted(
            (int(k), v) for k, v in _counts(profiles.column("group")).items())}
    if backgrounds is not None:
        texts = backgrounds.column("background").to_pylist()
        report["backgrounds"] = background_diversity(texts, pairs=pairs, seed=seed)
    return report
