"""Archetype sampling on the persona agent: members of an archetype share its samples
(calls: archetypes x samples, plus the audit), the answers do not depend on how agents are
spread over workers, individual mode is untouched, and the audit's interval covers the
true distance."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from populace.agents import Choice, Persona, archetype_sizes, divergence, fit_surrogates
from populace.agents._sampling import draw
from populace.core import ConfigError, unit_float
from populace.llm import ModelSet, SamplingConfig, ScriptedConfig

VOTE = Choice(["red", "green", "blue"])


class Voter(Persona):
    rules = "An election is held every step."


def profiles(n: int) -> list[dict[str, Any]]:
    return [{"age": 20 + 10 * (i % 5), "job": ["nurse", "baker"][i % 2],
             "background": f"You live at number {i}."} for i in range(n)]


def models(**sampling: Any) -> ModelSet:
    config = {"provider": "scripted"}
    if sampling:
        config["sampling"] = sampling
    return ModelSet.build({"s": ScriptedConfig.model_validate(config)})


async def votes(ids: range, people: list[dict[str, Any]], ms: ModelSet) -> dict[int, Any]:
    import asyncio

    voters = [Voter(i, people[i], models=ms) for i in ids]
    got = await asyncio.gather(*(v.decide("Whom do you vote for?", VOTE, step=1, seed=3)
                                 for v in voters))
    return {v.id: (d.value, d.calls) for v, d in zip(voters, got, strict=True)}


async def test_an_archetype_is_asked_samples_times_and_its_members_draw_from_them() -> None:
    people = profiles(200)
    ms = models(by=["job"], samples=4, audit=0.0)
    got = await votes(range(200), people, ms)
    stats = ms.statistics()["s"]
    assert stats.requests == 2 * 4  # two jobs, four samples each: not 200 calls
    assert stats.shared == 200
    assert {calls for _, calls in got.values()} == {0}  # shared calls are no one's own
    assert len({v for v, _ in got.values()}) > 1
    # the archetype's prompt shows only its columns: no age, no background
    alone = Voter(0, people[0], models=ms)
    assert alone.archetype_text() == "About you: job: nurse."


async def test_the_answers_do_not_depend_on_the_workers() -> None:
    people = profiles(120)
    one = await votes(range(120), people, models(by=["job"], samples=8, audit=0.1))
    two = {**await votes(range(0, 120, 2), people, models(by=["job"], samples=8, audit=0.1)),
           **await votes(range(1, 120, 2), people, models(by=["job"], samples=8, audit=0.1))}
    assert {k: v[0] for k, v in one.items()} == {k: v[0] for k, v in two.items()}


async def test_individual_mode_and_a_per_decision_override_ask_every_agent() -> None:
    people = profiles(30)
    plain = await votes(range(30), people, models())
    ms = models(by=["job"], decisions={"Whom do you vote for?": "individual"})
    assert await votes(range(30), people, ms) == plain
    assert ms.statistics()["s"].requests == 30 and ms.statistics()["s"].shared == 0


async def test_the_audit_asks_its_share_individually_and_counts_the_pairs() -> None:
    people = profiles(400)
    ms = models(by=["job"], samples=4, audit=0.25)
    got = await votes(range(400), people, ms)
    stats = ms.statistics()["s"]
    audited = sum(n for *_, n in stats.audit)
    assert 60 < audited < 140  # a quarter of 400, seeded
    assert stats.requests == 2 * 4 + audited
    assert sum(calls for _, calls in got.values()) == audited  # the audited pay their call
    assert {d for d, *_ in stats.audit} == {"Whom do you vote for?"}


def test_sampling_is_checked_in_one_line() -> None:
    with pytest.raises(ValidationError, match="by: archetype and surrogate modes need the "):
        models(samples=4)
    with pytest.raises(ValidationError, match="samples"):
        models(by=["job"], samples=0)


async def test_a_column_the_profile_lacks_is_one_line() -> None:
    v = Voter(0, {"age": 3}, models=models(by=["job"]))
    with pytest.raises(ConfigError, match=r"sampling.by: no profile column 'job' \(have: age\)"):
        await v.decide("Whom do you vote for?", VOTE, step=1)


def test_the_audit_interval_covers_the_true_distance() -> None:
    """200 audited agents per repetition, 200 repetitions, four true distances: the 95%
    interval holds the truth in at least 90% of them (and the plug-in distance alone,
    biased upwards, would not be an interval at all)."""
    rng = np.random.default_rng(0)
    p = np.array([0.1, 0.2, 0.3, 0.25, 0.15])
    for shift in (0.0, 0.02, 0.05, 0.1):
        q = p.copy()
        q[0] += shift
        q[2] -= shift
        covered = 0
        for rep in range(200):
            own = rng.choice(5, 200, p=p)
            given = rng.choice(5, 200, p=q)
            d = divergence(Counter(zip(map(str, own), map(str, given), strict=True)),
                           seed=rep)
            covered += d["low"] <= shift <= d["high"]
        assert covered >= 180, (shift, covered)


def test_numbers_are_compared_by_wasserstein() -> None:
    d = divergence(Counter({(1, 2): 50, (3, 3): 50}))
    assert d["wasserstein"] == 0.5 and "tv" not in d
    assert d["low"] <= 0.5 <= d["high"]


def test_a_surrogate_is_each_archetypes_audited_answers_shrunk_to_everyones() -> None:
    steps = [{"sampling": {"s": {"cells": [["vote", ["nurse"], "red", 8],
                                           ["vote", ["baker"], "blue", 1]]}}},
             {"sampling": {"s": {"cells": [["vote", ["nurse"], "blue", 2]]}}}]
    fitted = fit_surrogates(steps, prior=2.0)["s"]["vote"]
    answers, cumulative = fitted[("nurse",)]
    assert answers == ("blue", "red")
    # nurses: 2 blue, 8 red, plus 2 answers of everyone's (3 blue, 8 red of 11)
    assert cumulative[0] == pytest.approx((2 + 2 * 3 / 11) / 12)
    assert fitted[None][1][0] == pytest.approx(3 / 11)  # an archetype never audited
    draws = Counter(draw(fitted, ("nurse",), s) for s in range(4000))
    assert draws["blue"] / 4000 == pytest.approx(cumulative[0], abs=0.03)
    assert draw(fitted, ("cook",), 7) == draw(fitted, ("cook",), 7)


async def test_decide_with_a_surrogate_makes_no_call_but_the_audits() -> None:
    people = profiles(400)
    ms = models(mode="surrogate", by=["job"], audit=0.1)
    ms.surrogates = {"s": {"Whom do you vote for?": fit_surrogates(
        [{"sampling": {"s": {"cells": [["Whom do you vote for?", ["nurse"], "red", 5],
                                       ["Whom do you vote for?", ["baker"], "blue", 5]]}}}],
        prior=0.0)["s"]["Whom do you vote for?"]}}
    got = await votes(range(400), people, ms)
    stats = ms.statistics()["s"]
    audited = sum(n for *_, n in stats.audit)
    assert stats.requests == audited and 20 < audited < 70  # only the audited asked
    unaudited = {v for i, (v, calls) in got.items() if calls == 0}
    assert unaudited == {"red", "blue"}
    assert {c for c, *_ in [(cell, own) for _, cell, own, _ in stats.cells]} <= {("nurse",),
                                                                                ("baker",)}


# -- allocate: proportional ----------------------------------------------------------------

def test_proportional_allocation_is_the_exact_budget_with_a_floor() -> None:
    rng = np.random.default_rng(31)
    for _ in range(300):
        k, samples = int(rng.integers(1, 40)), int(rng.integers(1, 100))
        sizes = {(i,): int(rng.choice([1, 3, 50, int(rng.integers(1, 10**6))]))
                 for i in range(k)}
        config = SamplingConfig(by=["x"], samples=samples, allocate="proportional")
        got = config.allocation(sizes)
        assert sum(got.values()) == k * samples
        assert min(got.values()) >= min(4, samples) == config.floor
        # above the floor, within one of the archetype's share of what the floor left
        free = [c for c, n in got.items() if n > config.floor]
        left = k * samples - config.floor * (k - len(free))
        total = sum(sizes[c] for c in free)
        assert all(abs(got[c] - left * sizes[c] / total) < 1 for c in free)
        assert SamplingConfig(by=["x"], samples=samples).allocation(sizes) == \
            dict.fromkeys(sorted(sizes, key=repr), samples)


def skewed(n: int) -> list[dict[str, Any]]:
    return [{"job": "baker" if i % 5 == 0 else "nurse"} for i in range(n)]


def proportional(people: list[dict[str, Any]], **sampling: Any) -> ModelSet:
    """A worker's models as a run's launcher leaves them: the allocation counted over the
    whole population ``people``."""
    ms = models(allocate="proportional", **sampling)
    config = ms.sampling("s")
    assert config is not None
    sizes = archetype_sizes({c: [p[c] for p in people] for c in config.by}, config.by)
    ms.allocations = {"s": config.allocation(sizes)}
    return ms


async def test_proportional_samples_follow_the_population_and_not_the_workers() -> None:
    people = skewed(200)
    ms = proportional(people, by=["job"], samples=8, audit=0.0)
    assert ms.allocations["s"] == {("baker",): 4, ("nurse",): 12}  # 160 nurses, 40 bakers
    one = await votes(range(200), people, ms)
    assert ms.statistics()["s"].requests == 2 * 8  # the budget of equal allocation
    two = {**await votes(range(0, 200, 2), people, proportional(people, by=["job"],
                                                                  samples=8, audit=0.1)),
           **await votes(range(1, 200, 2), people, proportional(people, by=["job"],
                                                                  samples=8, audit=0.1))}
    audited = {k for k, (_, calls) in two.items() if calls}
    assert {k: v[0] for k, v in one.items() if k not in audited} == \
        {k: v[0] for k, v in two.items() if k not in audited}


async def test_proportional_without_the_populations_sizes_is_one_line() -> None:
    v = Voter(0, {"job": "nurse"}, models=models(by=["job"], allocate="proportional"))
    with pytest.raises(ConfigError, match="allocate: proportional needs the archetypes' "):
        await v.decide("Whom do you vote for?", VOTE, step=1)


#: Four archetypes of very unequal sizes, each with its own answers' distribution.
TRUTH = {"nurse": (425, [0.7, 0.2, 0.1]), "baker": (35, [0.2, 0.5, 0.3]),
         "judge": (25, [0.1, 0.1, 0.8]), "cook": (15, [0.4, 0.4, 0.2])}


async def marginal_error(allocate: str, base: int) -> tuple[float, int]:
    """Squared error of the answers' marginal over 500 agents against the true one, and
    the archetypes' samples drawn, for one seeded decision."""
    import asyncio

    people = [{"job": job} for job, (n, _) in TRUTH.items() for _ in range(n)]
    ms = proportional(people, by=["job"], samples=8, audit=0.0) \
        if allocate == "proportional" else models(by=["job"], samples=8, audit=0.0)
    drawn = 0

    def asking(job: str) -> Any:
        async def ask(shared: bool, seed: int) -> int:
            nonlocal drawn
            drawn += shared
            return int(np.searchsorted(np.cumsum(TRUTH[job][1]), unit_float(seed),
                                       side="right"))
        return ask

    voters = [Voter(i, p, models=ms) for i, p in enumerate(people)]
    got = await asyncio.gather(*(v.sampled("q", "q", base, 1, asking(p["job"]), lambda x: x)
                                 for v, p in zip(voters, people, strict=True)))
    share = np.bincount([answer for answer, _ in got], minlength=3) / len(people)
    true = sum(n * np.array(p) for n, p in TRUTH.values()) / len(people)
    return float(((share - true) ** 2).sum()), drawn


async def test_proportional_allocation_errs_less_for_the_same_samples() -> None:
    """Stratified sampling: with 32 answers in all, the big archetype's 20 (instead of 8)
    carry most of the marginal; over 30 seeded decisions its squared error is well under
    equal allocation's (variance Σ w σ² / n against A Σ w² σ² / n: about 2.4 times less)."""
    equal = [await marginal_error("equal", base) for base in range(30)]
    prop = [await marginal_error("proportional", base) for base in range(30)]
    assert {drawn for _, drawn in equal} == {drawn for _, drawn in prop} == {4 * 8}
    mse_equal = float(np.mean([e for e, _ in equal]))
    mse_prop = float(np.mean([e for e, _ in prop]))
    assert mse_prop < 0.6 * mse_equal, (mse_prop, mse_equal)
