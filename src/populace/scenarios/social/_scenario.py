"""The social network as a :class:`~populace.launch.Scenario`: one step per day.

Each step: seeded news posts appear, some agents are active, every active agent reads a
feed of posts shared by the people it follows (ranked by a recommender, computed per
worker), and acts (post, repost, like, follow, nothing). The central process keeps the
posts, the follows made and the counters, and writes the ``posts``, ``actions`` and
``follows`` tables; the graph itself is rebuilt from the seed (or the edge list) on resume.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field, model_validator

from populace._strict import StrictModel
from populace.config import key_text
from populace.core import ConfigError, PerWorker, derive_seed
from populace.launch import (
    ModelChoice,
    Run,
    RunFile,
    RunOptions,
    Scenario,
    ScenarioSettings,
    StudioView,
)
from populace.population import PopulationConfig, largest_remainder
from populace.results import atomic_write

from ._agents import Part, Person, Shard, StepData
from ._graph import Graph, degree_stats, homophily, load_edge_list
from ._policy import ACTIONS, FOLLOW, LIKE, POST, REPOST, ScriptedPolicy

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from populace.results import RunData

KINDS = ("news", "post", "repost")
NEWS, ORIGINAL, SHARED = range(3)


class GraphSettings(StrictModel):
    mean_degree: float = Field(20.0, gt=0, le=10_000, description="follows per agent")
    homophily: float = Field(0.0, ge=0, le=1, description="share of follows within the "
                             "agent's own value of `by`")
    by: str | None = Field(None, description="the population aspect of homophily, echo "
                           "chambers and reach")
    edges: str | None = Field(None, description="an edge list (CSV or Parquet: follower, "
                              "followee) instead of a generated graph")
    attractiveness: float = Field(1.0, gt=0, le=1e6, description="added to in-degrees when "
                                  "follows are drawn: higher, fewer and smaller hubs")


class FeedSettings(StrictModel):
    k: int = Field(10, ge=1, le=1000, description="posts in a feed")
    window: int = Field(3, ge=0, le=1000, description="steps a post stays in feeds")
    recommender: Literal["chronological", "popularity", "random"] = "popularity"


class ActivitySettings(StrictModel):
    share: float = Field(0.3, ge=0, le=1, description="agents active each step")
    by: str | None = None
    shares: dict[str, float] | None = Field(None, description="share per value of `by`")

    @model_validator(mode="after")
    def _pair(self) -> ActivitySettings:
        if (self.by is None) != (self.shares is None):
            raise ValueError("give by: and shares: together")
        for value, share in (self.shares or {}).items():
            if not 0 <= share <= 1:
                raise ValueError(f"shares.{value}: {share} is not within [0, 1]")
        return self


class ScriptedSettings(StrictModel):
    repost_base: float = Field(0.02, ge=0, le=1)
    per_share: float = Field(0.08, ge=0, le=1)
    similar: float = Field(0.05, ge=0, le=1)
    like: float = Field(0.10, ge=0, le=1)
    post: float = Field(0.05, ge=0, le=1)
    follow: float = Field(0.01, ge=0, le=1)

    @model_validator(mode="after")
    def _total(self) -> ScriptedSettings:
        if self.like + self.post + self.follow > 1:
            raise ValueError("like + post + follow is more than 1")
        return self


class News(StrictModel):
    step: int = Field(ge=1, strict=True)
    label: str = Field(min_length=1, max_length=64)
    text: str = Field(min_length=1)
    authors: int = Field(10, ge=1, strict=True)
    where: dict[str, str] | None = Field(None, description="authors' aspect values")


def _check_shares(active: ActivitySettings, people: PopulationConfig,
                  fail: Callable[[str, str], ConfigError]) -> None:
    """``active.shares`` names values of ``active.by`` only: a misspelt one would leave
    its agents at ``active.share`` without a word."""
    assert active.by is not None
    if people.aspects[active.by].kind == "numeric":
        raise fail("active.by", f"{active.by!r} is numeric; shares need a categorical aspect")
    values = people.values(active.by)
    for value in active.shares or {}:
        if value not in values:
            close = difflib.get_close_matches(value, values, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise fail(f"active.shares.{key_text(value)}", f"not a value of {active.by}{hint} "
                       f"(values: {', '.join(values)})")


def _pool(item: News, people: PopulationConfig | None, agents: int) -> int:
    """How many agents may author news ``item``: all of them, or those with its one
    ``where`` value of a plain categorical aspect (exact counts, known before sampling);
    other ``where`` forms are checked when the news appears."""
    where = item.where or {}
    if len(where) != 1 or people is None:
        return agents
    [(aspect, value)] = where.items()
    if aspect not in people.aspects or people.aspects[aspect].kind != "categorical":
        return agents
    shares = people.targets()[aspect]  # the sampler's own shares, in its order
    if value not in shares:
        return agents
    return int(largest_remainder(agents, list(shares.values()))[list(shares).index(value)])


def _finite(value: Any) -> Any:
    """JSON-safe: numpy numbers as Python ones, NaN (one group: no homophily index) as
    null."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


