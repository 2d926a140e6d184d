"""One environment split over several services: ``serve(env, sim, shards=N)``.

Every key goes to one shard, by a hash of its name, so that one service process is not the
ceiling when many workers write at once (on a cluster, each shard is an actor the backend
places). Each shard holds the whole tree of environments but only its own keys; a key and
the keys of the same name in other environments of the tree (which shadow one another)
are on the same shard, so fall-through reads and per-key order work within a shard as
they do in one service. What spans keys is split and joined again here:

- a batch of operations becomes one batch per shard (each shard's in the batch's order);
- a many-key operation over a list of keys becomes one per shard; an unknown key changes
  nothing on its own shard, but keys on other shards are applied (with one shard, nothing
  at all changes);
- ``query_prefix`` and ``query_where`` ask every shard and join the answers;
- listeners on a key go to its shard, others to every shard; statistics and state are
  joined (``fetch_state`` is the tree as one service would hold it).
"""

from __future__ import annotations

import asyncio
import functools
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from populace.core import Placeholder, ServiceHandle

from ._env import Env, EnvEvent, EnvStats, EventKind
from ._many import KeyList, as_keys, per_key
from ._ops import KEYLESS, MANY, Op, Reply
from ._remote import RemoteEnvService, ServiceActor
from ._service import ServiceStats


def shard_of(key: str, shards: int) -> int:
    """The shard holding ``key`` (stable across processes and runs)."""
    return zlib.crc32(key.encode()) % shards


def split_state(state: dict[str, Any], shards: int) -> list[dict[str, Any]]:
    """:meth:`Env.get_state` of a tree as one state per shard: every environment in each,
    each key in its shard's."""
    parts: list[dict[str, Any]] = [
        {"name": state["name"], "data": {}, "owners": {}, "children": {}}
        for _ in range(shards)]
    owners = state.get("owners") or {}
    for key, value in state["data"].items():
        part = parts[shard_of(key, shards)]
        part["data"][key] = value
        if key in owners:
            part["owners"][key] = owners[key]
    for name, child in (state.get("children") or {}).items():
        for part, sub in zip(parts, split_state(child, shards), strict=True):
            part["children"][name] = sub
    return parts


