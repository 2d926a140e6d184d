"""The paper's flagship experiment: every player guesses ratio × the average.

Each round a moderator (in the central process) tells N participants the rules; each
participant asks its model and reports a number; the moderator scores the round
(target = offset + ratio × mean of valid answers; the closest valid answer wins) and, with
``feedback``, tells everyone the winning number before the next round. With
``group_play``, each group reports its members' mean and the groups are scored instead.
"""

from ._agents import Guess, Participant, Rules
from ._config import DEFAULT_PROMPT, PROMPT_FIELDS, GameConfig
from ._play import RESPONSE_SCHEMA, GuessNumber, Reporter, SilentReporter, Timings, play
from ._rules import (
    GroupScores,
    RoundOutcome,
    parse_number,
    parse_ratio,
    score_groups,
    score_round,
)

__all__ = [
    "DEFAULT_PROMPT",
    "PROMPT_FIELDS",
    "RESPONSE_SCHEMA",
    "GameConfig",
    "GroupScores",
    "Guess",
    "GuessNumber",
    "Participant",
    "Reporter",
    "RoundOutcome",
    "Rules",
    "SilentReporter",
    "Timings",
    "parse_number",
    "parse_ratio",
    "play",
    "score_groups",
    "score_round",
]
