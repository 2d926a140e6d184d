"""A pool of equivalent LLM endpoints: least-outstanding choice, limits, ejection.

Every request leases one endpoint from the pool and releases it with its outcome::

    lease = await pool.acquire()
    try:
        ...  # send the request to lease.url
    finally:
        pool.release(lease, ok=True)

Choice: with a ``key`` (a hash of the prompt's leading part), the endpoint the key prefers
(rendezvous hashing: the same key always prefers the same endpoint, and removing one moves
only its keys), unless it has more than ``balance`` × the mean of requests in flight — then
the next one the key prefers; that is consistent hashing with bounded load, which keeps
each server's prefix cache hot for the prompts it has seen without letting one server queue
while another idles. Without a key: the endpoint with the fewest requests in flight; ties go
round-robin, so that equally idle servers take turns.

Limit: at most ``max_concurrency`` requests in flight per endpoint; beyond it callers queue
first-come first-served in the client (a free slot is handed to the head of the queue, never
grabbed by a later caller). With ``adaptive`` the limit of each endpoint moves between
``min_concurrency`` and ``max_concurrency`` (or the capacity a server declares, see
:meth:`EndpointPool.set_capacity`) by additive increase, multiplicative decrease: it starts
low and doubles per round trip while the server keeps up (slow start), then grows by one
per round trip; a congestion signal halves it (HTTP 503, a timeout) or cuts a tenth (HTTP
429: a limit was crossed, just below ours; later refusals of the same round trip bring it
down to the requests the server holds), once per round trip. Requests then wait in the
client, where waiting is free, instead of in a server's queue, where they time out and are
sent again.

Health: an endpoint failing ``eject_after``
times in a row is taken out for ``cooldown`` seconds, then receives one trial request; success
brings it back, failure sends it out again. The last healthy endpoint is never ejected, so a
pool always has somewhere to send requests and failures surface as errors, not as waits.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from populace.core import mix64

EndpointState = Literal["up", "ejected", "probing"]

#: What a 429 leaves of an adaptive limit (at most: see ``EndpointPool._adapt``). A refusal
#: over a limit says the limit is just below ours: a small cut keeps ~95% of its
#: throughput, where halving would keep ~75%.
_RATE_LIMITED = 0.9


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
    limit: int = 0  # requests it may have in flight now (moves when the pool is adaptive)

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
    __slots__ = ("ceiling", "cut_from", "decreased_at", "ejections", "failures", "in_flight",
                 "latency_sum", "limit", "limited", "requests", "retry_at", "salt", "ssthresh",
                 "state", "strikes", "url")

    def __init__(self, url: str, index: int, limit: float, ceiling: int) -> None:
        self.url = url
        self.salt = mix64(index + 0x9E3779B97F4A7C15)  # its rendezvous-hashing identity
        self.limit = limit  # in flight allowed now
        self.ceiling = ceiling  # the most the limit may grow to
        self.ssthresh = float(ceiling)  # below it the limit grows by slow start
        self.decreased_at = -math.inf  # when congestion last cut the limit
        self.limited = False  # its limit was used up since it was last idle
        self.cut_from = float(limit)  # the limit before the last cut
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
                 cooldown: float = 10.0, adaptive: bool = False, min_concurrency: int = 1,
                 balance: float = 1.25) -> None:
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
        if not 1 <= min_concurrency <= max_concurrency:
            raise ValueError(f"min_concurrency must be from 1 to max_concurrency "
                             f"({max_concurrency}), got {min_concurrency}")
        if not balance >= 1:
            raise ValueError(f"balance must be >= 1, got {balance}")
        self.adaptive = adaptive
        self.min_concurrency = min_concurrency
        self.balance = balance
        # Adaptive limits start low (at most 8) and grow while the server keeps up.
        start = min(max_concurrency, max(min_concurrency, 8)) if adaptive else max_concurrency
        self._endpoints = [_Endpoint(u, i, start, max_concurrency) for i, u in enumerate(urls)]
        self.max_concurrency = max_concurrency
        self.eject_after = eject_after
        self.cooldown = cooldown
        self._next = 0  # round-robin start for ties
        self._waiters: deque[tuple[asyncio.Future[Lease], int | None]] = deque()
        self._timers: list[asyncio.TimerHandle] = []

    @property
    def urls(self) -> list[str]:
        return [e.url for e in self._endpoints]

    @property
    def waiting(self) -> int:
        """Callers queued for a free slot."""
        return sum(1 for w, _ in self._waiters if not w.done())

    def set_capacity(self, url: str, slots: int) -> None:
        """``url`` serves at most ``slots`` requests at a time (a server's declared
        capacity, e.g. llama.cpp's ``total_slots``): its limit never grows beyond that."""
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        for ep in self._endpoints:
            if ep.url == url:
                ep.ceiling = max(self.min_concurrency, min(self.max_concurrency, slots))
                ep.ssthresh = min(ep.ssthresh, ep.ceiling)
                ep.limit = min(ep.limit, ep.ceiling) if self.adaptive else ep.ceiling
                return
        raise ValueError(f"{url} is not one of the pool's endpoints")

    # -- leasing -----------------------------------------------------------------------------
    async def acquire(self, key: int | None = None) -> Lease:
        """A lease on the best endpoint now (for ``key``, see the module docstring), or the
        first one freed after earlier callers."""
        loop = asyncio.get_running_loop()
        if not self._waiters:
            lease = self._try_lease(loop, key)
            if lease is not None:
                return lease
        waiter: asyncio.Future[Lease] = loop.create_future()
        self._waiters.append((waiter, key))
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
                count: bool = True, congested: bool = False,
                rate_limited: bool = False) -> None:
        """Give ``lease`` back. ``ok``: the request succeeded. ``strike`` (default ``not ok``):
        the failure speaks against the endpoint's health (a 429 or a 400 does not).
        ``count=False`` frees the slot without recording a request outcome. ``congested``:
        the server is overloaded (503, a timeout): an adaptive limit halves.
        ``rate_limited``: the server refused the request over a limit (429): an adaptive
        limit, just above that limit, shrinks by a tenth. Idempotent."""
        if lease.released:
            return
        lease.released = True
        loop = asyncio.get_running_loop()
        ep = self._endpoints[lease.index]
        if self.adaptive:
            self._adapt(ep, lease, ok and count,
                        0.5 if congested else _RATE_LIMITED if rate_limited else 1.0)
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

    def congest(self, lease: Lease) -> None:
        """The server of ``lease`` (still held) queues requests: an adaptive limit halves,
        once per round trip."""
        if self.adaptive:
            self._adapt(self._endpoints[lease.index], lease, False, 0.5)

    # -- internals ---------------------------------------------------------------------------
    def _adapt(self, ep: _Endpoint, lease: Lease, answered: bool, cut: float) -> None:
        """Additive increase, multiplicative decrease (by ``cut``) of ``ep``'s limit."""
        floor = float(self.min_concurrency)
        if cut == _RATE_LIMITED:
            # Refused over a limit: the requests still out were taken (or are being refused
            # too, and come back at once), so the limit follows them down to what the server
            # holds, but within one round trip never below half of where it was.
            held = ep.in_flight - 1
            if lease.started > ep.decreased_at:
                ep.cut_from = ep.limit
                ep.limit = max(floor, ep.limit / 2, min(ep.limit * cut, held))
                ep.decreased_at = asyncio.get_running_loop().time()
            else:
                ep.limit = max(floor, ep.cut_from / 2, min(ep.limit, held))
            # Back to just under where it was refused at once, then probe one by one.
            ep.ssthresh = max(ep.limit, ep.cut_from * 0.95)
        elif cut < 1.0:
            # One cut per round trip: the requests sent before the last cut carry old news.
            if lease.started > ep.decreased_at:
                ep.ssthresh = max(floor, ep.limit * cut)
                ep.limit = ep.ssthresh
                ep.decreased_at = asyncio.get_running_loop().time()
        elif answered and ep.limited:  # demand reached the limit: the limit is the bound
            ep.limit = min(float(ep.ceiling),
                           ep.limit + (1.0 if ep.limit < ep.ssthresh else 1.0 / ep.limit))
        if ep.in_flight == 1:  # about to be idle: the demand has passed
            ep.limited = False

    def _try_lease(self, loop: asyncio.AbstractEventLoop, key: int | None = None
                   ) -> Lease | None:
        eps = self._endpoints
        n = len(eps)
        now = loop.time()
        best = -1
        if key is not None and n > 1:
            best = self._preferred(key, now)
        if best < 0:
            best_load = math.inf
            for k in range(n):
                i = (self._next + k) % n
                ep = eps[i]
                state = ep.state
                if state == "up":
                    load = ep.in_flight
                    if load >= int(ep.limit):
                        continue
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
        if ep.in_flight >= int(ep.limit):
            ep.limited = True
        ep.requests += 1
        return Lease(ep.url, best, now)

    def _preferred(self, key: int, now: float) -> int:
        """An ejected endpoint due for its trial request, else the up endpoint ``key``
        prefers most among those with a free slot and no more than ``balance`` × the mean
        in flight; -1 when none qualifies."""
        eps = self._endpoints
        for i, ep in enumerate(eps):
            if ep.state == "ejected" and now >= ep.retry_at and ep.in_flight == 0:
                return i
        up = [ep for ep in eps if ep.state == "up"]
        if not up:
            return -1
        bound = math.ceil(self.balance * (sum(ep.in_flight for ep in up) + 1) / len(up))
        best, best_score = -1, -1
        for i, ep in enumerate(eps):
            if ep.state == "up" and ep.in_flight < min(bound, int(ep.limit)):
                score = mix64(key ^ ep.salt)
                if score > best_score:
                    best, best_score = i, score
        return best

    def _dispatch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Hand free slots to queued callers, oldest first."""
        waiters = self._waiters
        while waiters:
            head, key = waiters[0]
            if head.done():  # cancelled while queued
                waiters.popleft()
                continue
            lease = self._try_lease(loop, key)
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
                          e.ejections, int(e.limit))
            for e in self._endpoints
        )
