"""Archetype sampling and its audit: a decision asked once per archetype instead of once
per agent, with a seeded share of agents asked individually too, so that every step says
how far the archetypes' answers are from the agents' own.

An *archetype* is the agents of a worker alike in the ``by`` columns of the model's
``sampling:`` (for one decision, under one shared prompt). Its prompt shows only those
columns and no individual memory; it is answered ``samples`` times (seeds derived from the
prompt's key, so the same on any number of workers), and each member takes one of those
answers by its own seed. Members of one archetype on two workers get their answers from
the same samples: only the calls are repeated.

The audit compares, over the audited agents, the distribution of their own answers with
that of the answers their archetypes gave them: total variation (and Jensen–Shannon) for
categories, Wasserstein-1 for numbers, each with a bootstrap interval over the audited
agents (the basic bootstrap, which corrects the plug-in distance's upward bias: two
samples of one distribution are never at distance 0).

>>> from collections import Counter
>>> pairs = Counter({("yes", "yes"): 60, ("no", "no"): 30, ("yes", "no"): 10})
>>> d = divergence(pairs, seed=1)
>>> d["audited"], d["tv"]
(100, 0.1)
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from populace.core import ConfigError, derive_seed, unit_float
from populace.llm import audits, model_stats

#: Bootstrap resamples of an audit.
RESAMPLES = 400
_AUDIT = 0xA0D17


def audited(base: int, agent: int, share: float) -> bool:
    """Whether ``agent`` is audited for the decision of seed ``base`` (a share ``share``
    of agents, seeded)."""
    return share > 0 and unit_float(derive_seed(base, _AUDIT, agent)) < share


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return None


def divergence(pairs: Mapping[tuple[Any, Any], int], *, seed: int = 0,
               resamples: int = RESAMPLES) -> dict[str, Any]:
    """How far the mode's answers (second of each pair) are from the agents' own (first),
    over the audited agents: ``audited``; for numbers ``wasserstein``, else ``tv`` and
    ``jsd`` (bits); ``low``/``high``: a 95% interval of the distance (numbers: bootstrap;
    categories: the distance's range over a simultaneous band of the shares' differences).
    An answer that could not be read (None) is a category of its own."""
    # in a fixed order: the bootstrap's draws must not depend on the order pairs arrived
    items = sorted(((own, given, n) for (own, given), n in pairs.items() if n > 0),
                   key=lambda item: (repr(item[0]), repr(item[1])))
    total = sum(n for *_, n in items)
    out: dict[str, Any] = {"audited": total}
    if not total:
        return out
    numeric = all(_number(o) is not None and _number(g) is not None for o, g, _ in items)
    weights = np.array([n for *_, n in items], dtype=np.float64)
    rng = np.random.default_rng(seed)
    boot = rng.multinomial(total, weights / total, size=resamples).astype(np.float64)
    if numeric:
        own = np.array([_number(o) for o, _, _ in items])
        given = np.array([_number(g) for _, g, _ in items])
        stat = _wasserstein(own, given, weights[None, :])[0]
        again = _wasserstein(own, given, boot)
        out["wasserstein"] = round(float(stat), 6)
    else:
        labels = sorted({repr(v) for o, g, _ in items for v in (o, g)})
        where = {label: i for i, label in enumerate(labels)}
        to_own = np.zeros((len(items), len(labels)))
        to_given = np.zeros((len(items), len(labels)))
        for i, (o, g, _) in enumerate(items):
            to_own[i, where[repr(o)]] = 1
            to_given[i, where[repr(g)]] = 1
        p, q = (weights @ to_own) / total, (weights @ to_given) / total
        stat = 0.5 * float(np.abs(p - q).sum())
        # A distance is biased upwards and bounded below by 0, where bootstrap intervals
        # of it under-cover. Instead: a simultaneous 95% band for the differences of the
        # shares, d_c = p_c - q_c (its width from the resamples' largest studentised
        # deviation), and the distance's least and largest values over the band.
        gap = p - q
        again = (boot @ to_own - boot @ to_given) / total
        spread = again.std(axis=0)
        varies = spread > 0  # a share no resample moves has no margin
        studentised = np.abs(again - gap)[:, varies] / spread[varies]
        width = float(np.quantile(studentised.max(axis=1), 0.95)) if varies.any() else 0.0
        margin = width * spread
        out["tv"] = round(stat, 6)
        out["jsd"] = round(_jsd(p, q), 6)
        out["low"] = round(0.5 * float(np.maximum(np.abs(gap) - margin, 0).sum()), 6)
        out["high"] = round(min(1.0, 0.5 * float((np.abs(gap) + margin).sum())), 6)
        return out
    high = float(np.quantile(again, 0.975))
    # from the basic interval's low end (the resamples' spread mirrored about the
    # estimate, which takes the bias off) to the percentile interval's high end
    out["low"] = round(max(0.0, 2 * float(stat) - high), 6)
    out["high"] = round(max(float(stat), high), 6)
    return out


def _wasserstein(own: np.ndarray, given: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Wasserstein-1 between the weighted distributions of ``own`` and ``given`` (one per
    row of ``weights``): the area between their distribution functions."""
    points = np.unique(np.concatenate([own, given]))
    if len(points) < 2:
        return np.zeros(len(weights))
    a = np.searchsorted(points, own)
    b = np.searchsorted(points, given)
    k = len(points)
    total = weights.sum(axis=1, keepdims=True)
    cdf_own = np.zeros((len(weights), k))
    cdf_given = np.zeros((len(weights), k))
    np.add.at(cdf_own.T, a, weights.T)
    np.add.at(cdf_given.T, b, weights.T)
    gap = np.abs(np.cumsum(cdf_own - cdf_given, axis=1)[:, :-1]) / total
    return np.asarray(gap @ np.diff(points))


