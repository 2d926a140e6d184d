"""How a persona acts on its feed: the offline rules, and the prompt for a model.

One action per active agent and step, in :data:`ACTIONS`. The offline policies decide for
all the active agents of a worker at once, in numpy, from seeded draws (the same in every
run with the same seed, on any backend); a model policy asks each agent's model:

**dummy**: one of the five actions uniformly; a repost or like takes a uniformly chosen item
of the feed, a follow its original author (nothing when the feed is empty).

No policy follows the agent itself: its own post can return to its feed through a
followee's repost once the post has left the window, and a follow of its author is then
``nothing`` (target none).

**scripted** (parameters in :class:`ScriptedPolicy`): the agent looks at its feed items in
rank order and reposts the first item ``j`` whose draw ``u_j < repost_base + per_share ×
shares_j + similar × same_j`` (``shares_j``: how many of the people it follows shared that
post; ``same_j``: 1 when the item's author has the agent's value of the homophily aspect).
A post it already reposted is not reposted again. Otherwise it likes the top item with
probability ``like``, else posts something of its own with probability ``post``, else
follows the author of the top item's original post with probability ``follow`` (someone
it may not follow yet: the item reached it through a repost), else does nothing. So cascades
grow where many followees share, and faster inside a group than across.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

#: The actions, by code (the ``actions`` table spells them out).
ACTIONS = ("nothing", "post", "repost", "like", "follow")
NOTHING, POST, REPOST, LIKE, FOLLOW = range(5)
_DRAW, _ITEM, _PICK = 0x50C1, 0x50C2, 0x50C3


@dataclass(frozen=True, slots=True)
class ScriptedPolicy:
    """The scripted rule's knobs (see the module docstring)."""

    repost_base: float = 0.02
    per_share: float = 0.08
    similar: float = 0.05
    like: float = 0.10
    post: float = 0.05
    follow: float = 0.01


@dataclass(frozen=True, slots=True)
class Item:
    """One feed item as an agent sees it."""

    root: int  # the post that spreads
    via: int  # the latest post sharing it by someone the agent follows (a repost's parent)
    author: int  # who wrote ``via``
    shares: int  # how many of the people the agent follows shared it
    same: bool  # the author has the agent's value of the homophily aspect
    origin: int  # who wrote the root


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on an array of uint64 (wrapping arithmetic)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def draws(seed: int, *keys: np.ndarray) -> np.ndarray:
    """Uniform floats in [0, 1), one per element of ``keys`` (arrays of equal length),
    determined by ``seed`` and the keys."""
    with np.errstate(over="ignore"):
        x = np.full(len(keys[0]), seed & 0xFFFFFFFFFFFFFFFF, dtype=np.uint64)
        for key in keys:
            x = _mix(x ^ _mix(np.asarray(key).astype(np.uint64)))
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


@dataclass(frozen=True)
class Feeds:
    """The feeds of some agents as CSR: agent ``member[i]`` sees items
    ``indptr[i]:indptr[i+1]`` in rank order."""

    member: np.ndarray  # agent ids (int64)
    indptr: np.ndarray  # int64, len(member) + 1
    root: np.ndarray
    via: np.ndarray
    author: np.ndarray
    shares: np.ndarray
    same: np.ndarray  # bool: the author has the member's value of the homophily aspect
    origin: np.ndarray  # who wrote the root (whom a follow follows)

    def items(self, i: int) -> list[Item]:
        lo, hi = int(self.indptr[i]), int(self.indptr[i + 1])
        return [Item(int(self.root[j]), int(self.via[j]), int(self.author[j]),
                     int(self.shares[j]), bool(self.same[j]), int(self.origin[j]))
                for j in range(lo, hi)]


