"""Map2D: neighbour queries equal a brute-force scan; moves, removals, watches, bulk."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from populace.environment import Map2D

W, H = 100.0, 60.0


def brute_nearby(m: Map2D, pos: tuple[float, float], r: float, exclude: int | None = None
                 ) -> list[int]:
    ids = m.ids()
    if exclude is not None:
        ids = ids[ids != exclude]
    xs, ys = m.positions(ids)
    dx, dy = xs - pos[0], ys - pos[1]
    d2 = dx * dx + dy * dy
    keep = d2 <= r * r
    order = np.lexsort((ids[keep], d2[keep]))
    return ids[keep][order].tolist()


def brute_knn(m: Map2D, pos: tuple[float, float], k: int, exclude: int | None = None
              ) -> list[int]:
    ids = m.ids()
    if exclude is not None:
        ids = ids[ids != exclude]
    xs, ys = m.positions(ids)
    dx, dy = xs - pos[0], ys - pos[1]
    d2 = dx * dx + dy * dy
    return ids[np.lexsort((ids, d2))][:k].tolist()


coord_x = st.floats(0.0, W, allow_nan=False)
coord_y = st.floats(0.0, H, allow_nan=False)
points = st.lists(st.tuples(coord_x, coord_y), min_size=0, max_size=120)
# Coarse grids make exact ties and points on cell borders likely.
gridded = st.lists(st.tuples(st.integers(0, 20).map(lambda i: i * 5.0),
                             st.integers(0, 12).map(lambda i: i * 5.0)), max_size=80)


def build(pts: list[tuple[float, float]], cell: float) -> Map2D:
    m = Map2D(W, H, cell)
    if pts:
        m.place_many(np.arange(len(pts)), [p[0] for p in pts], [p[1] for p in pts])
    return m


@settings(max_examples=150, deadline=None)
@given(pts=points | gridded, cell=st.sampled_from([0.7, 5.0, 13.0, 200.0]),
       q=st.tuples(st.floats(-10, W + 10), st.floats(-10, H + 10)),
       r=st.floats(0.0, 80.0) | st.sampled_from([0.0, 5.0, 10.0]))
def test_nearby_equals_brute_force(pts: list[tuple[float, float]], cell: float,
                                   q: tuple[float, float], r: float) -> None:
    m = build(pts, cell)
    assert m.nearby(q, r).tolist() == brute_nearby(m, q, r)
    if pts:
        assert m.nearby(pts[0], r, exclude=0).tolist() == brute_nearby(m, pts[0], r, 0)


@settings(max_examples=150, deadline=None)
@given(pts=points | gridded, cell=st.sampled_from([0.7, 5.0, 13.0, 200.0]),
       q=st.tuples(coord_x, coord_y), k=st.integers(0, 130))
def test_k_nearest_equals_brute_force(pts: list[tuple[float, float]], cell: float,
                                      q: tuple[float, float], k: int) -> None:
    m = build(pts, cell)
    assert m.k_nearest(q, k).tolist() == brute_knn(m, q, k)
    if pts:
        assert m.k_nearest(pts[-1], k, exclude=len(pts) - 1).tolist() == \
            brute_knn(m, pts[-1], k, len(pts) - 1)


@settings(max_examples=60, deadline=None)
@given(pts=st.lists(st.tuples(coord_x, coord_y), min_size=1, max_size=60),
       moves=st.lists(st.tuples(st.integers(0, 59), coord_x, coord_y,
                                st.sampled_from(["move", "remove", "place"])), max_size=120),
       q=st.tuples(coord_x, coord_y), r=st.floats(0.0, 40.0))
def test_queries_stay_exact_through_moves_and_removals(
        pts: list[tuple[float, float]], moves: list[tuple[int, float, float, str]],
        q: tuple[float, float], r: float) -> None:
    m = build(pts, 4.0)
    for i, x, y, what in moves:
        if what == "remove" and i in m:
            m.remove(i)
        elif what == "place" and i not in m:
            m.place(i, x, y)
        elif i in m:
            m.move(i, x, y)
        assert m.nearby(q, r).tolist() == brute_nearby(m, q, r)
    assert m.k_nearest(q, 7).tolist() == brute_knn(m, q, 7)
    assert len(m) == len(m.ids())


def test_overlay_triggers_rebuild_and_stays_exact() -> None:
    rng = np.random.default_rng(1)
    m = Map2D(W, H, 3.0)
    n = 20_000
    m.place_many(np.arange(n), rng.uniform(0, W, n), rng.uniform(0, H, n))
    m.nearby((1.0, 1.0), 1.0)
    for i in rng.choice(n, 5000, replace=False).tolist():
        m.move(i, float(rng.uniform(0, W)), float(rng.uniform(0, H)))
    for _ in range(20):
        q = (float(rng.uniform(0, W)), float(rng.uniform(0, H)))
        assert m.nearby(q, 4.0).tolist() == brute_nearby(m, q, 4.0)
        assert m.k_nearest(q, 25).tolist() == brute_knn(m, q, 25)
    assert m.statistics().rebuilds >= 2


def test_place_move_remove_errors() -> None:
    m = Map2D(10, 10, 1)
    m.place(3, 1.0, 1.0)
    with pytest.raises(ValueError, match="already"):
        m.place(3, 2.0, 2.0)
    with pytest.raises(ValueError, match="already"):
        m.place_many([4, 3], [1, 1], [1, 1])
    with pytest.raises(ValueError, match="distinct"):
        m.place_many([5, 5], [1, 1], [1, 1])
    with pytest.raises(ValueError, match="outside"):
        m.place(4, 11.0, 1.0)
    with pytest.raises(ValueError, match="outside"):
        m.place_many([6, 7], [1.0, -1.0], [1.0, 1.0])
    with pytest.raises(KeyError):
        m.move(9, 1.0, 1.0)
    with pytest.raises(KeyError):
        m.move_many([3, 9], [1.0, 1.0], [1.0, 1.0])
    with pytest.raises(KeyError):
        m.remove(9)
    with pytest.raises(ValueError):
        m.place(-1, 1.0, 1.0)
    assert m.position(3) == (1.0, 1.0) and 3 in m and 4 not in m and len(m) == 1


def test_watch_reports_enter_and_leave() -> None:
    m = Map2D(100, 100, 5)
    m.place_many([0, 1, 2, 3], [50, 52, 80, 49], [50, 50, 80, 50])
    events: list[tuple[str, int, int]] = []
    w = m.watch(0, 5.0, on_enter=lambda c, o: events.append(("enter", c, o)),
                on_leave=lambda c, o: events.append(("leave", c, o)))
    assert w.members().tolist() == [1, 3]  # already in range: no enter events
    m.move(2, 54.0, 50.0)                   # 2 walks in
    m.move(1, 60.0, 50.0)                   # 1 walks out
    m.move(1, 61.0, 50.0)                   # still out: nothing
    m.remove(3)                             # 3 leaves the map
    m.place(4, 50.0, 51.0)                  # 4 appears in range
    m.move(0, 58.0, 50.0)                   # the center moves: 4 out, 1 in (2 stays)
    assert events == [("enter", 0, 2), ("leave", 0, 1), ("leave", 0, 3), ("enter", 0, 4),
                      ("leave", 0, 4), ("enter", 0, 1)]
    assert w.members().tolist() == [1, 2]
    events.clear()
    m.move_many(np.arange(3), [10.0, 11.0, 90.0], [10.0, 10.0, 90.0])
    assert events == [("leave", 0, 2)]
    w.cancel()
    m.move(2, 10.0, 11.0)
    assert events == [("leave", 0, 2)] and m.statistics().watches == 0


def test_watch_listener_errors_are_reported() -> None:
    m = Map2D(10, 10, 1)
    m.place(0, 5.0, 5.0)

    def broken(c: int, o: int) -> None:
        raise RuntimeError("oops")

    m.watch(0, 1.0, on_enter=broken)
    m.place(1, 5.5, 5.0)
    assert 1 in m and m.statistics().listener_errors == 1
    assert isinstance(m.listener_errors()[0].error, RuntimeError)


def test_state_round_trip() -> None:
    m = Map2D(10, 10, 1)
    m.place_many([0, 5, 9], [1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
    m.remove(5)
    other = Map2D(10, 10, 1)
    other.place(7, 1.0, 1.0)
    other.set_state(m.get_state())
    assert other.ids().tolist() == [0, 9] and other.position(9) == (3.0, 6.0)
    assert other.nearby((1.0, 4.0), 0.5).tolist() == [0]


def test_a_million_positions() -> None:
    rng = np.random.default_rng(0)
    n = 1_000_000
    m = Map2D(1000.0, 1000.0, 2.0)
    # how fast: benchmarks/environment.py --positions (a million by default)
    m.place_many(np.arange(n), rng.uniform(0, 1000, n), rng.uniform(0, 1000, n))
    found = m.nearby((500.0, 500.0), 3.0)
    assert len(m) == n
    assert found.tolist() == brute_nearby(m, (500.0, 500.0), 3.0)
    assert m.k_nearest((0.0, 0.0), 10).tolist() == brute_knn(m, (0.0, 0.0), 10)


def test_query_edge_cases() -> None:
    m = Map2D(10, 10, 1)
    assert m.nearby((5.0, 5.0), 3.0).tolist() == [] and m.k_nearest((5.0, 5.0), 3).tolist() == []
    m.place_many(np.arange(5), [1, 2, 3, 4, 10], [1, 2, 3, 4, 10])
    assert m.nearby((5.0, 5.0), float("inf")).tolist() == [3, 2, 1, 0, 4]
    assert m.nearby((50.0, 50.0), 57.0).tolist() == [4]  # a query point off the map
    assert m.k_nearest((-5.0, -5.0), 2).tolist() == [0, 1]
    assert m.k_nearest((0.0, 0.0), 10, exclude=0).tolist() == [1, 2, 3, 4]
    with pytest.raises(ValueError):
        m.nearby((float("nan"), 1.0), 1.0)
    with pytest.raises(ValueError):
        m.nearby((1.0, 1.0), -1.0)
    with pytest.raises(ValueError):
        m.k_nearest((1.0, 1.0), -1)