def _jsd(p: np.ndarray, q: np.ndarray) -> float:
    m = 0.5 * (p + q)

    def kl(a: np.ndarray) -> float:
        keep = a > 0
        return float((a[keep] * np.log2(a[keep] / m[keep])).sum())

    return 0.5 * kl(p) + 0.5 * kl(q)


def step_divergences(pairs: Counter[tuple[str, Any, Any]], *, seed: int = 0
                     ) -> dict[str, dict[str, Any]]:
    """:func:`divergence` per decision of one model's audited pairs."""
    by: dict[str, Counter[tuple[Any, Any]]] = {}
    for (decision, own, given), n in pairs.items():
        by.setdefault(decision, Counter())[own, given] += n
    return {d: divergence(p, seed=derive_seed(seed, i))
            for i, (d, p) in enumerate(sorted(by.items()))}


@dataclass(frozen=True)
class SamplingCounts:
    """The models' archetype sampling counters at one moment, summed over workers (see
    :class:`~populace.llm.ModelStats`): audited pairs, shared decisions, audited cost."""

    audit: Mapping[str, Counter[tuple[str, Any, Any]]]
    shared: Mapping[str, int]
    cost: Mapping[str, tuple[int, int, int, int]]
    cells: Mapping[str, Counter[tuple[str, Any, Any]]]

    @classmethod
    def of(cls, workers: Iterable[Iterable[Any]]) -> SamplingCounts:
        """From the workers' resource statistics."""
        workers = [list(w) for w in workers]
        shared: dict[str, int] = {}
        cost: dict[str, tuple[int, int, int, int]] = {}
        cells: dict[str, Counter[tuple[str, Any, Any]]] = {}
        for resources in workers:
            for m in model_stats(resources):
                for decision, cell, own, n in m.cells:
                    cells.setdefault(m.model, Counter())[decision, cell, own] += n
                if m.shared:
                    shared[m.model] = shared.get(m.model, 0) + m.shared
                if m.audit_cost[0]:
                    cost[m.model] = tuple(a + b for a, b in zip(  # type: ignore[assignment]
                        cost.get(m.model, (0, 0, 0, 0)), m.audit_cost, strict=True))
        return cls(audits(workers), shared, cost, cells)


