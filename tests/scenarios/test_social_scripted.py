"""The scripted model's social rule: feed prompts of the social scenario answered offline."""

from __future__ import annotations

import json
import zlib
from collections import Counter
from typing import Any

import aiohttp
import pytest

from populace.llm.offline import ScriptedModel, ServerOptions, running_server, scripted_reply
from populace.scenarios.social._policy import (
    ACTIONS,
    ASK,
    SCHEMA,
    Item,
    feed_message,
    parse_action,
)
from populace.scenarios.social._scripted import (
    ASK_START,
    POSTS,
    read_feed,
    repost_probability,
    social_reply,
)

Messages = list[dict[str, Any]]
N = 2000
PERSONA = {"role": "system",
           "content": "You use a social network. About you: politics: left; age_group: 25-34."}
DAM = "Breaking: the river dam will fail tonight."


def feed(*items: tuple[int, str], day: int = 3) -> Messages:
    """The social scenario's own prompt for a feed of ``(shares, text)`` items."""
    shown = [Item(root=i, via=i, author=1000 + i, shares=s, same=False, origin=1000 + i)
             for i, (s, _) in enumerate(items)]
    texts = {i: text for i, (_, text) in enumerate(items)}
    return [PERSONA, {"role": "user", "content": feed_message(shown, texts, day)}]


def action(messages: Messages, seed: int | None, **kw: Any) -> dict[str, Any]:
    out = json.loads(scripted_reply(messages, seed=seed, **kw))
    assert isinstance(out, dict)
    return out


def test_the_prompt_is_read_as_the_scenario_writes_it() -> None:
    assert ASK.startswith(ASK_START)  # the scenario's request still starts as the rule expects
    messages = feed((3, DAM), (1, "A post by @1234."))
    assert messages[1]["content"].splitlines()[1] == f"[1] (shared by 3 people you follow) {DAM}"
    items = read_feed(messages)
    assert items is not None
    assert [(i.number, i.shares, i.text) for i in items] == [
        (1, 3, DAM), (2, 1, "A post by @1234.")]
    assert read_feed(feed()) == []
    written = ("Day 3. Your feed:\n[1] (shared by 3 people you follow) Breaking: the river dam "
               "will fail tonight.\n[2] (from @1234) A post by @1234.\n" + ASK)
    assert read_feed([PERSONA, {"role": "user", "content": written}]) == items


@pytest.mark.parametrize("content", [
    "Day 3. Your feed is empty.",  # no request
    ASK,  # no feed line
    "Question 1 of 2: How is your feed?\n" + ASK,  # the feed line is not first
    "Choose a number between 0 and 100. The answer is N.",
])
def test_other_prompts_are_not_feeds(content: str) -> None:
    assert social_reply([{"role": "user", "content": content}], seed=1) is None


def test_same_seed_same_action() -> None:
    messages = feed((3, DAM), (1, "A post by @1234."), (2, "Rain all week."))
    replies = [scripted_reply(messages, seed=s) for s in range(200)]
    assert replies == [scripted_reply(messages, seed=s) for s in range(200)]
    assert len(set(replies)) > 2  # the seed matters
    hashed = zlib.crc32("\x1e".join(str(m["content"]) for m in messages).encode())
    assert scripted_reply(messages) == scripted_reply(messages) == \
        scripted_reply(messages, seed=hashed)
    # structured or not, any temperature: the same object
    for s in range(50):
        assert scripted_reply(messages, seed=s, response_format=SCHEMA, temperature=1.5) == \
            replies[s]


async def test_the_model_answers_by_the_rule() -> None:
    messages = feed((3, DAM))
    model = ScriptedModel(latency=0.0)
    got = await model.complete(messages, seed=9, response_format=SCHEMA)
    assert got.text == scripted_reply(messages, seed=9)


def test_every_reply_is_the_three_key_object() -> None:
    feeds = [feed(), feed((1, "Hello.")), feed((3, DAM), (1, "A post by @1234."), (7, "Vote."))]
    seen: Counter[str] = Counter()
    for messages in feeds:
        shown = read_feed(messages)
        assert shown is not None
        for s in range(N):
            out = action(messages, s, response_format=SCHEMA if s % 2 else None)
            assert list(out) == ["action", "item", "text"]
            assert out["action"] in ACTIONS and out["action"] != "follow"
            assert isinstance(out["item"], int) and isinstance(out["text"], str)
            if out["action"] in ("repost", "like"):
                assert 1 <= out["item"] <= len(shown) and out["text"] == ""
            else:
                assert out["item"] == 0
                assert (out["text"] in POSTS) if out["action"] == "post" else out["text"] == ""
            seen[out["action"]] += 1
    assert set(seen) == {"repost", "like", "post", "nothing"}


def test_the_scenario_parses_every_reply() -> None:
    items = [Item(10, 11, 1234, 3, False, 5), Item(20, 20, 1234, 1, False, 1234)]
    messages = [PERSONA, {"role": "user", "content": feed_message(
        items, {10: DAM, 20: "A post by @1234."}, 3)}]
    got = Counter(parse_action(scripted_reply(messages, seed=s, response_format=SCHEMA),
                               items)[:2] for s in range(N))
    # (repost, via of item 1), (repost, via of item 2), (like, root of item 1), post, nothing
    assert set(got) == {(2, 11), (2, 20), (3, 10), (1, None), (0, None)}
    # item 1 (3 shares): 0.5; item 2: 0.5 × 0.2; like: 0.4 × 0.1; post: 0.36 × 0.05
    assert got[(2, 11)] / N == pytest.approx(0.5, abs=0.04)
    assert got[(2, 20)] / N == pytest.approx(0.1, abs=0.025)
    assert got[(3, 10)] / N == pytest.approx(0.04, abs=0.015)
    assert got[(1, None)] / N == pytest.approx(0.018, abs=0.01)


