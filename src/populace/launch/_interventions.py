"""Interventions: a message to agents, or a change of the environment, at a chosen step.

Each intervention is one line of ``RUN_DIR/interventions.jsonl``, written before the step it
is for begins, and carried out by the launcher at the start of that step, before the
scenario's ``step``. Because the file is part of the run directory, ``--resume`` carries out
the ones of the steps it plays again, ``--replay`` the replayed run's, and a fork the ones
of its source. A message reaches the chosen agents through ``observe`` (their memory, by
default): what they make of it is the scenario's business. An environment change sets a key
of the run's (first) served environment.

>>> Intervention(step=3, kind="message", text="A storm is coming.", where='age > 60').kind
'message'
"""

from __future__ import annotations

import json
import os
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, ValidationError, model_validator

from populace._strict import StrictModel
from populace.core import ConfigError, Msg, derive_seed

from ._select import select

INTERVENTIONS = "interventions.jsonl"
MAX_TEXT = 4000


class Intervention(StrictModel):
    """One scheduled change: ``message`` (``text`` to the agents chosen by ``agents``,
    ``where`` and ``sample``; all of them by default) or ``environment`` (``key`` set to
    ``value`` in environment ``env``, default the served one's root)."""

    step: int = Field(ge=1, strict=True)
    kind: Literal["message", "environment"]
    text: str | None = Field(None, max_length=MAX_TEXT)
    agents: list[int] | None = Field(None, max_length=100_000)
    where: str | None = Field(None, max_length=2000)
    sample: int | None = Field(None, ge=1, strict=True)
    key: str | None = Field(None, min_length=1, max_length=200)
    value: Any = None
    env: str | None = Field(None, max_length=200)
    made: float | None = None  # when it was scheduled (seconds since the epoch)

    @model_validator(mode="after")
    def _fits_kind(self) -> Intervention:
        if self.kind == "message":
            if not (self.text or "").strip():
                raise ValueError("a message needs text")
            if self.key is not None:
                raise ValueError("a message takes no key (that is an environment change)")
        else:
            if self.key is None:
                raise ValueError("an environment change needs a key")
            if self.text is not None or self.where is not None or self.agents is not None \
                    or self.sample is not None:
                raise ValueError("an environment change takes key, value and env only")
        try:
            json.dumps(self.value, allow_nan=False)
        except (TypeError, ValueError):
            raise ValueError("value must be JSON (a number, text, list or mapping)") from None
        return self

    def describe(self) -> str:
        if self.kind == "environment":
            where = f" in {self.env}" if self.env else ""
            return f"set {self.key} = {json.dumps(self.value)}{where}"
        who = []
        if self.agents is not None:
            who.append(f"agents {', '.join(map(str, self.agents[:5]))}"
                       f"{'…' if len(self.agents) > 5 else ''}")
        if self.where:
            who.append(f"where {self.where}")
        if self.sample:
            who.append(f"a sample of {self.sample}")
        return f"message to {' and '.join(who) or 'all agents'}: {self.text}"


def parse_intervention(data: Any, source: str) -> Intervention:
    """An intervention from a mapping; ConfigError naming ``source`` and the key if bad."""
    try:
        return Intervention.model_validate(data)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        key = ".".join(str(p) for p in first["loc"])
        message = str(first["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"{source}: {key + ': ' if key else ''}{message}") from None


def read_interventions(run_dir: Path) -> list[Intervention]:
    """The interventions of ``run_dir``, in the order they were scheduled (a line cut short
    by a crash is left out: it was never acknowledged)."""
    path = Path(run_dir) / INTERVENTIONS
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    out = []
    for n, line in enumerate(lines, 1):
        if line.strip():
            try:
                data = json.loads(line)
            except ValueError:
                if n == len(lines) and not text.endswith("\n"):
                    break  # a write cut short by a crash: never acknowledged
                raise ConfigError(f"{path}: line {n}: not JSON") from None
            out.append(parse_intervention(data, f"{path}: line {n}"))
    return out


def append(run_dir: Path, intervention: Intervention) -> None:
    """Add ``intervention`` to ``run_dir``'s file, durably (one write, fsynced)."""
    path = Path(run_dir) / INTERVENTIONS
    line = json.dumps(intervention.model_dump(mode="json", exclude_none=True),
                      separators=(",", ":"), allow_nan=False) + "\n"
    if path.exists() and path.stat().st_size:
        with open(path, "rb") as f:  # a hand-written last line may lack its newline
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                line = "\n" + line
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def write_all(run_dir: Path, interventions: Sequence[Intervention]) -> None:
    path = Path(run_dir) / INTERVENTIONS
    path.unlink(missing_ok=True)
    for i in interventions:
        append(run_dir, i)


def stamped(intervention: Intervention) -> Intervention:
    return intervention.model_copy(update={"made": round(time.time(), 3)})


async def _set(run: Any, i: Intervention) -> str | None:
    """Set ``i.key`` in the run's environment; what went wrong, or None."""
    if not run.services:
        return "the run serves no environment"
    service = run.services[0]
    try:
        try:
            await service.update(i.key, i.value, env=i.env)
        except KeyError:  # a key the environment did not have: created
            await service.register(i.key, i.value, env=i.env)
    except (LookupError, ValueError, TypeError) as e:  # no such environment, a bad value
        return " ".join(str(e).split())[:300] or type(e).__name__
    return None


def chosen(run: Any, intervention: Intervention, t: int, n: int) -> np.ndarray:
    """The agents message ``intervention`` (the ``n``-th of step ``t``) reaches."""
    every = np.concatenate([g.ids for _, g in run.groups.values()]) \
        if run.groups else np.array([], np.int64)
    written = run.run_dir.read_profiles() if run.run_dir is not None else None
    return select(written if written is not None else run.population,
                  where=intervention.where, agents=intervention.agents,
                  sample=intervention.sample, ids=every,
                  seed=derive_seed(run.seed, zlib.crc32(b"intervention"), t, n))


async def carry_out(run: Any, interventions: Sequence[Intervention], t: int
                    ) -> list[dict[str, Any]]:
    """Carry out the interventions for step ``t`` on ``run``; what each did (for the step's
    summary entry)."""
    done = []
    for n, i in enumerate(x for x in interventions if x.step == t):
        entry: dict[str, Any] = {"kind": i.kind, "what": i.describe()[:300]}
        if i.kind == "message":
            ids = chosen(run, i, t, n)
            msg = Msg("intervention", i.text, role="system", metadata={"step": t})
            reached = 0
            for _cls, group in run.groups.values():
                mask = np.isin(group.ids, ids)
                if mask.any():
                    await group.select(mask).observe(msg)
                    reached += int(mask.sum())
            entry["agents"] = reached
        else:
            problem = await _set(run, i)
            if problem is not None:  # told, and the run goes on: it stays resumable
                entry["error"] = problem
                run.warn(f"intervention {i.describe()!r} not carried out: {problem}")
        done.append(entry)
    return done
