"""The follower graph: who follows whom, as compressed rows (CSR) of numpy arrays.

Row ``i`` of a :class:`Graph` lists the agents that agent ``i`` follows (its *followees*),
sorted, without duplicates or self-loops. A million agents with twenty follows each take
about 90 MB (``indices`` is int32, ``indptr`` int64)::

    g = Graph.generate(1_000_000, 20, np.random.default_rng(7))
    g.followees(42)               # whom agent 42 follows
    g.followers().followees(42)   # who follows agent 42
    degree_stats(g)["max_in_degree"]

:meth:`Graph.generate` grows a scale-free graph by preferential attachment (Price's
model), optionally with homophily among the agents of a group; :func:`load_edge_list`
reads a given graph from CSV or Parquet, reporting a bad row as one
:class:`~populace.core.ConfigError` line.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from populace.core import ConfigError

#: Arrivals drawn together by :meth:`Graph.generate`; a chunk never exceeds an eighth of
#: the agents already there, so the urn it draws from is at most 1/8 stale.
CHUNK = 50_000
#: Rounds of redrawing the follows that came out as duplicates (hubs are drawn repeatedly).
REDRAWS = 3

I64 = NDArray[np.int64]
I32 = NDArray[np.int32]


def _sorted_unique(a: I64) -> I64:
    """``np.unique`` by sorting in place (numpy 2's hash-based unique is far slower here)."""
    a.sort()
    return a[np.concatenate(([True], a[1:] != a[:-1]))] if len(a) > 1 else a


def _frozen(a: np.ndarray) -> np.ndarray:
    view = a.view()
    view.flags.writeable = False
    return view


@dataclass(frozen=True, eq=False)
class Graph:
    """A directed follower graph over agents ``0..n-1``; row ``i`` = whom ``i`` follows.

    The arrays are read-only views (nothing is copied if they already have the right
    dtype): ``indptr`` int64 of length ``n + 1``, ``indices`` int32 of length ``edges``.
    Build one with :meth:`generate`, :meth:`from_edges` or :func:`load_edge_list`; the
    constructor trusts that each row is sorted and free of duplicates and self-loops.
    """

    n: int
    indptr: I64
    indices: I32

    def __post_init__(self) -> None:
        indptr = np.asarray(self.indptr, dtype=np.int64)
        indices = np.asarray(self.indices, dtype=np.int32)
        if indptr.shape != (self.n + 1,) or indptr[0] != 0 or indptr[-1] != len(indices):
            raise ValueError(f"indptr must have n + 1 = {self.n + 1} entries from 0 to "
                             f"len(indices) = {len(indices)}")
        object.__setattr__(self, "indptr", _frozen(indptr))
        object.__setattr__(self, "indices", _frozen(indices))

    # --- building -----------------------------------------------------------------------

    @classmethod
    def generate(cls, n: int, mean_degree: float, rng: np.random.Generator | int, *,
                 groups: ArrayLike | None = None, homophily: float = 0.0,
                 attractiveness: float = 1.0) -> Graph:
        """A scale-free follower graph grown by preferential attachment (Price's model).

        Agents arrive in id order; agent ``i`` follows ``d_i ~ Poisson(mean_degree)``
        earlier agents (at most ``i``), each follow picking agent ``j < i`` with weight
        ``in_j + a`` (``a = attractiveness``): with probability ``E / (E + a·i)`` a uniform
        draw from the targets of the ``E`` follows made so far, else a uniform earlier
        agent. The in-degrees follow a power law of exponent ``2 + a / mean_degree``: with
        the default ``a = 1`` and 20 follows each, about half the agents have no follower
        and the top 1% hold over 80% of the follows; ``a = mean_degree`` gives exponent 3
        (Barabási–Albert) and a milder tail.

        Arrivals are drawn in chunks (up to :data:`CHUNK`, and at most an eighth of the
        agents already there) against the follows of the earlier chunks. Duplicate follows
        are redrawn :data:`REDRAWS` times, then dropped, so the realised mean degree
        (:attr:`mean_degree`) is a hair below ``mean_degree``.

        With ``groups`` (one integer code per agent) and ``homophily`` ``h``, each follow
        is drawn, with probability ``h``, by the same rule among the earlier agents of the
        follower's own group only (when it has any), else among everyone. The same
        ``rng`` seed gives the same graph.

        >>> g = Graph.generate(1000, 10, np.random.default_rng(0))
        >>> 9 < g.mean_degree < 11
        True
        """
        if n < 0 or mean_degree < 0:
            raise ValueError("n and mean_degree must be >= 0")
        if attractiveness <= 0:
            raise ValueError(f"attractiveness must be > 0, not {attractiveness}")
        if not 0.0 <= homophily <= 1.0:
            raise ValueError(f"homophily must be in [0, 1], not {homophily}")
        rng = np.random.default_rng(rng)
        group = _Groups(np.asarray(groups), n) if groups is not None and homophily > 0 else None
        want = rng.poisson(mean_degree, n).astype(np.int64)
        np.minimum(want, np.arange(n), out=want)
        indices = np.empty(int(want.sum()), dtype=np.int32)
        indptr = np.zeros(n + 1, dtype=np.int64)
        indeg = np.zeros(n, dtype=np.int64) if group is not None else None
        filled = 0
        lo = 0
        while lo < n:
            hi = min(n, lo + max(1, min(CHUNK, lo // 8)))
            urn = indices[:filled]
            if group is not None:
                assert indeg is not None
                group.refresh(indeg)
            rows = np.zeros((0,), dtype=np.int64)     # local follower << 32 | target, sorted
            need = want[lo:hi].copy()
            for _ in range(REDRAWS + 1):
                follower = np.repeat(np.arange(lo, hi, dtype=np.int64), need)
                if len(follower) == 0:
                    break
                target = _draw(follower, urn, rng, group, homophily, attractiveness)
                rows = _sorted_unique(np.concatenate((rows, ((follower - lo) << 32) | target)))
                need = want[lo:hi] - np.bincount(rows >> 32, minlength=hi - lo)
            target32 = (rows & 0xFFFFFFFF).astype(np.int32)
            indices[filled:filled + len(rows)] = target32
            indptr[lo + 1:hi + 1] = filled + np.cumsum(np.bincount(rows >> 32,
                                                                   minlength=hi - lo))
            filled += len(rows)
            if indeg is not None:
                indeg += np.bincount(target32, minlength=n)
            lo = hi
        return cls(n, indptr, indices[:filled].copy() if filled < len(indices) else indices)

    @classmethod
    def from_edges(cls, n: int, follower: ArrayLike, followee: ArrayLike) -> Graph:
        """The graph of the follows ``follower[e] -> followee[e]``; duplicates are kept once.

        Raises :class:`ValueError` on an id outside ``0..n-1`` or a self-loop (callers
        that read a file check first, to name the line).

        >>> Graph.from_edges(3, [0, 0, 2, 0], [2, 1, 1, 2]).followees(0).tolist()
        [1, 2]
        """
        src = np.asarray(follower).astype(np.int64, copy=False).ravel()
        dst = np.asarray(followee).astype(np.int64, copy=False).ravel()
        if src.shape != dst.shape:
            raise ValueError(f"{len(src)} followers but {len(dst)} followees")
        for name, ids in (("follower", src), ("followee", dst)):
            bad = np.flatnonzero((ids < 0) | (ids >= n))
            if len(bad):
                raise ValueError(f"edge {bad[0]}: {name} {ids[bad[0]]} is not an agent "
                                 f"(0..{n - 1})")
        loops = np.flatnonzero(src == dst)
        if len(loops):
            raise ValueError(f"edge {loops[0]}: agent {src[loops[0]]} follows itself")
        key = _sorted_unique(src * n + dst)
        indptr = np.zeros(n + 1, dtype=np.int64)
        if n:
            np.cumsum(np.bincount(key // n, minlength=n), out=indptr[1:])
            return cls(n, indptr, (key % n).astype(np.int32))
        return cls(n, indptr, np.zeros(0, dtype=np.int32))

    def with_edges(self, follower: ArrayLike, followee: ArrayLike) -> Graph:
        """This graph plus the follows ``follower[e] -> followee[e]``; those already there
        and self-loops are ignored. Costs one copy of ``indices``, not a sort.

        >>> g = Graph.from_edges(3, [0], [1]).with_edges([0, 1, 2], [2, 1, 0])
        >>> [g.followees(i).tolist() for i in range(3)]
        [[1, 2], [], [0]]
        """
        src = np.asarray(follower).astype(np.int64, copy=False).ravel()
        dst = np.asarray(followee).astype(np.int64, copy=False).ravel()
        if src.shape != dst.shape:
            raise ValueError(f"{len(src)} followers but {len(dst)} followees")
        if len(src) and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= self.n):
            raise ValueError(f"follows must be between agents 0..{self.n - 1}")
        key = _sorted_unique((src * self.n + dst)[src != dst])
        src, dst = key // self.n, key % self.n
        at = _lower_bound(self.indptr, self.indices, src, dst)
        there = at < self.indptr[src + 1]
        there[there] = self.indices[at[there]] == dst[there]
        new = ~there
        src, dst, at = src[new], dst[new], at[new]
        if len(src) == 0:
            return self
        indptr = self.indptr.copy()
        indptr[1:] += np.cumsum(np.bincount(src, minlength=self.n))
        return Graph(self.n, indptr, np.insert(self.indices, at, dst.astype(np.int32)))

    # --- reading ------------------------------------------------------------------------

    @property
    def edges(self) -> int:
        """How many follows the graph holds."""
        return len(self.indices)

    @property
    def mean_degree(self) -> float:
        """Follows per agent (the realised mean out- and in-degree)."""
        return self.edges / self.n if self.n else 0.0

    @property
    def nbytes(self) -> int:
        """Memory held by the two arrays."""
        return int(self.indptr.nbytes + self.indices.nbytes)

    def followees(self, i: int) -> I32:
        """Whom agent ``i`` follows, sorted (a view)."""
        return self.indices[self.indptr[i]:self.indptr[i + 1]]

    def out_degree(self) -> I64:
        """How many agents each agent follows."""
        return np.diff(self.indptr)

    def in_degree(self) -> I64:
        """How many followers each agent has."""
        return np.bincount(self.indices, minlength=self.n).astype(np.int64, copy=False)

    def rows(self, lo: int, hi: int) -> tuple[I64, I32]:
        """The followee lists of agents ``lo..hi-1`` (one worker's share): ``indptr``
        rebased to start at 0 and a view of ``indices`` (global ids)."""
        if not 0 <= lo <= hi <= self.n:
            raise ValueError(f"rows({lo}, {hi}) outside 0..{self.n}")
        ptr = self.indptr[lo:hi + 1]
        return ptr - ptr[0], self.indices[ptr[0]:ptr[-1]]

    def followers(self) -> Graph:
        """The reverse graph: row ``i`` lists who follows ``i``, sorted."""
        indptr = np.zeros(self.n + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.indices, minlength=self.n), out=indptr[1:])
        # A stable sort by followee keeps each group's followers in ascending order.
        order = np.argsort(self.indices, kind="stable")
        follower = np.repeat(np.arange(self.n, dtype=np.int32), self.out_degree())[order]
        return Graph(self.n, indptr, follower)


class _Groups:
    """Agents sorted by group, for drawing follows within the follower's group."""

    def __init__(self, groups: np.ndarray, n: int) -> None:
        if groups.shape != (n,):
            raise ValueError(f"groups must have one entry per agent ({n}), not {groups.shape}")
        _, code = np.unique(groups, return_inverse=True)
        self.code = code.astype(np.int64).ravel()
        self.order = np.argsort(self.code, kind="stable")          # agents by group, then id
        self.start = np.searchsorted(self.code[self.order], np.arange(self.code.max() + 2)
                                     if n else [0])
        rank = np.empty(n, dtype=np.int64)
        rank[self.order] = np.arange(n)
        self.before = rank - self.start[self.code]                 # same-group agents < i
        self.cum = np.zeros(n + 1, dtype=np.int64)

    def refresh(self, indeg: np.ndarray) -> None:
        """Cumulative in-degree along ``order`` (0 for agents not yet there)."""
        np.cumsum(indeg[self.order], out=self.cum[1:])


def _draw(follower: I64, urn: I32, rng: np.random.Generator, group: _Groups | None,
          homophily: float, a: float) -> I64:
    """One target per follow, by Price's rule, within the group for a share ``homophily``."""
    count = len(follower)
    target = np.empty(count, dtype=np.int64)
    inside = np.zeros(count, dtype=bool)
    if group is not None:
        inside = rng.random(count) < homophily
        f = follower[inside]
        g = group.code[f]
        first = group.start[g]
        earlier = group.before[f]
        base = group.cum[first]
        pool = group.cum[group.start[g + 1]] - base                # in-degree of the group
        inside[inside] = earlier > 0                               # else: draw among all
        keep = earlier > 0
        f, first, earlier, base, pool = f[keep], first[keep], earlier[keep], base[keep], pool[
            keep]
        from_urn = rng.random(len(f)) * (pool + a * earlier) < pool
        u = rng.random(len(f))
        pick = np.where(from_urn,
                        np.searchsorted(group.cum, base + (u * pool).astype(np.int64),
                                        side="right") - 1,
                        first + (u * earlier).astype(np.int64))
        target[inside] = group.order[np.minimum(pick, len(group.order) - 1)]
    rest = ~inside
    f = follower[rest]
    e = len(urn)
    from_urn = rng.random(len(f)) * (e + a * f) < e
    u = rng.random(len(f))
    pick = np.where(from_urn, urn[np.minimum((u * e).astype(np.int64), max(e - 1, 0))] if e
                    else 0, (u * f).astype(np.int64))
    target[rest] = pick
    return target


def _lower_bound(indptr: I64, indices: I32, row: I64, value: I64) -> I64:
    """For each ``(row, value)``, the first position in the row whose entry is >= value."""
    lo, hi = indptr[row].copy(), indptr[row + 1].copy()
    while True:
        open_ = lo < hi
        if not open_.any():
            return lo
        mid = (lo + hi) // 2
        below = open_ & (indices[np.minimum(mid, len(indices) - 1)] < value)
        lo = np.where(below, mid + 1, lo)
        hi = np.where(open_ & ~below, mid, hi)


# --- statistics -----------------------------------------------------------------------------


def degree_stats(graph: Graph, *, points: int = 60) -> dict[str, Any]:
    """Degree summary of ``graph``: follows, mean/median/max out- and in-degree, and the
    in-degree CCDF (the share of agents with at least ``ccdf_degree[j]`` followers is
    ``ccdf_share[j]``) at up to ``points`` log-spaced degrees, for a log-log plot.

    >>> degree_stats(Graph.from_edges(3, [0, 1], [2, 2]))["max_in_degree"]
    2
    """
    out, inn = graph.out_degree(), graph.in_degree()
    stats: dict[str, Any] = {"agents": graph.n, "edges": graph.edges}
    for name, deg in (("out", out), ("in", inn)):
        stats[f"mean_{name}_degree"] = float(deg.mean()) if graph.n else 0.0
        stats[f"median_{name}_degree"] = float(np.median(deg)) if graph.n else 0.0
        stats[f"max_{name}_degree"] = int(deg.max()) if graph.n else 0
    top = int(inn.max()) if graph.n else 0
    degree = np.unique(np.geomspace(1, max(top, 1), points).round().astype(np.int64))
    degree = degree[degree <= top]
    at_least = np.bincount(inn, minlength=top + 1)[::-1].cumsum()[::-1]
    stats["ccdf_degree"] = degree.tolist()
    stats["ccdf_share"] = (at_least[degree] / graph.n).tolist() if graph.n else []
    return stats


def homophily(graph: Graph, groups: ArrayLike) -> dict[str, float]:
    """How much follows stay within a group (``groups``: one value per agent).

    ``same_group_share`` is the share of follows between agents of the same group,
    ``expected_share`` the share random follows would give (Σ over groups of the squared
    share of agents), and ``coleman_index`` ``(share − expected) / (1 − expected)``: 0 for
    random follows, 1 when every follow stays in its group, negative for mixing (NaN when
    it is undefined: no follows, or a single group).

    >>> homophily(Graph.from_edges(4, [0, 1], [1, 2]), [0, 0, 1, 1])["same_group_share"]
    0.5
    """
    values = np.asarray(groups)
    if values.shape != (graph.n,):
        raise ValueError(f"groups must have one entry per agent ({graph.n}), not {values.shape}")
    _, code = np.unique(values, return_inverse=True)
    code = code.ravel()
    row = np.repeat(code, graph.out_degree())
    share = float((row == code[graph.indices]).mean()) if graph.edges else float("nan")
    expected = float(((np.bincount(code) / graph.n) ** 2).sum()) if graph.n else float("nan")
    index = (share - expected) / (1 - expected) if expected < 1 else float("nan")
    return {"same_group_share": share, "expected_share": expected, "coleman_index": index}


# --- edge lists -----------------------------------------------------------------------------

COLUMNS = ("follower", "followee")
_INT = re.compile(r"-?[0-9]+")


def load_edge_list(path: str | Path, n: int) -> Graph:
    """Read a follower graph from a CSV (header ``follower,followee``) or Parquet file.

    Other columns are ignored and duplicate follows kept once. Every problem is one
    :class:`~populace.core.ConfigError` line naming the file, the line (CSV, 1-based with
    the header as line 1) or row (Parquet, 1-based) and what is wrong, e.g.
    ``edges.csv: line 5: agent 1000042 does not exist (the run has 1,000,000 agents)``.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such edge-list file")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        follower, followee = _read_csv(path, n)
    elif suffix in (".parquet", ".pq"):
        follower, followee = _read_parquet(path, n)
    else:
        raise ConfigError(f"{path}: unknown edge-list format {path.suffix or '(none)'!r} "
                          "(use .csv or .parquet)")
    return Graph.from_edges(n, follower, followee)


def _agent_problem(value: int, n: int) -> str:
    return f"agent {value} does not exist (the run has {n:,} agents)"


def _first_bad(follower: I64, followee: I64, n: int) -> int | None:
    """The first row with an id outside 0..n-1 or a self-loop, if any."""
    bad = np.flatnonzero((follower < 0) | (follower >= n) | (followee < 0) | (followee >= n)
                         | (follower == followee))
    return int(bad[0]) if len(bad) else None


def _read_csv(path: Path, n: int) -> tuple[I64, I64]:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    with path.open(newline="", encoding="utf-8-sig", errors="replace") as f:
        header = next(csv.reader(f), None)
    if not header:
        raise ConfigError(f"{path}: line 1: the file is empty (expected the header "
                          "follower,followee)")
    names = [name.strip() for name in header]
    for column in COLUMNS:
        if column not in names:
            raise ConfigError(f"{path}: line 1: no {column!r} column (the header is "
                              f"{','.join(header)!r}; expected follower,followee)")
    try:
        table = pacsv.read_csv(
            path,
            read_options=pacsv.ReadOptions(column_names=names, skip_rows=1),
            convert_options=pacsv.ConvertOptions(
                column_types=dict.fromkeys(COLUMNS, pa.int64()), include_columns=COLUMNS))
    except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeDecodeError) as e:
        _raise_first_bad_line(path, n, str(e).splitlines()[0])
    columns = []
    for column in COLUMNS:
        array = table.column(column)
        if array.null_count:
            _raise_first_bad_line(path, n, None)
        columns.append(array.to_numpy())
    follower, followee = columns
    if _first_bad(follower, followee, n) is not None:
        _raise_first_bad_line(path, n, None)
    return follower, followee


def _raise_first_bad_line(path: Path, n: int, arrow_message: str | None) -> Any:
    """Find the first bad line by reading the file again, row by row, and raise on it."""
    with path.open(newline="", encoding="utf-8-sig", errors="replace") as f:
        rows = csv.reader(f)
        header = [name.strip() for name in next(rows)]
        width = len(header)
        at = [header.index(column) for column in COLUMNS]
        for row in rows:
            line = rows.line_num
            if not row:
                continue                                     # pyarrow skips blank lines
            if len(row) != width:
                raise ConfigError(f"{path}: line {line}: {len(row)} fields, expected {width} "
                                  f"({','.join(header)})")
            ids = []
            for column, j in zip(COLUMNS, at, strict=True):
                cell = row[j].strip()
                if not cell:
                    raise ConfigError(f"{path}: line {line}: empty {column}")
                if not _INT.fullmatch(cell):
                    raise ConfigError(f"{path}: line {line}: {column} {cell!r} is not an "
                                      "integer agent id")
                value = int(cell)
                if not 0 <= value < n:
                    raise ConfigError(f"{path}: line {line}: {_agent_problem(value, n)}")
                ids.append(value)
            if ids[0] == ids[1]:
                raise ConfigError(f"{path}: line {line}: agent {ids[0]} follows itself")
    raise ConfigError(f"{path}: cannot read the edge list: {arrow_message or 'bad row'}")


def _read_parquet(path: Path, n: int) -> tuple[I64, I64]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except (pa.ArrowException, OSError) as e:
        raise ConfigError(f"{path}: not a readable Parquet file ({e})") from None
    for column in COLUMNS:
        if column not in schema.names:
            raise ConfigError(f"{path}: no {column!r} column (the columns are "
                              f"{', '.join(schema.names) or 'none'}; expected follower, "
                              "followee)")
        kind = schema.field(column).type
        if not pa.types.is_integer(kind):
            raise ConfigError(f"{path}: column {column!r} holds {kind}, not integer agent ids")
    table = pq.read_table(path, columns=list(COLUMNS))
    columns = []
    for column in COLUMNS:
        array = table.column(column).combine_chunks()
        if array.null_count:
            row = int(np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False))[0])
            raise ConfigError(f"{path}: row {row + 1}: empty {column}")
        columns.append(array.to_numpy().astype(np.int64, copy=False))
    follower, followee = columns
    i = _first_bad(follower, followee, n)
    if i is not None:
        src, dst = int(follower[i]), int(followee[i])
        problem = (_agent_problem(src, n) if not 0 <= src < n else
                   _agent_problem(dst, n) if not 0 <= dst < n else
                   f"agent {src} follows itself")
        raise ConfigError(f"{path}: row {i + 1}: {problem}")
    return follower, followee
