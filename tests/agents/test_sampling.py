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

from populace.agents import Choice, Persona, divergence, fit_surrogates
from populace.agents._sampling import draw
from populace.core import ConfigError
from populace.llm import ModelSet, ScriptedConfig

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