def sampling_report(before: SamplingCounts, now: SamplingCounts, *, seed: int = 0
                    ) -> dict[str, dict[str, Any]]:
    """A step's archetype sampling per model, from the counters before and after it:
    ``shared`` (decisions answered by an archetype's samples), per decision
    :func:`divergence` of the step's audited pairs, ``audit_cost``: the audited agents' own
    decisions, calls and tokens, and ``individual``: what asking every agent would have
    cost (calls and tokens: the audited agents' mean, times the decisions). Models that
    sampled nothing are left out."""
    out: dict[str, dict[str, Any]] = {}
    for model in sorted({*now.audit, *now.shared, *now.cells}):
        shared = now.shared.get(model, 0) - before.shared.get(model, 0)
        pairs = now.audit.get(model, Counter()) - before.audit.get(model, Counter())
        cells = now.cells.get(model, Counter()) - before.cells.get(model, Counter())
        if not (shared or pairs or cells):
            continue
        got: dict[str, Any] = {"shared": shared,
                               "decisions": step_divergences(pairs, seed=seed)}
        n, calls, prompt, completion = (a - b for a, b in zip(
            now.cost.get(model, (0, 0, 0, 0)), before.cost.get(model, (0, 0, 0, 0)),
            strict=True))
        if n:
            got["individual"] = {"calls": round(calls / n * shared),
                                 "prompt_tokens": round(prompt / n * shared),
                                 "completion_tokens": round(completion / n * shared)}
            got["audit_cost"] = {"decisions": n, "calls": calls, "prompt_tokens": prompt,
                                 "completion_tokens": completion}
        if cells:  # what the surrogates of the next steps are fitted to
            got["cells"] = [[d, list(c), _plain(o), k] for (d, c, o), k
                            in sorted(cells.items(), key=repr)]
        out[model] = got
    return out


def fallen_back(steps: Iterable[Mapping[str, Any]]) -> dict[str, frozenset[str]]:
    """Per model, the decisions that fell back to individual calls in the summary entries
    ``steps`` (each entry's ``sampling.MODEL.fell_back``)."""
    out: dict[str, set[str]] = {}
    for entry in steps:
        for model, got in (entry.get("sampling") or {}).items():
            out.setdefault(model, set()).update(got.get("fell_back") or ())
    return {m: frozenset(d) for m, d in out.items() if d}


def falling_back(report: Mapping[str, Any], bounds: Mapping[str, float | None],
                 fallen: Mapping[str, frozenset[str]]) -> None:
    """Mark in a step's ``report`` (:func:`sampling_report`), per model with a bound, the
    decisions whose whole interval lies above it (``fell_back``), not fallen before.
    A multi-part decision (``q=part``) falls back as a whole (``q``)."""
    for model, got in report.items():
        bound = bounds.get(model)
        if bound is None:
            continue
        over = sorted({d.split("=", 1)[0] for d, v in got["decisions"].items()
                       if v.get("low", 0) > bound} - fallen.get(model, frozenset()))
        if over:
            got["fell_back"] = over


def instruct(agent: Any, fallen: Mapping[str, frozenset[str]],
             surrogates: Mapping[str, Mapping[str, Any]],
             allocations: Mapping[str, Mapping[Any, int]] | None = None) -> None:
    """Tell ``agent``'s worker which decisions are asked individually from now on, the
    surrogates fitted so far and, per model of ``allocate: proportional``, the answers each
    archetype gets (called on one agent per worker by the launcher)."""
    models = getattr(getattr(agent, "seat", None), "models", None)
    if models is not None and hasattr(models, "fallen"):
        models.fallen = dict(fallen)
        models.surrogates = {m: dict(d) for m, d in surrogates.items()}
        models.allocations = {m: dict(a) for m, a in (allocations or {}).items()}


def archetype_sizes(profiles: Any, by: list[str]) -> Counter[tuple[Any, ...]]:
    """Members per archetype (values of the ``by`` columns) in ``profiles`` (an Arrow
    table or a mapping of columns), the values as agents' profiles hold them."""
    import pyarrow as pa

    table = profiles if isinstance(profiles, pa.Table) else pa.table(dict(profiles))
    if not by:
        return Counter({(): table.num_rows})
    counted = table.select(by).group_by(by).aggregate([([], "count_all")])
    columns = [counted.column(c).to_pylist() for c in by]
    return Counter(dict(zip(zip(*columns, strict=True),
                            counted.column("count_all").to_pylist(), strict=True)))


