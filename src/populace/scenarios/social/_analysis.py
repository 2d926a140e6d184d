"""The social scenario's analysis, from the ``posts``, ``actions``, ``follows`` and
``profiles`` tables of a run::

    cascades       per original post: reposts of it (all generations), depth, duration
    ccdf           P(size ≥ x) of cascade sizes, for log-log plots
    adoption       new and cumulative reposts per step of each news post
    reach_by       distinct reposters per aspect value, as a share of its population
    echo_chamber   share of exposures from same-value authors against random exposure
    race           cumulative reposters of two labels (claim, correction) and who leads
    activity       actions per step, mean feed items seen, follow edges added
    report_tables  all of the above as the HTML report's tables

Every count is a ``np.bincount`` over integer keys and every lookup a ``np.searchsorted``
over sorted ids, so a million agents' ten steps (some three million reposts, ten million
actions) take seconds. Cascade depth follows the ``parent`` pointers one generation at a
time (as many passes as the deepest cascade, not one per post); size counts a root's
reposts by their ``root`` column.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from populace.core import ConfigError

from .._cells import num, pct, report

ORIGINALS = ("news", "post")  # kinds of post a cascade starts from
ACTIONS = ("post", "repost", "like", "follow", "nothing")
RACE = ("claim", "correction")
_MAX_VALUES = 12  # profile columns with more distinct values get no reach table
_TOP = 20  # largest cascades listed


# -- integer keys -----------------------------------------------------------------------------
def decoded(table: pa.Table) -> pa.Table:
    """``table`` with dictionary-encoded columns decoded (as Parquet stores aspects)."""
    for i, field in enumerate(table.schema):
        if pa.types.is_dictionary(field.type):
            table = table.set_column(i, field.name, table[field.name].cast(field.type.value_type))
    return table


def _profiles(profiles: pa.Table | None) -> pa.Table:
    if profiles is None:  # a run without profiles
        return pa.table({"agent_id": pa.array([], pa.int64())})
    return decoded(profiles)


def _ints(column: pa.ChunkedArray | pa.Array, fill: int = -1) -> np.ndarray:
    return np.asarray(pc.fill_null(column, fill).to_numpy(), dtype=np.int64)


def _is(column: pa.ChunkedArray | pa.Array, *values: str) -> np.ndarray:
    """Per element: is it one of ``values`` (null: no)."""
    hit = pc.is_in(column, value_set=pa.array(values, pa.string()))
    return np.asarray(pc.fill_null(hit, False).to_numpy(), dtype=bool)


def _positions(keys: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Position of each of ``keys`` in ``ids`` (distinct), -1 when absent."""
    if not ids.size or not keys.size:
        return np.full(keys.shape, -1, dtype=np.int64)
    low, high = int(ids.min()), int(ids.max())
    if high - low < 4 * ids.size + 1024:  # ids nearly dense (as agent and post ids are)
        table = np.full(high - low + 1, -1, dtype=np.int64)
        table[ids - low] = np.arange(ids.size)
        inside = (keys >= low) & (keys <= high)
        return np.where(inside, table[np.where(inside, keys - low, 0)], -1)
    ascending = ids.size < 2 or bool((ids[1:] > ids[:-1]).all())  # ids often come in order
    order = None if ascending else np.argsort(ids, kind="stable")
    ordered = ids if order is None else ids[order]
    at = np.minimum(np.searchsorted(ordered, keys), ids.size - 1)
    found = ordered[at] == keys
    rows = at if order is None else order[at]
    return np.where(found, rows, -1).astype(np.int64)


