"""Feeds of the social scenario, checked against a plain-Python feed on random cases."""

from __future__ import annotations

import numpy as np
import pytest

from populace.scenarios.social._feed import (
    RECOMMENDERS,
    Feeds,
    Posts,
    build_feeds,
    exposure_same,
)
from populace.scenarios.social._graph import Graph, homophily

Item = tuple[int, int, int, int, int]          # root, via, author, shares, newest


def brute_feeds(graph: Graph, lo: int, hi: int, active: np.ndarray, posts: Posts, t: int,
                k: int, recommender: str, extra: list[tuple[int, int]]
                ) -> dict[int, list[Item]]:
    """The feed rules written out one member and one post at a time."""
    feeds: dict[int, list[Item]] = {}
    rows = list(zip(posts.author.tolist(), posts.post.tolist(), posts.root.tolist(),
                    posts.step.tolist(), posts.popularity.tolist(), strict=True))
    for m in range(hi - lo):
        if not active[m]:
            continue
        me = lo + m
        follows = set(graph.followees(me).tolist()) | {b for a, b in extra if a == me}
        own = {root for author, _, root, _, _ in rows if author == me}
        shared: dict[int, list[tuple[int, int, int, float]]] = {}
        for author, post, root, step, pop in rows:
            if author in follows and author != me and root not in own:
                shared.setdefault(root, []).append((step, post, author, pop))
        items = []
        for root, shares in shared.items():
            step, post, author, pop = max(shares)
            items.append(((root, post, author, len({s[2] for s in shares}), step), pop))
        if recommender == "chronological":
            items.sort(key=lambda x: (-x[0][4], -x[0][3], x[0][0]))
        elif recommender == "popularity":
            items.sort(key=lambda x: (-(x[1] * 0.5 ** (t - x[0][4])), -x[0][3], x[0][0]))
        feeds[m] = [item for item, _ in items[:k]] if recommender != "random" else [
            item for item, _ in items]
    return feeds


def as_dict(feeds: Feeds) -> dict[int, list[Item]]:
    out = {}
    for j, m in enumerate(feeds.member.tolist()):
        s = slice(feeds.indptr[j], feeds.indptr[j + 1])
        out[m] = list(zip(feeds.root[s].tolist(), feeds.via[s].tolist(),
                          feeds.author[s].tolist(), feeds.shares[s].tolist(),
                          feeds.newest[s].tolist(), strict=True))
    return out


def random_case(seed: int) -> tuple[Graph, Posts, list[tuple[int, int]]]:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 40))
    graph = Graph.generate(n, float(rng.uniform(1, 6)), rng)
    count = int(rng.integers(0, 80))
    author = rng.integers(0, n, count)
    post = np.arange(count) * 3 + 100
    root = post.copy()
    for i in range(count):                     # reposts spread an earlier post's root
        if i and rng.random() < 0.6:
            root[i] = root[rng.integers(0, i)]
    step = np.sort(rng.integers(0, 6, count))
    popularity = rng.integers(1, 5, count)
    posts = Posts(author=author, post=post, root=root, step=step, popularity=popularity)
    extra = [(int(a), int(b)) for a, b in rng.integers(0, n, (int(rng.integers(0, 10)), 2))
             if a != b]
    return graph, posts, extra


def run(graph: Graph, lo: int, hi: int, active: np.ndarray, posts: Posts, *, t: int, k: int,
        recommender: str, extra: list[tuple[int, int]], rng: int | None = 3) -> Feeds:
    indptr, indices = graph.rows(lo, hi)
    src = np.array([a for a, _ in extra], dtype=np.int64)
    dst = np.array([b for _, b in extra], dtype=np.int64)
    return build_feeds(indptr, indices, active, posts, lo=lo, t=t, k=k,
                       recommender=recommender,  # type: ignore[arg-type]
                       extra_follower=src, extra_followee=dst, rng=rng)


