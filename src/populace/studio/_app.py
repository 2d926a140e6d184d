"""The studio's web application: JSON endpoints, server-sent events and the static page.

Endpoints (all under the security rules of ``_security``)::

    GET  /                                  the page (plain HTML/JS/CSS, no build step)
    GET  /api/runs                          runs: live ones, then those on disk
    POST /api/runs                          start {"config": "x.yaml", "agents": …, "steps": …}
    GET  /api/runs/{id}                     one snapshot (live, or rebuilt from disk)
    GET  /api/runs/{id}/events              snapshots as server-sent events, twice a second
    POST /api/runs/{id}/stop                ask a live run to stop
    GET  /api/runs/{id}/columns             the tables of agents; one's filterable columns
    GET  /api/runs/{id}/agents              one page of matching rows of one table
    GET  /api/runs/{id}/export?format=csv   all matching rows of one table (csv, parquet)
    GET  /api/runs/{id}/agents/{agent_id}   one agent: profile, background, rows per step
    GET  /api/runs/{id}/agents/{agent_id}/mind?step=K
                                            one agent's mind: its state (at checkpoint K,
                                            default the newest; a persona's text and
                                            memory), its LLM calls, its last prompt
    GET  /api/runs/{id}/view                what its scenario declares for the panels
    GET  /api/runs/{id}/shares              its categorical metrics, step by step
    GET  /api/runs/{id}/branch              a fork beside its source, step by step
    GET  /api/runs/{id}/sampling            archetype sampling: each step's audit
    GET  /api/runs/{id}/workers             each process's CPU and memory over the run
    GET  /api/runs/{id}/log                 its steps' warnings and failures, error.txt
    GET  /api/configs                       run files the studio may start
    GET  /runs/{id}/report/                 the run's report.html (and files it links)

Every error is ``{"error": "one line"}``: 400 for a request the studio refuses (a bad body
or parameter, a run file it does not list), 401/403 from ``_security``, 404 for what does
not exist (a run, a file, an agent, an id that cannot name one), 405 for a method a path
does not take, 409 for a run whose ``summary.json`` is damaged (the listing shows it with
status ``damaged`` and the reason under ``error``). An exception nothing expected (any
``BaseException`` but ``KeyboardInterrupt`` and a cancellation: ``SystemExit`` from a
scenario's code too) is one line in the log and a 500 ``{"error": "internal error"}``,
never a traceback.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import populace
from populace.launch import RunNotLive
from populace.results import RunSnapshot, run_snapshot

from ._agents import AgentBrowser, AgentQueryError, UnknownAgent
from ._control import add_routes
from ._runs import Damaged, NotFound, Refused, Runs
from ._security import Guard, _refuse, is_loopback
from ._view import (
    branch_view,
    categorical_history,
    run_log,
    sampling_history,
    scenario_view,
    state_describer,
)

STATIC = Path(__file__).parent / "static"
REPORT_FILES = (".html", ".png", ".svg", ".jpg", ".jpeg", ".css", ".js", ".json", ".csv")
LIVE_READ_S = 1.0   # seconds to read a live agent's state (its worker may be busy
#                     with a step) before its newest checkpoint answers instead
LIVE_ONLY_S = 5.0   # the same before the first checkpoint, when nothing else can answer
MAX_BODY = 64 * 1024  # bytes of a request body: a start request is a few dozen
_SOURCES = ("body", "query", "path", "header", "cookie")  # the first part of an error's loc

log = logging.getLogger("populace.studio")


def _no_such(e: Exception) -> str:
    name = str(e) if len(str(e)) <= 100 else str(e)[:100] + "…"
    return f"no run or file named {name!r}"


#: The errors a request may meet, each answered with its status and one line.
_EXPECTED: tuple[tuple[type[Exception], int, Callable[[Exception], str]], ...] = (
    (NotFound, 404, _no_such),
    (UnknownAgent, 404, str),
    (FileNotFoundError, 404, str),
    (Refused, 400, str),
    (AgentQueryError, 400, str),
    (Damaged, 409, str),
)


def _answer(status: int, say: Callable[[Exception], str]
            ) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
    async def handler(_: Request, e: Exception) -> JSONResponse:
        return JSONResponse({"error": say(e)}, status_code=status)
    return handler


class StartRequest(BaseModel):
    """What the start form sends: a run file and optional overrides (JSON numbers; no
    other fields)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    config: str = Field(max_length=1000)
    agents: int | None = Field(None, ge=1)
    steps: int | None = Field(None, ge=1)
    rounds: int | None = Field(None, ge=1)  # the same as steps
    workers: int | None = Field(None, ge=1)
    seed: int | None = None


