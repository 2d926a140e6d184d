"""Who may talk to the studio.

- Bound to a loopback address (the default), only this machine can connect; requests must
  also name a loopback host in their ``Host`` header, so that a web page on another site
  cannot reach the studio by pointing a DNS name at 127.0.0.1 (DNS rebinding).
- Bound anywhere else, a token is required: generated with :mod:`secrets` unless given.
  Every request carries it as ``Authorization: Bearer TOKEN``, as ``?token=TOKEN`` (the first
  page load, and ``EventSource``, which cannot set headers), or as the cookie the studio sets
  after a valid ``?token=``.
- A ``POST`` whose ``Origin`` is not the studio's own is refused (another site's form).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import parse_qs, urlsplit

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

COOKIE = "populace_studio"
_LOOPBACK_NAMES = {"localhost", "localhost.", "ip6-localhost"}


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost."""
    host = host.strip().strip("[]").lower()
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def new_token() -> str:
    return secrets.token_urlsafe(24)


def _hostname(value: str) -> str:
    """The host part of a ``Host`` header (``[::1]:8765`` → ``::1``)."""
    value = value.strip()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class Guard:
    """ASGI middleware enforcing the rules in the module docstring."""

    def __init__(self, app: ASGIApp, *, token: str | None, loopback: bool) -> None:
        self.app = app
        self.token = token
        self.loopback = loopback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":  # the studio has none: refuse them all
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        host = headers.get("host", "")
        if self.loopback and not is_loopback(_hostname(host)):
            await _refuse(send, 403, "the studio answers only to localhost addresses")
            return
        origin = headers.get("origin")
        if scope.get("method") == "POST" and origin is not None \
                and urlsplit(origin).netloc.lower() != host.lower():
            await _refuse(send, 403, "cross-site request refused")
            return
        set_cookie = False
        if self.token is not None:
            how = self._credential(scope, headers)
            if how is None:
                await _refuse(send, 401, "missing or wrong token: open the URL the studio "
                                         "printed (it ends in ?token=…)")
                return
            set_cookie = how == "query"
        if not set_cookie:
            await self.app(scope, receive, send)
            return
        token = self.token
        assert token is not None

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                cookie = (f"{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict")
                message["headers"] = [*message.get("headers", []),
                                      (b"set-cookie", cookie.encode("latin-1"))]
            await send(message)

        await self.app(scope, receive, send_with_cookie)

    def _credential(self, scope: Scope, headers: dict[str, str]) -> str | None:
        """How the request proved it knows the token (``header``/``cookie``/``query``)."""
        assert self.token is not None
        expected = self.token.encode()

        def ok(given: str | None) -> bool:
            return given is not None and hmac.compare_digest(given.encode(), expected)

        auth = headers.get("authorization", "")
        if auth.lower().startswith("bearer ") and ok(auth[7:].strip()):
            return "header"
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(headers.get("cookie", ""))
        except CookieError:  # a malformed cookie header is simply no credential
            jar = SimpleCookie()
        if COOKIE in jar and ok(jar[COOKIE].value):
            return "cookie"
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        if any(ok(t) for t in query.get("token", [])):
            return "query"
        return None


async def _refuse(send: Send, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
