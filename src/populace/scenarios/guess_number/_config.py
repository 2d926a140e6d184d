"""The run file of a guess-the-number simulation, validated with precise error paths."""

from __future__ import annotations

import string
from fractions import Fraction
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationInfo,
    field_validator,
    model_validator,
)

from populace.llm import DummyConfig, ModelConfig

from ._rules import parse_ratio

#: Fields a participant prompt template may use.
PROMPT_FIELDS = frozenset(
    {"n_players", "low", "high", "ratio", "offset", "target_rule", "round", "rounds", "history"}
)

DEFAULT_PROMPT = (
    "You are taking part in a number game with {n_players} players. Every player secretly "
    "picks a real number from {low} to {high}. {target_rule} The player whose number is "
    "closest to the target wins. {history}Report your number directly."
)

Ratio = Annotated[
    Fraction,
    BeforeValidator(parse_ratio),
    PlainSerializer(lambda f: f"{f.numerator}/{f.denominator}" if f.denominator != 1
                    else str(f.numerator), return_type=str),
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GameConfig(_Strict):
    """``game:`` — the rules of the round and what participants are told."""

    ratio: Ratio = Field(Fraction(2, 3), description="target = offset + ratio × mean, e.g. 2/3")
    offset: float = Field(0.0, description="added to the target; 5 with ratio 1/2 → equilibrium 10")
    low: float = Field(0.0, description="smallest valid answer")
    high: float = Field(100.0, description="largest valid answer")
    prompt: str = Field(DEFAULT_PROMPT, description="participant prompt template")
    feedback: bool = Field(True, description="tell every participant the winning number after each round")
    temperature: float | None = Field(None, ge=0, le=2)
    groups: int = Field(1, ge=1, description="number of groups agents are dealt into")

    @model_validator(mode="after")
    def _check(self) -> GameConfig:
        if self.high <= self.low:
            raise ValueError(f"high ({self.high}) must be greater than low ({self.low})")
        return self

    @field_validator("prompt")
    @classmethod
    def _template(cls, value: str) -> str:
        try:
            names = {f for _, f, _, _ in string.Formatter().parse(value) if f is not None}
        except ValueError as e:
            raise ValueError(f"malformed template: {e}") from None
        unknown = sorted(n for n in names if n not in PROMPT_FIELDS)
        if unknown:
            raise ValueError(f"unknown template field {{{unknown[0]}}}; "
                             f"expected one of {', '.join(sorted(PROMPT_FIELDS))}")
        return value


class RunConfig(_Strict):
    """The whole run file of the ``guess_number`` scenario."""

    scenario: Literal["guess_number"] = "guess_number"
    name: str = Field("guess-number", min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    seed: int = Field(0, ge=0, description="one seed for the whole run")
    agents: int = Field(1000, ge=1, description="number of participants")
    rounds: int = Field(1, ge=1)
    workers: int = Field(1, ge=1, description="worker count (each hosts many agents)")
    backend: Literal["local", "ray"] = Field("local", description="where workers live")
    address: str | None = Field(None, description="Ray cluster to join ('auto', 'ray://…'); "
                                "default: start a local one")
    models: dict[str, ModelConfig] = Field(default_factory=lambda: {"dummy": DummyConfig()},
                                           min_length=1)
    model: str | None = Field(None, validate_default=True,
                              description="name in models: used by every participant")
    game: GameConfig = Field(default_factory=GameConfig)

    # A field validator (not a model one) so that errors carry the key path ``model``.
    @field_validator("model")
    @classmethod
    def _model_name(cls, value: str | None, info: ValidationInfo) -> str | None:
        models = info.data.get("models")
        if models is None:  # models: itself is invalid and reported as such
            return value
        if value is None:
            if len(models) > 1:
                raise ValueError("models has several entries; set model: to the one to use")
        elif value not in models:
            raise ValueError(f"model {value!r} is not defined under models: "
                             f"(defined: {', '.join(models)})")
        return value

    @model_validator(mode="after")
    def _address(self) -> RunConfig:
        if self.address is not None and self.backend != "ray":
            raise ValueError("address: is only meaningful with backend: ray")
        return self

    def backend_options(self) -> dict[str, Any]:
        return {"address": self.address} if self.backend == "ray" else {}

    @property
    def model_name(self) -> str:
        return self.model or next(iter(self.models))

    def resolved(self) -> dict[str, Any]:
        """The config with every default filled in, as written to ``config.yaml``."""
        return self.model_dump(mode="json")