def create_app(runs: Runs, *, host: str = "127.0.0.1", token: str | None = None,
               interval: float = 0.5) -> Any:
    """The studio as an ASGI app over ``runs``.

    ``host`` is the address the server binds: anything but loopback needs a ``token``
    (``ValueError`` otherwise). ``interval``: seconds between live updates.
    """
    loopback = is_loopback(host)
    if not loopback and not token:
        raise ValueError(f"binding the studio to {host} needs a token (--token, or let "
                         "`populace studio` generate one)")
    # No redirects to a slashed path: every answer is the page, JSON, or a JSON error.
    app = FastAPI(title="Populace Studio", version=populace.__version__, docs_url=None,
                  redoc_url=None, openapi_url=None, redirect_slashes=False)
    app.add_middleware(_InternalErrors)
    agents = AgentBrowser()
    app.state.runs = runs
    app.state.closing = False

    for kind, status, say in _EXPECTED:
        app.add_exception_handler(kind, _answer(status, say))

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        errors = e.errors()
        in_path = any(err.get("loc", ("",))[0] == "path" for err in errors)
        return JSONResponse({"error": _one_line(errors)}, status_code=404 if in_path else 400)

    @app.exception_handler(HTTPException)  # no such page, a method a path does not take
    async def http_error(_: Request, e: HTTPException) -> JSONResponse:
        return JSONResponse({"error": str(e.detail).lower()}, status_code=e.status_code,
                            headers=e.headers)

    def view(run_id: str) -> RunSnapshot:
        live = runs.live(run_id)
        return live.monitor.snapshot() if live is not None else run_snapshot(runs.check(run_id))

    def snapshot(run_id: str) -> dict[str, Any]:
        snap = view(run_id).to_json()
        snap["report"] = (runs.path(run_id) / "report.html").is_file()
        live = runs.live(run_id)
        control = live.control if live is not None else None
        # the step an intervention scheduled now lands in (the server's own count)
        snap["next_step"] = control.next_step if control is not None and control.live \
            else None
        # a pause asked for, and the step after which the run now waits (None: it plays)
        snap["paused"] = {"requested": control.paused, "waiting_after": control.waiting_after} \
            if control is not None and control.live else None
        return snap

    # -- pages -------------------------------------------------------------------------------
    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/runs/{run_id}/report/", include_in_schema=False)
    def report(run_id: str) -> FileResponse:
        return FileResponse(runs.file(run_id, "report.html", REPORT_FILES))

    @app.get("/runs/{run_id}/report/{name:path}", include_in_schema=False)
    def report_file(run_id: str, name: str) -> FileResponse:
        return FileResponse(runs.file(run_id, name, REPORT_FILES))

    # -- runs --------------------------------------------------------------------------------
    @app.get("/api/info")
    def info() -> dict[str, Any]:
        return {"version": populace.__version__, "runs_dir": str(runs.runs_dir),
                "roots": [str(r) for r in runs.roots]}

    @app.get("/api/runs")
    def list_runs() -> list[dict[str, Any]]:
        return runs.listing()

    # Starting and stopping run on the event loop, one at a time: no two starts can race.
    @app.post("/api/runs")
    async def start_run(request: Request) -> dict[str, Any]:
        try:  # read bounded and parsed here: FastAPI's parser fails on non-UTF-8 bodies
            body = StartRequest.model_validate_json(await _body(request))
        except ValidationError as e:
            raise Refused(_one_line(e.errors())) from None
        overrides = {k: v for k, v in body.model_dump().items() if k != "config"}
        live = runs.start(body.config, overrides)
        return {"id": live.run_id, "config": live.config}

    @app.get("/api/runs/{run_id}")
    def get_run(run_id: str) -> dict[str, Any]:
        return snapshot(run_id)

    @app.post("/api/runs/{run_id}/stop")
    async def stop_run(run_id: str) -> dict[str, Any]:
        live = runs.stop(run_id)
        return {"id": run_id, "status": live.monitor.status}

    @app.get("/api/runs/{run_id}/events")
    async def events(run_id: str, request: Request) -> StreamingResponse:
        snapshot(run_id)  # 404 before the stream starts

        async def stream() -> AsyncIterator[str]:
            yield "retry: 2000\n\n"
            while True:
                snap = snapshot(run_id)
                snap["sent_at"] = round(time.time(), 3)
                yield f"data: {json.dumps(snap, separators=(',', ':'))}\n\n"
                if snap["finished"] or app.state.closing:
                    yield "event: end\ndata: {}\n\n"
                    return
                await asyncio.sleep(interval)
                if await request.is_disconnected():
                    return

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache",
                                          "X-Accel-Buffering": "no"})

    # -- agents ------------------------------------------------------------------------------
    @app.get("/api/runs/{run_id}/columns")
    def columns(run_id: str, table: str | None = None, step: int | None = None
                ) -> dict[str, Any]:
        return agents.columns(runs.check(run_id), table=table, step=step)

    @app.get("/api/runs/{run_id}/agents")
    def search_agents(run_id: str, table: str | None = None, step: int | None = None,
                      agent_id: int | None = None, group: int | None = None,
                      attribute: str | None = None, value: str | None = None, page: int = 0,
                      size: int = 50) -> dict[str, Any]:
        return agents.search(runs.check(run_id), table=table, step=step, agent_id=agent_id,
                             group=group, attribute=attribute, value=value, page=page,
                             size=size)

    @app.get("/api/runs/{run_id}/export")
    async def export(run_id: str, table: str | None = None, step: int | None = None,
                     agent_id: int | None = None, group: int | None = None,
                     attribute: str | None = None, value: str | None = None,
                     format: str = "csv") -> Response:
        if format not in ("csv", "parquet"):
            raise Refused(f"format: {format[:20]!r} (expected csv or parquet)")
        path = runs.check(run_id)
        chosen, rows = await asyncio.to_thread(
            agents.matching, path, table=table, step=step, agent_id=agent_id, group=group,
            attribute=attribute, value=value)
        data = await asyncio.to_thread(_encode, rows, format)
        at = f"-step{chosen['step']}" if chosen.get("step") is not None else ""
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{run_id}-{chosen['name']}{at}") + f".{format}"
        return Response(data, media_type="text/csv" if format == "csv"
                        else "application/vnd.apache.parquet",
                        headers={"Content-Disposition": f'attachment; filename="{name}"'})

    @app.get("/api/runs/{run_id}/agents/{agent_id}")
    def agent(run_id: str, agent_id: int) -> dict[str, Any]:
        series = view(run_id).series
        metrics = {t: {k: v[i] for k, v in series.metrics.items() if v[i] is not None}
                   for i, t in enumerate(series.steps)}
        return agents.agent(runs.check(run_id), agent_id, metrics=metrics)

    @app.get("/api/runs/{run_id}/agents/{agent_id}/mind")
    async def mind(run_id: str, agent_id: int, step: int | None = None) -> dict[str, Any]:
        path = runs.check(run_id)
        live = runs.live(run_id)
        control = live.control if live is not None else None
        live_state = live_mind = done = None
        busy = False
        if step is None and control is not None and control.live:
            wait = LIVE_READ_S if control.steps_done else LIVE_ONLY_S
            try:  # the agent as the running simulation holds it, read beside the step
                done, live_state, live_mind = await asyncio.wait_for(
                    asyncio.wrap_future(control.agent_state(agent_id)), wait)
            except TimeoutError:  # its worker is busy: the checkpoint answers, if any
                live_state = live_mind = None
                busy = True
            except (RunNotLive, LookupError, ValueError):
                live_state = live_mind = None  # gone or unknown: the checkpoint answers
        _, describe = await asyncio.to_thread(declared, run_id, path)
        found = await asyncio.to_thread(agents.mind, path, agent_id, step=step,
                                        live_state=live_state, live_mind=live_mind,
                                        describe=describe)
        if found.get("state") and found["state"]["source"] == "live":
            found["state"]["step"] = done  # the steps written when it was read
        found["live_busy"] = busy  # the page reads again by itself
        return found

    views: dict[str, tuple[dict[str, Any], Any]] = {}  # run id → (its view, describer)

    def declared(run_id: str, path: Path) -> tuple[dict[str, Any], Any]:
        found = views.get(run_id)
        if found is None:
            found = (scenario_view(path), state_describer(path))
            if found[0]["scenario"] is not None:  # a run's scenario does not change
                views[run_id] = found
        return found

    @app.get("/api/runs/{run_id}/view")
    async def run_view(run_id: str) -> dict[str, Any]:
        path = runs.check(run_id)
        view, _ = await asyncio.to_thread(declared, run_id, path)
        return view

    @app.get("/api/runs/{run_id}/shares")
    async def shares(run_id: str) -> dict[str, Any]:
        path = runs.check(run_id)
        view, _ = await asyncio.to_thread(declared, run_id, path)
        return await asyncio.to_thread(categorical_history, path, view["categorical"])

    @app.get("/api/runs/{run_id}/sampling")
    async def sampling(run_id: str) -> dict[str, Any]:
        return await asyncio.to_thread(sampling_history, runs.check(run_id))

    @app.get("/api/runs/{run_id}/workers")
    def workers(run_id: str) -> dict[str, Any]:
        runs.check(run_id)
        live = runs.live(run_id)  # measured by this process only: none from disk
        return live.monitor.worker_history() if live is not None else {"t": [],
                                                                      "processes": []}

    @app.get("/api/runs/{run_id}/log")
    async def log_of(run_id: str) -> dict[str, Any]:
        return await asyncio.to_thread(run_log, runs.check(run_id))

    @app.get("/api/runs/{run_id}/branch")
    async def branch(run_id: str) -> dict[str, Any]:
        origin = (await asyncio.to_thread(view, run_id)).forked_from
        if not origin:
            raise Refused(f"run {run_id} is not a fork")
        try:
            source = runs.check(str(origin["run"]))
        except (NotFound, Damaged) as e:
            raise Refused(f"its source {origin['run']} is not among the runs here") from e
        return await asyncio.to_thread(branch_view, runs.path(run_id), source,
                                       int(origin.get("step") or 0))

    @app.get("/api/configs")
    def configs() -> list[str]:
        return runs.configs()

    add_routes(app, runs, _body, _one_line)  # interviews, interventions, forks

    return Guard(app, token=token, loopback=loopback)


