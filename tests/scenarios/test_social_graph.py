"""The follower graph of the social scenario: building, generating, reading edge lists."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from populace.core import ConfigError
from populace.scenarios.social._graph import Graph, degree_stats, homophily, load_edge_list


def as_sets(graph: Graph) -> dict[int, set[int]]:
    return {i: set(graph.followees(i).tolist()) for i in range(graph.n)}


def check_csr(graph: Graph) -> None:
    """Rows sorted, no duplicates, no self-loops."""
    assert graph.indptr[0] == 0 and graph.indptr[-1] == graph.edges
    for i in range(graph.n):
        row = graph.followees(i)
        assert (np.diff(row) > 0).all() and i not in row


def test_from_edges_sorts_and_dedupes() -> None:
    g = Graph.from_edges(4, [2, 0, 0, 2, 0, 3], [1, 3, 1, 1, 3, 0])
    assert g.indptr.tolist() == [0, 2, 2, 3, 4]
    assert g.indices.tolist() == [1, 3, 1, 0]
    assert g.indices.dtype == np.int32 and g.indptr.dtype == np.int64
    assert g.out_degree().tolist() == [2, 0, 1, 1]
    assert g.in_degree().tolist() == [1, 2, 0, 1]
    assert g.edges == 4 and g.mean_degree == 1.0
    assert g.nbytes == 5 * 8 + 4 * 4
    with pytest.raises(ValueError):
        g.indices[0] = 2                       # read-only


@pytest.mark.parametrize(("src", "dst", "match"), [
    ([0, 1], [1, 4], "followee 4 is not an agent"),
    ([-1], [1], "follower -1 is not an agent"),
    ([0, 2], [1, 2], "agent 2 follows itself"),
])
def test_from_edges_refuses_bad_ids(src: list[int], dst: list[int], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Graph.from_edges(4, src, dst)


def test_followers_is_the_transpose() -> None:
    g = Graph.generate(300, 6, np.random.default_rng(5))
    reverse: dict[int, set[int]] = {i: set() for i in range(g.n)}
    for i, row in as_sets(g).items():
        for j in row:
            reverse[j].add(i)
    back = g.followers()
    check_csr(back)
    assert as_sets(back) == reverse
    assert (back.out_degree() == g.in_degree()).all()
    assert as_sets(back.followers()) == as_sets(g)


def test_with_edges_adds_new_follows_only() -> None:
    g = Graph.from_edges(5, [0, 0, 2, 4], [1, 3, 4, 0])
    h = g.with_edges([0, 0, 1, 1, 3, 4, 4, 2], [2, 3, 1, 0, 4, 1, 0, 0])
    check_csr(h)
    assert as_sets(h) == {0: {1, 2, 3}, 1: {0}, 2: {0, 4}, 3: {4}, 4: {0, 1}}
    assert as_sets(g) == {0: {1, 3}, 1: set(), 2: {4}, 3: set(), 4: {0}}   # unchanged
    assert g.with_edges([0, 1], [1, 1]) is g


def test_with_edges_matches_rebuilding() -> None:
    rng = np.random.default_rng(9)
    g = Graph.generate(200, 5, rng)
    src, dst = rng.integers(0, 200, 400), rng.integers(0, 200, 400)
    h = g.with_edges(src, dst)
    check_csr(h)
    want = as_sets(g)
    for a, b in zip(src.tolist(), dst.tolist(), strict=True):
        if a != b:
            want[a].add(b)
    assert as_sets(h) == want


def test_rows_are_one_workers_share() -> None:
    g = Graph.from_edges(4, [1, 1, 2, 3], [0, 2, 3, 1])
    indptr, indices = g.rows(1, 3)
    assert indptr.tolist() == [0, 2, 3] and indices.tolist() == [0, 2, 3]
    assert np.shares_memory(indices, g.indices)
    with pytest.raises(ValueError):
        g.rows(2, 5)


def test_generate_is_deterministic_per_seed() -> None:
    a = Graph.generate(5000, 8, np.random.default_rng(11))
    b = Graph.generate(5000, 8, 11)
    c = Graph.generate(5000, 8, np.random.default_rng(12))
    assert np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)
    assert not np.array_equal(a.indices, c.indices)
    check_csr(Graph.generate(2000, 8, 1))


def test_generate_mean_degree_and_heavy_tail() -> None:
    g = Graph.generate(20_000, 20, np.random.default_rng(3))
    stats = degree_stats(g)
    assert abs(g.mean_degree - 20) < 2          # the brief: within 10%
    assert abs(g.mean_degree - 20) < 0.4        # duplicates (hubs drawn twice) are redrawn
    assert stats["mean_out_degree"] == pytest.approx(g.mean_degree)
    assert stats["max_in_degree"] > 10 * stats["mean_in_degree"]
    # Preferential attachment: early agents collect followers, late ones few.
    indeg = g.in_degree()
    assert indeg[:1000].mean() > 10 * indeg[-10_000:].mean()
    share = np.array(stats["ccdf_share"])
    assert share[0] <= 1 and (np.diff(share) <= 0).all() and share[-1] > 0
    assert stats["ccdf_degree"][-1] == stats["max_in_degree"]


def test_attractiveness_tames_the_tail() -> None:
    wild = Graph.generate(20_000, 20, 3)
    tame = Graph.generate(20_000, 20, 3, attractiveness=20)
    assert degree_stats(tame)["max_in_degree"] < degree_stats(wild)["max_in_degree"] / 2


def test_generate_with_homophily() -> None:
    groups = np.arange(20_000) % 2
    g = Graph.generate(20_000, 20, np.random.default_rng(4), groups=groups, homophily=0.8)
    h = homophily(g, groups)
    assert h["expected_share"] == pytest.approx(0.5)
    assert h["same_group_share"] >= 0.8 + 0.2 * 0.5 - 0.05
    assert h["coleman_index"] == pytest.approx((h["same_group_share"] - 0.5) / 0.5)
    plain = homophily(Graph.generate(20_000, 20, 4), groups)
    assert abs(plain["same_group_share"] - 0.5) < 0.05


def test_homophily_by_hand() -> None:
    g = Graph.from_edges(4, [0, 0, 2, 3], [1, 2, 3, 1])
    h = homophily(g, np.array(["a", "a", "b", "b"]))
    assert h == {"same_group_share": 0.5, "expected_share": 0.5, "coleman_index": 0.0}


def test_degree_stats_by_hand() -> None:
    g = Graph.from_edges(4, [0, 1, 2, 3, 0], [3, 3, 3, 0, 1])
    stats = degree_stats(g)
    assert stats["edges"] == 5
    assert stats["max_out_degree"] == 2 and stats["median_out_degree"] == 1.0
    assert stats["max_in_degree"] == 3 and stats["median_in_degree"] == 1.0
    assert stats["ccdf_degree"] == [1, 2, 3]
    assert stats["ccdf_share"] == [0.75, 0.25, 0.25]


# --- edge lists ---------------------------------------------------------------------------


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_load_csv(tmp_path: Path) -> None:
    path = write(tmp_path / "edges.csv", "followee,follower,weight\n1,0,5\n2, 0,1\n"
                                         "\n1,0,3\n0,2,1\n")
    g = load_edge_list(path, 3)
    assert as_sets(g) == {0: {1, 2}, 1: set(), 2: {0}}


def test_load_parquet(tmp_path: Path) -> None:
    path = tmp_path / "edges.parquet"
    pq.write_table(pa.table({"follower": pa.array([0, 0, 2, 0], pa.int32()),
                             "followee": [1, 2, 0, 1]}), path)
    assert as_sets(load_edge_list(path, 3)) == {0: {1, 2}, 1: set(), 2: {0}}


def one_line_error(path: Path, n: int = 1_000_000) -> str:
    with pytest.raises(ConfigError) as info:
        load_edge_list(path, n)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    return message


GOOD = "follower,followee\n1,2\n3,4\n5,6\n"


@pytest.mark.parametrize(("text", "problem"), [
    (GOOD + "7,x\n", "line 5: followee 'x' is not an integer agent id"),
    (GOOD + "7,8,9\n", "line 5: 3 fields, expected 2"),
    (GOOD + "7\n", "line 5: 1 fields, expected 2"),
    (GOOD + "7,\n", "line 5: empty followee"),
    (GOOD + "1.5,2\n", "line 5: follower '1.5' is not an integer agent id"),
    (GOOD + "7,1000042\n",
     "line 5: agent 1000042 does not exist (the run has 1,000,000 agents)"),
    (GOOD + "-3,1\n", "line 5: agent -3 does not exist"),
    (GOOD + "99999999999999999999999,1\n", "line 5: agent 99999999999999999999999 does "),
    (GOOD + "8,8\n", "line 5: agent 8 follows itself"),
    ("follower,followee\n1,2\n\n3,4\n8,8\n1,1\n", "line 5: agent 8 follows itself"),
    ("follower,target\n1,2\n", "line 1: no 'followee' column"),
    ("", "line 1: the file is empty"),
])
def test_csv_errors_name_file_line_and_problem(tmp_path: Path, text: str,
                                               problem: str) -> None:
    assert problem in one_line_error(write(tmp_path / "edges.csv", text))


def test_parquet_errors_name_the_row(tmp_path: Path) -> None:
    path = tmp_path / "edges.parquet"
    pq.write_table(pa.table({"follower": [1, 2, 3], "followee": [2, 3, 1_000_042]}), path)
    assert ("row 3: agent 1000042 does not exist (the run has 1,000,000 agents)"
            in one_line_error(path))
    pq.write_table(pa.table({"follower": [1, 2, 3], "followee": [2, 2, 1]}), path)
    assert "row 2: agent 2 follows itself" in one_line_error(path)
    pq.write_table(pa.table({"follower": [1, None], "followee": [2, 3]}), path)
    assert "row 2: empty follower" in one_line_error(path)
    pq.write_table(pa.table({"follower": [1], "to": [2]}), path)
    assert "no 'followee' column" in one_line_error(path)
    pq.write_table(pa.table({"follower": ["1"], "followee": [2]}), path)
    assert "column 'follower' holds string" in one_line_error(path)
    write(path, "not parquet")
    assert "not a readable Parquet file" in one_line_error(path)


def test_missing_file_and_unknown_format(tmp_path: Path) -> None:
    assert "no such edge-list file" in one_line_error(tmp_path / "nope.csv")
    assert "unknown edge-list format '.txt'" in one_line_error(
        write(tmp_path / "edges.txt", GOOD))