class _Posts:
    """The posts table as arrays: ``orig`` (rows of the originals, in table order) and,
    per repost (``rows``), the index of its root among the originals (``of``, -1 when the
    root is not in the table)."""

    def __init__(self, posts: pa.Table) -> None:
        posts = decoded(posts)
        self.table = posts
        self.id = _ints(posts["post_id"])
        self.step = _ints(posts["step"], 0)
        self.author = _ints(posts["author"])
        self.orig = np.flatnonzero(_is(posts["kind"], *ORIGINALS))
        self.news = _is(posts["kind"], "news")[self.orig]
        self.rows = np.flatnonzero(_is(posts["kind"], "repost"))
        self.of = _positions(_ints(posts["root"])[self.rows], self.id[self.orig])
        self.last = int(self.step.max()) if self.step.size else 0
        self.first = int(self.step.min()) if self.step.size else 0

    def labels(self, index: np.ndarray) -> pa.Array:
        """The labels of the originals at ``index`` (as text)."""
        column = pc.cast(self.table["label"], pa.string())
        return pc.take(column, pa.array(self.orig[index], pa.int64())).combine_chunks()

    def select(self, roots: Iterable[int] | None) -> np.ndarray:
        """Indices of the originals among ``roots`` (default: the news), in table order."""
        if roots is None:
            return np.flatnonzero(self.news)
        wanted = np.unique(np.fromiter(roots, dtype=np.int64))
        return np.flatnonzero(_positions(self.id[self.orig], wanted) >= 0)


def _ranges(start: np.ndarray, count: np.ndarray) -> np.ndarray:
    """``concat(arange(s, s + c) for s, c in zip(start, count))``, without a Python loop."""
    total = int(count.sum())
    return np.repeat(start - (np.cumsum(count) - count), count) + np.arange(total)


def _depths(p: _Posts) -> np.ndarray:
    """Longest parent chain below each original, by generations: the frontier starts at the
    originals; each pass takes the reposts whose parent is on it. Every repost has one
    parent, so each is reached once at most and the passes end."""
    depth = np.zeros(p.orig.size, dtype=np.int64)
    parent = _positions(_ints(p.table["parent"])[p.rows], p.id)
    known = parent >= 0
    order = np.argsort(parent[known], kind="stable")
    child = p.rows[known][order]  # the reposts, grouped by parent row (CSR)
    count = np.bincount(parent[known], minlength=p.id.size)
    start = np.cumsum(count) - count
    front, origin = p.orig, np.arange(p.orig.size)
    generation = 0
    while front.size:
        n = count[front]
        if not n.any():
            break
        generation += 1
        front, origin = child[_ranges(start[front], n)], np.repeat(origin, n)
        depth[origin] = generation  # later generations overwrite: the deepest wins
    return depth


def _schema(**fields: pa.DataType) -> pa.Schema:
    return pa.schema(list(fields.items()))


def _table(columns: dict[str, Any], schema: pa.Schema) -> pa.Table:
    return pa.table({f.name: columns[f.name] if isinstance(columns[f.name], pa.Array)
                     else pa.array(columns[f.name], type=f.type) for f in schema},
                    schema=schema)


# -- cascades ---------------------------------------------------------------------------------
_CASCADES = _schema(root=pa.int64(), kind=pa.string(), label=pa.string(), author=pa.int64(),
                    step=pa.int32(), size=pa.int64(), depth=pa.int32(),
                    reach_steps=pa.int32())


def cascades(posts: pa.Table) -> pa.Table:
    """Per original post (news and posts, in table order): ``root`` (its post id),
    ``kind``, ``label``, ``author``, ``step`` posted, ``size`` (reposts of it, every
    generation), ``depth`` (longest chain of reposts below it; 0 when never reposted) and
    ``reach_steps`` (step of its last repost − step posted).

    >>> cascades(posts).to_pylist()[0]                               # doctest: +SKIP
    {'root': 0, 'kind': 'news', 'label': 'claim', 'author': 17, 'step': 0, 'size': 412,
     'depth': 5, 'reach_steps': 6}
    """
    if not posts.num_rows:
        return _CASCADES.empty_table()
    p = _Posts(posts)
    known = p.of >= 0
    of = p.of[known]
    size = np.bincount(of, minlength=p.orig.size)
    last = p.step[p.orig].copy()
    np.maximum.at(last, of, p.step[p.rows[known]])
    index = np.arange(p.orig.size)
    kind = pc.take(pc.cast(p.table["kind"], pa.string()), pa.array(p.orig, pa.int64()))
    return _table({"root": p.id[p.orig], "kind": kind.combine_chunks(),
                   "label": p.labels(index), "author": p.author[p.orig],
                   "step": p.step[p.orig], "size": size, "depth": _depths(p),
                   "reach_steps": last - p.step[p.orig]}, _CASCADES)


