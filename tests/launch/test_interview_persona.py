"""An agent that is no persona is interviewed with its profile but never the run's internal
columns (arm, group, ids): the rule of populace.agents.INTERNAL, for every agent."""

from __future__ import annotations

from populace.core import Agent
from populace.launch._interview import interview_messages


class Plain(Agent):
    pass


def test_an_agent_that_is_no_persona_is_interviewed_without_internal_columns() -> None:
    agent = Plain(1, {"age": 30, "arm": "treated", "group": 2})  # type: ignore[arg-type]
    shown = " ".join(m["content"] for m in interview_messages(agent, "How are you?"))
    assert "About you: age: 30." in shown
    assert "treated" not in shown and "group" not in shown
