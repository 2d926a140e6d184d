"""Checks that every configured model can answer, before a run starts.

A wrong base URL, a misspelt model name or a forgotten API key would otherwise surface as a
thousand failed agent calls, each after its retries. :func:`preflight` asks each server once
(``GET {base_url}/models``, all endpoints at the same time) and turns the first problem into
one :class:`~populace.core.ConfigError` line.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # aiohttp loads when a server is asked: a run of offline models never
    import aiohttp  # pays its import (~0.1 s of every start)

from populace.core import ConfigError

from ._config import ModelConfig, OpenAIConfig
from ._servers import owner_kind

_SHOWN_MODELS = 8  # served model ids listed in a "does not serve" message

_Check = tuple[str, OpenAIConfig, str, str | None]  # model key, its config, a URL, the API key


@dataclass(frozen=True, slots=True)
class Served:
    """What the preflight learnt of a model's servers: which kind of server it is (for its
    own spelling of structured decoding, by its ``owned_by``: see
    :class:`~populace.llm.ServerKind`; ``openai`` when it does not say) and how many
    requests each computes at once, where it declares it (llama.cpp's ``/props``)."""

    server: str
    slots: int | None = None


class _Listing:
    """What one ``GET /models`` gave: the served ids, or why there are none."""

    __slots__ = ("ids", "owners", "problem", "slots", "status")

    def __init__(self, ids: list[str] | None = None, *, status: int = 200,
                 problem: str | None = None, owners: dict[str, str] | None = None) -> None:
        self.ids = ids
        self.status = status
        self.problem = problem  # text after "cannot reach URL (…)", for network failures
        self.owners = owners or {}  # model id → owned_by
        self.slots: int | None = None  # from /props, for servers that declare them


def _unreachable(exc: BaseException) -> str:
    """Why a connection failed, in a few words."""
    import aiohttp

    if isinstance(exc, TimeoutError):
        return "no answer"
    if isinstance(exc, aiohttp.ClientConnectorDNSError) or isinstance(
            getattr(exc, "os_error", None), socket.gaierror):
        return "unknown host"
    if isinstance(exc, aiohttp.ClientSSLError):
        return f"TLS error: {exc}"
    os_error = getattr(exc, "os_error", None)
    if isinstance(os_error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(os_error, OSError) and os_error.strerror:
        return os_error.strerror.lower()
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "server disconnected"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def _list_models(session: aiohttp.ClientSession, base_url: str,
                       api_key: str | None, timeout: float) -> _Listing:
    import aiohttp

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        async with session.get(f"{base_url}/models", headers=headers) as resp:
            status = resp.status
            raw = await resp.read()
    except TimeoutError:
        return _Listing(problem=f"no answer within {timeout:g} s")
    except (aiohttp.ClientError, OSError) as exc:
        return _Listing(problem=_unreachable(exc))
    if status != 200:
        return _Listing(status=status)
    try:
        data = json.loads(raw)["data"]
        ids = [m["id"] for m in data]
    except (ValueError, KeyError, TypeError):
        return _Listing(status=status)
    owners = {m["id"]: m.get("owned_by") for m in data
              if isinstance(m["id"], str) and isinstance(m.get("owned_by"), str)}
    listing = _Listing([i for i in ids if isinstance(i, str)], owners=owners)
    path = next((k.slots_path for o in owners.values()
                 if (k := owner_kind(o)) is not None and k.slots_path), None)
    if path is not None:
        listing.slots = await _slots(session, base_url, headers, path)
    return listing


async def _slots(session: aiohttp.ClientSession, base_url: str,
                 headers: dict[str, str], path: str) -> int | None:
    """``total_slots`` of ``GET {path}`` (llama.cpp's ``/props``, at the server's root,
    beside ``/v1``); None when it does not answer with one."""
    import aiohttp

    root = base_url.removesuffix("/v1")
    try:
        async with session.get(f"{root}{path}", headers=headers) as resp:
            if resp.status != 200:
                return None
            slots = json.loads(await resp.read()).get("total_slots")
    except (TimeoutError, aiohttp.ClientError, OSError, ValueError, AttributeError):
        return None
    return slots if type(slots) is int and slots > 0 else None


def _served(config: OpenAIConfig, listings: list[_Listing]) -> Served:
    """The kind of server a model's endpoints are (the first one's) and their slots (the
    fewest any declares)."""
    owner = next((lst.owners.get(config.model) for lst in listings
                  if lst.owners.get(config.model)), None)
    slots = [lst.slots for lst in listings if lst.slots is not None]
    kind = owner_kind(owner)
    return Served(kind.name if kind is not None else "openai", min(slots) if slots else None)


def _serves(ids: list[str], model: str) -> bool:
    # Ollama lists "llama3:latest" and answers to "llama3".
    return model in ids or (":" not in model and f"{model}:latest" in ids)


def _judge(name: str, config: OpenAIConfig, url: str, listing: _Listing,
           api_key: str | None) -> str | None:
    where = f"models.{name}"
    if listing.problem is not None:
        return f"{where}: cannot reach {url} ({listing.problem})"
    if listing.status in (401, 403):
        if api_key is None:
            return (f"{where}: server at {url} requires an API key (HTTP {listing.status}); "
                    "name the variable holding it in api_key_env")
        return (f"{where}: server at {url} rejected the API key from {config.api_key_env} "
                f"(HTTP {listing.status})")
    if listing.ids is None:
        if listing.status == 200:
            return f"{where}: {url}/models did not answer with a model list; is {url} the API root?"
        hint = "; is the base URL right (usually ending in /v1)?" if listing.status == 404 else ""
        return f"{where}: server at {url} answered HTTP {listing.status} to GET /models{hint}"
    if not _serves(listing.ids, config.model):
        served = ", ".join(listing.ids[:_SHOWN_MODELS]) or "nothing"
        if len(listing.ids) > _SHOWN_MODELS:
            served += f", … ({len(listing.ids)} in all)"
        return (f"{where}: server at {url} does not serve model {config.model!r} "
                f"(it serves: {served})")
    return None


async def preflight(models: Mapping[str, ModelConfig], *,
                    timeout: float = 5.0) -> dict[str, Served]:
    """Raise :class:`~populace.core.ConfigError` if a configured model cannot answer;
    return what was learnt of each ``openai`` model's servers (:class:`Served`).

    >>> asyncio.run(preflight({"qwen": OpenAIConfig(provider="openai", model="qwen",
    ...     base_urls=["http://gpu1:8000/v1"])}))  # doctest: +SKIP
    Traceback (most recent call last):
    populace.core.ConfigError: models.qwen: cannot reach http://gpu1:8000/v1 (unknown host)

    For each ``openai`` model: the ``api_key_env`` variable must be set and non-empty, and
    every base URL must answer ``GET /models`` within ``timeout`` seconds, accept the key, and
    list the configured ``model``. All endpoints are asked at once, each URL only once per
    key. The message is one line naming the model's key and the first problem, in config
    order, with ``(+N more)`` when there are others. Dummy and scripted models always pass,
    and so do models whose batch jobs are files (``batch.mode: files``). Await it
    from a task (``asyncio.run`` makes one), not from inside an agent.
    """
    # In config order: a key problem, or the endpoint checks of the model.
    plan: list[str | _Check] = []
    for name, config in models.items():
        if not isinstance(config, OpenAIConfig):
            continue
        if config.batch is not None and config.batch.mode == "files":
            continue  # vLLM's run_batch reads files: no server to ask
        api_key = None
        if config.api_key_env is not None:
            api_key = os.environ.get(config.api_key_env)
            if not api_key:
                plan.append(f"models.{name}: environment variable {config.api_key_env} "
                            "(api_key_env) is not set or empty")
                continue
        plan.extend((name, config, url, api_key) for url in config.base_urls)
    checks = [step for step in plan if not isinstance(step, str)]
    listings = await _list_all(checks, timeout) if checks else {}
    found = []
    for step in plan:
        if isinstance(step, str):
            found.append(step)
        else:
            name, config, url, api_key = step
            verdict = _judge(name, config, url, listings[url, api_key], api_key)
            if verdict is not None:
                found.append(verdict)
    if found:
        more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
        raise ConfigError(" ".join(found[0].split()) + more)
    learnt: dict[str, list[_Listing]] = {}
    for step in checks:
        name, _, url, api_key = step
        learnt.setdefault(name, []).append(listings[url, api_key])
    return {name: _served(models[name], found_listings)  # type: ignore[arg-type]
            for name, found_listings in learnt.items()}


async def _list_all(checks: list[_Check], timeout: float
                    ) -> dict[tuple[str, str | None], _Listing]:
    """``GET /models`` of every endpoint at once, each (URL, key) once."""
    import aiohttp

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=timeout)) as session, \
            asyncio.TaskGroup() as group:  # _list_models returns its failures, never raises
        tasks: dict[tuple[str, str | None], asyncio.Task[_Listing]] = {}
        for _, _, url, api_key in checks:
            if (url, api_key) not in tasks:
                tasks[url, api_key] = group.create_task(
                    _list_models(session, url, api_key, timeout))
    return {k: t.result() for k, t in tasks.items()}