def ccdf(sizes: pa.Array | pa.ChunkedArray | np.ndarray | Sequence[float]
         ) -> tuple[np.ndarray, np.ndarray]:
    """The distinct sizes ``x`` (ascending) and ``P(size ≥ x)`` (nulls left out); drop
    ``x == 0`` before a log-log plot.

    >>> ccdf([0, 1, 1, 4])                                           # doctest: +SKIP
    (array([0, 1, 4]), array([1.  , 0.75, 0.25]))
    """
    if isinstance(sizes, pa.Array | pa.ChunkedArray):
        values = np.asarray(sizes.drop_null().to_numpy())
    else:
        values = np.asarray(sizes)
    values = np.sort(values.ravel())
    x, first = np.unique(values, return_index=True)
    return x, (values.size - first) / max(values.size, 1)


# -- adoption and reach -----------------------------------------------------------------------
_ADOPTION = _schema(root=pa.int64(), label=pa.string(), step=pa.int32(), new=pa.int64(),
                    cumulative=pa.int64())


def adoption(posts: pa.Table, roots: Iterable[int] | None = None) -> pa.Table:
    """Per root × step, from the step it was posted to the run's last: ``new`` reposts of
    it (every generation) and ``cumulative`` reposts so far. ``roots``: post ids of
    originals (others are left out); by default the news posts."""
    if not posts.num_rows:
        return _ADOPTION.empty_table()
    p = _Posts(posts)
    chosen = p.select(roots)
    if not chosen.size:
        return _ADOPTION.empty_table()
    slot = np.full(p.orig.size + 1, -1, dtype=np.int64)
    slot[chosen] = np.arange(chosen.size)
    mine = slot[p.of]  # of == -1 reads the trailing -1
    keep = mine >= 0
    start = p.step[p.orig[chosen]]
    low = int(start.min())
    width = p.last - low + 1
    new = np.bincount(mine[keep] * width + p.step[p.rows[keep]] - low,
                      minlength=chosen.size * width).reshape(chosen.size, width)
    steps = np.arange(low, p.last + 1)
    shown = steps[None, :] >= start[:, None]
    which, at = np.nonzero(shown)
    labels = pc.take(p.labels(chosen), pa.array(which, pa.int64()))
    return _table({"root": p.id[p.orig[chosen]][which], "label": labels, "step": steps[at],
                   "new": new[shown], "cumulative": np.cumsum(new, axis=1)[shown]},
                  _ADOPTION)


def _values(profiles: pa.Table, aspect: str, who: str) -> tuple[list[str], np.ndarray]:
    """The distinct values of ``aspect`` (as text, sorted) and each profile's index among
    them (-1: null)."""
    if aspect == "agent_id" or aspect not in profiles.column_names:
        raise ConfigError(f"{who}: {aspect!r} is not a profile column (columns: "
                          f"{', '.join(c for c in profiles.column_names if c != 'agent_id')})")
    column = profiles[aspect]
    distinct = pc.unique(column).drop_null()
    distinct = pc.take(distinct, pc.sort_indices(distinct))
    index = _ints(pc.index_in(column, value_set=distinct.combine_chunks()
                              if isinstance(distinct, pa.ChunkedArray) else distinct))
    return [str(v) for v in pc.cast(distinct, pa.string()).to_pylist()], index


_REACH = _schema(root=pa.int64(), label=pa.string(), value=pa.string(), adopters=pa.int64(),
                 population=pa.int64(), share=pa.float64())


