"""The game's participants are personas: their rounds are memory events, the conversation
built from them is the one the game always built, and checkpoints written before the port
(messages as ``(sender, content, role, metadata)``) are read."""

from __future__ import annotations

from populace.agents import Event
from populace.core import Msg
from populace.llm import ModelSet, ScriptedConfig
from populace.scenarios.guess_number import Participant, Rules


def participant(memory_rounds: int = 2) -> Participant:
    models = ModelSet.build({"scripted": ScriptedConfig(provider="scripted")})
    rules = Rules(1, 0, 100, None, memory_rounds=memory_rounds)
    return Participant(4, {"education": "PhD"}, models=models, rules=rules)


def test_an_old_checkpoint_is_read_as_events() -> None:
    p = participant()
    p.set_state({"memory": [
        (4, "I pick 30. The answer is 30.", "assistant", None),
        ("moderator", "The winning number was 22.", "system", {"round": 1}),
        ("intervention", "A storm is coming.", "system", {"step": 2})]})
    assert p.memory.events() == [
        Event(0, "decision", "I pick 30. The answer is 30."),
        Event(1, "observation", "The winning number was 22."),
        Event(2, "intervention", "A storm is coming.")]
    again = participant()
    again.set_state(p.get_state())
    assert again.memory.events() == p.memory.events()


def test_the_conversation_is_the_rounds_as_they_were_said() -> None:
    p = participant(memory_rounds=1)
    p.set_state({"memory": [
        (4, "Line one.\nThe answer is 30.", "assistant", None),
        ("moderator", "The winning number was 22.", "system", {"round": 1})]})
    p.observe(Msg("intervention", "Vote early.", metadata={"step": 2}))
    turns = p.conversation("Round 2. Go.")
    assert turns[1:-1] == [  # the last two turns: memory_rounds=1 keeps one round's two
        {"role": "user", "content": "The winning number was 22."},
        {"role": "user", "content": "Vote early."}]
    assert p._history(3)[0] == {"role": "assistant",
                                "content": "Line one.\nThe answer is 30."}  # not flattened
