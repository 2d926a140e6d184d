"""The studio's hands on a run: interview agents, schedule interventions, fork.

Endpoints (added to the app by :func:`add_routes`, under its security rules)::

    GET  /api/runs/{id}/interviews          the run's interviews (newest first, paged)
    POST /api/runs/{id}/interviews          ask {"question", "agents"?, "where"?, "sample"?,
                                            "step"?}: a live run between its steps, else
                                            the run rebuilt from a checkpoint
    GET  /api/runs/{id}/interventions       scheduled and carried-out interventions
    POST /api/runs/{id}/interventions       schedule one for the next step of a live run:
                                            {"kind": "message", "text", "agents"?, "where"?,
                                            "sample"?} or {"kind": "environment", "key",
                                            "value", "env"?}
    POST /api/runs/{id}/fork                {"step", "set"?: {"game.ratio": 0.5}}: start a
                                            new live run from that step's checkpoint
    POST /api/runs/{id}/pause               hold a live run at its next step boundary
    POST /api/runs/{id}/resume              go on ({"steps": 1}: one more step, then hold)

A request that cannot be carried out is a 400 ``{"error": "one line"}`` (an unknown agent or
setting, a step without a checkpoint, a bad query); one that needs a live run of a run that
is not live is a 409. A live interview waits for the step in progress; if that takes longer
than ``WAIT_S`` the answer is 202 ``{"queued": true}`` and the answers arrive in the list.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from populace.core import ConfigError
from populace.launch import (
    InterviewError,
    RunNotLive,
    checkpointed_steps,
    interview,
    interview_run,
    parse_intervention,
    read_interventions,
    read_interviews,
    save_interview,
    written_profiles,
)

from ._runs import Refused, Runs

WAIT_S = 20.0
MAX_ROWS = 200


class InterviewRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    question: str = Field(min_length=1, max_length=2000)
    agents: list[int] | None = Field(None, max_length=10_000)
    where: str | None = Field(None, max_length=2000)
    sample: int | None = Field(None, ge=1, le=10_000)
    step: int | None = Field(None, ge=0)


class ResumeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    steps: int | None = Field(None, ge=1, le=1_000_000)


class ForkRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    step: int = Field(ge=1)
    set: dict[str, Any] = Field(default_factory=dict, max_length=50)


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def add_routes(app: FastAPI, runs: Runs, read_body: Any, one_line: Any) -> None:
    """Add the endpoints above to ``app`` (``read_body``: the app's bounded body reader;
    ``one_line``: its pydantic-errors-as-one-line)."""
    offline = threading.Lock()  # one run rebuilt from a checkpoint at a time

    def answer(status: int) -> Any:
        async def handler(_: Request, e: Exception) -> JSONResponse:
            return JSONResponse({"error": str(e)}, status_code=status)
        return handler

    for error, status in ((ConfigError, 400), (InterviewError, 400), (RunNotLive, 409)):
        app.add_exception_handler(error, answer(status))

    async def body_of(request: Request, model: type[BaseModel]) -> Any:
        try:
            return model.model_validate_json(await read_body(request))
        except ValidationError as e:
            raise Refused(one_line(e.errors())) from None

    @app.get("/api/runs/{run_id}/interviews")
    def list_interviews(run_id: str, page: int = Query(0, ge=0)) -> dict[str, Any]:
        table = read_interviews(runs.check(run_id))
        if table is None:
            return {"total": 0, "rows": []}
        rows = table.to_pylist()[::-1]
        start = max(0, page) * MAX_ROWS
        return {"total": len(rows), "rows": [{k: _clean(v) for k, v in r.items()}
                                             for r in rows[start:start + MAX_ROWS]]}

    @app.post("/api/runs/{run_id}/interviews")
    async def ask(run_id: str, request: Request) -> Any:
        body = await body_of(request, InterviewRequest)
        path = runs.check(run_id)
        if body.agents is None and body.where is None and body.sample is None:
            raise Refused("choose whom to ask: agents, where and/or sample")
        choice = {"agents": body.agents, "where": body.where, "sample": body.sample}
        live = runs.live(run_id)
        control = live.control if live is not None else None
        if control is not None and control.live and body.step is None:
            async def job(run: Any) -> Any:
                rows = await interview_run(run, body.question, step=control.steps_done,
                                           source="live", profiles=written_profiles(path),
                                           **choice)
                return save_interview(path, rows), rows

            future = control.between_steps(job)
            try:
                # shielded: a wait cut short leaves the interview queued, not cancelled
                number, rows = await asyncio.wait_for(
                    asyncio.shield(asyncio.wrap_future(future)), WAIT_S)
            except TimeoutError:
                return JSONResponse({"queued": True, "after_step": control.steps_done + 1},
                                    status_code=202)
        else:
            if body.step is not None and body.step not in checkpointed_steps(path):
                have = ", ".join(map(str, checkpointed_steps(path))) or "none"
                raise Refused(f"step {body.step} has no checkpoint (steps with one: {have})")
            if not offline.acquire(blocking=False):
                raise Refused("another interview from a checkpoint is under way; try again")
            try:
                number, rows = await asyncio.to_thread(
                    lambda: asyncio.run(interview(path, body.question, step=body.step,
                                                  **choice)))
            finally:
                offline.release()
        return {"interview": number, "rows": [{k: _clean(v) for k, v in r.items()}
                                              for r in rows]}

    @app.get("/api/runs/{run_id}/interventions")
    def list_interventions(run_id: str) -> dict[str, Any]:
        path = runs.check(run_id)
        live = runs.live(run_id)
        control = live.control if live is not None else None
        done = control.steps_done if control is not None and control.live else None
        out = []
        for i in read_interventions(path):
            row = i.model_dump(mode="json", exclude_none=True)
            row["what"] = i.describe()
            if done is not None:
                row["pending"] = i.step > done
            out.append(row)
        return {"interventions": out,
                "next_step": control.next_step if done is not None and control else None}

    @app.post("/api/runs/{run_id}/interventions")
    async def intervene(run_id: str, request: Request) -> Any:
        raw = await read_body(request)
        runs.check(run_id)
        live = runs.live(run_id)
        control = live.control if live is not None else None
        if control is None or not control.live:
            raise RunNotLive(f"run {run_id} is not running: fork it to change what comes next")
        try:
            data = json.loads(raw)
        except ValueError:
            raise Refused("the request body is not JSON") from None
        except RecursionError:
            raise Refused("the request body is nested too deeply") from None
        if not isinstance(data, dict):
            raise Refused("expected a JSON object")
        data.setdefault("step", control.next_step)
        intervention = parse_intervention(data, "intervention")
        try:  # an environment that is not the run's is refused now, not warned of later
            await asyncio.wait_for(asyncio.wrap_future(
                control.check_environment(intervention)), WAIT_S)
        except TimeoutError:
            raise Refused(f"the run did not answer within {WAIT_S:g} s whether it has "
                          f"environment {intervention.env!r}; try again") from None
        written = control.intervene(intervention)
        return {"intervention": {**written.model_dump(mode="json", exclude_none=True),
                                 "what": written.describe()}}

    def live_control(run_id: str) -> Any:
        runs.check(run_id)
        live = runs.live(run_id)
        control = live.control if live is not None else None
        if control is None or not control.live:
            raise RunNotLive(f"run {run_id} is not running")
        return control

    @app.post("/api/runs/{run_id}/pause")
    async def pause(run_id: str) -> dict[str, Any]:
        control = live_control(run_id)
        control.pause()
        return {"paused": True, "waiting_after": control.waiting_after}

    @app.post("/api/runs/{run_id}/resume")
    async def resume(run_id: str, request: Request) -> dict[str, Any]:
        raw = await read_body(request)
        try:  # no body: resume for good
            body = ResumeRequest.model_validate_json(raw if raw.strip() else b"{}")
        except ValidationError as e:
            raise Refused(one_line(e.errors())) from None
        control = live_control(run_id)
        control.resume(body.steps)
        return {"paused": control.paused, "steps": body.steps}

    @app.post("/api/runs/{run_id}/fork")
    async def fork_run(run_id: str, request: Request) -> dict[str, Any]:
        body = await body_of(request, ForkRequest)
        live = await asyncio.to_thread(runs.fork, run_id, body.step, dict(body.set))
        return {"id": live.run_id, "forked_from": run_id, "step": body.step}