class Social(Scenario):
    """Posts spreading through a follower graph (``scenario: social``)."""

    name = "social"
    defaults = {"agents": 10_000, "steps": 10}
    shown = ("active", "posts", "reposts", "likes", "follows", "largest_cascade")

    class Settings(ScenarioSettings):
        graph: GraphSettings = GraphSettings()
        feed: FeedSettings = FeedSettings()
        active: Annotated[float, Field(strict=True, ge=0, le=1)] | ActivitySettings = 0.3
        policy: Literal["scripted", "dummy", "model"] = "scripted"
        scripted: ScriptedSettings = ScriptedSettings()
        model: str | None = None
        temperature: float | None = Field(None, ge=0, le=2)
        max_tokens: int | None = Field(None, ge=1, le=100_000)
        news: tuple[News, ...] = ()

    @classmethod
    def check(cls, options: RunOptions, settings: Social.Settings, source: str
              ) -> dict[str, Any]:
        def fail(key: str, message: str) -> ConfigError:
            return ConfigError(f"{source}: settings.{key}: {message}")

        people = options.population
        aspects = set(people.aspects) if people is not None else set()
        have = f"(aspects: {', '.join(sorted(aspects)) or 'none: add a population'})"
        if settings.graph.by is not None and settings.graph.by not in aspects:
            raise fail("graph.by", f"{settings.graph.by!r} is not an aspect of the population "
                       f"{have}")
        if settings.graph.homophily > 0 and settings.graph.by is None and \
                settings.graph.edges is None:
            raise fail("graph.homophily", "needs graph.by: (the aspect agents follow their "
                       "own kind by)")
        active = settings.active
        if isinstance(active, ActivitySettings) and active.by is not None:
            if active.by not in aspects or people is None:
                raise fail("active.by", f"{active.by!r} is not an aspect of the population "
                           f"{have}")
            _check_shares(active, people, fail)
        agents = options.agents
        most = (agents - 1) / 2  # agents follow earlier agents only: agent i at most i
        if settings.graph.edges is None and settings.graph.mean_degree > most:
            raise fail("graph.mean_degree", f"{settings.graph.mean_degree:g} follows per agent "
                       f"for {agents} agents (expected at most {most:g}: each agent follows "
                       "only agents that came before it)")
        steps = options.steps
        for i, item in enumerate(settings.news):
            if item.step > steps:
                raise fail(f"news.{i}.step", f"step {item.step} is after the last step "
                           f"({steps})")
            pool = _pool(item, people, agents)
            if item.authors > pool:
                who = "agents" + (" with " + ", ".join(f"{k}: {v}" for k, v in
                                                    item.where.items()) if item.where else "")
                raise fail(f"news.{i}.authors", f"{item.authors} authors for {pool} {who} "
                           f"(expected at most {pool})")
            for aspect, value in (item.where or {}).items():
                if aspect not in aspects or people is None:
                    raise fail(f"news.{i}.where.{aspect}", f"not an aspect of the "
                               f"population {have}")
                values = people.aspects[aspect].values
                if values is not None and value not in map(str, values):
                    raise fail(f"news.{i}.where", f"no agent has {item.where}: "
                               f"{aspect} is one of {', '.join(map(str, values))}")
        model = ModelChoice.of(options, settings, source).model \
            if settings.policy == "model" else None
        edges, graph = None, None
        if settings.graph.edges is not None:
            edges = Path(source).parent / settings.graph.edges  # as written, for messages
            if not edges.is_file():
                raise fail("graph.edges", f"no such file {edges}")
            # read now: a bad row is refused before a run directory exists
            graph = load_edge_list(edges, agents)
        return {"model": model, "edges": edges, "graph": graph}

    @classmethod
    def resolved(cls, run_file: RunFile) -> dict[str, Any]:
        """The generic form, the edge list's path made absolute (resumable from anywhere)."""
        data = run_file.options.model_dump(mode="json", exclude={"settings"})
        data["scenario"] = run_file.scenario_ref
        settings = run_file.settings.model_dump(mode="json")
        if run_file.config["edges"] is not None:
            settings["graph"]["edges"] = str(run_file.config["edges"].resolve())
        data["settings"] = settings
        return data

    # -- the world ---------------------------------------------------------------------------
    @classmethod
    def studio(cls, config: Mapping[str, Any]) -> StudioView:
        return StudioView(question="What did you read in your feed today?",
                          message="A post about the town's new park is going around.",
                          changes="settings.active=0.5")

    async def setup(self, run: Run) -> None:
        s = run.settings
        n = run.agents
        self.n = n
        people = run.population
        self.groups: np.ndarray | None = None
        self.group_values: list[str] = []
        if s.graph.by is not None and people is not None:
            codes = people.column(s.graph.by).combine_chunks().dictionary_encode()
            self.groups = codes.indices.to_numpy().astype(np.int16)
            self.group_values = [str(v) for v in codes.dictionary.to_pylist()]
        if run.config["graph"] is not None:
            graph = run.config["graph"]
        else:
            graph = Graph.generate(n, s.graph.mean_degree, run.rng("graph"),
                                   groups=self.groups, homophily=s.graph.homophily,
                                   attractiveness=s.graph.attractiveness)
        self.graph = graph
        if run.run_dir is not None:
            about: dict[str, Any] = {"degrees": degree_stats(graph)}
            if self.groups is not None:
                about["homophily"] = {"aspect": s.graph.by, **homophily(graph, self.groups)}
            atomic_write(run.run_dir.path / "graph.json",
                         (json.dumps(_finite(about), indent=2) + "\n").encode())
        model = run.config["model"] if s.policy == "model" else None
        self.people = await run.create(
            Person, init={"shard": PerWorker(Shard),
                          "models": run.models([model]) if model is not None else None})
        workers = self.people.workers
        self.blocks: list[tuple[int, int]] = []
        for w in np.unique(workers):
            members = np.flatnonzero(workers == w)
            lo, hi = int(members[0]), int(members[-1]) + 1
            if hi - lo != members.size:
                raise RuntimeError("social: a worker's agents are not one range of ids")
            self.blocks.append((lo, hi))
        self.blocks.sort()
        parts = [Part(lo, hi, graph.indptr[lo:hi + 1] - graph.indptr[lo],
                      graph.indices[graph.indptr[lo]:graph.indptr[hi]], self.groups)
                 for lo, hi in self.blocks]
        await run.collect(self._firsts().scatter(Person.install, parts))
        self._clear()

    def _firsts(self) -> Any:
        return self.people.select([lo for lo, _ in self.blocks])

    def _clear(self) -> None:
        """An empty store: no posts, no follows made."""
        self.count = 0
        cap = 1024
        self.author = np.zeros(cap, np.int64)
        self.root = np.zeros(cap, np.int64)
        self.parent = np.full(cap, -1, np.int64)
        self.step_of = np.zeros(cap, np.int32)
        self.kind = np.zeros(cap, np.int8)
        self.label = np.full(cap, -1, np.int16)
        self.likes = np.zeros(cap, np.int64)
        self.reposts = np.zeros(cap, np.int64)
        self.texts: dict[int, str] = {}
        self.labels: list[str] = []
        self.follower = np.zeros(0, np.int64)
        self.followee = np.zeros(0, np.int64)

    def _add(self, author: np.ndarray, root: np.ndarray | None, parent: np.ndarray | None,
             kind: int, label: np.ndarray | int, t: int) -> np.ndarray:
        """Append posts; their ids."""
        m = len(author)
        need = self.count + m
        if need > len(self.author):
            cap = max(need, 2 * len(self.author))
            for name in ("author", "root", "parent", "step_of", "kind", "label", "likes",
                         "reposts"):
                old = getattr(self, name)
                grown = np.full(cap, -1 if name in ("parent", "label") else 0, old.dtype)
                grown[:self.count] = old[:self.count]
                setattr(self, name, grown)
        ids = np.arange(self.count, need, dtype=np.int64)
        self.author[ids] = author
        self.root[ids] = ids if root is None else root
        self.parent[ids] = -1 if parent is None else parent
        self.step_of[ids] = t
        self.kind[ids] = kind
        self.label[ids] = label
        self.count = need
        return ids

    # -- a step ------------------------------------------------------------------------------
    def _news(self, run: Run, t: int) -> None:
        people = run.population
        for i, item in enumerate(run.settings.news):
            if item.step != t:
                continue
            mask = np.ones(self.n, dtype=bool)
            for aspect, value in (item.where or {}).items():
                assert people is not None
                column = people.column(aspect).to_numpy(zero_copy_only=False).astype(str)
                mask &= column == value
            pool = np.flatnonzero(mask)
            if not pool.size:
                raise ConfigError(f"{run.run_file.path}: settings.news.{i}.where: no agent has "
                                  f"{item.where} in this population")
            authors = np.sort(run.rng(f"news-{i}").choice(
                pool, size=min(item.authors, pool.size), replace=False))
            if item.label not in self.labels:
                self.labels.append(item.label)
            ids = self._add(authors, None, None, NEWS, self.labels.index(item.label), t)
            for post in ids.tolist():
                self.texts[post] = item.text

    def _active(self, run: Run) -> np.ndarray:
        active = run.settings.active
        draw = run.rng("active").random(self.n)
        if isinstance(active, float | int):
            return draw < float(active)
        share = np.full(self.n, active.share)
        if active.by is not None and run.population is not None:
            column = run.population.column(active.by).to_numpy(zero_copy_only=False).astype(str)
            for value, p in (active.shares or {}).items():
                share[column == value] = p
        return draw < share

    def _data(self, run: Run, t: int, active: np.ndarray, lo: int, hi: int) -> StepData:
        s = run.settings
        recent = np.flatnonzero(self.step_of[:self.count] >= t - s.feed.window)
        roots = self.root[recent]
        mine = (self.follower >= lo) & (self.follower < hi)
        # every root its agents already posted or reposted, whenever: never shared again
        made = np.flatnonzero((self.author[:self.count] >= lo) & (self.author[:self.count] < hi))
        shared = np.unique((self.author[made] << 32) | self.root[made])
        texts = {int(r): self.texts.get(int(r), f"A post by @{self.author[r]}.")
                 for r in np.unique(roots)} if s.policy == "model" else {}
        return StepData(
            t=t, seed=derive_seed(run.seed, t), active=lo + np.flatnonzero(active[lo:hi]),
            author=self.author[recent], post=recent, root=roots, step=self.step_of[recent],
            popularity=(1 + self.likes[roots] + self.reposts[roots]).astype(np.float32),
            origin=self.author[roots],
            follower=self.follower[mine], followee=self.followee[mine], shared=shared,
            k=s.feed.k, recommender=s.feed.recommender, texts=texts)

    async def step(self, run: Run, t: int) -> None:
        s = run.settings
        first = self.count
        self._news(run, t)
        active = self._active(run)
        data = [self._data(run, t, active, lo, hi) for lo, hi in self.blocks]
        await run.collect(self._firsts().scatter(Person.prepare, data))
        texts: list[str | None] | None = None
        if s.policy == "model":
            who = np.flatnonzero(active)
            results = await run.collect(
                self.people.select(who).map(Person.act, t, s.temperature, s.max_tokens),
                on_error="return")
            ok = [r for r in results if not isinstance(r, BaseException)]
            agent = who[[i for i, r in enumerate(results) if not isinstance(r, BaseException)]]
            action = np.array([r[0] for r in ok], np.int8)
            target = np.array([-1 if r[1] is None else r[1] for r in ok], np.int64)
            texts = [r[2] for r in ok]
            exposed = np.array([r[3] for r in ok], np.int16)
            same = np.array([r[4] for r in ok], np.int16)
            raws: list[str] | None = [r[5] for r in ok]
            if ok and not any(_readable(r) for r in raws or ()):
                reply = " ".join(str(raws[0] if raws else "").split())
                run.warn(f"none of the {len(ok):,} model replies could be read as an action "
                         f"(each counts as 'nothing'; first reply: {reply[:80]!r}"
                         f"{'…' if len(reply) > 80 else ''})")
        else:
            params = ScriptedPolicy(**s.scripted.model_dump())
            parts = await run.collect(self._firsts().map(Person.decide_offline, s.policy, params))
            agent, action, target, exposed, same = (np.concatenate([p[i] for p in parts])
                                                    for i in range(5))
            raws = None
        self._apply(run, t, agent, action, target, texts)
        self._record(run, t, first, agent, action, target, exposed, same, raws)
        self._metrics(run, active, action)

    def _apply(self, run: Run, t: int, agent: np.ndarray, action: np.ndarray,
               target: np.ndarray, texts: list[str | None] | None) -> None:
        posting = action == POST
        ids = self._add(agent[posting], None, None, ORIGINAL, -1, t)
        if texts is not None:
            for post, text in zip(ids.tolist(), np.asarray(texts, dtype=object)[posting],
                                  strict=True):
                if text:
                    self.texts[post] = text
        sharing = action == REPOST
        via = target[sharing]
        roots = self.root[via]
        self._add(agent[sharing], roots, via, SHARED, self.label[roots], t)
        np.add.at(self.reposts, roots, 1)
        liking = action == LIKE
        np.add.at(self.likes, target[liking], 1)
        following = (action == FOLLOW) & (target != agent)
        new = self._new_follows(agent[following], target[following])
        self.follower = np.concatenate([self.follower, new[0]])
        self.followee = np.concatenate([self.followee, new[1]])
        self._follows = new

    def _new_follows(self, follower: np.ndarray, followee: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
        """The follows that are new: not in the graph, not made before."""
        g = self.graph
        known = set(((self.follower << 32) | self.followee).tolist())
        keep = []
        for a, b in zip(follower.tolist(), followee.tolist(), strict=True):
            row = g.indices[g.indptr[a]:g.indptr[a + 1]]
            key = (a << 32) | b
            if key in known:
                continue
            at = np.searchsorted(row, b)
            if at < row.size and row[at] == b:
                continue
            known.add(key)
            keep.append((a, b))
        if not keep:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        pairs = np.array(keep, dtype=np.int64)
        return pairs[:, 0], pairs[:, 1]

    def _record(self, run: Run, t: int, first: int, agent: np.ndarray, action: np.ndarray,
                target: np.ndarray, exposed: np.ndarray, same: np.ndarray,
                raws: list[str] | None) -> None:
        ids = np.arange(first, self.count, dtype=np.int64)
        labels = self.label[ids]
        kinds = pa.DictionaryArray.from_arrays(pa.array(self.kind[ids].astype(np.int32)),
                                               pa.array(KINDS)).cast(pa.string())
        label = pa.DictionaryArray.from_arrays(
            pa.array(labels.astype(np.int32), mask=labels < 0),
            pa.array(self.labels or [""], pa.string())).cast(pa.string())
        text = pa.array([self.texts.get(i) for i in ids.tolist()], pa.string())
        parent = self.parent[ids]
        run.record("posts", {
            "post_id": ids, "author": self.author[ids], "kind": kinds,
            "root": self.root[ids], "parent": pa.array(parent, mask=parent < 0),
            "label": label, "text": text})
        actions = pa.DictionaryArray.from_arrays(pa.array(action.astype(np.int32)),
                                                 pa.array(ACTIONS)).cast(pa.string())
        rows: dict[str, Any] = {
            "agent_id": agent.astype(np.int64), "action": actions,
            "target": pa.array(target, mask=target < 0),
            "exposed": exposed.astype(np.int16), "exposed_same": same.astype(np.int16)}
        if raws is not None:
            rows["raw"] = pa.array(raws, pa.string())
        run.record("actions", rows)
        follower, followee = self._follows
        run.record("follows", {"follower": follower, "followee": followee})

    def _metrics(self, run: Run, active: np.ndarray, action: np.ndarray) -> None:
        counts = np.bincount(action, minlength=len(ACTIONS))
        run.metric("active", int(active.sum()))
        run.metric("posts", int(counts[POST]))
        run.metric("reposts", int(counts[REPOST]))
        run.metric("likes", int(counts[LIKE]))
        run.metric("follows", len(self._follows[0]))
        run.metric("largest_cascade", int(self.reposts[:self.count].max(initial=0)))
        if self.labels:
            news = self.kind[:self.count] == NEWS
            reach = {}
            for code, label in enumerate(self.labels):
                roots = news & (self.label[:self.count] == code)
                reach[label] = int(self.reposts[:self.count][roots].sum())
            run.metric("news_reposts", reach)

    # -- resume ------------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        c = self.count
        return {"count": c, "author": self.author[:c], "root": self.root[:c],
                "parent": self.parent[:c], "step": self.step_of[:c], "kind": self.kind[:c],
                "label": self.label[:c], "likes": self.likes[:c],
                "reposts": self.reposts[:c], "texts": self.texts, "labels": self.labels,
                "follower": self.follower, "followee": self.followee}

    def set_state(self, state: dict[str, Any]) -> None:
        self._clear()
        c = state["count"]
        self._add(state["author"], state["root"], state["parent"], 0, state["label"], 0)
        self.step_of[:c] = state["step"]
        self.kind[:c] = state["kind"]
        self.likes[:c] = state["likes"]
        self.reposts[:c] = state["reposts"]
        self.texts = dict(state["texts"])
        self.labels = list(state["labels"])
        self.follower, self.followee = state["follower"], state["followee"]

    # -- the report --------------------------------------------------------------------------
    def _inputs(self, run: RunData) -> tuple[Any, ...] | None:
        if "posts" not in run.tables:
            return None
        by = ((run.config.get("settings") or {}).get("graph") or {}).get("by")
        follows = run.table("follows") if "follows" in run.tables else None
        return (run.table("posts"), run.table("actions"), follows, run.profiles, by)

    def figures(self, run: RunData) -> dict[str, Figure]:
        from ._figures import figures

        inputs = self._inputs(run)
        if inputs is None:
            return {}
        *tables, by = inputs
        return figures(*tables, aspect=by)

    def tables(self, run: RunData) -> list[dict[str, Any]]:
        from ._analysis import report_tables

        inputs = self._inputs(run)
        if inputs is None:
            return []
        *tables, by = inputs
        return report_tables(*tables, aspect=by)


def _readable(reply: str | None) -> bool:
    """Does a model's reply hold a JSON object naming an action (what ``parse_action``
    reads; an unreadable reply is taken as ``nothing``)?"""
    from ._policy import _OBJECT

    found = _OBJECT.search(reply or "")
    try:
        data = json.loads(found.group(0)) if found else None
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and data.get("action") in ACTIONS
