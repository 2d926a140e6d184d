"""The ``population:`` config: size, aspects, groups and background settings.

A standalone population file holds these keys at its top level; a run file embeds the same
mapping under ``population:``. Every mistake is reported with the key path that holds it,
e.g. ``pop.yaml: aspects.education.weights: weights sum to 0.9, expected 1``.

```yaml
size: 1000
seed: 7                                   # optional; the run's seed otherwise
aspects:
  age: {template: age}                    # shipped templates: age, gender, education,
  gender: {template: gender}              #   occupation, nationality
  education: {template: education, percentages: {high school: 60, bachelor's degree: 40}}
  trust: {weights: {low: 0.25, medium: 0.5, high: 0.25}}
  profession: {values: [economist, artist, writer]}          # equal shares
  income: {distribution: lognormal, mu: 10.3, sigma: 0.5, min: 0, round: 0}
  occupation:                             # conditional: one row per education value
    given: education
    weights:
      high school: {clerk: 0.7, farmer: 0.3}
      bachelor's degree: {clerk: 0.4, engineer: 0.6}
groups: {by: education}                   # or {count: 10}: equal random groups
backgrounds: {temperature: [0.7, 1.0], concurrency: 64}
```
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from populace._strict import MAX_AGENTS, MAX_SEED, StrictModel
from populace._strict import fail_at as _fail
from populace.config import load_config, read_yaml, validate
from populace.core import ConfigError

from ._prompts import (
    DEFAULT_META_PROMPT,
    DEFAULT_SYSTEM_PROMPT,
    TEMPLATE_VARIABLES,
    compile_template,
    template_names,
)
from ._specs import Categorical, Conditional, Numeric, Spec
from ._templates import TEMPLATES

#: Column names the sampler writes itself; aspects may not take them.
RESERVED = frozenset({"agent_id", "group", "background"})

_WEIGHT_TOLERANCE = 1e-3  # relative: 0.333 * 3 passes, 0.9 does not
_NUMERIC_PARAMS = {
    "normal": ("mean", "std"),
    "uniform": ("low", "high"),
    "lognormal": ("mu", "sigma"),
}
_ALL_PARAMS = ("mean", "std", "low", "high", "mu", "sigma")


def _weight(value: Any, loc: tuple[str | int, ...]) -> float:
    if isinstance(value, bool):
        _fail(loc, f"expected a number, got {value!r}")
    if isinstance(value, int | float):
        w = float(value)
    elif isinstance(value, str):
        try:
            w = float(Fraction(value.strip()))
        except (ValueError, ZeroDivisionError):
            _fail(loc, f"expected a number or a fraction like 1/6, got {value!r}")
    else:
        _fail(loc, f"expected a number, got {type(value).__name__}")
    if not math.isfinite(w) or w < 0:
        _fail(loc, f"weights must be finite and >= 0, got {value!r}")
    return w


def _distribution(table: Any, unit: Literal["weights", "percentages"],
                  loc: tuple[str | int, ...]) -> Categorical:
    """Parse ``{value: weight}``; the weights must sum to 1 (or 100) within 0.1 %."""
    if not isinstance(table, Mapping) or not table:
        _fail(loc, f"expected a mapping of value: {unit[:-1]}, got {table!r}")
    values: list[str] = []
    weights: list[float] = []
    for key, w in table.items():
        if not isinstance(key, str) or not key:
            _fail(loc, f"values must be non-empty text, got {key!r} (quote it in YAML)")
        values.append(key)
        weights.append(_weight(w, (*loc, key)))
    total = sum(weights)
    expected = 1.0 if unit == "weights" else 100.0
    if abs(total - expected) > _WEIGHT_TOLERANCE * expected + 1e-12:
        _fail(loc, f"{unit} sum to {total:g}, expected {expected:g}")
    return Categorical(tuple(values), np.asarray(weights) / total)


class AspectConfig(StrictModel):
    """One attribute of every agent: categorical, numeric, or conditional on another aspect.

    Categorical: ``values:`` (equal shares), ``weights:`` (sum 1) or ``percentages:``
    (sum 100), or ``template:`` (a shipped distribution; any of the three replaces its
    figures). Numeric: ``distribution:`` normal (``mean``, ``std``), uniform (``low``,
    ``high``) or lognormal (``mu``, ``sigma`` of the log), optional ``min``/``max`` bounds
    (the distribution is truncated to them) and ``round:`` decimals (0 gives integers).
    Conditional: ``given:`` another categorical aspect, and ``weights:``/``percentages:``
    holding one distribution per value of that aspect.
    """

    template: str | None = Field(default=None,
                                 description="a shipped template: " + ", ".join(TEMPLATES))
    given: str | None = Field(default=None, description="the aspect this one's weights depend on")
    values: list[str] | None = Field(default=None, min_length=1,
                                     description="equally likely values")
    weights: dict[str, Any] | None = Field(default=None, description="value: weight, summing to 1")
    percentages: dict[str, Any] | None = Field(default=None,
                                               description="value: percent, summing to 100")
    distribution: Literal["normal", "uniform", "lognormal"] | None = None
    mean: float | None = None
    std: float | None = Field(default=None, gt=0)
    low: float | None = None
    high: float | None = None
    mu: float | None = None
    sigma: float | None = Field(default=None, gt=0)
    min: float | None = Field(default=None, description="lower bound (numeric aspects)")
    max: float | None = Field(default=None, description="upper bound (numeric aspects)")
    round: int | None = Field(default=None, ge=0, le=12,
                              description="decimals to keep; 0 gives integers")

    _spec: Categorical | Conditional | Numeric = PrivateAttr()

    @model_validator(mode="before")
    @classmethod
    def _apply_template(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("template") is None:
            return data
        name = data["template"]
        if not isinstance(name, str) or name not in TEMPLATES:
            _fail(("template",), f"unknown template {name!r}; known templates: "
                                 f"{', '.join(sorted(TEMPLATES))}")
        for key in ("given", "distribution"):
            if data.get(key) is not None:
                _fail((key,), f"a template aspect is categorical and cannot take {key}:")
        if all(data.get(k) is None for k in ("values", "weights", "percentages")):
            data = {**data, "percentages": dict(TEMPLATES[name])}
        return data

    @model_validator(mode="after")
    def _build(self) -> AspectConfig:
        given_kinds = [k for k in ("values", "weights", "percentages") if getattr(self, k)]
        params = [p for p in (*_ALL_PARAMS, "min", "max", "round") if getattr(self, p) is not None]
        if self.distribution is not None:
            self._spec = self._numeric(given_kinds)
            return self
        if params:
            _fail((params[0],), "applies to numeric aspects only; add distribution: normal, "
                                "uniform or lognormal")
        if len(given_kinds) > 1:
            _fail((given_kinds[1],), f"give only one of values:, weights:, percentages: "
                                     f"(found {' and '.join(given_kinds)})")
        if self.given is not None:
            self._spec = self._conditional(given_kinds)
            return self
        if not given_kinds:
            _fail((), "an aspect needs template:, values:, weights:, percentages:, "
                      "given: (conditional) or distribution: (numeric)")
        kind = given_kinds[0]
        if kind == "values":
            assert self.values is not None
            if len(set(self.values)) != len(self.values):
                dup = next(v for v in self.values if self.values.count(v) > 1)
                _fail(("values",), f"value {dup!r} is listed twice")
            n = len(self.values)
            self._spec = Categorical(tuple(self.values), np.full(n, 1.0 / n))
        else:
            self._spec = _distribution(getattr(self, kind), kind, (kind,))  # type: ignore[arg-type]
        return self

    def _conditional(self, kinds: list[str]) -> Conditional:
        if kinds == ["values"] or not kinds:
            _fail(("weights",), "a conditional aspect needs weights: (or percentages:) with one "
                                "distribution per value of " + repr(self.given))
        unit = kinds[0]
        table = getattr(self, unit)
        order: dict[str, None] = {}
        parsed: dict[str, Categorical] = {}
        for parent_value, row in table.items():
            parsed[parent_value] = _distribution(row, unit, (unit, parent_value))  # type: ignore[arg-type]
            order.update(dict.fromkeys(parsed[parent_value].values))
        values = tuple(order)
        index = {v: i for i, v in enumerate(values)}
        rows: dict[str, np.ndarray] = {}
        for parent_value, cat in parsed.items():
            probs = np.zeros(len(values))
            for v, p in zip(cat.values, cat.probs, strict=True):
                probs[index[v]] = p
            rows[parent_value] = probs
        return Conditional(str(self.given), values, rows)

    def _numeric(self, kinds: list[str]) -> Numeric:
        dist = self.distribution
        assert dist is not None
        if kinds or self.given is not None:
            key = kinds[0] if kinds else "given"
            _fail((key,), f"a numeric aspect (distribution: {dist}) takes no {key}:")
        needed = _NUMERIC_PARAMS[dist]
        for p in _ALL_PARAMS:
            value = getattr(self, p)
            if p in needed and value is None:
                _fail((p,), f"required for distribution: {dist} (it takes "
                            f"{' and '.join(needed)})")
            if p not in needed and value is not None:
                _fail((p,), f"not a parameter of distribution: {dist} (it takes "
                            f"{' and '.join(needed)})")
        a, b = (float(getattr(self, p)) for p in needed)
        if dist == "uniform" and not a < b:
            _fail(("high",), f"high ({b:g}) must be greater than low ({a:g})")
        low = -math.inf if self.min is None else self.min
        high = math.inf if self.max is None else self.max
        if not low < high:
            _fail(("max",), f"max ({high:g}) must be greater than min ({low:g})")
        spec = Numeric(dist, a, b, low, high, self.round)
        if spec.mass() < 1e-4:
            _fail(("min",) if self.min is not None else ("max",),
                  f"the bounds [{low:g}, {high:g}] keep less than 0.01% of the distribution")
        glow, ghigh = spec.grid_bounds()
        if glow > ghigh:
            _fail(("round",), f"no value rounded to {self.round} decimals lies within "
                              f"[{low:g}, {high:g}]")
        return spec

    @property
    def spec(self) -> Spec:
        """The validated distribution the sampler uses."""
        return self._spec

    @property
    def kind(self) -> Literal["categorical", "conditional", "numeric"]:
        spec = self._spec
        if isinstance(spec, Numeric):
            return "numeric"
        return "conditional" if isinstance(spec, Conditional) else "categorical"


class GroupsConfig(StrictModel):
    """``groups:`` — ``{by: aspect}`` (one group per value) or ``{count: k}`` (k equal groups).

    Group ids are integers: with ``by``, the position of the agent's value among the aspect's
    values (in the order the config lists them); with ``count``, a seeded random deal into
    groups whose sizes differ by at most one.
    """

    by: str | None = Field(default=None, description="a categorical aspect; one group per value")
    count: int | None = Field(default=None, ge=1,
                              description="number of equal-size random groups")

    @model_validator(mode="after")
    def _one(self) -> GroupsConfig:
        if (self.by is None) == (self.count is None):
            raise ValueError("give exactly one of by: (an aspect) or count: (a number)")
        return self


class BackgroundConfig(StrictModel):
    """``backgrounds:`` — how each agent's background is asked of a model.

    ``temperature`` is a ``[low, high]`` range (or one number); every agent gets its own
    temperature in it and its own seed, both derived from the run seed and the agent id.
    """

    model: str | None = Field(default=None,
                              description="name of the model under the run's models:")
    system: str = Field(default=DEFAULT_SYSTEM_PROMPT, description="system message")
    template: str = Field(default=DEFAULT_META_PROMPT, description="Jinja2 meta-prompt")
    words: int = Field(default=180, ge=10, description="length asked for, in words")
    temperature: tuple[float, float] = Field(default=(0.7, 1.0),
                                             description="per-agent range [low, high]")
    send_seed: bool = Field(default=True, description="send each agent's seed with its request")
    max_tokens: int | None = Field(default=600, ge=1)
    concurrency: int = Field(default=64, ge=1, description="requests in flight at once")
    retries: int = Field(default=2, ge=0, description="retries per agent after the first attempt")
    retry_backoff: float = Field(default=0.5, ge=0,
                                 description="seconds before the first retry; doubles")

    @field_validator("temperature", mode="before")
    @classmethod
    def _range(cls, value: Any) -> Any:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return (value, value)
        return value

    @field_validator("temperature")
    @classmethod
    def _check_range(cls, value: tuple[float, float]) -> tuple[float, float]:
        low, high = value
        if not 0 <= low <= high <= 2:
            raise ValueError(f"expected 0 <= low <= high <= 2, got [{low:g}, {high:g}]")
        return value

    @field_validator("template")
    @classmethod
    def _template(cls, value: str) -> str:
        compile_template(value)
        return value


class PopulationConfig(StrictModel):
    """A population: its size, the aspects every agent gets, groups, background settings.

    >>> cfg = PopulationConfig.model_validate(
    ...     {"size": 1000, "aspects": {"education": {"template": "education"}}})
    >>> cfg.aspects["education"].kind
    'categorical'
    """

    size: int | None = Field(default=None, ge=1, le=MAX_AGENTS,
                             description="number of agents (at most 1,000,000,000)")
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED,
                             description="sampling seed; the run's seed if unset")
    aspects: dict[str, AspectConfig] = Field(default_factory=dict)
    groups: GroupsConfig | None = None
    backgrounds: BackgroundConfig = Field(default_factory=BackgroundConfig)

    _order: tuple[str, ...] = PrivateAttr(())

    @model_validator(mode="after")
    def _link(self) -> PopulationConfig:
        for name in self.aspects:
            if not name.isidentifier() or name in RESERVED:
                _fail(("aspects", name), f"aspect name {name!r} must be an identifier (letters, "
                                         f"digits, _) other than {', '.join(sorted(RESERVED))}")
        for name, aspect in self.aspects.items():
            spec = aspect.spec
            if isinstance(spec, Conditional):
                self._check_conditional(name, spec)
        self._order = self._topological()
        count = self.groups.count if self.groups is not None else None
        if count is not None and self.size is not None and count > self.size:
            _fail(("groups", "count"), f"{count} groups for {self.size} agents (expected at "
                                       f"most {self.size})")
        if self.groups is not None and self.groups.by is not None:
            by = self.groups.by
            if by not in self.aspects:
                _fail(("groups", "by"), f"{by!r} is not an aspect (aspects: "
                                        f"{', '.join(self.aspects) or 'none'})")
            if self.aspects[by].kind == "numeric":
                _fail(("groups", "by"), f"{by!r} is numeric; groups need a categorical aspect")
        allowed = TEMPLATE_VARIABLES | set(self.aspects)
        unknown = sorted(template_names(self.backgrounds.template) - allowed)
        if unknown:
            _fail(("backgrounds", "template"),
                  f"unknown template variable {unknown[0]!r}; expected one of "
                  f"{', '.join(sorted(allowed))}")
        return self

    def check_agents(self, agents: int) -> None:
        """Raise ValueError (naming the keys) unless this population fits a run of ``agents``
        agents: ``size`` the same or left out, and no more ``groups.count`` than agents (a
        group would be left empty)."""
        if self.size is not None and self.size != agents:
            raise ValueError(f"population.size ({self.size}) differs from agents ({agents}); "
                             "leave it out to follow agents")
        count = self.groups.count if self.groups is not None else None
        if count is not None and count > agents:
            raise ValueError(f"population.groups.count: {count} groups for {agents} agents "
                             f"(expected at most {agents})")

    def _check_conditional(self, name: str, spec: Conditional) -> None:
        parent = self.aspects.get(spec.given)
        if parent is None:
            _fail(("aspects", name, "given"), f"{spec.given!r} is not an aspect (aspects: "
                                              f"{', '.join(self.aspects)})")
        if parent.kind == "numeric":
            _fail(("aspects", name, "given"), f"{spec.given!r} is numeric; a conditional aspect "
                                              "needs a categorical one")
        parent_values = self.values(spec.given)
        unit = "weights" if self.aspects[name].weights is not None else "percentages"
        for key in spec.rows:
            if key not in parent_values:
                _fail(("aspects", name, unit, key),
                      f"{key!r} is not a value of {spec.given} "
                      f"(values: {', '.join(parent_values)})")
        missing = [v for v in parent_values if v not in spec.rows]
        if missing:
            _fail(("aspects", name, unit), f"no row for {spec.given} value {missing[0]!r}; "
                                           f"every value of {spec.given} needs one")

    def _topological(self) -> tuple[str, ...]:
        order: list[str] = []
        state: dict[str, int] = {}  # 1: visiting, 2: done

        def visit(name: str, path: list[str]) -> None:
            if state.get(name) == 2:
                return
            if state.get(name) == 1:
                cycle = " → ".join([*path[path.index(name):], name])
                _fail(("aspects", name, "given"), f"conditional aspects form a cycle: {cycle}")
            state[name] = 1
            spec = self.aspects[name].spec
            if isinstance(spec, Conditional):
                visit(spec.given, [*path, name])
            state[name] = 2
            order.append(name)

        for name in self.aspects:
            visit(name, [])
        return tuple(order)

    def values(self, aspect: str) -> tuple[str, ...]:
        """The values of a categorical or conditional aspect, in config order."""
        spec = self.aspects[aspect].spec
        if isinstance(spec, Numeric):
            raise TypeError(f"aspect {aspect!r} is numeric and has no list of values")
        return spec.values

    @property
    def sampling_order(self) -> tuple[str, ...]:
        """Aspect names with every conditioning aspect before the aspects that depend on it."""
        return self._order

    def targets(self) -> dict[str, dict[str, float]]:
        """Expected share of each value of every non-numeric aspect (conditionals mixed)."""
        out: dict[str, dict[str, float]] = {}
        for name in self._order:
            spec = self.aspects[name].spec
            if isinstance(spec, Categorical):
                out[name] = dict(zip(spec.values, spec.probs.tolist(), strict=True))
            elif isinstance(spec, Conditional):
                parent = out[spec.given]
                mix = sum(parent[v] * row for v, row in spec.rows.items())
                out[name] = dict(zip(spec.values, np.asarray(mix).tolist(), strict=True))
        return out


class _PopulationBlock(BaseModel):
    """A run file read only for its ``population:`` block."""

    model_config = ConfigDict(extra="ignore")
    population: PopulationConfig


def load_population_config(path: str | Path,
                           overrides: dict[str, Any] | None = None) -> PopulationConfig:
    """Read a population file, or the ``population:`` block of a run file.

    ``overrides`` are dotted keys applied before validation (``{"size": 200}``). Raises
    :class:`~populace.core.ConfigError` with one line naming the file and key path.

    >>> cfg = load_population_config("examples/population/education_200x5.yaml")  # doctest: +SKIP
    """
    data = read_yaml(path)
    if "population" in data and "population" not in PopulationConfig.model_fields:
        prefixed = {f"population.{k}": v for k, v in (overrides or {}).items()}
        block = load_config(path, _PopulationBlock, prefixed).population
        if block.size is None:
            raise ConfigError(f"{path}: population.size: required key is missing")
        return block
    cfg = load_config(path, PopulationConfig, overrides)
    if cfg.size is None:
        raise ConfigError(f"{path}: size: required key is missing")
    return cfg


def parse_population(data: dict[str, Any], source: str = "population") -> PopulationConfig:
    """Validate an in-memory mapping; errors are ConfigError lines starting with ``source``."""
    return validate(data, PopulationConfig, source)
