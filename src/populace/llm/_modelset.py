"""Several named model clients built together, closed together (one per worker)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ._base import ModelClient, ModelStats
from ._config import build_model


class ModelSet(Mapping[str, ModelClient]):
    """``name → client`` for every model a worker's agents use.

    >>> models = ModelSet.build({"dummy": DummyConfig(latency=0.0)})  # doctest: +SKIP
    """

    def __init__(self, clients: Mapping[str, ModelClient]) -> None:
        self._clients = dict(clients)

    @classmethod
    def build(cls, configs: Mapping[str, Any]) -> ModelSet:
        return cls({name: build_model(name, cfg) for name, cfg in configs.items()})

    def __getitem__(self, name: str) -> ModelClient:
        return self._clients[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._clients)

    def __len__(self) -> int:
        return len(self._clients)

    def statistics(self) -> dict[str, ModelStats]:
        return {name: c.statistics() for name, c in self._clients.items()}

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
