"""The scripted model's social rule: what an agent does with its feed, by a fixed rule.

:func:`~populace.llm.offline.scripted_reply` (and ``populace serve-llm --policy scripted``) hands
the feed prompt of a social-network run to :func:`social_reply` (entry point ``social`` of
group ``populace.scripted_rules``, priority 200: after the persona agents' rule, before the
survey's and the game's), so a ``social`` run with a model policy works offline and still
shows cascades: an item shared by more of the people an agent follows is reposted more
often. The rule, in full (also in
``docs/scripted-model.md``, section "Social feeds"):

**What it reads.** The *last user message*, when its first line is "Day N. Your feed:" or
"Day N. Your feed is empty." (the "Day N." is optional) and it contains the sentence
:data:`ASK_START` ("Choose one thing to do now: …", whitespace aside). Its items are the
lines ``[n] (how) text`` before that sentence: ``how`` is "shared by K people you follow"
(``shares`` = K) or "from @X" (``shares`` = 1); a line without either has ``shares`` = 1
and all of it after ``[n]`` as its text. Nothing else is read: not the persona (system
message), not the day, not the temperature, not the ``response_format``.

**The action.** In the order listed, item ``j`` is reposted if ``u_j < min(0.9, 0.05 +
0.15 × shares_j)``; the first such item wins. ``u_j`` is a uniform draw from the request
``seed`` and the crc32 of the item's text (so an item keeps its draw wherever it is listed,
and two items with the same text share one). When no item is reposted: with a non-empty
feed, the first item listed is liked with probability 0.1; otherwise (or with an empty
feed) a post of one of :data:`POSTS` (chosen by a draw) is written with probability 0.05;
otherwise nothing. The rule never follows. Knobs of :class:`ScriptedParams` (``invalid``,
``depth``, ``noise``, …) do not apply.

**The reply.** Always exactly the JSON object ``{"action": A, "item": n, "text": T}``,
for structured and unstructured requests alike: ``A`` one of "repost", "like", "post",
"nothing"; ``n`` the item's number as shown (0 for a post or nothing); ``T`` the post
(empty otherwise).
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from populace.core import derive_seed, mix64, unit_float
from populace.llm import text_of
from populace.llm.offline import scripted_rule

#: The first sentence of the social scenario's request; a feed prompt must contain it.
ASK_START = ("Choose one thing to do now: write a post of your own, repost an item, like an "
             "item, follow the author of an item, or nothing.")
#: Repost probability ``min(REPOST_CAP, REPOST_BASE + PER_SHARE × shares)``.
REPOST_BASE, PER_SHARE, REPOST_CAP = 0.05, 0.15, 0.9
#: Probability of liking the first item (non-empty feed), then of writing a post.
LIKE, POST = 0.1, 0.05
#: The posts the rule writes, one chosen per post by a draw.
POSTS: tuple[str, ...] = (
    "Thinking about what I read today.",
    "Quiet day here. Hope everyone is well.",
    "Does anyone else feel the news moves too fast?",
    "Just got back from a long walk. Recommend it.",
)

_ASK_HEAD = "Choose one thing to do now:"
_FIRST = re.compile(r"^(?:Day\s+\d+\.\s+)?Your feed(?::|\s+is empty\.)\s*$")
_ITEM = re.compile(r"^\[(\d+)\]\s*(?:\((?:shared by (\d+) (?:people|person) you follow"
                   r"|from @[^)\s]*)\)\s*)?(.*?)\s*$")
_REPOST, _LIKE, _POST, _TEXT = range(0x5D0, 0x5D4)


@dataclass(frozen=True, slots=True)
class FeedItem:
    """One item of a feed prompt as the rule reads it."""

    number: int  # as shown, ``[n]``
    shares: int
    text: str


def read_feed(messages: Sequence[Mapping[str, Any]]) -> list[FeedItem] | None:
    """The items of the feed prompt in the last user message (``[]``: an empty feed);
    None when that message is not a feed prompt."""
    prompt = next((text_of(m.get("content")) for m in reversed(messages)
                   if m.get("role") == "user"), None)
    if prompt is None:
        return None
    lines = prompt.strip().splitlines()
    if not lines or not _FIRST.match(lines[0].strip()) or \
            ASK_START not in " ".join(prompt.split()):
        return None
    items: list[FeedItem] = []
    for line in lines[1:]:
        if line.strip().startswith(_ASK_HEAD):
            break
        found = _ITEM.match(line.strip())
        if found is not None:
            shares = int(found.group(2)) if found.group(2) is not None else 1
            items.append(FeedItem(int(found.group(1)), shares, found.group(3)))
    return items


def repost_probability(shares: int) -> float:
    """``min(0.9, 0.05 + 0.15 × shares)``."""
    return min(REPOST_CAP, REPOST_BASE + PER_SHARE * shares)


def social_action(items: Sequence[FeedItem], seed: int) -> tuple[str, int, str]:
    """``(action, item number, text)`` by the rule of the module docstring."""
    for item in items:
        u = unit_float(derive_seed(seed, _REPOST, zlib.crc32(item.text.encode())))
        if u < repost_probability(item.shares):
            return "repost", item.number, ""
    if items and unit_float(derive_seed(seed, _LIKE)) < LIKE:
        return "like", items[0].number, ""
    if unit_float(derive_seed(seed, _POST)) < POST:
        return "post", 0, POSTS[mix64(derive_seed(seed, _TEXT)) % len(POSTS)]
    return "nothing", 0, ""


@scripted_rule(priority=200)
def social_reply(messages: Sequence[Mapping[str, Any]], *, seed: int, **_: Any) -> str | None:
    """The scripted reply to a social feed prompt (the rule of the module docstring); None
    when the last user message is not one.

    >>> social_reply([{"role": "user", "content": "Day 1. Your feed is empty.\\n" + ASK_START}],
    ...              seed=3)
    '{"action": "nothing", "item": 0, "text": ""}'
    """
    items = read_feed(messages)
    if items is None:
        return None
    action, number, text = social_action(items, seed)
    return json.dumps({"action": action, "item": number, "text": text})
