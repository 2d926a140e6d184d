"""Several named model clients built together, closed together (one per worker)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ._base import ModelClient, ModelStats
from ._config import build_model
from ._record import RecordingModel, ReplayModel
from ._sampling import SamplingConfig
from ._wrappers import ReplayThenLive


class ModelSet(Mapping[str, ModelClient]):
    """``name → client`` for every model a worker's agents use.

    >>> models = ModelSet.build({"dummy": DummyConfig(latency=0.0)})  # doctest: +SKIP
    """

    def __init__(self, clients: Mapping[str, ModelClient],
                 sampling: Mapping[str, SamplingConfig | None] | None = None) -> None:
        self._clients = dict(clients)
        self._unreadable = dict.fromkeys(self._clients, 0)
        self._sampling = {n: c for n, c in (sampling or {}).items() if c is not None}
        self._audit: dict[str, Counter[tuple[str, Any, Any]]] = {}
        self._shared = dict.fromkeys(self._clients, 0)
        self._audit_cost: dict[str, tuple[int, int, int, int]] = {}
        #: What the personas of this worker share within a step: an archetype's answers,
        #: keyed by the persona layer (see :meth:`Persona.sampled`); cleared per step.
        self.pooled: dict[Any, Any] = {}
        self.pooled_step: int | None = None
        #: Per model, the decisions the launcher has made fall back to individual calls
        #: (``sampling.fallback``; see :func:`populace.agents.fall_back`).
        self.fallen: dict[str, frozenset[str]] = {}
        #: Per model and surrogate-mode decision, the fitted surrogate: archetype values →
        #: (answers, cumulative probabilities); ``None`` for an archetype never audited
        #: (see :func:`populace.agents.fit_surrogates`).
        self.surrogates: dict[str, dict[str, dict[Any, tuple[tuple[Any, ...],
                                                             tuple[float, ...]]]]] = {}
        self._cells: dict[str, Counter[tuple[str, tuple[Any, ...], Any]]] = {}
        #: Per model with ``sampling.allocate: proportional``, the answers each archetype
        #: gets (:meth:`SamplingConfig.allocation` of its size in the whole population,
        #: which the launcher counts and sends: the same on every worker).
        self.allocations: dict[str, dict[Any, int]] = {}

    @classmethod
    def build(cls, configs: Mapping[str, Any], *, record_to: str | Path | None = None,
              replay_from: str | Path | None = None, resume: bool = False,
              workers: int = 1) -> ModelSet:
        """Clients for ``configs``.

        ``record_to``: a directory; every call to a non-dummy model is appended to
        ``NAME-HOST-PID.jsonl`` there (one file per worker process). ``replay_from``: a
        directory of such recordings; models answer from it and make no request at all —
        unless ``resume``, where a request not in the recording goes to the live model (the
        calls an interrupted run already made are not paid for twice). ``workers``: how
        many workers build a set (they share each server's slots).
        """
        clients: dict[str, ModelClient] = {}
        # batch jobs keep their journal beside the recording, in the run directory
        work = Path(record_to).parent / "llm_batches" if record_to is not None else None
        for name, cfg in configs.items():
            client: ModelClient
            if cfg.provider == "dummy" or replay_from is None:
                client = build_model(name, cfg, work_dir=work, workers=workers)
            elif not resume:
                client = ReplayModel(Path(replay_from), name)
            else:
                client = build_model(name, cfg, work_dir=work, workers=workers)
                if any(Path(replay_from).glob(f"{name}-*.jsonl")):
                    client = ReplayThenLive(ReplayModel(Path(replay_from), name), client)
            if record_to is not None and cfg.provider != "dummy":
                client = RecordingModel(client, Path(record_to) / f"{name}-{{host}}-{{pid}}.jsonl")
            clients[name] = client
        return cls(clients, {name: getattr(cfg, "sampling", None)
                             for name, cfg in configs.items()})

    def __getitem__(self, name: str) -> ModelClient:
        return self._clients[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._clients)

    def __len__(self) -> int:
        return len(self._clients)

    def count_unreadable(self, name: str) -> None:
        """Count a decision whose reply from model ``name`` could not be read (agents of
        the worker call this; the count is the models' ``unreadable`` statistic)."""
        self._unreadable[name] += 1

    def sampling(self, name: str) -> SamplingConfig | None:
        """Model ``name``'s ``sampling:`` (None: every agent is asked)."""
        return self._sampling.get(name)

    def count_shared(self, name: str) -> None:
        """Count a decision answered by an archetype's samples, not a call of its own."""
        self._shared[name] += 1

    def count_audit(self, name: str, decision: str, own: Any, given: Any) -> None:
        """Count an audited agent's pair of answers to ``decision``: its own (asked
        individually) and the one its archetype gave it."""
        self._audit.setdefault(name, Counter())[decision, own, given] += 1

    def count_cell(self, name: str, decision: str, cell: tuple[Any, ...], own: Any) -> None:
        """Count an audited agent's own answer to a surrogate-mode ``decision`` under its
        archetype ``cell``."""
        self._cells.setdefault(name, Counter())[decision, cell, own] += 1

    def count_audit_cost(self, name: str, calls: int, prompt_tokens: int,
                         completion_tokens: int) -> None:
        """Count what an audited agent's own decision cost."""
        n, c, p, t = self._audit_cost.get(name, (0, 0, 0, 0))
        self._audit_cost[name] = (n + 1, c + calls, p + prompt_tokens,
                                  t + completion_tokens)

    def statistics(self) -> dict[str, ModelStats]:
        out = {}
        for name, client in self._clients.items():
            stats = client.statistics()
            extra: dict[str, Any] = {}
            if self._unreadable[name]:
                extra["unreadable"] = self._unreadable[name]
            if self._shared[name]:
                extra["shared"] = self._shared[name]
            if name in self._cells:
                extra["cells"] = tuple((d, c, o, n) for (d, c, o), n
                                       in self._cells[name].items())
            if name in self._audit_cost:
                extra["audit_cost"] = self._audit_cost[name]
            if name in self._audit:
                extra["audit"] = tuple((d, o, g, n) for (d, o, g), n
                                       in self._audit[name].items())
            out[name] = dataclasses.replace(stats, **extra) if extra else stats
        return out

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
