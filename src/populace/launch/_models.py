"""Which model each agent uses: one for all (``model:``) or shares of several (``assign:``).

A scenario whose agents talk to a model declares a ``model`` setting (and ``assign`` if it
mixes models) and asks :meth:`ModelChoice.of` in its :meth:`~populace.launch.Scenario.check`:
the names are checked against the run's ``models:`` with one line per mistake, and
:meth:`ModelChoice.assignment` deals the models to the agents, exactly and reproducibly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from populace.core import ConfigError, derive_seed

if TYPE_CHECKING:
    from ._runfile import RunOptions

#: The seed stream of the deal of models to agents.
_DEAL = 0xA551


@dataclass(frozen=True)
class ModelChoice:
    """Which model each agent uses: :attr:`model` for all of them, or :attr:`shares` of
    several (then :attr:`model` is None).

    >>> choice = ModelChoice(None, {"a": Fraction(1, 4), "b": Fraction(3, 4)})
    >>> sorted(choice.assignment(8, seed=1).tolist()).count("a")
    2
    """

    model: str | None
    shares: Mapping[str, Fraction] | None = None

    @classmethod
    def of(cls, options: RunOptions, settings: Any, source: str) -> ModelChoice:
        """The choice a run file makes: ``settings.model`` (default: the only model under
        ``models:``) or, when the settings declare an ``assign`` field, ``settings.assign``
        (fractions adding up to 1, or counts adding up to ``agents``). A mistake is a
        :class:`~populace.core.ConfigError` naming ``settings.model``, ``settings.assign``
        or, when several models are configured and none is chosen, ``models``."""
        models = list(options.models)
        model: str | None = getattr(settings, "model", None)
        mixable = "assign" in type(settings).model_fields
        shares: Mapping[str, Fraction] | None = settings.assign if mixable else None
        if model is not None and model not in models:
            raise ConfigError(f"{source}: settings.model: {_unknown(model, models)}")
        if shares is not None:
            unknown = [name for name in shares if name not in models]
            if unknown:
                raise ConfigError(f"{source}: settings.assign: {_unknown(unknown[0], models)}")
            if not shares or sum(shares.values()) <= 0:
                raise ConfigError(f"{source}: settings.assign: give at least one positive "
                                  "share")
            if model is not None:
                raise ConfigError(f"{source}: set either model: (one model for all) or "
                                  "assign: (mixed), not both")
            total = sum(shares.values())
            counts = all(Fraction(v).denominator == 1 for v in shares.values()) and total > 1
            if counts and total != options.agents:
                raise ConfigError(f"{source}: settings.assign: counts add up to {total}, but "
                                  f"agents is {options.agents}")
            if not counts and total != 1:
                raise ConfigError(f"{source}: settings.assign: fractions add up to "
                                  f"{float(total):g}, expected 1")
            return cls(None, dict(shares))
        if model is None and len(models) > 1:  # no key of the settings was wrong: models is
            mix = ", or assign: to mix them" if mixable else ""
            raise ConfigError(f"{source}: models: several are configured ({', '.join(models)})"
                              f"; set model: to the one the agents use{mix}")
        return cls(model or models[0])

    @property
    def names(self) -> tuple[str, ...]:
        """The models chosen, in the run file's order (a share of 0 included)."""
        return tuple(self.shares) if self.shares is not None else (str(self.model),)

    def assignment(self, agents: int, seed: int) -> np.ndarray:
        """The model name of every agent (an object array): exact shares (largest remainder),
        in an order shuffled with the run's ``seed``."""
        if self.shares is None:
            return np.full(agents, self.model, dtype=object)
        names = list(self.shares)
        shares = np.array([float(v) for v in self.shares.values()])
        exact = shares / shares.sum() * agents
        counts = np.floor(exact).astype(np.int64)
        # Largest remainder: the seats left go to the largest fractional parts.
        for i in np.argsort(-(exact - counts), kind="stable")[: agents - counts.sum()]:
            counts[i] += 1
        out = np.repeat(np.array(names, dtype=object), counts)
        np.random.default_rng(derive_seed(seed, _DEAL)).shuffle(out)
        return out


def _unknown(name: str, models: list[str]) -> str:
    return f"{name!r} is not under models: (have: {', '.join(models)})"