def samples_of(sampling: Any, models: Any, name: str | None, cell: tuple[Any, ...]) -> int:
    """The answers archetype ``cell`` of model ``name`` gets per decision: ``samples``,
    or under ``allocate: proportional`` its share of the budget the launcher sent (the
    floor for an archetype the population had none of)."""
    if sampling.allocate == "equal":
        return int(sampling.samples)
    allocation = models.allocations.get(name)
    if allocation is None:
        raise ConfigError(f"models.{name}.sampling.allocate: proportional needs the "
                          "archetypes' sizes in the whole population, which a run's "
                          "launcher sends to its workers (outside a run: set "
                          "ModelSet.allocations[name] = sampling.allocation(sizes))")
    return int(allocation.get(cell, sampling.floor))


#: How many audited answers the whole decision's distribution counts for in an
#: archetype's (shrinking an archetype of few audited answers towards everyone's).
PRIOR = 2.0
_SURROGATE = 0x5A77


def frozen(value: Any) -> Any:
    """``value`` hashable: a mapping as a tuple of its items, a list as a tuple."""
    if isinstance(value, Mapping):
        return tuple((k, frozen(v)) for k, v in value.items())
    if isinstance(value, list | tuple):
        return tuple(frozen(v) for v in value)
    return value


def _plain(value: Any) -> Any:
    """``value`` as JSON holds it (tuples as lists)."""
    return [_plain(v) for v in value] if isinstance(value, tuple) else value


def fit_surrogates(steps: Iterable[Mapping[str, Any]], prior: float = PRIOR
                   ) -> dict[str, dict[str, dict[Any, tuple[tuple[Any, ...],
                                                             tuple[float, ...]]]]]:
    """Per model and surrogate-mode decision, the distribution of answers per archetype,
    from the audited answers in the summary entries ``steps`` (each ``sampling.MODEL.cells``):
    an archetype's counts plus ``prior`` answers drawn from the decision's overall
    distribution (a multinomial model of the ``by`` columns, shrunk towards the whole);
    the archetype ``None``: the overall distribution, for archetypes never audited."""
    counts: dict[str, dict[str, dict[Any, Counter[Any]]]] = {}
    for entry in steps:
        for model, got in (entry.get("sampling") or {}).items():
            for decision, cell, own, n in got.get("cells") or ():
                per = counts.setdefault(model, {}).setdefault(decision, {})
                per.setdefault(frozen(cell), Counter())[frozen(own)] += n
    out: dict[str, dict[str, dict[Any, tuple[tuple[Any, ...], tuple[float, ...]]]]] = {}
    for model, decisions in counts.items():
        for decision, cells in decisions.items():
            overall: Counter[Any] = Counter()
            for c in cells.values():
                overall.update(c)
            answers = sorted(overall, key=repr)
            total = sum(overall.values())
            base = np.array([overall[a] / total for a in answers])
            fitted = {None: (tuple(answers), tuple(np.cumsum(base).tolist()))}
            for cell, c in cells.items():
                p = (np.array([c[a] for a in answers], dtype=np.float64) + prior * base) \
                    / (sum(c.values()) + prior)
                fitted[cell] = (tuple(answers), tuple(np.cumsum(p).tolist()))
            out.setdefault(model, {})[decision] = fitted
    return out


def draw(fitted: Mapping[Any, tuple[tuple[Any, ...], tuple[float, ...]]],
         cell: tuple[Any, ...], seed: int) -> Any:
    """An answer of archetype ``cell`` from a fitted surrogate, by ``seed``."""
    answers, cumulative = fitted.get(cell) or fitted[None]
    u = unit_float(derive_seed(seed, _SURROGATE)) * cumulative[-1]
    return answers[min(bisect.bisect_right(cumulative, u), len(answers) - 1)]
