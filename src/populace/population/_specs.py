"""Validated aspects in the form the sampler uses: value tuples and probability arrays.

The pydantic models in ``_config`` check what a user wrote and build one of these per
aspect; sampling and reports read only these.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

Distribution = Literal["normal", "uniform", "lognormal"]


@dataclass(frozen=True, eq=False)
class Categorical:
    """Values with probabilities (normalised to sum to 1)."""

    values: tuple[str, ...]
    probs: np.ndarray


@dataclass(frozen=True, eq=False)
class Conditional:
    """Probabilities over ``values`` that depend on the value of aspect ``given``.

    ``rows[parent_value]`` holds one probability per entry of ``values``.
    """

    given: str
    values: tuple[str, ...]
    rows: dict[str, np.ndarray]


@dataclass(frozen=True)
class Numeric:
    """A continuous distribution, truncated to ``[low, high]`` and rounded to ``decimals``."""

    distribution: Distribution
    a: float  # normal: mean; uniform: low end; lognormal: mu (mean of the log)
    b: float  # normal: std; uniform: high end; lognormal: sigma (std of the log)
    low: float = -math.inf
    high: float = math.inf
    decimals: int | None = None

    def cdf(self, x: float) -> float:
        if self.distribution == "uniform":
            return min(1.0, max(0.0, (x - self.a) / (self.b - self.a)))
        if self.distribution == "lognormal":
            if x <= 0:
                return 0.0
            if math.isinf(x):
                return 1.0
            x = math.log(x)
        if math.isinf(x):
            return 1.0 if x > 0 else 0.0
        return 0.5 * (1.0 + math.erf((x - self.a) / (self.b * math.sqrt(2.0))))

    def mass(self) -> float:
        """Probability the untruncated distribution gives to ``[low, high]``."""
        return self.cdf(self.high) - self.cdf(self.low)

    def grid_bounds(self) -> tuple[float, float]:
        """The bounds moved inwards onto the rounding grid (so rounding cannot leave them)."""
        if self.decimals is None:
            return self.low, self.high
        scale = 10.0**self.decimals
        low = math.ceil(self.low * scale - 1e-9) / scale if math.isfinite(self.low) else self.low
        high = (math.floor(self.high * scale + 1e-9) / scale if math.isfinite(self.high)
                else self.high)
        return low, high

    def _draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.distribution == "normal":
            return rng.normal(self.a, self.b, n)
        if self.distribution == "uniform":
            return rng.uniform(self.a, self.b, n)
        return rng.lognormal(self.a, self.b, n)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` draws within the bounds (by rejection), rounded; int64 when ``decimals == 0``."""
        out = self._draw(rng, n)
        bounded = math.isfinite(self.low) or math.isfinite(self.high)
        if bounded:
            bad = np.flatnonzero((out < self.low) | (out > self.high))
            accept = max(self.mass(), 1e-6)
            while bad.size:
                # Oversample so that a narrow window still fills in a few passes.
                extra = self._draw(rng, int(bad.size / accept * 1.2) + 16)
                extra = extra[(extra >= self.low) & (extra <= self.high)][: bad.size]
                out[bad[: extra.size]] = extra
                bad = bad[extra.size:]
        if self.decimals is not None:
            out = np.round(out, self.decimals)
            if bounded:
                np.clip(out, *self.grid_bounds(), out=out)
            if self.decimals == 0:
                return out.astype(np.int64)
        return out


Spec = Categorical | Conditional | Numeric
