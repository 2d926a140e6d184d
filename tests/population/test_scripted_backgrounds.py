"""The scripted model's background writer writes the length the meta-prompt asks for."""

from __future__ import annotations

import json

import pytest

from populace.population._prompts import DEFAULT_META_PROMPT, compile_template, render
from populace.population._scripted import background_reply, persona_steps


def ask(words: int, attributes: dict[str, str]) -> list[dict[str, str]]:
    prompt = render(compile_template(DEFAULT_META_PROMPT),
                    {"attributes_json": json.dumps(attributes), "words": words})
    return [{"role": "user", "content": prompt}]


@pytest.mark.parametrize("words", [40, 60, 120, 200, 400])
def test_a_background_has_the_words_asked_within_15_percent(words: int) -> None:
    messages = ask(words, {"education": "master's degree", "profession": "economist"})
    for seed in range(100):
        text = background_reply(messages, seed=seed)
        assert text is not None
        assert abs(len(text.split()) / words - 1) <= 0.15, (seed, len(text.split()))


def test_the_facts_the_rules_read_stay_and_backgrounds_differ() -> None:
    messages = ask(120, {"education": "doctorate"})
    texts = [background_reply(messages, seed=s) or "" for s in range(20)]
    assert all("Your education is doctorate." in t for t in texts)
    assert {persona_steps(t) for t in texts} == {2.0}  # no added sentence adds steps
    assert len(set(texts)) == 20


def test_without_a_length_the_background_stays_short() -> None:
    text = background_reply([{"role": "user", "content": '{"education": "doctorate"}'}],
                            seed=1)
    assert text is not None and len(text.split()) < 60