def join_state(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The shards' states as one tree's."""
    first = parts[0]
    out: dict[str, Any] = {"name": first["name"], "data": {}, "owners": {}, "children": {}}
    for part in parts:
        out["data"].update(part["data"])
        out["owners"].update(part.get("owners") or {})
    for name in first.get("children") or {}:
        out["children"][name] = join_state([p["children"][name] for p in parts])
    return out


def _join_env_stats(parts: Sequence[EnvStats]) -> EnvStats:
    first = parts[0]
    monitored: dict[str, Any] = {}
    for part in parts:
        monitored.update(part.monitored)
    return EnvStats(
        path=first.path, keys=sum(p.keys for p in parts), reads=sum(p.reads for p in parts),
        writes=sum(p.writes for p in parts),
        listeners=sum(p.listeners for p in parts),
        listener_calls=sum(p.listener_calls for p in parts),
        listener_errors=sum(p.listener_errors for p in parts), monitored=monitored,
        children=tuple(_join_env_stats(group)
                       for group in zip(*(p.children for p in parts), strict=True)))


class _Join:
    """Where each op of a batch went: ``(shard, index)`` pieces, and how to join them."""

    __slots__ = ("how", "pieces")

    def __init__(self, how: str, pieces: list[tuple[int, int, Any]]) -> None:
        self.how = how  # "one", "dict" (keyless), or a many-key kind
        self.pieces = pieces  # (shard, index in its batch, positions of its keys or None)


class ShardedEnvService(RemoteEnvService):
    """An environment served by several services, one per shard of its keys: a
    :class:`RemoteEnvService` (its API, picklable to every worker) made of several."""

    def __init__(self, shards: Sequence[RemoteEnvService]) -> None:
        super().__init__(shards[0]._handle, shards[0].max_concurrency)  # info: the first's
        self._shards = list(shards)

    def __reduce__(self) -> tuple[Any, ...]:
        return (ShardedEnvService, (self._shards,))

    def __repr__(self) -> str:
        return f"<ShardedEnvService {len(self._shards)} shards>"

    @property
    def shards(self) -> int:
        return len(self._shards)

    def submit(self, ops: Sequence[Op]) -> Placeholder[Reply]:
        """Send ``ops`` as one batch per shard; a placeholder of their joined reply."""
        loop = asyncio.get_running_loop()
        n_shards = len(self._shards)
        batches: list[list[Op]] = [[] for _ in range(n_shards)]
        joins: list[_Join] = []
        for op in ops:
            kind = op.kind
            if kind in KEYLESS:
                joins.append(_Join("dict", [(s, len(batches[s]), None)
                                            for s in range(n_shards)]))
                for batch in batches:
                    batch.append(op)
            elif kind in MANY and op.arg[2] is None:
                joins.append(self._split_many(op, batches))
            else:
                s = shard_of(op.key, n_shards)
                joins.append(_Join("one", [(s, len(batches[s]), None)]))
                batches[s].append(op)
        placeholder: Placeholder[Reply] = Placeholder(loop, "environment batch")
        sent = [(s, self._shards[s].submit(batch)) for s, batch in enumerate(batches) if batch]
        replies: dict[int, Reply] = {}

        def arrived(s: int, part: Placeholder[Reply]) -> None:
            replies[s] = part.result()  # a shard's placeholder always holds a Reply
            if len(replies) == len(sent):
                placeholder.set_result(_joined(joins, replies))

        if not sent:  # nothing to ask (ops on no keys)
            placeholder.set_result(_joined(joins, {}))
        for s, part in sent:
            if part.done():
                arrived(s, part)
            else:
                part.add_done_callback(functools.partial(_arrived_at, arrived, s))
        return placeholder

    def _split_many(self, op: Op, batches: list[list[Op]]) -> _Join:
        keys, x, _ = op.arg
        keys = as_keys(keys)
        n = len(self._shards)
        where: dict[int, list[int]] = {}
        for j, key in enumerate(keys):
            where.setdefault(shard_of(key, n), []).append(j)
        if op.kind in ("incr_many", "set_many"):
            args = per_key(x, len(keys), "deltas" if op.kind == "incr_many" else "values")
        elif op.kind == "each":
            args = x
        else:
            args = None
        pieces = []
        for s, positions in where.items():
            sub_keys = KeyList([keys[j] for j in positions])
            sub_x = x if args is None else [args[j] for j in positions]
            pieces.append((s, len(batches[s]), positions))
            batches[s].append(Op(op.kind, op.key, (sub_keys, sub_x, None), op.env))
        return _Join(op.kind, pieces)

    # -- the rest of the service's API, on every shard -----------------------------------------
    async def monitor(self, listener: Callable[[EnvEvent], Any], key: str | None = None,
                      prefix: str | None = None,
                      event: EventKind | Iterable[EventKind] | None = None, *,
                      descendants: bool = False, env: str | None = None) -> None:
        """:meth:`RemoteEnvService.monitor`: on the key's shard, or on every shard."""
        shards = (self._shards if key is None
                  else [self._shards[shard_of(key, len(self._shards))]])
        await asyncio.gather(*(s.monitor(listener, key, prefix, event,
                                         descendants=descendants, env=env) for s in shards))

    async def fetch_statistics(self) -> ServiceStats:
        parts = await asyncio.gather(*(s.fetch_statistics() for s in self._shards))
        return ServiceStats(
            max_concurrency=parts[0].max_concurrency, ops=sum(p.ops for p in parts),
            batches=sum(p.batches for p in parts), active=sum(p.active for p in parts),
            queued=sum(p.queued for p in parts),
            peak_queued=sum(p.peak_queued for p in parts),
            waiting_keys=sum(p.waiting_keys for p in parts),
            env=_join_env_stats([p.env for p in parts]))

    async def fetch_state(self) -> dict[str, Any]:
        return join_state(await asyncio.gather(*(s.fetch_state() for s in self._shards)))

    async def load_state(self, state: dict[str, Any]) -> None:
        parts = split_state(state, len(self._shards))
        await asyncio.gather(*(s.load_state(p)
                               for s, p in zip(self._shards, parts, strict=True)))

    async def aclose(self) -> None:
        await asyncio.gather(*(s.aclose() for s in self._shards))

    async def __aenter__(self) -> ShardedEnvService:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _arrived_at(arrived: Callable[[int, Placeholder[Reply]], None], s: int,
                part: Placeholder[Reply]) -> None:
    arrived(s, part)


def _joined(joins: list[_Join], replies: dict[int, Reply]) -> Reply:
    values: list[Any] = []
    errors: dict[int, BaseException] = {}
    for i, join in enumerate(joins):
        how = join.how
        if how == "one":
            s, k, _ = join.pieces[0]
            reply = replies[s]
            values.append(reply.values[k])
            if k in reply.errors:
                errors[i] = reply.errors[k]
            continue
        if how == "dict":
            merged: dict[str, Any] = {}
            for s, k, _ in join.pieces:
                reply = replies[s]
                if k in reply.errors:
                    errors[i] = reply.errors[k]
                    break
                merged.update(reply.values[k])
            values.append(merged)
            continue
        size = sum(len(positions) for _, _, positions in join.pieces)
        out: list[Any] = [None] * size
        each_errors: dict[int, BaseException] = {}
        failed: BaseException | None = None
        for s, k, positions in join.pieces:
            reply = replies[s]
            if k in reply.errors:
                if how == "each":
                    each_errors.update({j: reply.errors[k] for j in positions})
                elif failed is None:
                    failed = reply.errors[k]
                continue
            got = reply.values[k]
            if how == "each":
                got, sub_errors = got
                each_errors.update({positions[t]: e for t, e in sub_errors.items()})
            if got is not None:
                for t, j in enumerate(positions):
                    out[j] = got[t]
        if how == "each":
            values.append((out, each_errors))
        elif failed is not None:
            values.append(None)
            errors[i] = failed
        elif how == "incr_many":
            values.append(np.asarray(out))
        else:
            values.append(out if how == "query_many" else None)
    return Reply(values, errors)


async def serve_sharded(env: Env, backend: Any, shards: int,
                        max_concurrency: int) -> ShardedEnvService:
    """Place one service per shard of ``env``'s keys with ``backend``; see :func:`serve`."""
    parts = split_state(env.get_state(), shards)
    handles: list[ServiceHandle] = await asyncio.gather(*(
        backend.place(ServiceActor, part, max_concurrency) for part in parts))
    return ShardedEnvService([RemoteEnvService(h, max_concurrency) for h in handles])
