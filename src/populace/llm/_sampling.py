"""``sampling:`` of a model: whether the persona decisions it answers are asked of every
agent (``individual``) or once per archetype (``archetype``), with a seeded share of agents
audited individually. The data only: the persona agent (:mod:`populace.agents`) carries it
out, and the launcher reports the audit's divergence per step.

```yaml
models:
  scripted:
    provider: scripted
    sampling: {mode: archetype, by: [education, age_band], samples: 16, audit: 0.02}
```

``allocate: proportional`` shares the same budget, archetypes × ``samples`` answers per
decision, among the archetypes by their sizes in the whole population (stratified sampling
with proportional allocation), each keeping at least :data:`FLOOR`: a marginal over the
population then has the variance ``Σ w_a σ_a² / B`` instead of ``A Σ w_a² σ_a² / B``
(``w_a``: an archetype's share, ``A`` archetypes, ``B`` answers), never more and the less
the more unequal the archetypes are.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import Field, model_validator

from populace._strict import StrictModel

Mode = Literal["individual", "archetype", "surrogate"]
Allocate = Literal["equal", "proportional"]
#: The least answers an archetype gets under ``allocate: proportional`` (``samples`` when
#: that is less): an archetype of few members still has more than one answer to draw from.
FLOOR = 4


class SamplingConfig(StrictModel):
    """How a model's persona decisions are sampled (see the module docstring)."""

    mode: Mode = Field("archetype", description="individual: one call per agent and "
                       "decision; archetype: agents alike in the `by` columns share one "
                       "prompt, answered `samples` times, each member drawing one answer; "
                       "surrogate: only the audited agents are asked, the others answered "
                       "by a model of the `by` columns fitted to the audited answers of "
                       "the steps before (archetypes until there are some)")
    by: list[str] = Field(default_factory=list, description="profile columns that make an "
                          "archetype (the prompt shows only these)")
    samples: int = Field(16, strict=True, ge=1, le=1024, description="answers drawn per "
                         "archetype and decision (calls, or one request for n answers with "
                         "coalesce: true); with allocate: proportional, their mean")
    allocate: Allocate = Field("equal", description="equal: every archetype gets `samples` "
                               "answers; proportional: archetypes × samples answers shared "
                               "by the archetypes' sizes in the whole population, at least "
                               f"{FLOOR} each (largest remainder: the total is exact)")
    audit: float = Field(0.02, ge=0, le=1, description="seeded share of agents also asked "
                         "individually; their two answers give the divergence per step")
    fallback: float | None = Field(None, gt=0, description="adaptive: a decision whose "
                                   "audited distance has its whole 95% interval above this "
                                   "(TV for categories; Wasserstein, in the answer's units, "
                                   "for numbers) is asked individually from the next step on")
    decisions: dict[str, Mode] = Field(default_factory=dict, description="a mode per "
                                       "decision name, overriding `mode`")

    @model_validator(mode="after")
    def _needs_columns(self) -> SamplingConfig:
        modes = {self.mode, *self.decisions.values()}
        if modes - {"individual"} and not self.by:
            raise ValueError("by: archetype and surrogate modes need the profile columns "
                             "that make an archetype (e.g. by: [age_band, education])")
        if "surrogate" in modes and not self.audit:
            raise ValueError("audit: a surrogate is fitted to the audited answers; give a "
                             "share above 0")
        if len(set(self.by)) != len(self.by):
            raise ValueError(f"by: columns must be distinct, got {self.by}")
        return self

    def mode_of(self, decision: str) -> Mode:
        """The mode of ``decision`` (its own, else :attr:`mode`)."""
        return self.decisions.get(decision, self.mode)

    @property
    def floor(self) -> int:
        """The least answers an archetype gets under ``allocate: proportional``."""
        return min(FLOOR, self.samples)

    def allocation(self, sizes: Mapping[Any, int]) -> dict[Any, int]:
        """The answers each archetype gets, from the archetypes' ``sizes`` (members in the
        whole population): :attr:`samples` each when ``allocate: equal``; else
        ``len(sizes) × samples`` in all, each archetype's share proportional to its size
        but at least :data:`FLOOR` (those below it get it, the rest share what is left),
        rounded by largest remainder (ties to the first in ``repr`` order).

        >>> config = SamplingConfig(by=["job"], samples=8, allocate="proportional")
        >>> config.allocation({("nurse",): 850, ("baker",): 100, ("judge",): 50})
        {('baker',): 4, ('judge',): 4, ('nurse',): 16}
        """
        cells = sorted((c for c, n in sizes.items() if n > 0), key=repr)
        if self.allocate == "equal":
            return dict.fromkeys(cells, self.samples)
        floor = self.floor
        budget = self.samples * len(cells)
        floored: set[Any] = set()
        while True:  # an archetype whose share is below the floor gets the floor
            free = [c for c in cells if c not in floored]
            left = budget - floor * len(floored)
            total = sum(sizes[c] for c in free)
            below = {c for c in free if left * sizes[c] < floor * total}
            if not below:
                break
            floored |= below
        # in integers: the rounding must not depend on the platform's floats
        out = {c: floor for c in floored}
        whole = {c: left * sizes[c] // total for c in free}
        rest = sorted(free, key=lambda c: -(left * sizes[c] % total))  # stable: ties by repr
        for i, c in enumerate(rest):
            out[c] = whole[c] + (i < left - sum(whole.values()))
        return {c: out[c] for c in cells}


def sampling_field() -> Any:
    """The ``sampling:`` key every model config has (none: every agent is asked)."""
    # left out of dumps when unset: a run's config.yaml shows only what it uses
    return Field(None, exclude_if=lambda value: value is None,
                 description="archetype sampling with an individual audit (default: every "
                 "agent asked)")


#: One audited pair count: (decision, individual answer, the mode's answer, count).
AuditRow = tuple[str, Any, Any, int]


def audits(workers: Iterable[Iterable[Any]]) -> dict[str, Counter[tuple[str, Any, Any]]]:
    """Per model, the audited answer pairs summed over workers' resource statistics
    (cumulative: subtract an earlier reading for a step's)."""
    from ._base import model_stats

    out: dict[str, Counter[tuple[str, Any, Any]]] = {}
    for resources in workers:
        for m in model_stats(resources):
            if m.audit:
                acc = out.setdefault(m.model, Counter())
                for decision, own, given, n in m.audit:
                    acc[decision, own, given] += n
    return out
