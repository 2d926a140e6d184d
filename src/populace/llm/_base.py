"""The one interface every model provider implements, and what a call returns."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ._pool import EndpointStats

ChatMessage = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": "..."}


@dataclass(slots=True)
class Completion:
    """The text a model produced for one request, with its accounting.

    Not frozen: one is made per LLM call, and frozen dataclasses construct ~2x slower.
    """

    text: str
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    endpoint: str | None = None
    retries: int = 0  # attempts beyond the first that this answer needed

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class ModelStats:
    """Live counters of one model client (read by progress displays and the studio)."""

    model: str
    requests: int
    failures: int
    in_flight: int
    prompt_tokens: int
    completion_tokens: int
    retries: int = 0
    endpoints: tuple[EndpointStats, ...] = ()  # per server, for clients that use several


@runtime_checkable
class ModelClient(Protocol):
    """A language model: one method, ``complete``. Behaviour is added by wrappers."""

    name: str

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        max_tokens: int | None = None,
        response_format: dict[str, Any] | None = None,
    ) -> Completion:
        """Answer ``messages``; raises :class:`~populace.core.ModelError` on failure."""
        ...

    def statistics(self) -> ModelStats: ...

    async def aclose(self) -> None: ...


def model_stats(resources: Iterable[Any]) -> list[ModelStats]:
    """The :class:`ModelStats` among a worker's resource statistics (a ModelSet gives a
    mapping of them)."""
    found: list[ModelStats] = []
    for r in resources:
        for item in (r.values() if isinstance(r, Mapping) else (r,)):
            if isinstance(item, ModelStats):
                found.append(item)
    return found


#: The counters of :func:`traffic`, per model.
TRAFFIC = ("requests", "retries", "sent", "failures", "prompt_tokens", "completion_tokens")


def traffic(workers: Iterable[Iterable[Any]]) -> dict[str, dict[str, int]]:
    """Per model, summed over workers' resource statistics: ``requests`` (calls asked for),
    ``retries`` (attempts beyond the first), ``sent`` (both: the HTTP requests made, or the
    simulated or replayed calls), ``failures`` (calls that gave up), and tokens."""
    out: dict[str, dict[str, int]] = {}
    for resources in workers:
        for m in model_stats(resources):
            acc = out.setdefault(m.model, dict.fromkeys(TRAFFIC, 0))
            acc["requests"] += m.requests
            acc["retries"] += m.retries
            acc["sent"] += m.requests + m.retries
            acc["failures"] += m.failures
            acc["prompt_tokens"] += m.prompt_tokens
            acc["completion_tokens"] += m.completion_tokens
    return out
