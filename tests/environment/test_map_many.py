"""Map2D.nearby_many and k_nearest_many: the answers of nearby / k_nearest, for many points
at once, as CSR-style arrays."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from populace.environment import Map2D


def town(n: int = 3000, seed: int = 1) -> tuple[Map2D, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    m = Map2D(100.0, 100.0, cell_size=3.0)
    ids = np.arange(0, 2 * n, 2)  # not 0..n-1: rows must map back to ids
    xs, ys = rng.uniform(0, 100, n), rng.uniform(0, 100, n)
    xs[:5] = ys[:5] = 50.0  # a few on one spot: equal distances
    m.place_many(ids, xs, ys)
    return m, ids, np.column_stack((xs, ys))


def rows(indptr: np.ndarray, indices: np.ndarray) -> list[list[int]]:
    return [indices[a:b].tolist() for a, b in itertools.pairwise(indptr)]


@pytest.mark.parametrize("radius", [0.0, 2.5, 7.0])
def test_nearby_many_is_nearby_for_each_point(radius: float) -> None:
    m, ids, pts = town()
    rng = np.random.default_rng(2)
    queries = np.vstack([pts[:40], rng.uniform(-5, 105, (40, 2))])  # some off the map
    want = [sorted(m.nearby(tuple(p), radius).tolist()) for p in queries]
    assert rows(*m.nearby_many(queries, radius)) == want
    asked = ids[:40]
    skip = asked[::-1]  # someone else's id: excluded only where it is found
    want = [sorted(m.nearby(tuple(p), radius, exclude=int(e)).tolist())
            for p, e in zip(pts[:40], skip, strict=True)]
    assert rows(*m.nearby_many(pts[:40], radius, exclude=skip)) == want


@pytest.mark.parametrize("share", [0.05, 0.5, 1.0])
def test_asking_by_ids_is_asking_by_their_positions(share: float) -> None:
    m, ids, pts = town()
    pick = np.random.default_rng(3).permutation(len(ids))[:int(share * len(ids))]
    asked = ids[pick]
    for exclude in (None, asked, asked[::-1]):
        by_ids = m.nearby_many(asked, 4.0, exclude=exclude)
        by_points = m.nearby_many(pts[pick], 4.0, exclude=exclude)
        assert rows(*by_ids) == rows(*by_points)
    own = rows(*m.nearby_many(asked, 4.0, exclude=asked))
    assert all(int(i) not in row for i, row in zip(asked, own, strict=True))
    assert rows(*m.nearby_many(np.concatenate([asked, asked[:3]]), 4.0))[-3:] == \
        rows(*m.nearby_many(asked[:3], 4.0))  # an id asked twice: two rows


def test_the_tree_follows_moves_and_removals() -> None:
    m, ids, pts = town(500)
    first = rows(*m.nearby_many(ids, 5.0, exclude=ids))
    m.move_many(ids[:250], pts[250:, 0], pts[250:, 1])
    m.move(int(ids[300]), 1.0, 1.0)
    m.remove(int(ids[400]))
    left = m.ids()
    now = rows(*m.nearby_many(left, 5.0, exclude=left))
    assert now != first[:len(left)]
    assert now == [sorted(m.nearby(m.position(int(i)), 5.0, exclude=int(i)).tolist())
                   for i in left]


def test_k_nearest_many_is_k_nearest_for_each_point() -> None:
    m, ids, pts = town()
    asked = ids[5:60]  # away from the five on one spot: no ties at equal distance
    got = rows(*m.k_nearest_many(asked, 6, exclude=asked))
    assert got == [m.k_nearest(m.position(int(i)), 6, exclude=int(i)).tolist()
                   for i in asked]
    got = rows(*m.k_nearest_many(pts[5:60], 6))
    assert got == [m.k_nearest(tuple(p), 6).tolist() for p in pts[5:60]]
    small = Map2D(10.0, 10.0, 1.0)
    small.place_many([4, 9], [1.0, 2.0], [1.0, 1.0])
    assert rows(*small.k_nearest_many([[0.0, 0.0], [9.0, 9.0]], 5)) == [[4, 9], [9, 4]]
    assert rows(*small.k_nearest_many([4, 9], 5, exclude=[4, 9])) == [[9], [4]]


def test_empty_and_bad_queries() -> None:
    m = Map2D(10.0, 10.0, 1.0)
    assert rows(*m.nearby_many(np.empty((0, 2)), 1.0)) == []
    assert rows(*m.nearby_many([[1.0, 1.0]], 1.0)) == [[]]  # nobody on the map
    m.place(3, 1.0, 1.0)
    with pytest.raises(ValueError, match=r"\(n, 2\) array"):
        m.nearby_many([[1.0, 1.0, 1.0]], 1.0)
    with pytest.raises(ValueError, match="finite"):
        m.nearby_many([[np.nan, 1.0]], 1.0)
    with pytest.raises(KeyError):
        m.nearby_many([7], 1.0)
    with pytest.raises(ValueError, match="one integer id per point"):
        m.nearby_many([3], 1.0, exclude=[3, 4])
    with pytest.raises(ValueError, match="radius"):
        m.nearby_many([3], -1.0)
    assert m.statistics().queries == 1  # one point asked