def _encode(rows: pa.Table, format: str) -> bytes:
    """``rows`` as a CSV or Parquet file."""
    sink = io.BytesIO()
    if format == "csv":
        pa_csv.write_csv(rows, sink)
    else:
        pq.write_table(rows, sink)
    return sink.getvalue()


def _one_line(errors: Sequence[Any]) -> str:
    """Pydantic's errors as one line: where the first is, what it says, how many more."""
    first = errors[0] if errors else {}
    loc = [str(part) for part in first.get("loc", ())]
    where = ".".join(loc[1:] if loc and loc[0] in _SOURCES else loc) or "request body"
    message = " ".join(str(first.get("msg", "invalid")).split())
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {message}{more}"


async def _body(request: Request) -> bytes:
    """The request's body; :class:`Refused` past ``MAX_BODY`` bytes, before reading on."""
    too_big = Refused(f"the request body is over {MAX_BODY >> 10} KiB")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY:
        raise too_big
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise too_big
        chunks.append(chunk)
    return b"".join(chunks)


class _InternalErrors:
    """ASGI middleware: an exception that no handler expects becomes one line in the log and
    a 500 ``{"error": "internal error"}`` (or the end of a stream already under way),
    instead of a traceback and a plain-text page."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except (KeyboardInterrupt, asyncio.CancelledError):
            raise
        except BaseException as e:  # the point: no exception reaches the server (SystemExit
            # from a scenario imported by a start request included)
            while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
                e = e.exceptions[0]
            if isinstance(e, KeyboardInterrupt | asyncio.CancelledError):
                raise e from None
            text = (str(e).splitlines() or [""])[0][:200]
            log.error("studio: %s %r failed: %s: %s", scope.get("method"), scope.get("path"),
                      type(e).__name__, text)
            if started:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            else:
                await _refuse(send, 500, "internal error")
