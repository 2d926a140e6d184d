"""Personas and the per-worker shard that holds their part of the graph.

Each worker has one :class:`Shard` (a :class:`~populace.core.PerWorker` resource): the
followee lists of the worker's agents, and, each step, the recent posts and who is active.
The shard computes every active agent's feed at once (numpy), and, for the offline
policies, every decision too. A :class:`Person` with a model policy reads its own feed from
the shard, asks its model, and answers with its action.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from populace.agents import Persona, persona_columns
from populace.core import Profile, derive_seed, seed_for
from populace.llm import ChatMessage, Completion, ModelClient

from ._feed import Posts, Recommender, build_feeds
from ._policy import (
    ACTIONS,
    SCHEMA,
    Feeds,
    Item,
    ScriptedPolicy,
    decide,
    feed_message,
    parse_action,
)


@dataclass(frozen=True)
class Part:
    """One worker's part of the graph: agents ``lo..hi-1`` and whom they follow."""

    lo: int
    hi: int
    indptr: np.ndarray  # rebased to lo
    indices: np.ndarray
    groups: np.ndarray | None  # every agent's value code of the homophily aspect


@dataclass(frozen=True)
class StepData:
    """What a shard needs for step ``t`` (sent fresh every step: a resumed run needs no
    state in the workers)."""

    t: int
    seed: int
    active: np.ndarray  # the worker's active agents (global ids, sorted)
    author: np.ndarray  # recent posts...
    post: np.ndarray
    root: np.ndarray
    step: np.ndarray
    popularity: np.ndarray
    origin: np.ndarray  # the author of each post's root
    follower: np.ndarray  # follows made during the run by the worker's agents
    followee: np.ndarray
    shared: np.ndarray  # sorted keys ``agent << 32 | root`` of posts its agents reposted
    k: int
    recommender: Recommender
    texts: Mapping[int, str] = field(default_factory=dict)  # root → text, for models


class Shard:
    """A worker's part of the graph and of each step (see the module docstring)."""

    def __init__(self) -> None:
        self.part: Part | None = None
        self.data: StepData | None = None
        self._feeds: Feeds | None = None
        self._row: dict[int, int] = {}

    def install(self, part: Part) -> None:
        self.part = part

    def prepare(self, data: StepData) -> None:
        self.data, self._feeds, self._row = data, None, {}

    def feeds(self) -> Feeds:
        """This step's feeds of the worker's active agents (computed once per step)."""
        if self._feeds is None:
            part, data = self.part, self.data
            assert part is not None and data is not None, "install() and prepare() first"
            active = np.zeros(part.hi - part.lo, dtype=bool)
            active[data.active - part.lo] = True
            posts = Posts(author=data.author, post=data.post, root=data.root, step=data.step,
                          popularity=data.popularity)
            made = build_feeds(part.indptr, part.indices, active, posts, lo=part.lo,
                               t=data.t, k=data.k, recommender=data.recommender,
                               extra_follower=data.follower, extra_followee=data.followee,
                               rng=derive_seed(data.seed, 0x50C5))
            member = part.lo + made.member
            if part.groups is not None:
                owner = np.repeat(member, np.diff(made.indptr))
                same = part.groups[made.author] == part.groups[owner]
            else:
                same = np.zeros(len(made.author), dtype=bool)
            roots, first = np.unique(data.root, return_index=True)
            origin = data.origin[first][np.searchsorted(roots, made.root)]
            self._feeds = Feeds(member, made.indptr, made.root, made.via,
                                made.author.astype(np.int64), made.shares, same, origin)
            self._row = {int(m): i for i, m in enumerate(member)}  # global ids
        return self._feeds

    def decide(self, policy: str, params: ScriptedPolicy) -> tuple[np.ndarray, ...]:
        """The offline policy's actions of every active agent of the worker:
        ``(agent, action, target, exposed, exposed_same)``."""
        assert self.data is not None
        feeds = self.feeds()
        action, target = decide(feeds, self.data.seed, policy, params, self.data.shared)
        counts = np.diff(feeds.indptr)
        owner = np.repeat(np.arange(len(feeds.member)), counts)
        same = np.bincount(owner, weights=feeds.same, minlength=len(feeds.member))
        return (feeds.member, action, target, counts.astype(np.int16), same.astype(np.int16))

    def items_of(self, agent_id: int) -> tuple[Feeds, int]:
        feeds = self.feeds()
        return feeds, self._row.get(agent_id, -1)