def decide(feeds: Feeds, seed: int, policy: str, params: ScriptedPolicy,
           shared: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(action, target)`` per member by the ``scripted`` or ``dummy`` rule, vectorised
    (``shared``: sorted keys ``member << 32 | root`` of posts already reposted; target -1
    for none). See the module docstring for the rules."""
    n = len(feeds.member)
    counts = np.diff(feeds.indptr)
    owner = np.repeat(np.arange(n), counts)
    has = counts > 0
    first = feeds.indptr[:-1]
    top = np.minimum(first, max(len(feeds.root) - 1, 0))
    action = np.full(n, NOTHING, dtype=np.int8)
    target = np.full(n, -1, dtype=np.int64)
    u = draws(seed, feeds.member, np.full(n, _DRAW))
    if policy == "dummy":
        action = (draws(seed, feeds.member, np.full(n, _PICK)) * len(ACTIONS)).astype(np.int8)
        pick = first + (u * np.maximum(counts, 1)).astype(np.int64)
        pick = np.minimum(pick, max(len(feeds.root) - 1, 0))
        needs = np.isin(action, (REPOST, LIKE, FOLLOW))
        action[needs & ~has] = NOTHING
        ok = needs & has
        target[ok & (action == REPOST)] = feeds.via[pick[ok & (action == REPOST)]]
        target[ok & (action == LIKE)] = feeds.root[pick[ok & (action == LIKE)]]
        target[ok & (action == FOLLOW)] = feeds.origin[pick[ok & (action == FOLLOW)]]
        return _no_self_follow(feeds.member, action, target)
    p = (params.repost_base + params.per_share * feeds.shares
         + params.similar * feeds.same.astype(np.float64))
    member_of = feeds.member[owner]
    keys = (member_of.astype(np.int64) << 32) | feeds.root.astype(np.int64)
    fresh = ~np.isin(keys, shared, assume_unique=False)
    chosen = fresh & (draws(seed, member_of, feeds.root, np.full(len(owner), _ITEM)) < p)
    hits = np.flatnonzero(chosen)
    who, at = np.unique(owner[hits], return_index=True)  # the first such item per member
    action[who] = REPOST
    target[who] = feeds.via[hits[at]]
    rest = action == NOTHING
    like = rest & has & (u < params.like)
    u2 = u - np.where(has, params.like, 0.0)
    post = rest & ~like & (u2 >= 0) & (u2 < params.post)
    follow = rest & ~like & ~post & has & (u2 - params.post >= 0) & \
        (u2 - params.post < params.follow)
    action[like], target[like] = LIKE, feeds.root[top[like]]
    action[post] = POST
    action[follow], target[follow] = FOLLOW, feeds.origin[top[follow]]
    return _no_self_follow(feeds.member, action, target)


def _no_self_follow(member: np.ndarray, action: np.ndarray, target: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """A follow of the agent itself is nothing (see the module docstring)."""
    selfish = (action == FOLLOW) & (target == member)
    action[selfish], target[selfish] = NOTHING, -1
    return action, target


# -- a model's policy ----------------------------------------------------------------------
SCHEMA: dict[str, Any] = {"type": "json_schema", "json_schema": {
    "name": "action", "strict": True,
    "schema": {"type": "object", "properties": {
        "action": {"type": "string", "enum": list(ACTIONS)},
        "item": {"type": "integer"},
        "text": {"type": "string"},
    }, "required": ["action", "item", "text"], "additionalProperties": False}}}

ASK = ("Choose one thing to do now: write a post of your own, repost an item, like an item, "
       "follow the author of an item, or nothing. Reply with a JSON object: "
       '{"action": "post" | "repost" | "like" | "follow" | "nothing", "item": the item '
       'number (0 if none), "text": your post (empty unless you post)}.')


def feed_message(items: list[Item], texts: dict[int, str], step: int) -> str:
    """The user message showing a feed to a model."""
    if not items:
        lines = [f"Day {step}. Your feed is empty."]
    else:
        lines = [f"Day {step}. Your feed:"]
        for i, item in enumerate(items, 1):
            by = f"shared by {item.shares} people you follow" if item.shares > 1 else \
                f"from @{item.author}"
            text = " ".join(texts.get(item.root, "").split())[:400]
            lines.append(f"[{i}] ({by}) {text}")
    lines.append(ASK)
    return "\n".join(lines)


_OBJECT = re.compile(r"\{.*\}", re.S)


def parse_action(reply: str, items: list[Item], *, me: int | None = None
                 ) -> tuple[int, int | None, str | None]:
    """``(action, target, text)`` from a model's reply; an unreadable reply, an item
    number that is not in the feed, or a follow of agent ``me`` itself, is ``nothing``.

    >>> mine = Item(root=7, via=9, author=2, shares=1, same=False, origin=5)
    >>> parse_action('{"action": "follow", "item": 1}', [mine], me=5)
    (0, None, None)
    """
    found = _OBJECT.search(reply)
    try:
        data = json.loads(found.group(0)) if found else None
    except ValueError:
        data = None
    if not isinstance(data, dict) or data.get("action") not in ACTIONS:
        return NOTHING, None, None
    action = ACTIONS.index(data["action"])
    if action == POST:
        text = data.get("text")
        return (POST, None, " ".join(text.split())[:1000]) if isinstance(text, str) \
            and text.strip() else (NOTHING, None, None)
    if action == NOTHING:
        return NOTHING, None, None
    number = data.get("item")
    if isinstance(number, bool) or not isinstance(number, int) or \
            not 1 <= number <= len(items):
        return NOTHING, None, None
    item = items[number - 1]
    target = item.via if action == REPOST else item.root if action == LIKE else item.origin
    if action == FOLLOW and target == me:
        return NOTHING, None, None
    return action, target, None