def reach_by(posts: pa.Table, profiles: pa.Table | None, aspect: str,
             roots: Iterable[int] | None = None, *,
             per: Literal["root", "label"] = "root") -> pa.Table:
    """Per root × value of profile column ``aspect`` (as text, every value): ``adopters``
    (distinct agents of that value who reposted the root), ``population`` (agents of that
    value) and ``share`` = adopters / population. ``roots``: post ids of originals; by
    default the news posts. ``per="label"`` pools the chosen roots of each label (an agent
    counts once a label; ``root`` null; roots without a label left out). Reposters
    without a profile are left out.

    >>> reach_by(posts, profiles, "party").to_pylist()[0]            # doctest: +SKIP
    {'root': 0, 'label': 'claim', 'value': 'left', 'adopters': 120, 'population': 480,
     'share': 0.25}
    """
    profiles = _profiles(profiles)
    values, index = _values(profiles, aspect, "reach_by")
    if not posts.num_rows or not values:
        return _REACH.empty_table()
    p = _Posts(posts)
    chosen = p.select(roots)
    if not chosen.size:
        return _REACH.empty_table()
    labels = p.labels(chosen)
    if per == "label":
        names = pc.unique(labels.drop_null())
        names = pc.take(names, pc.sort_indices(names))
        group_of = _ints(pc.index_in(labels, value_set=names))
        groups = len(names)
    else:
        group_of = np.arange(chosen.size)
        groups = chosen.size
    slot = np.full(p.orig.size + 1, -1, dtype=np.int64)
    slot[chosen] = group_of
    group = slot[p.of]
    agent = _positions(p.author[p.rows], _ints(profiles["agent_id"]))
    value = np.append(index, -1)[agent]
    keep = (group >= 0) & (value >= 0)
    pairs = np.unique(group[keep] * profiles.num_rows + agent[keep])  # an agent once
    adopters = np.bincount(pairs // profiles.num_rows * len(values)
                           + index[pairs % profiles.num_rows], minlength=groups * len(values))
    population = np.bincount(index[index >= 0], minlength=len(values))
    g = np.repeat(np.arange(groups), len(values))
    v = np.tile(np.arange(len(values)), groups)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = adopters / population[v]
    if per == "label":
        root = pa.nulls(g.size, pa.int64())
        label = pc.take(names, pa.array(g, pa.int64()))
    else:
        root = pa.array(p.id[p.orig[chosen]][g], pa.int64())
        label = pc.take(labels, pa.array(g, pa.int64()))
    return _table({"root": root, "label": label,
                   "value": pa.array([values[i] for i in v.tolist()], pa.string()),
                   "adopters": adopters, "population": population[v], "share": share},
                  _REACH)


# -- echo chambers ----------------------------------------------------------------------------
_ECHO = _schema(step=pa.int32(), value=pa.string(), agents=pa.int64(),
                same_share=pa.float64(), expected=pa.float64(), ratio=pa.float64())


