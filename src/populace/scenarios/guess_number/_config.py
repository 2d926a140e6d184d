"""The run file of a guess-the-number simulation, validated with precise error paths."""

from __future__ import annotations

import string
from decimal import Decimal
from fractions import Fraction
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import (
    BeforeValidator,
    Field,
    PlainSerializer,
    ValidationInfo,
    field_validator,
    model_validator,
)

from populace._strict import (
    MAX_AGENTS,
    MAX_SEED,
    MAX_STEPS,
    MAX_WORKERS,
    BackendName,
    KeepCheckpoints,
    StrictModel,
    fail_at,
    only_with_address,
)
from populace.core import backend_kind, derive_seed
from populace.llm import DummyConfig, Layout, ModelConfig
from populace.population import PopulationConfig

from ._prompts import RULES, number_constraint
from ._rules import parse_ratio

#: The largest magnitude of ``low``, ``high``, ``offset`` and the target: beyond it answers
#: lose their units (floats are exact integers up to 2**53) and a mean could overflow.
MAX_MAGNITUDE = 1e15

#: Fields a participant prompt template may use.
PROMPT_FIELDS = frozenset({
    "n_players", "low", "high", "ratio", "offset", "target_rule", "famous_note", "instruction",
    "round", "rounds", "history", "composition", "group_note",
})
#: The fields filled with integers; the others are text (see ``_round_prompt``).
_INT_FIELDS = frozenset({"n_players", "round", "rounds"})

#: The round prompt unless ``game.prompt`` replaces it: the rules, then the level's
#: instruction (see ``_prompts.py``).
DEFAULT_PROMPT = RULES + " {instruction}"

