"""What participants are told, in our own words, at the paper's four levels of guidance.

- P1: the rules, then "give your number directly";
- P2: the rules, then "think step by step, then give your number";
- P3: P2 plus "assume every player is rational";
- P4: P3 plus "every player tries to predict the others and adjusts".
"""

from __future__ import annotations

from typing import Any

from ._rules import read_answer

RULES = (
    "You are one of {n_players} players in a number game.{composition} Every player "
    "privately chooses a "
    "real number between {low} and {high}, inclusive. {target_rule} The player whose number "
    "is closest to the target wins.{famous_note}{group_note}"
)

FAMOUS_NOTE = " (This is a version of the famous game 'guess 2/3 of the average'.)"

GROUP_NOTE = (" In this game the players are split into {groups} groups: a group's number is "
              "the average of its members' numbers, and the group whose number is closest to "
              "the target wins.")

STEP_BY_STEP = "Think the problem through step by step first, then give your number."

INSTRUCTIONS = {
    "P1": "Give your number directly.",
    "P2": STEP_BY_STEP,
    "P3": STEP_BY_STEP + " Assume that every player is rational.",
    "P4": STEP_BY_STEP + " Assume that every player is rational, tries to predict the "
          "numbers the others will choose, and adjusts their own accordingly.",
}

#: Added for protocols that read the number from the answer itself.
ANSWER_FORMAT = " End with the sentence 'The answer is N', where N is your number."

CONSTRAINED_FORMAT = " Reply with your number only."

#: The answer of the constrained protocol: a few tokens (the number and an end).
CONSTRAINED_MAX_TOKENS = 8


def number_constraint(low: float, high: float) -> dict[str, Any]:
    """The ``response_format`` holding an answer to a number (see
    ``populace.llm.ServerKind``): one of the integers of a range of at most 1,001 of them,
    else a decimal number.

    >>> number_constraint(0, 3)
    {'type': 'choice', 'choice': ['0', '1', '2', '3']}
    """
    if low == int(low) and high == int(high) and high - low <= 1000:
        return {"type": "choice", "choice": [str(i) for i in range(int(low), int(high) + 1)]}
    return {"type": "regex", "regex": r"-?[0-9]{1,15}(\.[0-9]{1,4})?"}


STRUCTURED_FORMAT = (" Reply with a JSON object with two fields: \"reasoning\" (a string) "
                     "and \"number\" (your number).")

#: The instruction comes before the answer it reads, so every extraction call shares it as
#: a prefix a server computes once (see ``populace.llm.conversation``).
EXTRACT = (
    "Extract the one number a player of a number game finally chose in the answer below. "
    "Reply with exactly 'The answer is N', where N is that number, or with 'I CAN'T' if the "
    "answer does not settle on one number.\n\n---\n{answer}\n---"
)

#: The user's turn that ends a shared-first conversation (the rules came first). No
#: digits: a small model that echoes it must not be read as answering a number.
TURN = "It is your turn: choose your number."

#: The ``response_format`` of the structured protocol (OpenAI / vLLM JSON schema).
RESPONSE_SCHEMA: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {
        "name": "guess",
        "schema": {
            "type": "object",
            "properties": {"reasoning": {"type": "string"}, "number": {"type": "number"}},
            "required": ["reasoning", "number"],
            "additionalProperties": False,
        },
    },
}


def extracted_number(text: str) -> str | None:
    """The N of "The answer is N" in an extraction reply, as written ("22", "2/3", "1,000");
    None for "I CAN'T", the template itself ("The answer is N") or no stated number.

    A reply that is one number and nothing else ("22", "**22**") counts too.

    >>> extracted_number("The answer is 2/3.")
    '2/3'
    """
    found = read_answer(text, stated_only=True)
    return found[0] if found else None


def describe_target(ratio: Any, offset: float) -> str:
    rule = f"The target is {ratio} of the average of all chosen numbers"
    if offset:
        rule += f", plus {offset:g}"
    return rule + "."


def composition(aspect: str, counts: dict[str, int]) -> str:
    """The player-count note of the heterogeneous experiments, from the actual population.

    >>> composition("profession", {"economist": 2, "artist": 1})
    ' By profession, the players are: 2 economist, 1 artist.'
    """
    parts = ", ".join(f"{n} {value}" for value, n in counts.items())
    return f" By {aspect}, the players are: {parts}."


def persona(profile: Any, attributes: tuple[str, ...]) -> str | None:
    """The system message that makes a participant someone: its background if written,
    else its sampled attributes; None when the run has no population."""
    if "background" in attributes:
        return str(profile["background"])
    if not attributes:
        return None
    return "About you: " + "; ".join(f"{a}: {profile[a]}" for a in attributes) + "."