def echo_chamber(actions: pa.Table | None, profiles: pa.Table | None, aspect: str
                 ) -> pa.Table:
    """Per step × value of ``aspect`` (the homophily aspect, the one ``exposed_same``
    counts against): ``agents`` of that value who saw a feed (``exposed > 0``),
    ``same_share`` (their mean of ``exposed_same / exposed``), ``expected`` (the value's
    share of the population: the same-value share under random exposure) and ``ratio`` =
    same_share / expected. An agent with several rows in a step counts once (its first);
    agents without a profile are left out, and so are values nobody of which saw a feed.

    >>> echo_chamber(actions, profiles, "party").to_pylist()[0]      # doctest: +SKIP
    {'step': 0, 'value': 'left', 'agents': 480, 'same_share': 0.71, 'expected': 0.48,
     'ratio': 1.48}
    """
    profiles = _profiles(profiles)
    values, index = _values(profiles, aspect, "echo_chamber")
    if actions is None or not actions.num_rows or not values:
        return _ECHO.empty_table()
    exposed = _ints(actions["exposed"], 0)
    rows = np.flatnonzero(exposed > 0)
    agent = _positions(_ints(actions["agent_id"])[rows], _ints(profiles["agent_id"]))
    value = np.append(index, -1)[agent]
    rows, agent, value = rows[value >= 0], agent[value >= 0], value[value >= 0]
    if not rows.size:
        return _ECHO.empty_table()
    step = _ints(actions["step"], 0)[rows]
    low = int(step.min())
    width = int(step.max()) - low + 1
    key = (step - low) * profiles.num_rows + agent
    if key.size > 1 and not (key[1:] > key[:-1]).all():  # not plainly one row per agent
        _, first = np.unique(key, return_index=True)
        rows, step, value = rows[first], step[first], value[first]
    same = _ints(actions["exposed_same"], 0)[rows] / exposed[rows]
    cell = (step - low) * len(values) + value
    agents = np.bincount(cell, minlength=width * len(values))
    total = np.bincount(cell, weights=same, minlength=width * len(values))
    population = np.bincount(index[index >= 0], minlength=len(values))
    expected = population / population.sum()
    shown = np.flatnonzero(agents)
    v = shown % len(values)
    mean = total[shown] / agents[shown]
    return _table({"step": shown // len(values) + low,
                   "value": pa.array([values[i] for i in v.tolist()], pa.string()),
                   "agents": agents[shown], "same_share": mean, "expected": expected[v],
                   "ratio": mean / expected[v]}, _ECHO)


# -- claim against correction -----------------------------------------------------------------
_RACE = _schema(step=pa.int32(), label=pa.string(), new=pa.int64(), adopters=pa.int64(),
                share=pa.float64())


def race(posts: pa.Table, labels: tuple[str, str] = RACE, *, population: int | None = None
         ) -> tuple[pa.Table, int | None]:
    """Per step (every step of the run) × label of ``labels``: ``new`` adopters (agents
    reposting a post of that label for the first time), cumulative ``adopters`` and
    ``share`` = adopters / ``population`` (null without it); and the step at which the
    second label overtakes the first: the first step its adopters exceed the first's after
    trailing them at an earlier step (None when it never does). No rows when no post
    carries either label.

    >>> table, overtakes = race(posts, population=1_000_000)         # doctest: +SKIP
    >>> overtakes
    6
    """
    if not posts.num_rows:
        return _RACE.empty_table(), None
    p = _Posts(posts)
    label = _ints(pc.index_in(pc.cast(p.table["label"], pa.string()),
                              value_set=pa.array(labels, pa.string())))
    if not (label >= 0).any():
        return _RACE.empty_table(), None
    rows = p.rows[label[p.rows] >= 0]
    lab, agent, step = label[rows], p.author[rows], p.step[rows]
    order = np.lexsort((step, agent, lab))
    lab, agent, step = lab[order], agent[order], step[order]
    first = np.ones(lab.size, dtype=bool)  # an agent's first repost of the label
    first[1:] = (lab[1:] != lab[:-1]) | (agent[1:] != agent[:-1])
    width = p.last - p.first + 1
    new = np.bincount(lab[first] * width + step[first] - p.first,
                      minlength=len(labels) * width).reshape(len(labels), width)
    adopters = np.cumsum(new, axis=1)
    behind = adopters[1] < adopters[0]
    trailed = np.cumsum(behind) > 0
    passes = np.flatnonzero((adopters[1] > adopters[0])[1:] & trailed[:-1]) + 1
    overtakes = int(passes[0]) + p.first if passes.size else None
    share = adopters / population if population else np.full(adopters.shape, np.nan)
    steps = np.arange(p.first, p.last + 1)
    return _table({"step": np.tile(steps, len(labels)),
                   "label": pa.array(np.repeat(labels, width).tolist(), pa.string()),
                   "new": new.ravel(), "adopters": adopters.ravel(),
                   "share": pa.array(share.ravel(), pa.float64(), from_pandas=True)},
                  _RACE), overtakes


