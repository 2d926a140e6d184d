"""The one interface every model provider implements, and what a call returns."""

from __future__ import annotations

from collections.abc import Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from ._pool import EndpointStats

ChatMessage = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": "..."}


def text_of(content: Any) -> str:
    """Message content as text; multi-part content keeps its text parts.

    >>> text_of([{"type": "text", "text": "Hello"}, {"type": "image_url"}])
    'Hello'
    """
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content
                        if isinstance(p, dict) and isinstance(p.get("text"), str))
    return "" if content is None else str(content)


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
    #: prompt tokens the server took from its prefix cache, when it says
    #: (``usage.prompt_tokens_details.cached_tokens``)
    cached_tokens: int = 0
    #: prompt tokens of a prefix already sent to the same endpoint (the client's estimate
    #: of what a prefix cache can reuse)
    prefix_tokens: int = 0
    #: answered by a request another call made (see :class:`~populace.llm.Coalescing`)
    coalesced: bool = False

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
    cached_tokens: int = 0  # prompt tokens servers said they took from their prefix cache
    prefix_tokens: int = 0  # prompt tokens repeating a prefix sent to the same endpoint
    coalesced: int = 0  # calls answered by another call's request (n > 1)
    replayed: int = 0  # calls answered (or missed) by a recording: nothing was sent
    #: decisions whose reply could not be read as the answer asked for (counted by the
    #: persona agents that use the model, see :class:`~populace.llm.ModelSet`)
    unreadable: int = 0
    #: audited answer pairs of archetype sampling: ``(decision, individual answer, the
    #: archetype's answer, count)`` (see :func:`~populace.llm.audits`)
    audit: tuple[tuple[str, Any, Any, int], ...] = ()
    #: decisions answered by an archetype's samples instead of a call of their own
    shared: int = 0
    #: what the audited agents' own decisions cost: ``(decisions, calls, prompt tokens,
    #: completion tokens)`` (what every decision would cost asked individually, sampled)
    audit_cost: tuple[int, int, int, int] = (0, 0, 0, 0)
    #: the audited answers of surrogate-mode decisions by archetype: ``(decision,
    #: archetype values, own answer, count)`` (what the launcher fits a surrogate to)
    cells: tuple[tuple[str, tuple[Any, ...], Any, int], ...] = ()


class Request(NamedTuple):
    """One chat completion request, as every layer passes it down (frozen).

    A named tuple rather than a dataclass: one is made per LLM call, a million per step,
    and a tuple is the cheapest immutable record Python builds.
    """

    messages: Sequence[ChatMessage]
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    max_tokens: int | None = None
    response_format: dict[str, Any] | None = None


_new = tuple.__new__


class ModelClient:
    """A language model. Subclasses implement one method, :meth:`send`; behaviour (retries,
    accounting, recording, replay) is added by wrappers around any client (see
    :class:`~populace.llm.Wrapper`).

    >>> class Echo(ModelClient):
    ...     name = "echo"
    ...     async def send(self, request: Request) -> Completion:
    ...         return Completion(request.messages[-1]["content"], self.name)
    """

    name: str
    #: Whether answers depend on the messages; a model that ignores them (the dummy) is
    #: not handed any, which saves building a million conversations per step.
    reads_prompt: bool = True

    def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        max_tokens: int | None = None,
        response_format: dict[str, Any] | None = None,
    ) -> Coroutine[Any, Any, Completion]:
        """Answer ``messages`` (awaitable); raises :class:`~populace.core.ModelError` on
        failure. The callers' spelling of :meth:`send`."""
        # tuple.__new__ skips the named tuple's Python-level __new__: half the cost, paid
        # a million times a step
        return self.send(_new(Request, (messages, temperature, top_p, seed, max_tokens,
                                        response_format)))

    async def send(self, request: Request) -> Completion:
        """Answer ``request``; raises :class:`~populace.core.ModelError` on failure."""
        raise NotImplementedError(f"{type(self).__name__} does not implement send()")

    def statistics(self) -> ModelStats:
        """Live counters (zeros for a client that keeps none; see
        :class:`~populace.llm.Counted`)."""
        return ModelStats(self.name, 0, 0, 0, 0, 0, endpoints=self.endpoint_statistics())

    def endpoint_statistics(self) -> tuple[EndpointStats, ...]:
        """Per-server counters, for clients that use servers."""
        return ()

    async def aclose(self) -> None:
        """Release what the client holds (sessions, files). Idempotent."""


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
TRAFFIC = ("requests", "retries", "sent", "failures", "prompt_tokens", "completion_tokens",
           "cached_tokens", "prefix_tokens", "coalesced", "replayed", "unreadable")


def traffic(workers: Iterable[Iterable[Any]]) -> dict[str, dict[str, int]]:
    """Per model, summed over workers' resource statistics: ``requests`` (calls asked for),
    ``retries`` (attempts beyond the first), ``coalesced`` (calls answered by another
    call's request), ``replayed`` (calls a recording answered), ``sent`` (the requests
    made, or the simulated calls: requests + retries - coalesced - replayed), ``failures``
    (calls that gave up), ``unreadable`` (decisions whose reply could not be read), and
    tokens:
    ``cached_tokens`` (prompt tokens servers said their prefix cache gave them) and
    ``prefix_tokens`` (prompt tokens repeating a prefix already sent to the same endpoint:
    what a prefix cache could reuse, estimated by the client)."""
    out: dict[str, dict[str, int]] = {}
    for resources in workers:
        for m in model_stats(resources):
            acc = out.setdefault(m.model, dict.fromkeys(TRAFFIC, 0))
            acc["requests"] += m.requests
            acc["retries"] += m.retries
            acc["sent"] += m.requests + m.retries - m.coalesced - m.replayed
            acc["failures"] += m.failures
            acc["prompt_tokens"] += m.prompt_tokens
            acc["completion_tokens"] += m.completion_tokens
            acc["cached_tokens"] += m.cached_tokens
            acc["prefix_tokens"] += m.prefix_tokens
            acc["coalesced"] += m.coalesced
            acc["replayed"] += m.replayed
            acc["unreadable"] += m.unreadable
    return out


def limits(workers: Iterable[Iterable[Any]]) -> dict[str, dict[str, int]]:
    """Per model and endpoint URL, the requests the workers may have in flight there now
    (their limits summed; adaptive limits move with the server's answers)."""
    out: dict[str, dict[str, int]] = {}
    for resources in workers:
        for m in model_stats(resources):
            for e in m.endpoints:
                per = out.setdefault(m.model, {})
                per[e.url] = per.get(e.url, 0) + e.limit
    return out