@pytest.mark.parametrize("recommender", RECOMMENDERS)
@pytest.mark.parametrize("seed", range(12))
def test_feeds_match_brute_force(seed: int, recommender: str) -> None:
    graph, posts, extra = random_case(seed)
    rng = np.random.default_rng(seed + 1000)
    lo = int(rng.integers(0, graph.n // 2))
    hi = int(rng.integers(lo + 1, graph.n + 1))
    active = rng.random(hi - lo) < 0.8
    k = int(rng.integers(1, 6)) if recommender != "random" else 10_000
    got = as_dict(run(graph, lo, hi, active, posts, t=6, k=k, recommender=recommender,
                      extra=extra))
    want = brute_feeds(graph, lo, hi, active, posts, 6, k, recommender, extra)
    assert set(got) == set(want) == set(np.flatnonzero(active).tolist())
    if recommender == "random":
        got = {m: sorted(items) for m, items in got.items()}
        want = {m: sorted(items) for m, items in want.items()}
    assert got == want


def test_random_takes_k_of_the_candidates_and_follows_the_seed() -> None:
    graph, posts, extra = random_case(4)
    active = np.ones(graph.n, dtype=bool)
    every = as_dict(run(graph, 0, graph.n, active, posts, t=6, k=10_000,
                        recommender="random", extra=extra))
    some = as_dict(run(graph, 0, graph.n, active, posts, t=6, k=2, recommender="random",
                       extra=extra))
    again = as_dict(run(graph, 0, graph.n, active, posts, t=6, k=2, recommender="random",
                        extra=extra))
    assert some == again
    assert any(len(items) > 2 for items in every.values())
    for m, items in some.items():
        assert len(items) == min(2, len(every[m])) and set(items) <= set(every[m])


def tiny_posts(rows: list[tuple[int, int, int, int]], popularity: float = 1.0) -> Posts:
    """Posts from (author, post, root, step) rows."""
    author, post, root, step = (list(c) for c in zip(*rows, strict=True))
    return Posts(author=author, post=post, root=root, step=step,
                 popularity=[popularity] * len(rows))


def test_own_posts_and_own_roots_are_not_shown() -> None:
    # 0 follows 1 and 2; 0 posted root 50, which 1 reposts; 2 posts root 60.
    graph = Graph.from_edges(3, [0, 0], [1, 2])
    posts = tiny_posts([(0, 50, 50, 0), (1, 51, 50, 1), (2, 60, 60, 1)])
    feeds = build_feeds(*graph.rows(0, 3), np.ones(3, bool), posts, lo=0, t=1, k=5,
                        extra_follower=[0], extra_followee=[0])   # a self-follow too
    assert as_dict(feeds)[0] == [(60, 60, 2, 1, 1)]


def test_inactive_members_get_nothing() -> None:
    graph = Graph.from_edges(4, [0, 1], [2, 2])
    posts = tiny_posts([(2, 7, 7, 0), (3, 8, 8, 1)])
    feeds = build_feeds(*graph.rows(0, 4), np.array([False, True, False, False]), posts,
                        lo=0, t=0, k=5, extra_follower=[0, 1], extra_followee=[3, 3])
    assert feeds.member.tolist() == [1]
    assert as_dict(feeds) == {1: [(8, 8, 3, 1, 1), (7, 7, 2, 1, 0)]}


def test_shares_count_distinct_followees() -> None:
    # 0 follows 1, 2, 3: 1 reposts root 5 twice, 2 once, 3 not; 4 (not followed) too.
    graph = Graph.from_edges(5, [0, 0, 0], [1, 2, 3])
    posts = tiny_posts([(4, 5, 5, 0), (1, 6, 5, 1), (1, 7, 5, 3), (2, 8, 5, 2),
                        (4, 9, 5, 4)])
    feeds = build_feeds(*graph.rows(0, 1), np.ones(1, bool), posts, lo=0, t=4, k=5,
                        extra_follower=[0], extra_followee=[1])   # a duplicate follow
    assert as_dict(feeds) == {0: [(5, 7, 1, 2, 3)]}


def test_extra_follows_are_included_for_this_worker_only() -> None:
    graph = Graph.from_edges(4, [0], [1])
    posts = tiny_posts([(1, 10, 10, 0), (3, 11, 11, 1)])
    indptr, indices = graph.rows(2, 4)       # the worker of agents 2 and 3
    feeds = build_feeds(indptr, indices, np.ones(2, bool), posts, lo=2, t=1, k=5,
                        extra_follower=[2, 0], extra_followee=[3, 3])
    assert as_dict(feeds) == {0: [(11, 11, 3, 1, 1)], 1: []}


def test_rankings_break_ties_by_shares_then_root() -> None:
    graph = Graph.from_edges(4, [0, 0, 0], [1, 2, 3])
    posts = Posts(author=[1, 2, 3, 1, 2], post=[20, 21, 22, 23, 24], root=[20, 21, 22, 21, 9],
                  step=[1, 1, 1, 1, 0], popularity=[1, 1, 1, 1, 4])
    run = build_feeds(*graph.rows(0, 1), np.ones(1, bool), posts, lo=0, t=1, k=3,
                      recommender="chronological")
    assert run.root.tolist() == [21, 20, 22]
    run = build_feeds(*graph.rows(0, 1), np.ones(1, bool), posts, lo=0, t=1, k=2,
                      recommender="popularity")
    assert run.root.tolist() == [9, 21]       # 4 × 0.5 = 2 beats 1; then 2 shares
    assert run.indptr.tolist() == [0, 2]


def test_bad_arguments() -> None:
    posts = tiny_posts([(1, 1, 1, 0)])
    with pytest.raises(ValueError, match="unknown recommender"):
        build_feeds([0, 0], [], [True], posts, lo=0, t=0, k=1,
                    recommender="loudest")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs rng"):
        build_feeds([0, 0], [], [True], posts, lo=0, t=0, k=1, recommender="random")
    with pytest.raises(ValueError, match="one entry per member"):
        build_feeds([0, 0], [], [True, False], posts, lo=0, t=0, k=1)
    with pytest.raises(ValueError, match="rebased"):
        build_feeds([3, 4], [1], [True], posts, lo=0, t=0, k=1)
    with pytest.raises(ValueError, match="entries"):
        Posts(author=[1], post=[1, 2], root=[1], step=[0], popularity=[1])


def test_empty_inputs_give_empty_rows() -> None:
    graph = Graph.from_edges(3, [0], [1])
    empty = Posts(author=[], post=[], root=[], step=[], popularity=[])
    feeds = build_feeds(*graph.rows(0, 3), np.ones(3, bool), empty, lo=0, t=0, k=3)
    assert feeds.indptr.tolist() == [0, 0, 0, 0] and feeds.items == 0


def test_exposure_same_counts_same_group_authors() -> None:
    groups = np.array([0, 1, 0, 1, 1])
    exposed, same = exposure_same([1, 2, 3, 0], [0, 4], groups, indptr=[0, 3, 4])
    assert exposed.tolist() == [3, 1]
    assert same.tolist() == [1, 0]        # 0 (group 0) sees 2; 4 (group 1) sees 0


@pytest.mark.slow
def test_scale_numbers() -> None:
    """Not a timed assert: prints generate(1M, 20) and a 500,000-member feed's cost."""
    import resource
    import time
    import tracemalloc

    tracemalloc.start()
    began = time.perf_counter()
    graph = Graph.generate(1_000_000, 20, np.random.default_rng(0))
    took = time.perf_counter() - began
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"\ngenerate(1_000_000, 20): {took:.1f} s, {graph.edges:,} follows "
          f"(mean {graph.mean_degree:.3f}), {graph.nbytes / 2**20:.0f} MiB, "
          f"peak numpy {peak / 2**20:.0f} MiB, "
          f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10:.0f} MiB")
    groups = np.random.default_rng(5).integers(0, 4, graph.n)
    tracemalloc.start()
    began = time.perf_counter()
    mixed = Graph.generate(graph.n, 20, 0, groups=groups, homophily=0.7)
    took = time.perf_counter() - began
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"with 4 groups, homophily 0.7: {took:.1f} s, mean {mixed.mean_degree:.3f}, "
          f"peak numpy {peak / 2**20:.0f} MiB, "
          f"same-group share {homophily(mixed, groups)['same_group_share']:.3f}")
    del mixed
    rng = np.random.default_rng(1)
    count = 150_000
    post = np.arange(count, dtype=np.int64) + 1_000_000
    root = np.where(rng.random(count) < 0.5, post, post[rng.integers(0, count, count)])
    posts = Posts(author=rng.integers(0, graph.n, count), post=post,
                  root=np.minimum(root, post), step=rng.integers(0, 5, count),
                  popularity=rng.integers(1, 50, count))
    indptr, indices = graph.rows(0, 500_000)
    for recommender in RECOMMENDERS:
        tracemalloc.start()
        began = time.perf_counter()
        feeds = build_feeds(indptr, indices, np.ones(500_000, bool), posts, lo=0, t=5,
                            k=20, recommender=recommender, rng=2)
        took = time.perf_counter() - began
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(f"feeds ({recommender}) for 500,000 members: {took:.2f} s, "
              f"{feeds.items:,} items, peak numpy {peak / 2**20:.0f} MiB")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10:.0f} MiB")