class Person(Persona):
    """A persona on the network. Offline policies decide in its shard; a model policy
    asks this agent's model (``models``), with its persona and what it remembers (the
    messages and interventions it received) before its feed."""

    __slots__ = ("shard",)

    def __init__(self, id: int, profile: Profile | None = None, *, shard: Shard,
                 models: Mapping[str, ModelClient] | None = None) -> None:
        super().__init__(id, profile, models=models or {})
        self.shard = shard

    # -- calls made on one agent per worker, for the whole worker ---------------------------
    def install(self, part: Part) -> None:
        self.shard.install(part)

    def prepare(self, data: StepData) -> None:
        self.shard.prepare(data)

    def decide_offline(self, policy: str, params: ScriptedPolicy) -> tuple[np.ndarray, ...]:
        """The offline policy's actions of the whole worker (``decide`` is a persona's
        question to its model)."""
        return self.shard.decide(policy, params)

    # -- a model's policy --------------------------------------------------------------------
    async def act(self, t: int, temperature: float | None = None,
                  max_tokens: int | None = None) -> tuple[int, int | None, str | None, int,
                                                          int, str]:
        """``(action, target, text, exposed, exposed_same, raw reply)``."""
        assert self.shard.data is not None
        feeds, row = self.shard.items_of(self.id)
        items = feeds.items(row) if row >= 0 else []
        base = derive_seed(self.shard.data.seed, 0x50C4)
        ask = functools.partial(self._ask, t, items, temperature, max_tokens)
        if self._sampling() is None:  # every agent asked: no sampling's bookkeeping
            answer = await ask(False, seed_for(base, self.id))
        else:  # an archetype sees no feed (feeds are each agent's own)
            answer, _ = await self.sampled(
                "action", (temperature, max_tokens), base, t, ask,
                lambda a: ACTIONS[parse_action(a.text, items, me=self.id)[0]],
                lambda a: (1 + a.retries, a.prompt_tokens, a.completion_tokens))
        action, target, text = parse_action(answer.text, items, me=self.id)
        same = sum(i.same for i in items)
        return action, target, text, len(items), same, answer.text

    async def _ask(self, t: int, items: list[Item], temperature: float | None,
                   max_tokens: int | None, shared: bool, seed: int) -> Completion:
        """The model's answer to step ``t``'s feed (``shared``: an archetype's prompt, its
        persona and an empty feed, no memory); a failed call raises (the step counts it)."""
        assert self.shard.data is not None
        messages: list[ChatMessage] = [{"role": "system", "content": (
            self.archetype_text() if shared else self.persona_text())}]
        if self._memory and not shared:  # what it was told (a message, an intervention)
            messages.append({"role": "system", "content": await self.recall(t, seed)})
        messages.append({"role": "user", "content": feed_message(
            [] if shared else items, dict(self.shard.data.texts), t)})
        return await self.model.complete(messages, temperature=temperature, seed=seed,
                                         max_tokens=max_tokens, response_format=SCHEMA)

    def persona_text(self) -> str:
        """The persona its model is told: the background, else the profile's columns but
        the internal ones (group, arm, ids: :data:`populace.agents.INTERNAL`)."""
        if "background" in self.profile:
            return str(self.profile["background"])
        about = "; ".join(f"{k}: {self.profile[k]}" for k in persona_columns(self.profile))
        return f"You use a social network. About you: {about}." if about else \
            "You use a social network."
