"""The social scenario's analysis and figures, on posts and actions tables built by hand."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from populace.core import ConfigError
from populace.scenarios.social._analysis import (
    activity,
    adoption,
    cascades,
    ccdf,
    echo_chamber,
    race,
    reach_by,
    report_tables,
)
from populace.scenarios.social._figures import figures

POSTS = pa.schema([
    ("step", pa.int32()), ("post_id", pa.int64()), ("author", pa.int64()),
    ("kind", pa.string()), ("root", pa.int64()), ("parent", pa.int64()),
    ("label", pa.string()), ("text", pa.string()),
])
ACTIONS = pa.schema([
    ("step", pa.int32()), ("agent_id", pa.int64()), ("action", pa.string()),
    ("target", pa.int64()), ("exposed", pa.int16()), ("exposed_same", pa.int16()),
])
FOLLOWS = pa.schema([("step", pa.int32()), ("follower", pa.int64()), ("followee", pa.int64())])


def posts_table(rows: list[dict[str, Any]]) -> pa.Table:
    full = [{"parent": None, "label": None, "text": "", "author": 0, **r} for r in rows]
    for r in full:
        r.setdefault("root", r["post_id"])
    return pa.Table.from_pylist(full, schema=POSTS)


def news(post_id: int, step: int = 0, label: str | None = "claim", author: int = 0
         ) -> dict[str, Any]:
    return {"step": step, "post_id": post_id, "author": author, "kind": "news",
            "label": label}


def post(post_id: int, step: int = 0, author: int = 0) -> dict[str, Any]:
    return {"step": step, "post_id": post_id, "author": author, "kind": "post"}


def repost(post_id: int, parent: int, root: int, step: int, author: int = 0,
           label: str | None = None) -> dict[str, Any]:
    return {"step": step, "post_id": post_id, "author": author, "kind": "repost",
            "root": root, "parent": parent, "label": label}


def actions_table(rows: list[tuple[int, int, str, int, int]]) -> pa.Table:
    """Rows of (step, agent_id, action, exposed, exposed_same)."""
    return pa.Table.from_pylist([{"step": s, "agent_id": a, "action": act, "target": None,
                                  "exposed": e, "exposed_same": same}
                                 for s, a, act, e, same in rows], schema=ACTIONS)


def profiles_table(parties: Mapping[int, str | None], encode: bool = True) -> pa.Table:
    party = pa.array(list(parties.values()), pa.string())
    return pa.table({"agent_id": pa.array(list(parties), pa.int64()),
                     "party": party.dictionary_encode() if encode else party})


# -- cascades ----------------------------------------------------------------------------------
def forest(seed: int) -> list[dict[str, Any]]:
    """A random forest of posts: originals, then reposts of random earlier posts (often the
    latest, for deep chains), rows shuffled; odd seeds use sparse random post ids."""
    rng = random.Random(seed)
    ids = iter(rng.sample(range(10**12), 2000) if seed % 2 else range(2000))
    rows, nodes = [], []
    for _ in range(rng.randint(1, 15)):
        kind = rng.choice(["news", "post"])
        label = rng.choice(["claim", "correction", None]) if kind == "news" else None
        pid, step = next(ids), rng.randint(0, 3)
        rows.append({"step": step, "post_id": pid, "author": rng.randrange(40), "kind": kind,
                     "root": pid, "parent": None, "label": label})
        nodes.append((pid, step, pid, label))
    for _ in range(rng.randint(0, 400)):
        parent, step, root, label = nodes[-1] if rng.random() < 0.4 else rng.choice(nodes)
        pid, step = next(ids), step + rng.randint(0, 2)
        rows.append({"step": step, "post_id": pid, "author": rng.randrange(40),
                     "kind": "repost", "root": root, "parent": parent, "label": label})
        nodes.append((pid, step, root, label))
    rng.shuffle(rows)
    return rows


def walk(rows: list[dict[str, Any]]) -> dict[int, tuple[int, int, int]]:
    """Per original, by walking its tree in Python: (size, depth, last step − step)."""
    children: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["kind"] == "repost":
            children[r["parent"]].append(r)
    out = {}
    for r in rows:
        if r["kind"] == "repost":
            continue
        size, depth, last = 0, 0, r["step"]
        stack = [(r["post_id"], 0)]
        while stack:
            pid, d = stack.pop()
            depth = max(depth, d)
            for c in children[pid]:
                size += 1
                last = max(last, c["step"])
                stack.append((c["post_id"], d + 1))
        out[r["post_id"]] = (size, depth, last - r["step"])
    return out


@pytest.mark.parametrize("seed", range(8))
def test_cascades_match_a_tree_walk(seed: int) -> None:
    rows = forest(seed)
    made = cascades(posts_table(rows))
    expected = walk(rows)
    got = {r["root"]: (r["size"], r["depth"], r["reach_steps"]) for r in made.to_pylist()}
    assert got == expected
    originals = [r for r in rows if r["kind"] != "repost"]
    assert made["root"].to_pylist() == [r["post_id"] for r in originals]  # table order
    assert made["label"].to_pylist() == [r["label"] for r in originals]
    assert made["author"].to_pylist() == [r["author"] for r in originals]
    assert made.schema.field("depth").type == pa.int32()


def test_cascades_by_hand() -> None:
    posts = posts_table([
        news(10, label="claim"), post(20, step=1),
        repost(11, 10, 10, step=1), repost(12, 11, 10, step=2), repost(13, 12, 10, step=5),
        repost(14, 10, 10, step=2),  # a second branch
        repost(21, 20, 20, step=1),
        repost(99, 98, 97, step=3),  # its parent and root are not in the table
    ])
    got = {r["root"]: r for r in cascades(posts).to_pylist()}
    assert set(got) == {10, 20}
    assert (got[10]["size"], got[10]["depth"], got[10]["reach_steps"]) == (4, 3, 5)
    assert (got[20]["size"], got[20]["depth"], got[20]["reach_steps"]) == (1, 1, 0)
    assert got[10]["label"] == "claim" and got[10]["kind"] == "news"
    assert got[20]["label"] is None and got[20]["kind"] == "post"


def test_cascades_read_dictionary_encoded_kinds() -> None:
    posts = posts_table([news(1), repost(2, 1, 1, step=1)])
    i = posts.schema.get_field_index("kind")
    posts = posts.set_column(i, "kind", posts["kind"].dictionary_encode())
    assert cascades(posts)["size"].to_pylist() == [1]


@pytest.mark.parametrize("seed", range(4))
def test_ccdf_against_a_direct_count(seed: int) -> None:
    rng = np.random.default_rng(seed)
    sizes = rng.zipf(2.0, size=300)
    x, p = ccdf(sizes)
    assert x.tolist() == sorted(set(sizes.tolist()))
    assert p.tolist() == pytest.approx([float((sizes >= v).mean()) for v in x])
    assert p[0] == 1.0 and np.all(np.diff(p) < 0)
    xa, pa_ = ccdf(pa.chunked_array([pa.array(sizes[:100]), pa.array([None], pa.int64()),
                                     pa.array(sizes[100:])]))
    assert xa.tolist() == x.tolist() and pa_.tolist() == pytest.approx(p.tolist())


def test_ccdf_of_nothing() -> None:
    x, p = ccdf([])
    assert x.size == 0 and p.size == 0


# -- adoption and reach ------------------------------------------------------------------------
ADOPTION_POSTS = [
    news(1, step=0, label="claim"), news(2, step=2, label="correction"), post(3, step=0),
    repost(10, 1, 1, step=0, label="claim"), repost(11, 10, 1, step=1, label="claim"),
    repost(12, 1, 1, step=1, label="claim"), repost(13, 11, 1, step=3, label="claim"),
    repost(20, 2, 2, step=2, label="correction"), repost(21, 20, 2, step=4,
                                                         label="correction"),
    repost(30, 3, 3, step=4),
]


def test_adoption_counts_and_cumulates() -> None:
    rows = adoption(posts_table(ADOPTION_POSTS)).to_pylist()
    one = [r for r in rows if r["root"] == 1]
    two = [r for r in rows if r["root"] == 2]
    assert {r["root"] for r in rows} == {1, 2}  # the news only
    assert [r["step"] for r in one] == [0, 1, 2, 3, 4]
    assert [r["new"] for r in one] == [1, 2, 0, 1, 0]
    assert [r["cumulative"] for r in one] == [1, 3, 3, 4, 4]
    assert [r["step"] for r in two] == [2, 3, 4]  # from the step it was posted
    assert [r["cumulative"] for r in two] == [1, 1, 2]
    assert {r["label"] for r in two} == {"correction"}
    chosen = adoption(posts_table(ADOPTION_POSTS), roots=[3, 777]).to_pylist()
    assert [(r["root"], r["step"], r["new"], r["cumulative"]) for r in chosen] == [
        (3, s, int(s == 4), int(s == 4)) for s in range(5)]


PARTIES = {1: "left", 2: "left", 3: "left", 4: "right", 5: "right", 6: None}


def reach_posts() -> pa.Table:
    return posts_table([
        news(1, label="claim"), news(2, label="correction"), news(3, label="claim"),
        repost(10, 1, 1, 1, author=1), repost(11, 10, 1, 2, author=1),  # agent 1 twice
        repost(12, 1, 1, 1, author=4), repost(13, 1, 1, 1, author=6),  # 6: no party
        repost(14, 1, 1, 1, author=42),  # no profile
        repost(20, 2, 2, 1, author=2), repost(30, 3, 3, 1, author=1),
        repost(31, 3, 3, 2, author=5),
    ])


def test_reach_by_counts_distinct_adopters_per_value() -> None:
    rows = reach_by(reach_posts(), profiles_table(PARTIES), "party").to_pylist()
    got = {(r["root"], r["value"]): (r["adopters"], r["population"], r["share"]) for r in rows}
    assert got == {(1, "left"): (1, 3, pytest.approx(1 / 3)), (1, "right"): (1, 2, 0.5),
                   (2, "left"): (1, 3, pytest.approx(1 / 3)), (2, "right"): (0, 2, 0.0),
                   (3, "left"): (1, 3, pytest.approx(1 / 3)), (3, "right"): (1, 2, 0.5)}
    assert {r["label"] for r in rows if r["root"] == 2} == {"correction"}


def test_reach_by_label_pools_the_roots() -> None:
    rows = reach_by(reach_posts(), profiles_table(PARTIES, encode=False), "party",
                    per="label").to_pylist()
    got = {(r["label"], r["value"]): (r["adopters"], r["share"]) for r in rows}
    # agent 1 reposted both claims: once; agents 4 and 5 each one claim
    assert got == {("claim", "left"): (1, pytest.approx(1 / 3)), ("claim", "right"): (2, 1.0),
                   ("correction", "left"): (1, pytest.approx(1 / 3)),
                   ("correction", "right"): (0, 0.0)}
    assert all(r["root"] is None for r in rows)
    only = reach_by(reach_posts(), profiles_table(PARTIES), "party", roots=[2]).to_pylist()
    assert {r["root"] for r in only} == {2}


def test_reach_by_names_a_missing_aspect() -> None:
    with pytest.raises(ConfigError, match="'age' is not a profile column"):
        reach_by(reach_posts(), profiles_table(PARTIES), "age")


# -- echo chambers -----------------------------------------------------------------------------
def test_echo_chamber_against_a_hand_computation() -> None:
    profiles = profiles_table({1: "left", 2: "left", 3: "right", 4: "right", 5: "right"})
    actions = actions_table([
        (0, 1, "like", 4, 3), (0, 2, "nothing", 2, 2), (0, 3, "post", 5, 1),
        (0, 4, "nothing", 0, 0),  # saw nothing: left out
        (0, 1, "follow", 4, 3),  # agent 1's second row this step: counts once
        (0, 77, "like", 3, 3),  # no profile
        (1, 4, "repost", 10, 5), (1, 5, "like", 4, 4),
    ])
    rows = echo_chamber(actions, profiles, "party").to_pylist()
    got = {(r["step"], r["value"]): r for r in rows}
    assert set(got) == {(0, "left"), (0, "right"), (1, "right")}  # nobody left saw step 1
    left0 = (3 / 4 + 2 / 2) / 2
    assert got[0, "left"]["agents"] == 2
    assert got[0, "left"]["same_share"] == pytest.approx(left0)
    assert got[0, "left"]["expected"] == pytest.approx(2 / 5)
    assert got[0, "left"]["ratio"] == pytest.approx(left0 / (2 / 5))
    assert got[0, "right"]["agents"] == 1
    assert got[0, "right"]["same_share"] == pytest.approx(1 / 5)
    assert got[1, "right"]["same_share"] == pytest.approx((5 / 10 + 4 / 4) / 2)
    assert got[1, "right"]["expected"] == pytest.approx(3 / 5)


# -- claim against correction ------------------------------------------------------------------
def race_posts(later: bool = True) -> pa.Table:
    c, k = "claim", "correction"
    return posts_table([
        news(1, label=c), news(2, step=1 if later else 0, label=k),
        repost(10, 1, 1, 0, author=1, label=c), repost(11, 1, 1, 0, author=2, label=c),
        repost(12, 1, 1, 1, author=3, label=c), repost(13, 10, 1, 2, author=1, label=c),
        repost(20, 2, 2, 1 if later else 0, author=4, label=k),
        repost(21, 2, 2, 2, author=5, label=k), repost(22, 20, 2, 2, author=6, label=k),
        repost(23, 2, 2, 3, author=7, label=k), repost(24, 2, 2, 3, author=4, label=k),
        post(3, step=4),
    ])


def test_race_finds_the_overtaking_step() -> None:
    table, overtakes = race(race_posts(), population=10)
    rows = {(r["step"], r["label"]): r for r in table.to_pylist()}
    assert [rows[s, "claim"]["adopters"] for s in range(5)] == [2, 3, 3, 3, 3]
    assert [rows[s, "correction"]["adopters"] for s in range(5)] == [0, 1, 3, 4, 4]
    assert [rows[s, "correction"]["new"] for s in range(5)] == [0, 1, 2, 1, 0]
    assert rows[3, "correction"]["share"] == pytest.approx(0.4)
    assert overtakes == 3  # tied at step 2, ahead at 3
    _, never = race(race_posts().filter(pc.not_equal(race_posts()["label"], "correction")))
    assert never is None


def test_race_needs_the_second_to_trail_first() -> None:
    posts = posts_table([
        news(1, label="claim"), news(2, label="correction"),
        repost(10, 2, 2, 0, author=1, label="correction"),
        repost(11, 1, 1, 1, author=2, label="claim"),
        repost(12, 2, 2, 1, author=3, label="correction"),
    ])
    table, overtakes = race(posts)
    assert overtakes is None  # ahead from the start: nothing overtaken
    assert all(math_isnan(r["share"]) for r in table.to_pylist())  # no population


def math_isnan(value: float | None) -> bool:
    return value is None or value != value


# -- activity, report tables and figures -------------------------------------------------------
def run_tables() -> tuple[pa.Table, pa.Table, pa.Table, pa.Table]:
    rng = random.Random(5)
    parties = {a: rng.choice(["left", "right"]) for a in range(1, 11)}
    actions = actions_table([(s, a, rng.choice(["post", "repost", "like", "follow",
                                                "nothing"]), 4, rng.randint(0, 4))
                             for s in range(5) for a in parties])
    follows = pa.Table.from_pylist([{"step": 1, "follower": 1, "followee": 2},
                                    {"step": 3, "follower": 2, "followee": 5}],
                                   schema=FOLLOWS)
    return race_posts(), actions, follows, profiles_table(parties)


def test_activity_counts_per_step() -> None:
    _, actions, follows, _ = run_tables()
    rows = activity(actions, follows).to_pylist()
    assert [r["step"] for r in rows] == list(range(5))
    assert all(sum(r[a] for a in ("post", "repost", "like", "follow", "nothing")) == 10
               for r in rows)
    assert [r["follows"] for r in rows] == [0, 1, 0, 1, 0]
    assert rows[0]["exposed"] == pytest.approx(4.0)


def test_report_tables_are_text() -> None:
    posts, actions, follows, profiles = run_tables()
    tables = report_tables(posts, actions, follows, profiles, aspect="party")
    titles = [t["title"] for t in tables]
    assert titles == ["Actions per step", "Cascades", "News cascades",
                      "Largest cascades (top 20)", "Adoption of the news per step",
                      "Reach of the news by party", "Echo chamber by party",
                      "Claim against correction (correction overtakes at step 3)"]
    for t in tables:
        assert t["rows"] and all(len(r) == len(t["head"]) for r in t["rows"])
        assert all(isinstance(c, str) for r in t["rows"] for c in r)
    cascades_rows = {r[0]: r for r in tables[1]["rows"]}
    assert set(cascades_rows) == {"news: claim", "news: correction", "all posts"}
    assert cascades_rows["all posts"][1] == "3"
    no_aspect = [t["title"] for t in report_tables(posts, actions, follows, profiles)]
    assert "Reach of the news by party" in no_aspect  # two values: broken down anyway
    assert not any(t.startswith("Echo chamber") for t in no_aspect)


def test_figures_draw_and_save(tmp_path: Path) -> None:
    posts, actions, follows, profiles = run_tables()
    drawn = figures(posts, actions, follows, profiles, aspect="party")
    assert set(drawn) == {"cascades", "adoption", "reach_by_party", "echo_chamber", "race"}
    for name, fig in drawn.items():
        assert fig.axes and all(ax.has_data() for ax in fig.axes)
        fig.savefig(tmp_path / f"{name}.png")
        assert (tmp_path / f"{name}.png").stat().st_size > 1000
        fig.clear()
    assert set(figures(posts, actions, follows, None)) == {"cascades", "adoption", "race"}


def test_empty_tables_give_empty_results() -> None:
    posts, actions, follows = POSTS.empty_table(), ACTIONS.empty_table(), FOLLOWS.empty_table()
    profiles = profiles_table(PARTIES)
    assert cascades(posts).num_rows == 0 and "depth" in cascades(posts).column_names
    assert adoption(posts).num_rows == 0
    assert reach_by(posts, profiles, "party").num_rows == 0
    assert echo_chamber(actions, profiles, "party").num_rows == 0
    assert race(posts) == (race(posts)[0], None) and race(posts)[0].num_rows == 0
    assert activity(actions, follows).num_rows == 0
    assert report_tables(posts, actions, follows, profiles, aspect="party") == []
    assert report_tables(posts, None, None, None) == []
    nobody = profiles.slice(0, 0)  # profiles with the aspect, but no rows
    assert reach_by(reach_posts(), nobody, "party").num_rows == 0
    assert echo_chamber(actions_table([(0, 1, "like", 2, 1)]), nobody, "party").num_rows == 0
    assert figures(posts, actions, follows, profiles, aspect="party") == {}
    unshared = posts_table([post(1), post(2, step=1)])  # posts, none reposted, no news
    assert figures(unshared, actions, follows, profiles) == {}
    assert adoption(unshared).num_rows == 0
    unread = posts_table([news(1), news(2, label="correction"), post(3)])  # nobody reposts
    assert figures(unread, actions, follows, profiles, aspect="party") == {}
    assert [t["title"] for t in report_tables(unread, None, None, None)] == [
        "Cascades", "News cascades", "Adoption of the news per step"]


# -- scale -------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_million_agents() -> None:
    rng = np.random.default_rng(0)
    agents, steps, per_step = 1_000_000, 10, 300_000
    origin = np.arange(100_000)
    post_id, parent, root = [origin], [np.full(origin.size, -1)], [origin]
    for _ in range(1, steps):
        pick = rng.integers(0, sum(p.size for p in post_id), per_step)
        ids, roots = np.concatenate(post_id), np.concatenate(root)
        post_id.append(np.arange(ids.size, ids.size + per_step))
        parent.append(ids[pick])
        root.append(roots[pick])
    n = sum(p.size for p in post_id)
    par = np.concatenate(parent)
    step = np.concatenate([np.full(p.size, i, np.int32) for i, p in enumerate(post_id)])
    kind = np.where(par < 0, "post", "repost")
    kind[:4] = "news"
    posts = pa.table({"step": step, "post_id": np.concatenate(post_id),
                      "author": rng.integers(0, agents, n), "kind": kind,
                      "root": np.concatenate(root), "parent": pa.array(par, mask=par < 0),
                      "label": pa.array(np.full(n, "claim"), mask=np.concatenate(root) >= 4),
                      "text": pa.nulls(n, pa.string())})
    exposed = rng.integers(0, 20, agents * steps).astype(np.int16)
    actions = pa.table({"step": np.repeat(np.arange(steps, dtype=np.int32), agents),
                        "agent_id": np.tile(np.arange(agents), steps),
                        "action": pa.array(np.full(agents * steps, "like")),
                        "target": pa.nulls(agents * steps, pa.int64()), "exposed": exposed,
                        "exposed_same": exposed // 2})
    profiles = pa.table({"agent_id": np.arange(agents),
                         "party": rng.choice(["left", "right"], agents)})
    tables = report_tables(posts, actions, FOLLOWS.empty_table(), profiles, aspect="party")
    assert pc.sum(cascades(posts)["size"]).as_py() == (steps - 1) * per_step
    assert tables