def test_the_repost_share_rises_with_shares() -> None:
    def share(shares: int) -> float:
        messages = feed((shares, DAM))
        return sum(action(messages, s)["action"] == "repost" for s in range(N)) / N

    one, five = share(1), share(5)
    assert repost_probability(1) == pytest.approx(0.2)
    assert repost_probability(5) == pytest.approx(0.8)
    assert repost_probability(10) == 0.9
    assert one == pytest.approx(0.2, abs=0.03)
    assert five == pytest.approx(0.8, abs=0.03)
    assert five > one + 0.5


def test_first_hit_wins_and_an_item_keeps_its_draw() -> None:
    many, few = (6, "Shared widely."), (1, "Shared once.")
    for s in range(N):
        ahead, behind = action(feed(many, few), s), action(feed(few, many), s)
        # the draws follow the texts, so whether some item is reposted does not depend on
        # the order; which one does (the first listed that hits)
        assert (ahead["action"] == "repost") == (behind["action"] == "repost")
        if ahead["action"] != "repost":
            assert ahead == behind  # like item 1, post or nothing alike
        elif ahead["item"] == 2:  # only "Shared once." hit: it is item 1 the other way round
            assert behind["item"] == 1
        elif behind["item"] == 2:  # only "Shared widely." hit
            assert ahead["item"] == 1


def test_an_empty_feed_only_posts_or_does_nothing() -> None:
    messages = feed()
    got = Counter(action(messages, s)["action"] for s in range(N))
    assert set(got) <= {"post", "nothing"}
    assert got["post"] / N == pytest.approx(0.05, abs=0.015)


# Replies recorded before the social rule was added: the game and survey rules are unchanged.
_GAME = [{"role": "system", "content": "You are a doctorate economist."},
         {"role": "user", "content": "Choose a number between 0 and 100. The winner is closest "
          "to 2/3 of the average. Think step by step. The answer is N."}]
_LATER = [*_GAME, {"role": "assistant", "content": "The answer is 30."},
          {"role": "user", "content": "Last round the winning number was 22. Choose again "
           "between 0 and 100, 2/3 of the average."}]
_SURVEY = [{"role": "system", "content": "About you: age: 30; education: bachelor."},
           {"role": "user", "content": "Question 3 of 10: How much do you trust the "
            "government?\nOptions:\n1. Low\n2. Mid\n3. High\nReply with the number of one "
            "option on this scale."}]
_SINGLE = [{"role": "user", "content": "Question 1 of 2: How do you travel?\nOptions:\n1. Car"
            "\n2. Bus\n3. Train\nReply with the number of one option."}]
_NUMBER = {"type": "json_schema", "json_schema": {"name": "a", "strict": True, "schema": {
    "type": "object", "properties": {"reasoning": {"type": "string"},
                                     "number": {"type": "integer"}},
    "required": ["reasoning", "number"]}}}
_ANSWER = {"type": "json_schema", "json_schema": {"name": "answer", "strict": True, "schema": {
    "type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}}}
_STEPS = ("If the others choose about 50, the target is about 33. If the others choose about "
          "33, the target is about 22. If the others choose about 22, the target is about 15. "
          "If the others choose about 15, the target is about 10.")
_MOVE = ("Last round the winning number was 22. Everyone will aim at about 0.67 of that now, "
         "so I move down with them.")
RECORDED = [
    (_GAME, None, None, f"{_STEPS} The answer is 6."),
    (_GAME, 7, None, f"{_STEPS} The answer is 8."),
    (_GAME, 7, _NUMBER, json.dumps({"reasoning": _STEPS, "number": 8})),
    (_LATER, None, None, f"{_MOVE} The answer is 8."),
    (_LATER, 1, _NUMBER, json.dumps({"reasoning": _MOVE, "number": 7})),
    (_LATER, 7, None, f"{_MOVE} The answer is 10."),
    (_SURVEY, None, None, "I would pick option 2."),
    (_SURVEY, 1, None, "I would pick option 3."),
    (_SURVEY, 7, _ANSWER, '{"answer": 2}'),
    (_SINGLE, 1, _ANSWER, '{"answer": 1}'),
    (_SINGLE, 7, None, "I would pick option 3."),
]


@pytest.mark.parametrize(("messages", "seed", "fmt", "expected"), RECORDED)
def test_game_and_survey_replies_are_unchanged(messages: Messages, seed: int | None,
                                               fmt: dict[str, Any] | None,
                                               expected: str) -> None:
    assert scripted_reply(messages, seed=seed, temperature=0.7, response_format=fmt) == expected


async def test_serve_llm_answers_feeds() -> None:
    messages = feed((3, DAM), (1, "A post by @1234."))
    async with running_server(ServerOptions(policy="scripted")) as base, \
            aiohttp.ClientSession() as session:
        for body in ({"seed": 12}, {"seed": 12, "response_format": SCHEMA}, {"seed": 40}):
            async with session.post(f"{base}/chat/completions", json={
                    "model": "dummy", "messages": messages, **body}) as resp:
                assert resp.status == 200
                text = (await resp.json())["choices"][0]["message"]["content"]
            assert text == scripted_reply(messages, seed=body["seed"])
            assert set(json.loads(text)) == {"action", "item", "text"}
