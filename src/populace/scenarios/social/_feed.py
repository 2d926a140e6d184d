"""Feeds: what each agent of a worker sees of the recent posts of those it follows.

One call builds the feeds of every active member of a worker at once, in numpy: the follow
lists are joined with the recent posts grouped by author, the shares of one root are merged
into one *item* per (member, root), and each member keeps its best ``k`` items::

    posts = Posts(author=..., post=..., root=..., step=..., popularity=...)
    indptr, indices = graph.rows(lo, hi)
    feeds = build_feeds(indptr, indices, active, posts, lo=lo, t=step, k=10,
                        recommender="popularity")
    for j, member in enumerate(feeds.member):            # agent lo + member
        items = slice(feeds.indptr[j], feeds.indptr[j + 1])
        feeds.root[items], feeds.via[items], feeds.shares[items]

Items aggregate shares: ``root`` is the original post, ``via`` the latest post by a
followee that shares it (the parent of a repost made from the feed), ``author`` that post's
author, ``shares`` how many distinct followees shared the root among the given posts, and
``newest`` the step of ``via``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

Recommender = Literal["chronological", "popularity", "random"]
RECOMMENDERS: tuple[Recommender, ...] = ("chronological", "popularity", "random")

I64 = NDArray[np.int64]
I32 = NDArray[np.int32]
F32 = NDArray[np.float32]


@dataclass(frozen=True, eq=False)
class Posts:
    """Recent posts, one entry each (arrays of one length, coerced to these dtypes).

    ``root`` is the original post a repost spreads (``root == post`` for an original) and
    ``popularity`` the root's ``1 + likes + reposts`` so far.
    """

    author: I32
    post: I64
    root: I64
    step: I32
    popularity: F32

    def __post_init__(self) -> None:
        kinds = {"author": np.int32, "post": np.int64, "root": np.int64, "step": np.int32,
                 "popularity": np.float32}
        length = None
        for field in fields(self):
            array = np.asarray(getattr(self, field.name), dtype=kinds[field.name]).ravel()
            object.__setattr__(self, field.name, array)
            if length is not None and len(array) != length:
                raise ValueError(f"Posts.{field.name} has {len(array)} entries, not {length}")
            length = len(array)

    def __len__(self) -> int:
        return len(self.post)


@dataclass(frozen=True, eq=False)
class Feeds:
    """The feeds of a worker's active members, as compressed rows.

    ``member`` holds the active members' indices within the worker (agent ``lo + member``),
    ascending; the items of ``member[j]`` are ``indptr[j]:indptr[j + 1]`` of the item
    arrays, best first.
    """

    member: I64
    indptr: I64
    root: I64
    via: I64
    author: I32
    shares: I32
    newest: I32

    @property
    def items(self) -> int:
        """Items over all feeds."""
        return len(self.root)


def build_feeds(indptr: ArrayLike, indices: ArrayLike, active: ArrayLike, posts: Posts, *,
                lo: int, t: int, k: int, recommender: Recommender = "chronological",
                extra_follower: ArrayLike | None = None,
                extra_followee: ArrayLike | None = None,
                rng: np.random.Generator | int | None = None) -> Feeds:
    """Up to ``k`` feed items for each active member of the worker holding agents ``lo..``.

    ``indptr``/``indices`` are the members' followee lists (``Graph.rows(lo, hi)``: rows
    rebased, ids global); ``extra_follower``/``extra_followee`` add follows made during the
    run (global ids; followers outside the worker are skipped; duplicates are harmless);
    ``active`` masks the members. Every given post counts, so pass only the recent window.

    A member never sees its own posts, nor a root it has itself posted or reposted among
    ``posts`` (not even when a followee reposts it). Ranking, ties broken by more
    ``shares`` then the lower root id:

    - ``chronological``: the newest share first;
    - ``popularity``: ``popularity × 0.5 ** (t − newest)`` highest first (the popularity
      of the ``via`` post);
    - ``random``: a random order drawn from ``rng`` (a Generator or a seed; required).

    >>> posts = Posts(author=[1, 2], post=[10, 11], root=[10, 10], step=[0, 1],
    ...               popularity=[2, 2])
    >>> f = build_feeds([0, 2], [1, 2], [True], posts, lo=0, t=1, k=5)
    >>> f.root.tolist(), f.via.tolist(), f.shares.tolist()
    ([10], [11], [2])
    """
    if recommender not in RECOMMENDERS:
        raise ValueError(f"unknown recommender {recommender!r} (use one of "
                         f"{', '.join(RECOMMENDERS)})")
    if recommender == "random" and rng is None:
        raise ValueError("the random recommender needs rng= (a Generator or a seed)")
    if k < 0:
        raise ValueError(f"k must be >= 0, not {k}")
    ptr = np.asarray(indptr, dtype=np.int64)
    followee = np.asarray(indices, dtype=np.int32)
    mask = np.asarray(active, dtype=bool)
    members = len(ptr) - 1
    if members < 0 or ptr[0] != 0 or ptr[-1] != len(followee):
        raise ValueError("indptr must run from 0 to len(indices) (rows rebased, as from "
                         "Graph.rows)")
    if mask.shape != (members,):
        raise ValueError(f"active must have one entry per member ({members}), not "
                         f"{mask.shape}")
    shown = np.flatnonzero(mask)
    if len(posts) == 0 or k == 0 or len(shown) == 0:
        return _empty(shown)
    src = np.zeros(0, np.int64) if extra_follower is None else np.asarray(
        extra_follower, dtype=np.int64).ravel()
    dst = np.zeros(0, np.int64) if extra_followee is None else np.asarray(
        extra_followee, dtype=np.int64).ravel()
    if src.shape != dst.shape:
        raise ValueError(f"{len(src)} extra followers but {len(dst)} extra followees")

    # The latest post of each (author, root): one author counts once per root, and only its
    # latest share can be the item's via. Sorted by author, so each author's is a range.
    order = np.lexsort((posts.post, posts.step, posts.root, posts.author))
    a, r = posts.author[order], posts.root[order]
    last = np.ones(len(order), dtype=bool)
    last[:-1] = (a[1:] != a[:-1]) | (r[1:] != r[:-1])
    keep = order[last]
    author, step, pid = posts.author[keep], posts.step[keep], posts.post[keep]
    roots, root_code = np.unique(posts.root[keep], return_inverse=True)
    root_code = root_code.ravel().astype(np.int64)
    by_time = np.lexsort((pid, step))                       # reduced posts, oldest first
    tick = np.empty(len(keep), dtype=np.int64)
    tick[by_time] = np.arange(len(keep))

    span = int(max(author.max(), followee.max(initial=0), dst.max(initial=0))) + 1
    count = np.bincount(author, minlength=span).astype(np.int32)
    first = np.cumsum(count, dtype=np.int64) - count

    # Follow entries (member, followee) whose followee posted something.
    has = count[followee] > 0
    has &= np.repeat(mask, np.diff(ptr))
    at = np.flatnonzero(has)
    e_member = np.searchsorted(ptr, at, side="right") - 1
    e_followee = followee[at].astype(np.int64)
    if len(src):
        src = src - lo
        ok = (src >= 0) & (src < members) & (dst >= 0)
        ok[ok] = mask[src[ok]]
        ok[ok] = count[dst[ok]] > 0
        key = np.concatenate((e_member * span + e_followee, src[ok] * span + dst[ok]))
        key.sort()
        key = key[np.concatenate(([True], key[1:] != key[:-1]))] if len(key) > 1 else key
        e_member, e_followee = key // span, key % span

    # Pairs (member, reduced post) and their (member, root) keys.
    per = count[e_followee].astype(np.int64)
    entry = np.repeat(np.arange(len(per)), per)
    offset = np.arange(len(entry), dtype=np.int64) - (np.cumsum(per) - per)[entry]
    post = first[e_followee][entry] + offset
    member = e_member[entry]
    del entry, offset
    n_roots = len(roots)
    key = member * n_roots + root_code[post]

    # One item per key: the share count and the latest share (the via).
    order = np.lexsort((tick[post], key))
    key, post = key[order], post[order]
    end = np.ones(len(key), dtype=bool)
    end[:-1] = key[1:] != key[:-1]
    ends = np.flatnonzero(end)
    shares = np.diff(ends, prepend=-1).astype(np.int32)
    via, key = post[ends], key[ends]
    del post, order

    mine = (author >= lo) & (author < lo + members)
    own_roots = np.unique((author[mine].astype(np.int64) - lo) * n_roots + root_code[mine])
    if len(own_roots):
        hit = np.minimum(np.searchsorted(own_roots, key), len(own_roots) - 1)
        fresh = own_roots[hit] != key
        via, key, shares = via[fresh], key[fresh], shares[fresh]
    item_member = key // n_roots
    newest = step[via]

    # Rank within each member; items already run by (member, root), and lexsort is stable.
    if recommender == "chronological":
        rank = np.lexsort((-shares, -newest, item_member))
    elif recommender == "popularity":
        score = np.ldexp(posts.popularity[keep][via].astype(np.float64),
                         (newest.astype(np.int64) - t).astype(np.int32))
        rank = np.lexsort((-shares, -score, item_member))
    else:
        rank = np.lexsort((np.random.default_rng(rng).random(len(key)), item_member))
    item_member, via, shares = item_member[rank], via[rank], shares[rank]
    per_member = np.bincount(item_member, minlength=members)
    start = np.cumsum(per_member) - per_member
    top = np.arange(len(via)) - start[item_member] < k
    item_member, via, shares = item_member[top], via[top], shares[top]
    out = np.zeros(len(shown) + 1, dtype=np.int64)
    np.cumsum(np.minimum(per_member, k)[shown], out=out[1:])
    return Feeds(member=shown.astype(np.int64), indptr=out, root=roots[root_code[via]],
                 via=pid[via], author=author[via], shares=shares, newest=step[via])


def _empty(shown: I64) -> Feeds:
    none = np.zeros(0, dtype=np.int64)
    return Feeds(member=shown.astype(np.int64), indptr=np.zeros(len(shown) + 1, np.int64),
                 root=none, via=none, author=none.astype(np.int32),
                 shares=none.astype(np.int32), newest=none.astype(np.int32))


def exposure_same(items_author: ArrayLike, member_ids: ArrayLike, groups: ArrayLike, *,
                  indptr: ArrayLike) -> tuple[I64, I64]:
    """Per feed row: how many items it holds, and how many by an author of the member's
    group. ``member_ids`` are the rows' global agent ids (``lo + feeds.member``),
    ``groups`` one value per agent, ``indptr`` the rows (``feeds.indptr``).

    >>> exposure_same([1, 2, 3], [0], [0, 0, 1, 0], indptr=[0, 3])
    (array([3]), array([2]))
    """
    ptr = np.asarray(indptr, dtype=np.int64)
    values = np.asarray(groups)
    who = np.asarray(member_ids, dtype=np.int64)
    rows = len(ptr) - 1
    if who.shape != (rows,):
        raise ValueError(f"member_ids must have one entry per row ({rows}), not {who.shape}")
    exposed = np.diff(ptr)
    same = values[np.asarray(items_author, dtype=np.int64)] == np.repeat(values[who], exposed)
    row = np.repeat(np.arange(rows), exposed)
    return exposed, np.bincount(row[same], minlength=rows).astype(np.int64)
