"""The scripted model's rules: each lives with what it answers, joins through the entry point
group ``populace.scripted_rules`` and is asked in a stated order — in-process and in a
separate ``serve-llm`` process alike."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

import forkserver
import populace.llm.offline._scripted as registry
from populace.agents._scripted import persona_reply
from populace.llm.offline import ScriptedParams, scripted_reply, scripted_rule
from populace.population._scripted import background_reply
from populace.scenarios.guess_number._scripted import extraction_reply, game_reply
from populace.scenarios.social._scripted import ASK_START, social_reply
from populace.scenarios.survey._scripted import survey_reply

Messages = list[dict[str, Any]]

#: One prompt per rule, in the order the rules are asked.
PROMPTS: dict[str, Messages] = {
    "persona": [
        {"role": "system", "content": "Your town votes every week on a new park."},
        {"role": "system", "content": "About you: age: old; job: nurse."},
        {"role": "user", "content": 'Question: Do you support the park?\n'
                                    'Answer with exactly one of: "yes", "no".'}],
    "social": [{"role": "user", "content": "Day 2. Your feed:\n[1] (shared by 4 people you "
                                           "follow) The dam holds.\n" + ASK_START}],
    "survey": [
        {"role": "system", "content": "About you: age_group: 45-54; education: doctorate."},
        {"role": "user", "content": "Question 1 of 2: How happy are you?\nOptions:\n"
                                    "1. Not too happy\n2. Pretty happy\n3. Very happy\n"
                                    "Reply with the number of one option on this scale."}],
    "guess_number_extraction": [
        {"role": "user", "content": "Extract the number. Reply 'The answer is N'.\n---\n"
                                    "So I pick 30. The answer is 30.\n---"}],
    "background": [{"role": "user", "content": 'Write a background for {"education": '
                                               '"master\'s degree", "age": 41}'}],
    "guess_number": [
        {"role": "system", "content": "Your education is doctorate."},
        {"role": "user", "content": "Choose a number between 0 and 100. The target is 2/3 of "
                                    "the average of all numbers. Think step by step."}],
}
RULES = {"persona": persona_reply, "social": social_reply, "survey": survey_reply,
         "guess_number_extraction": extraction_reply, "background": background_reply,
         "guess_number": game_reply}


def test_the_rules_are_asked_in_their_stated_order() -> None:
    assert registry.scripted_rules() == tuple(RULES.values())
    assert [getattr(r, "priority", registry.DEFAULT_PRIORITY) for r in RULES.values()] == \
        [100, 200, 300, 400, 500, 1000]


def test_no_rule_lives_below_the_scenarios_layer() -> None:
    below = ("populace.llm", "populace.core", "populace.environment", "populace.results")
    assert not [r.__module__ for r in registry.scripted_rules() if r.__module__.startswith(below)]


@pytest.mark.parametrize("name", list(RULES))
def test_each_prompt_is_answered_by_its_own_rule(name: str) -> None:
    messages = PROMPTS[name]
    kw: dict[str, Any] = {"seed": 7, "temperature": 0.5, "response_format": None,
                          "params": ScriptedParams(), "max_tokens": None}
    own = RULES[name](messages, **kw)
    assert own is not None
    assert scripted_reply(messages, **kw) == own
    earlier = list(RULES)[:list(RULES).index(name)]
    assert all(RULES[e](messages, **kw) is None for e in earlier)  # nobody earlier knows it


class _EntryPoint:
    def __init__(self, name: str, rule: Any) -> None:
        self.name, self.rule = name, rule

    def load(self) -> Any:
        return self.rule


@pytest.fixture
def with_added_rules(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[_EntryPoint]]:
    """The installed rules plus the ones a test appends, as a package's entry points would
    add them."""
    installed = [_EntryPoint(r.__name__, r) for r in registry.scripted_rules()]
    added: list[_EntryPoint] = []
    monkeypatch.setattr(registry.importlib.metadata, "entry_points",
                        lambda group: [*added, *installed] if group == registry.RULES_GROUP
                        else [])
    registry.scripted_rules.cache_clear()
    yield added
    registry.scripted_rules.cache_clear()


def test_a_package_adds_a_rule_with_or_without_a_priority(
        with_added_rules: list[_EntryPoint]) -> None:
    def haiku(messages: Messages, *, seed: int, **_: Any) -> str | None:
        return "An old silent pond." if "haiku" in messages[-1]["content"] else None

    @scripted_rule(priority=450)
    def shout(messages: Messages, *, seed: int, **_: Any) -> str | None:
        return "LOUD" if "Extract" in messages[-1]["content"] else None

    with_added_rules += [_EntryPoint("zz_haiku", haiku), _EntryPoint("shout", shout)]
    rules = registry.scripted_rules()
    assert rules.index(haiku) == 1  # the default 100, after "persona_reply" by name
    assert rules.index(shout) == rules.index(extraction_reply) + 1
    assert scripted_reply([{"role": "user", "content": "A haiku, please."}]) == \
        "An old silent pond."
    extraction = PROMPTS["guess_number_extraction"]
    assert scripted_reply(extraction) == "The answer is 30"  # 400 is asked before 450
    assert scripted_reply([{"role": "user", "content": "Extract it."}]) == "LOUD"


def test_a_rule_priority_is_an_int() -> None:
    with pytest.raises(TypeError, match="takes an int"):
        scripted_rule(priority="first")  # type: ignore[arg-type]


def test_without_any_rule_the_model_says_how_to_install_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from populace.core import ConfigError

    monkeypatch.setattr(registry.importlib.metadata, "entry_points", lambda group: [])
    registry.scripted_rules.cache_clear()
    try:
        with pytest.raises(ConfigError, match=r"populace\.scripted_rules"):
            scripted_reply(PROMPTS["guess_number"])
    finally:
        registry.scripted_rules.cache_clear()


def test_serve_llm_in_its_own_process_answers_every_rule_s_prompt(tmp_path: Any) -> None:
    """``serve-llm --policy scripted`` runs in a process of its own: the rules load there
    through the same entry points, and each prompt gets the in-process reply."""
    log = tmp_path / "server.txt"
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR")}
    with log.open("w") as out:
        server = forkserver.spawn(
            [sys.executable, "-m", "populace.cli", "serve-llm", "--port", "0", "--policy",
             "scripted", "--model", "scripted"], stdout=out, stderr=subprocess.STDOUT,
            env={**env, "NO_COLOR": "1"})
    try:
        deadline = time.monotonic() + 60
        while not (found := re.search(r"http://127\.0\.0\.1:\d+/v1", log.read_text())):
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        for name, messages in PROMPTS.items():
            body = {"model": "scripted", "messages": messages, "seed": 11, "temperature": 0.7}
            request = urllib.request.Request(found.group(0) + "/chat/completions",
                                             data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=30) as reply:
                text = json.loads(reply.read())["choices"][0]["message"]["content"]
            assert text == scripted_reply(messages, seed=11, temperature=0.7), name
            assert text == RULES[name](messages, seed=11, temperature=0.7,
                                       response_format=None, params=ScriptedParams(),
                                       max_tokens=None), name
    finally:
        server.kill()
        server.wait(timeout=30)
