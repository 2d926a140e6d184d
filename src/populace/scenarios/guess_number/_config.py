"""The game's settings (``model:``, ``assign:``, ``game:``) and their checks against the run
options; :class:`GameSetup` is what the game makes of a checked run file."""

from __future__ import annotations

import string
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BeforeValidator, Field, PlainSerializer, field_validator, model_validator

from populace._strict import MAX_AGENTS, StrictModel, fail_at
from populace.core import ConfigError
from populace.launch import ModelChoice, RunOptions, ScenarioSettings
from populace.llm import Layout

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
        # Field names are checked by check_game, which knows the population's attributes.
        return value


class GameSettings(ScenarioSettings):
    """The game's settings (``GuessNumber.Settings``): ``model:``, ``assign:`` and ``game:``,
    at the top level of the run file or under ``settings:``."""

    model: str | None = Field(None, description="name in models: used by every participant")
    assign: dict[str, Share] | None = Field(
        None, description="mixed models: share of participants per model name, as fractions "
        "(1/3) or counts (500)")
    game: GameConfig = Field(default_factory=GameConfig)


@dataclass(frozen=True)
class GameSetup:
    """The game's reading of a checked run file (what :meth:`GuessNumber.check` returns, the
    run's ``run.config``): the run options, the game's settings and the model each
    participant uses."""

    options: RunOptions
    settings: GameSettings
    choice: ModelChoice

    @property
    def game(self) -> GameConfig:
        return self.settings.game

    @property
    def model_name(self) -> str:
        """The single model in use (the first one when models are mixed)."""
        return self.choice.names[0]

    def assignment(self) -> np.ndarray:
        """The model name of every participant, exact shares, shuffled with the run's seed."""
        return self.choice.assignment(self.options.agents, self.options.seed)

    def agent_fields(self) -> tuple[str, ...]:
        """Per-agent prompt fields: the population's aspects, and background if written."""
        population = self.options.population
        if population is None:
            return ()
        fields = tuple(population.aspects)
        if population.backgrounds.model is not None:
            fields += ("background",)
        return fields

    def group_count(self) -> int:
        """How many groups participants are dealt into (population groups first)."""
        population = self.options.population
        groups = population.groups if population is not None else None
        if groups is None:
            return self.game.groups
        if groups.count is not None:
            return groups.count
        assert population is not None and groups.by is not None
        return len(population.values(groups.by))

    def protocol_for(self, model: str, choice: bool = False) -> str:
        """The protocol participants on ``model`` use, resolving ``auto``: direct for the
        dummy model; at P1 on a server that holds an answer to a list of choices (``choice``:
        ``run.supports(model, "choice")``: vLLM, SGLang, llama.cpp, serve-llm; the range's
        integers), constrained: one call of a few tokens; otherwise the paper's two calls."""
        game = self.game
        if game.protocol != "auto":
            return game.protocol
        if self.options.models[model].provider == "dummy":
            return "direct"
        if game.level == "P1" and choice and \
                number_constraint(game.low, game.high)["type"] == "choice":
            return "constrained"
        return "two_call"


def check_game(options: RunOptions, settings: GameSettings, source: str) -> GameSetup:
    """The game's checks across the run file: the models chosen, the prompt's fields against
    the population, the groups against the agents."""
    setup = GameSetup(options, settings, ModelChoice.of(options, settings, source))
    game = settings.game

    def fail(message: str) -> ConfigError:  # the message names the setting
        return ConfigError(f"{source}: settings.{message}")

    names = {f for _, f, _, _ in string.Formatter().parse(game.prompt) if f is not None}
    allowed = PROMPT_FIELDS | set(setup.agent_fields())
    unknown = sorted(n for n in names if n not in allowed)
    if unknown:
        raise fail(f"game.prompt: unknown template field {{{unknown[0]}}}; expected one of "
                   f"{', '.join(sorted(allowed))}")
    try:  # a bad conversion or format spec ({n_players!x}, {low:d}) fails only when filled
        game.prompt.format_map({f: 1 if f in _INT_FIELDS else "x" for f in allowed})
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
        raise fail(f"game.prompt: cannot fill the template: {e}") from None
    agent = setup.agent_fields()
    if agent:  # the moderator fills the game's fields, then each agent its own
        shared = game.prompt.format_map(_Shared(
            {f: 1 if f in _INT_FIELDS else "x" for f in PROMPT_FIELDS}))
        try:
            shared.format_map(dict.fromkeys(agent, "x"))
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
            raise fail(f"game.prompt: cannot fill the template for each agent: "
                       f"{type(e).__name__} {e} (with a population the prompt is filled "
                       "twice: write a literal brace as {{{{ or }}}})") from None
    if game.groups > options.agents:
        raise fail(f"game.groups: {game.groups} groups for {options.agents} agents "
                   f"(expected at most {options.agents})")
    if game.group_play and setup.group_count() < 2:
        raise fail("game.group_play needs at least two groups: set game.groups, or "
                   "population.groups")
    return setup