# -- activity ---------------------------------------------------------------------------------
_ACTIVITY = _schema(step=pa.int32(), **{a: pa.int64() for a in ACTIONS},
                    exposed=pa.float64(), follows=pa.int64())


def activity(actions: pa.Table | None, follows: pa.Table | None = None) -> pa.Table:
    """Per step: the count of each action (``post``, ``repost``, ``like``, ``follow``,
    ``nothing``), the mean ``exposed`` (feed items seen) per action row, and ``follows``:
    rows of the follows table at that step (edges added)."""
    parts = [t for t in (actions, follows) if t is not None and t.num_rows]
    if not parts:
        return _ACTIVITY.empty_table()
    steps = np.concatenate([_ints(t["step"], 0) for t in parts])
    low = int(steps.min())
    width = int(steps.max()) - low + 1
    counts: dict[str, Any] = {a: np.zeros(width, np.int64) for a in ACTIONS}
    mean = np.full(width, np.nan)
    if actions is not None and actions.num_rows:
        actions = decoded(actions)
        step = _ints(actions["step"], 0) - low
        action = _ints(pc.index_in(pc.cast(actions["action"], pa.string()),
                                   value_set=pa.array(ACTIONS, pa.string())))
        known = action >= 0
        grid = np.bincount(action[known] * width + step[known],
                           minlength=len(ACTIONS) * width).reshape(len(ACTIONS), width)
        counts = dict(zip(ACTIONS, grid, strict=True))
        rows = np.bincount(step, minlength=width)
        seen = np.bincount(step, weights=_ints(actions["exposed"], 0), minlength=width)
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = np.where(rows > 0, seen / rows, np.nan)
    added = np.zeros(width, np.int64)
    if follows is not None and follows.num_rows:
        added = np.bincount(_ints(follows["step"], 0) - low, minlength=width)
    return _table({"step": np.arange(low, low + width), **counts,
                   "exposed": pa.array(mean, pa.float64(), from_pandas=True),
                   "follows": added}, _ACTIVITY)


# -- the report's tables -----------------------------------------------------------------------
def reach_columns(profiles: pa.Table | None, aspect: str | None = None) -> list[str]:
    """The profile columns to break reach down by: ``aspect`` if given, else those of 2 to
    12 distinct values."""
    profiles = _profiles(profiles)
    if aspect is not None:
        return [aspect]
    return [c for c in profiles.column_names if c != "agent_id"
            and 2 <= pc.count_distinct(profiles[c]).as_py() <= _MAX_VALUES]


def cascade_groups(table: pa.Table) -> list[tuple[str, pa.Table]]:
    """:func:`cascades`' rows by group: one per news label (``"news: claim"``; unlabelled
    news as ``"news"``), then ``"all posts"`` (every original, news included)."""
    if not table.num_rows:
        return []
    news = table.filter(pc.equal(table["kind"], "news"))
    out = []
    for label in sorted({x for x in news["label"].to_pylist() if x is not None}):
        out.append((f"news: {label}", news.filter(pc.equal(news["label"], label))))
    bare = news.filter(pc.is_null(news["label"]))
    if bare.num_rows:
        out.append(("news", bare))
    return [*out, ("all posts", table)]


def _summary(name: str, part: pa.Table) -> list[str]:
    size = np.asarray(part["size"].to_numpy(), dtype=np.int64)
    depth = np.asarray(part["depth"].to_numpy(), dtype=np.int64)
    return [name, num(part.num_rows), pct(float((size > 0).mean())),
            num(float(size.mean()), 2), f"{float(np.median(size)):g}", num(int(size.max())),
            num(float(depth.mean()), 2), num(int(depth.max()))]


