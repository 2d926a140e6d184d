"""How an HTTP request reaches a server: aiohttp for real, a handler for tests.

:class:`~populace.llm.OpenAIModel` sends each attempt through a transport. The default,
:class:`AiohttpTransport`, holds one session per event loop; :class:`MockTransport` hands the
request to a function instead (httpx's ``MockTransport`` idea), so the client's parsing,
retries and accounting can be tested on any reply — a 503 with ``Retry-After``, a body cut
short, negative token counts — without a server and without patching anything.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # aiohttp loads with the first request: a run of offline models, a report
    import aiohttp  # or an interview never pays its import (~0.1 s of every start)

from populace.core import (
    ModelBadResponse,
    ModelError,
    ModelTimeout,
    ModelUnreachable,
    PopulaceError,
)


@dataclass(frozen=True, slots=True)
class Response:
    """What a server answered: status, headers and the raw body."""

    status: int
    content: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, data: Any, status: int = 200, headers: Mapping[str, str] | None = None
             ) -> Response:
        return cls(status, json.dumps(data).encode(), dict(headers or {}))


class TransportError(PopulaceError):
    """No complete response: ``cause`` is the countable kind (``"timed out"``,
    ``"cannot connect"``…), ``error`` the :class:`~populace.core.ModelError` subclass the
    call fails with; ``retryable``: whether another attempt may help (not when the client
    was closed under the call)."""

    def __init__(self, message: str, *, cause: str,
                 error: type[ModelError] = ModelUnreachable, retryable: bool = True) -> None:
        super().__init__(message)
        self.cause = cause
        self.error = error
        self.retryable = retryable


class Transport(Protocol):
    async def post(self, url: str, body: bytes, headers: Mapping[str, str], *,
                   timeout: float | None = None) -> Response:
        """POST ``body`` (within ``timeout`` seconds, when given, instead of the
        transport's own); raises :class:`TransportError` when no response came back."""
        ...

    async def get(self, url: str, headers: Mapping[str, str], *,
                  timeout: float | None = None) -> Response:
        """GET ``url``; raises :class:`TransportError` when no response came back."""
        ...

    async def aclose(self) -> None: ...


class AiohttpTransport:
    """Real HTTP over one aiohttp session, bound to the event loop of its first request.

    ``timeout`` bounds one request, connect to last byte; ``connections`` caps the
    connections open at once (endpoints may share a host, so there is no per-host cap).
    """

    def __init__(self, *, timeout: float = 60.0, connections: int = 64) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0, got {timeout}")
        self.timeout = timeout
        self.connections = connections
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _open(self) -> aiohttp.ClientSession:
        import aiohttp

        loop = asyncio.get_running_loop()
        if self._session is not None:
            if self._loop is loop:
                return self._session
            raise RuntimeError(
                "this model client is bound to another event loop; build one client per "
                "loop (PerWorker does) or await aclose() before reusing it")
        connector = aiohttp.TCPConnector(limit=self.connections, limit_per_host=0)
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=self.timeout))
        self._loop = loop
        return self._session

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], *,
                   timeout: float | None = None) -> Response:
        session = self._open()
        try:
            return await self._exchange(session, url, body, headers, timeout or self.timeout)
        except TransportError:
            if session.closed:  # closed under the call (the run ended): nothing to retry
                raise TransportError("client closed during the call", cause="closed",
                                     retryable=False) from None
            raise

    async def get(self, url: str, headers: Mapping[str, str], *,
                  timeout: float | None = None) -> Response:
        return await self._exchange(self._open(), url, None, headers, timeout or self.timeout)

    async def _exchange(self, session: aiohttp.ClientSession, url: str, body: bytes | None,
                        headers: Mapping[str, str], timeout: float) -> Response:
        import aiohttp

        method = "GET" if body is None else "POST"
        try:
            if timeout == self.timeout:  # the session's (timeout=None would mean none at all)
                request = session.request(method, url, data=body, headers=headers)
            else:
                request = session.request(method, url, data=body, headers=headers,
                                          timeout=aiohttp.ClientTimeout(total=timeout))
            async with request as resp:
                return Response(resp.status, await resp.read(), resp.headers)
        except TimeoutError as exc:  # aiohttp's own timeouts derive from it too
            raise TransportError(f"timed out after {timeout:g} s", cause="timed out",
                                 error=ModelTimeout) from exc
        except aiohttp.ClientConnectorError as exc:
            raise TransportError(f"cannot connect ({exc.os_error.strerror or exc})",
                                 cause="cannot connect") from exc
        except aiohttp.ServerDisconnectedError as exc:
            raise TransportError("server disconnected", cause="server disconnected") from exc
        except aiohttp.ClientPayloadError as exc:
            raise TransportError(f"truncated response ({exc})", cause="truncated response",
                                 error=ModelBadResponse) from exc
        except (aiohttp.ClientError, OSError, RuntimeError) as exc:  # RuntimeError: closed
            raise TransportError(f"connection error ({type(exc).__name__}: {exc})",
                                 cause="connection error") from exc

    async def aclose(self) -> None:
        session, self._session = self._session, None
        self._loop = None
        if session is not None:
            await session.close()


Handler = Callable[[str, Any], "Response | Awaitable[Response]"]


class MockTransport:
    """Answers each request with ``handler(url, body)`` (``body`` decoded from JSON, None
    for a GET; the handler may be async, and may raise :class:`TransportError` to play a
    dead server).

    >>> def handler(url, body):
    ...     return Response.json({"choices": [{"message": {"content": "42"}}]})
    >>> model = OpenAIModel("m", model="m", base_urls="http://test/v1",
    ...                     transport=MockTransport(handler))  # doctest: +SKIP
    """

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        #: ``(url, body, headers)`` of every request, in order.
        self.requests: list[tuple[str, Any, Mapping[str, str]]] = []
        #: the ``timeout`` each request was given (None: the transport's own)
        self.timeouts: list[float | None] = []

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], *,
                   timeout: float | None = None) -> Response:
        data = json.loads(body)
        self.requests.append((url, data, dict(headers)))
        self.timeouts.append(timeout)
        return await self._answer(url, data)

    async def get(self, url: str, headers: Mapping[str, str], *,
                  timeout: float | None = None) -> Response:
        """Answered by ``handler(url, None)``."""
        return await self._answer(url, None)

    async def _answer(self, url: str, data: Any) -> Response:
        answer = self.handler(url, data)
        if inspect.isawaitable(answer):
            answer = await answer
        return answer

    async def aclose(self) -> None:
        pass
