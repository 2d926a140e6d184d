"""A pool of equivalent LLM endpoints: least-outstanding choice, limits, ejection.

Every request leases one endpoint from the pool and releases it with its outcome::

    lease = await pool.acquire()
    try:
        ...  # send the request to lease.url
    finally:
        pool.release(lease, ok=True)

Choice: the endpoint with the fewest requests in flight; ties go round-robin, so that
equally idle servers take turns. Limit: at most ``max_concurrency`` requests in flight per
endpoint; beyond it callers queue first-come first-served (a free slot is handed to the head
of the queue, never grabbed by a later caller). Health: an endpoint failing ``eject_after``
times in a row is taken out for ``cooldown`` seconds, then receives one trial request; success
brings it back, failure sends it out again. The last healthy endpoint is never ejected, so a
pool always has somewhere to send requests and failures surface as errors, not as waits.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

EndpointState = Literal["up", "ejected", "probing"]


@dataclass(frozen=True, slots=True)
class EndpointStats:
    """Counters of one endpoint (read by progress displays and the studio)."""

    url: str
    state: EndpointState
    requests: int
    failures: int
    in_flight: int
    latency_sum: float
    ejections: int

    @property
    def mean_latency(self) -> float:
        """Mean seconds per finished request (0.0 before the first)."""
        done = self.requests - self.in_flight
        return self.latency_sum / done if done > 0 else 0.0


@dataclass(slots=True)
class Lease:
    """The right to send one request to ``url``; give it back with :meth:`EndpointPool.release`."""

    url: str
    index: int
    started: float
    released: bool = False


class _Endpoint:
    __slots__ = ("ejections", "failures", "in_flight", "latency_sum", "requests", "retry_at",
                 "state", "strikes", "url")

    def __init__(self, url: str) -> None:
        self.url = url
        self.state: EndpointState = "up"
        self.requests = 0
        self.failures = 0
        self.in_flight = 0
        self.latency_sum = 0.0
        self.strikes = 0  # consecutive failures
        self.retry_at = 0.0  # when an ejected endpoint may be probed
        self.ejections = 0


class EndpointPool:
    """Spreads requests over ``urls``; see the module docstring for the rules.

    >>> pool = EndpointPool(["http://a:8000/v1", "http://b:8000/v1"], max_concurrency=32)

    All methods must be called from one event loop (the one of the worker that owns it).
    """

    def __init__(self, urls: Sequence[str], *, max_concurrency: int = 64, eject_after: int = 5,
                 cooldown: float = 10.0) -> None:
        if not urls:
            raise ValueError("an endpoint pool needs at least one URL")
        if len(set(urls)) != len(urls):
            raise ValueError(f"duplicate endpoint URLs in {list(urls)}")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        if eject_after < 1:
            raise ValueError(f"eject_after must be >= 1, got {eject_after}")
        if cooldown < 0:
            raise ValueError(f"cooldown must be >= 0, got {cooldown}")
        self._endpoints = [_Endpoint(u) for u in urls]
        self.max_concurrency = max_concurrency
        self.eject_after = eject_after
        self.cooldown = cooldown
        self._next = 0  # round-robin start for ties
        self._waiters: deque[asyncio.Future[Lease]] = deque()
        self._timers: list[asyncio.TimerHandle] = []

    @property
    def urls(self) -> list[str]:
        return [e.url for e in self._endpoints]

    @property
    def waiting(self) -> int:
        """Callers queued for a free slot."""
        return sum(1 for w in self._waiters if not w.done())

    # -- leasing -----------------------------------------------------------------------------
    async def acquire(self) -> Lease:
        """A lease on the best endpoint now, or the first one freed after earlier callers."""
        loop = asyncio.get_running_loop()
        if not self._waiters:
            lease = self._try_lease(loop)
            if lease is not None:
                return lease
        waiter: asyncio.Future[Lease] = loop.create_future()
        self._waiters.append(waiter)
        try:
            return await waiter
        except BaseException:  # cancelled, or the coroutine was closed while queued
            if waiter.done() and not waiter.cancelled():
                # Handed a slot in the same tick we gave up: pass it on.
                self.release(waiter.result(), ok=True, strike=False, count=False)
            else:
                waiter.cancel()  # _dispatch skips it
            raise

    def release(self, lease: Lease, *, ok: bool, strike: bool | None = None,
                count: bool = True) -> None:
        """Give ``lease`` back. ``ok``: the request succeeded. ``strike`` (default ``not ok``):
        the failure speaks against the endpoint's health (a 429 or a 400 does not).
        ``count=False`` frees the slot without recording a request outcome. Idempotent."""
        if lease.released:
            return
        lease.released = True
        loop = asyncio.get_running_loop()
        ep = self._endpoints[lease.index]
        ep.in_flight -= 1
        if count:
            ep.latency_sum += loop.time() - lease.started
            if not ok:
                ep.failures += 1
        else:
            ep.requests -= 1
        if strike is None:
            strike = not ok
        if ep.state == "probing":
            if not count:  # the trial never went out; let the next request make it
                ep.state = "ejected"
                ep.retry_at = loop.time()
            elif strike:
                self._eject(ep, loop, force=True)
            else:  # it answered (even a 429 shows it is alive)
                ep.state, ep.strikes = "up", 0
        elif ok and count:
            ep.strikes = 0
        elif strike:
            ep.strikes += 1
            if ep.state == "up" and ep.strikes >= self.eject_after:
                self._eject(ep, loop, force=False)
        self._dispatch(loop)

    # -- internals ---------------------------------------------------------------------------
    def _try_lease(self, loop: asyncio.AbstractEventLoop) -> Lease | None:
        eps = self._endpoints
        n = len(eps)
        now = loop.time()
        best = -1
        best_load = self.max_concurrency
        for k in range(n):
            i = (self._next + k) % n
            ep = eps[i]
            state = ep.state
            if state == "up":
                load = ep.in_flight
            elif state == "ejected" and now >= ep.retry_at and ep.in_flight == 0:
                load = 0  # due for its trial request
            else:
                continue
            if load < best_load:
                best, best_load = i, load
                if load == 0:
                    break
        if best < 0:
            return None
        ep = eps[best]
        if ep.state == "ejected":
            ep.state = "probing"
        self._next = (best + 1) % n
        ep.in_flight += 1
        ep.requests += 1
        return Lease(ep.url, best, now)

    def _dispatch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Hand free slots to queued callers, oldest first."""
        waiters = self._waiters
        while waiters:
            head = waiters[0]
            if head.done():  # cancelled while queued
                waiters.popleft()
                continue
            lease = self._try_lease(loop)
            if lease is None:
                return
            waiters.popleft()
            head.set_result(lease)

    def _eject(self, ep: _Endpoint, loop: asyncio.AbstractEventLoop, *, force: bool) -> None:
        if not force and not any(o is not ep and o.state == "up" for o in self._endpoints):
            return  # never eject the last healthy endpoint
        ep.state = "ejected"
        ep.retry_at = loop.time() + self.cooldown
        ep.ejections += 1
        # Queued callers may use the endpoint for its trial once the cool-down ends.
        self._timers = [t for t in self._timers if not t.cancelled() and t.when() > loop.time()]
        self._timers.append(loop.call_at(ep.retry_at, self._dispatch, loop))

    def close(self) -> None:
        """Cancel pending cool-down timers (queued callers stay queued)."""
        for t in self._timers:
            t.cancel()
        self._timers = []

    def statistics(self) -> tuple[EndpointStats, ...]:
        return tuple(
            EndpointStats(e.url, e.state, e.requests, e.failures, e.in_flight, e.latency_sum,
                          e.ejections)
            for e in self._endpoints
        )