class _Shared(dict[str, Any]):
    """The moderator's fill of the prompt: per-agent fields are left for the agents."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def _share(value: Any) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, int | float | str | Fraction):
        raise ValueError("expected a fraction like 1/3 or a count like 500")
    try:
        share = parse_ratio(value) if not (isinstance(value, int | float) and value == 0) \
            else Fraction(0)
    except ValueError:
        raise ValueError(f"expected a fraction like 1/3 or a count like 500, got {value!r}") \
            from None
    return share


Share = Annotated[
    Fraction,
    BeforeValidator(_share),
    PlainSerializer(lambda f: f"{f.numerator}/{f.denominator}" if f.denominator != 1
                    else f.numerator, return_type=str | int),
]

Ratio = Annotated[
    Fraction,
    BeforeValidator(parse_ratio),
    PlainSerializer(lambda f: f"{f.numerator}/{f.denominator}" if f.denominator != 1
                    else str(f.numerator), return_type=str),
]


class GameConfig(StrictModel):
    """``game:`` — the rules of the round and what participants are told."""

    ratio: Ratio = Field(Fraction(2, 3), description="target = offset + ratio × mean, e.g. 2/3")
    offset: float = Field(0.0, ge=-MAX_MAGNITUDE, le=MAX_MAGNITUDE, description="added to "
                          "the target; 5 with ratio 1/2 → equilibrium 10")
    low: float = Field(0.0, ge=-MAX_MAGNITUDE, le=MAX_MAGNITUDE,
                       description="smallest valid answer")
    high: float = Field(100.0, ge=-MAX_MAGNITUDE, le=MAX_MAGNITUDE,
                        description="largest valid answer")
    level: Literal["P1", "P2", "P3", "P4"] = Field(
        "P1", description="guidance: P1 answer directly … P4 step by step, rational, adaptive")
    famous_note: bool = Field(False, description="say it is a variant of the famous 2/3 game")
    protocol: Literal["auto", "direct", "two_call", "structured", "constrained"] = Field(
        "auto", description="direct: one call, number parsed from the answer; two_call: the "
        "paper's answer + extraction calls; structured: one call with a JSON schema; "
        "constrained: one call of a few tokens that the server holds to a number (a choice "
        "or regex constraint where the server takes one); auto: direct for the dummy model, "
        "constrained at P1 on a server that takes a choice constraint (vLLM, SGLang, "
        "llama.cpp, serve-llm), two_call otherwise")
    extract: Literal["always", "when_stated"] = Field(
        "always", description="two_call's extraction call: always (the paper), or only "
        "when the answer does not state its number plainly ('The answer is 22', 'Answer: "
        "22', a lone number), which saves a call per answer that does")
    prompt: str = Field(DEFAULT_PROMPT, description="round prompt template")
    layout: Layout = Field("shared_first", description="shared_first: the round prompt (the "
                           "same for every player) opens the conversation, then the persona "
                           "and the player's history, so a server's prefix cache reuses it; "
                           "persona_first: persona, history, then the round prompt")
    feedback: bool = Field(True, description="tell every participant the winning number "
                           "after each round")
    memory_rounds: int = Field(5, ge=0, description="earlier rounds a participant remembers "
                               "in its conversation")
    temperature: float | None = Field(None, ge=0, le=2)
    max_tokens: int | None = Field(None, ge=1, description="cap on each answer's tokens")
    groups: int = Field(1, ge=1, le=MAX_AGENTS, description="number of groups agents are "
                        "dealt into (at most one per agent)")
    on_model_error: Literal["continue", "stop"] = Field(
        "continue", description="when a participant gets no answer after every retry: "
        "continue (its row is invalid, with the reason) or stop the run, resumable later")
    colocate_groups: bool = Field(False, description="place each group's members on one "
                                  "worker, so a group's traffic stays inside one process")
    group_play: bool = Field(False, description="group-level play: each group reports the "
                             "mean of its members' numbers; the closest group wins")

    @model_validator(mode="after")
    def _check(self) -> GameConfig:
        if self.high <= self.low:
            raise ValueError(f"high ({self.high}) must be greater than low ({self.low})")
        # exact arithmetic: a ratio like 1e400 must not overflow while it is checked
        for mean in (self.low, self.high):
            target = Fraction(self.offset) + self.ratio * Fraction(mean)
            if abs(target) > MAX_MAGNITUDE:
                key = "ratio" if abs(self.ratio * Fraction(mean)) > MAX_MAGNITUDE / 2 \
                    else "offset"
                value = Decimal(target.numerator) / Decimal(target.denominator)
                fail_at((key,), f"an average of {mean:g} gives the target {value:.3g} "
                        f"(offset + ratio × average; expected within ±{MAX_MAGNITUDE:.0e})")
        return self

    @field_validator("prompt")
    @classmethod
    def _template(cls, value: str) -> str:
        try:
            list(string.Formatter().parse(value))
        except ValueError as e:
            raise ValueError(f"malformed template: {e}") from None
        # Field names are checked by RunConfig, which knows the population's attributes.
        return value


def _default_models() -> dict[str, ModelConfig]:
    return {"dummy": DummyConfig()}


class RunConfig(StrictModel):
    """The whole run file of the ``guess_number`` scenario."""

    scenario: Literal["guess_number"] = "guess_number"
    name: str = Field("guess-number", min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="one seed for the whole run")
    agents: int = Field(1000, ge=1, le=MAX_AGENTS, description="number of participants")
    rounds: int = Field(1, ge=1, le=MAX_STEPS)
    workers: int = Field(1, ge=1, le=MAX_WORKERS,
                         description="worker count (each hosts many agents)")
    backend: BackendName = Field("local", description="where workers live: local, ray or a "
                                 "registered backend")
    address: str | None = Field(None, description="Ray cluster to join ('auto', 'ray://…'); "
                                "default: start a local one")
    models: dict[str, ModelConfig] = Field(default_factory=_default_models, min_length=1)
    model: str | None = Field(None, validate_default=True,
                              description="name in models: used by every participant")
    assign: dict[str, Share] | None = Field(
        None, description="mixed models: share of participants per model name, as fractions "
        "(1/3) or counts (500)")
    game: GameConfig = Field(default_factory=GameConfig)
    checkpoint_minutes: float = Field(
        5.0, gt=0, le=1440, description="inside a round, save the answers so far this often "
        "(every round also ends with a full checkpoint; at most 1440, once a day)")
    keep_checkpoints: KeepCheckpoints = Field(
        "all", description="checkpoints kept: all (any round can be forked or interviewed) "
        "or the newest N (at least 2)")
    population: PopulationConfig | None = Field(
        None, description="aspects sampled for every participant (see populace.population); "
        "its groups replace game.groups, its attributes and backgrounds reach the prompts")

    # A field validator (not a model one) so that errors carry the key path ``model``.
    @field_validator("model")
    @classmethod
    def _model_name(cls, value: str | None, info: ValidationInfo) -> str | None:
        models = info.data.get("models")
        if models is None:  # models: itself is invalid and reported as such
            return value
        if value is None:
            pass  # checked with assign: below
        elif value not in models:
            raise ValueError(f"model {value!r} is not defined under models: "
                             f"(defined: {', '.join(models)})")
        return value

    @field_validator("assign")
    @classmethod
    def _assign(cls, value: dict[str, Fraction] | None, info: ValidationInfo
                ) -> dict[str, Fraction] | None:
        models = info.data.get("models")
        if value is None or models is None:
            return value
        unknown = [k for k in value if k not in models]
        if unknown:
            raise ValueError(f"model {unknown[0]!r} is not defined under models: "
                             f"(defined: {', '.join(models)})")
        if not value or sum(value.values()) <= 0:
            raise ValueError("give at least one positive share")
        return value

    @model_validator(mode="after")
    def _one_choice(self) -> RunConfig:
        if self.assign is not None and self.model is not None:
            raise ValueError("set either model: (one model for all) or assign: (mixed), not both")
        if self.assign is None and self.model is None and len(self.models) > 1:
            raise ValueError("models has several entries; set model: to the one to use, or "
                             "assign: to mix them")
        if self.assign is not None:
            total = sum(self.assign.values())
            counts = all(v.denominator == 1 for v in self.assign.values()) and total > 1
            if counts and total != self.agents:
                raise ValueError(f"assign: counts add up to {total}, but agents is {self.agents}")
            if not counts and total != 1:
                raise ValueError(f"assign: fractions add up to {float(total):g}, expected 1")
        return self

    def assignment(self) -> np.ndarray:
        """The model name of every participant, exact shares, shuffled with the run's seed."""
        if self.assign is None:
            return np.full(self.agents, self.model_name, dtype=object)
        names = list(self.assign)
        shares = np.array([float(v) for v in self.assign.values()])
        exact = shares / shares.sum() * self.agents
        counts = np.floor(exact).astype(np.int64)
        # Largest remainder: the seats left go to the largest fractional parts.
        for i in np.argsort(-(exact - counts), kind="stable")[: self.agents - counts.sum()]:
            counts[i] += 1
        out = np.repeat(np.array(names, dtype=object), counts)
        np.random.default_rng(derive_seed(self.seed, 0xA551)).shuffle(out)
        return out

    def agent_fields(self) -> tuple[str, ...]:
        """Per-agent prompt fields: the population's aspects, and background if written."""
        if self.population is None:
            return ()
        fields = tuple(self.population.aspects)
        if self.population.backgrounds.model is not None:
            fields += ("background",)
        return fields

    @model_validator(mode="after")
    def _population(self) -> RunConfig:
        pop = self.population
        if pop is not None:
            pop.check_agents(self.agents)
            model = pop.backgrounds.model
            if model is not None and model not in self.models:
                raise ValueError(f"population.backgrounds.model {model!r} is not defined "
                                 f"under models: (defined: {', '.join(self.models)})")
        names = {f for _, f, _, _ in string.Formatter().parse(self.game.prompt) if f is not None}
        allowed = PROMPT_FIELDS | set(self.agent_fields())
        unknown = sorted(n for n in names if n not in allowed)
        if unknown:
            raise ValueError(f"game.prompt: unknown template field {{{unknown[0]}}}; expected "
                             f"one of {', '.join(sorted(allowed))}")
        try:  # a bad conversion or format spec ({n_players!x}, {low:d}) fails only when filled
            self.game.prompt.format_map({f: 1 if f in _INT_FIELDS else "x" for f in allowed})
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
            raise ValueError(f"game.prompt: cannot fill the template: {e}") from None
        agent = self.agent_fields()
        if agent:  # the moderator fills the game's fields, then each agent its own
            shared = self.game.prompt.format_map(_Shared(
                {f: 1 if f in _INT_FIELDS else "x" for f in PROMPT_FIELDS}))
            try:
                shared.format_map(dict.fromkeys(agent, "x"))
            except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
                raise ValueError(f"game.prompt: cannot fill the template for each agent: "
                                 f"{type(e).__name__} {e} (with a population the prompt is "
                                 "filled twice: write a literal brace as {{{{ or }}}})") from None
        return self

    @model_validator(mode="after")
    def _groups(self) -> RunConfig:
        if self.game.groups > self.agents:
            fail_at(("game", "groups"), f"{self.game.groups} groups for {self.agents} agents "
                    f"(expected at most {self.agents})")
        return self

    @model_validator(mode="after")
    def _group_play(self) -> RunConfig:
        if self.game.group_play and self.group_count() < 2:
            raise ValueError("game.group_play needs at least two groups: set game.groups, or "
                             "population.groups")
        return self

    def group_count(self) -> int:
        """How many groups participants are dealt into (population groups first)."""
        groups = self.population.groups if self.population is not None else None
        if groups is None:
            return self.game.groups
        if groups.count is not None:
            return groups.count
        assert self.population is not None and groups.by is not None
        return len(self.population.values(groups.by))

    @model_validator(mode="after")
    def _address(self) -> RunConfig:
        only_with_address(self.address, self.backend)
        return self

    def backend_options(self) -> dict[str, Any]:
        return backend_kind(self.backend).options(self.address)

    @property
    def model_name(self) -> str:
        """The single model in use (the first one when models are mixed)."""
        return self.model or next(iter(self.assign or self.models))

    def protocol_for(self, model: str, choice: bool = False) -> str:
        """The protocol participants on ``model`` use, resolving ``auto``: direct for the
        dummy model; at P1 on a server that holds an answer to a list of choices (``choice``:
        ``run.supports(model, "choice")``: vLLM, SGLang, llama.cpp, serve-llm; the range's
        integers), constrained: one call of a few tokens; otherwise the paper's two calls."""
        if self.game.protocol != "auto":
            return self.game.protocol
        if self.models[model].provider == "dummy":
            return "direct"
        if self.game.level == "P1" and choice and \
                number_constraint(self.game.low, self.game.high)["type"] == "choice":
            return "constrained"
        return "two_call"

    def resolved(self) -> dict[str, Any]:
        """The config with every default filled in, as written to ``config.yaml``."""
        return self.model_dump(mode="json")