def report_tables(posts: pa.Table, actions: pa.Table | None, follows: pa.Table | None,
                  profiles: pa.Table | None, *, aspect: str | None = None
                  ) -> list[dict[str, Any]]:
    """The report's tables (``{"title", "head", "rows"}``, cells as text): actions per
    step, cascades by label, each news post's cascade, the largest cascades, adoption of
    each news post per step, reach by ``aspect`` (without it: by each profile column of 2
    to 12 values), the echo chamber by ``aspect`` (only with it: ``exposed_same`` counts
    against the homophily aspect) and the claim-against-correction race; tables without
    rows are left out.

    >>> [t["title"] for t in report_tables(posts, actions, follows, profiles)]  # doctest: +SKIP
    ['Actions per step', 'Cascades', 'News cascades', ...]
    """
    profiles = _profiles(profiles)
    out = []
    out.append(report("Actions per step", ("step", *ACTIONS, "mean feed items seen",
                                            "follow edges added"),
                       [[str(r["step"]), *(num(r[a]) for a in ACTIONS),
                         num(r["exposed"], 1), num(r["follows"])]
                        for r in activity(actions, follows).to_pylist()]))
    made = cascades(posts)
    out.append(report("Cascades", ("posts", "n", "reposted", "mean size", "median size",
                                    "max size", "mean depth", "max depth"),
                       [_summary(name, part) for name, part in cascade_groups(made)]))
    head = ("root", "label", "author", "step", "size", "depth", "steps reached")

    def listed(rows: list[dict[str, Any]]) -> list[list[str]]:
        return [[str(r["root"]), r["label"] or "-", str(r["author"]), str(r["step"]),
                 num(r["size"]), str(r["depth"]), str(r["reach_steps"])] for r in rows]

    news = made.filter(pc.equal(made["kind"], "news")) if made.num_rows else made
    out.append(report("News cascades", head, listed(news.to_pylist())))
    top = made.take(pc.select_k_unstable(made, _TOP, [("size", "descending")])) \
        if made.num_rows else made
    top = top.filter(pc.greater(top["size"], 0)) if top.num_rows else top
    top = top.sort_by([("size", "descending"), ("root", "ascending")]) if top.num_rows else top
    out.append(report(f"Largest cascades (top {_TOP})", head, listed(top.to_pylist())))
    out.append(report("Adoption of the news per step", ("root", "label", "step",
                                                         "new reposts", "reposts so far"),
                       [[str(r["root"]), r["label"] or "-", str(r["step"]), num(r["new"]),
                         num(r["cumulative"])] for r in adoption(posts).to_pylist()]))
    for by in reach_columns(profiles, aspect):
        rows = reach_by(posts, profiles, by, per="label").to_pylist()
        out.append(report(f"Reach of the news by {by}", ("label", by, "reposters",
                                                          "population", "share reached"),
                           [[r["label"], r["value"], num(r["adopters"]),
                             num(r["population"]), pct(r["share"])] for r in rows]))
    if aspect is not None:
        out.append(report(f"Echo chamber by {aspect}",
                           ("step", aspect, "agents exposed", "same-value share",
                            "random exposure", "ratio"),
                           [[str(r["step"]), r["value"], num(r["agents"]),
                             pct(r["same_share"]), pct(r["expected"]), num(r["ratio"], 2)]
                            for r in echo_chamber(actions, profiles, aspect).to_pylist()]))
    raced, overtakes = race(posts, population=profiles.num_rows or None)
    if raced.num_rows and pc.sum(raced["adopters"]).as_py():
        per = {(r["step"], r["label"]): r for r in raced.to_pylist()}
        steps = sorted({s for s, _ in per})
        first, second = RACE
        when = "no overtaking" if overtakes is None else \
            f"{second} overtakes at step {overtakes}"
        out.append(report(f"{first.capitalize()} against {second} ({when})",
                           ("step", f"{first} reposters", "share", f"{second} reposters",
                            "share"),
                           [[str(s), num(per[s, first]["adopters"]),
                             pct(per[s, first]["share"]), num(per[s, second]["adopters"]),
                             pct(per[s, second]["share"])] for s in steps]))
    return [t for t in out if t["rows"]]
