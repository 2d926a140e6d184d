"""Interventions: a message to agents, or a change of the environment, at a chosen step.

Each intervention is one line of ``RUN_DIR/interventions.jsonl``, written before the step it
is for begins, and carried out by the launcher at the start of that step, before the
scenario's ``step``. Because the file is part of the run directory, ``--resume`` carries out
the ones of the steps it plays again, ``--replay`` the replayed run's, and a fork the ones
of its source. A message reaches the chosen agents through ``observe`` (their memory, by
default): what they make of it is the scenario's business. An environment change sets a key
of the run's (first) served environment.

A live run is intervened on through its :class:`~populace.launch.RunControl` (the studio);
a run that no process is running, through :func:`intervene` (``populace intervene``).

>>> Intervention(step=3, kind="message", text="A storm is coming.", where='age > 60').kind
'message'
"""

from __future__ import annotations

import json
import os
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, ValidationError, model_validator

from populace._strict import StrictModel
from populace.core import ConfigError, Msg, derive_seed
from populace.results import RunDirectory, RunInUse

from ._select import check_where, select, utf8_text

INTERVENTIONS = "interventions.jsonl"
MAX_TEXT = 4000
MAX_VALUE_DEPTH = 32  # lists and mappings nested in an environment change's value
MAX_FILE = 64 << 20   # bytes of interventions.jsonl


def _depth(value: Any) -> int:
    """How deeply lists and mappings nest in ``value`` (walked without recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, depth)
            if depth <= MAX_VALUE_DEPTH:
                stack.extend((v, depth + 1) for v in
                             (node.values() if isinstance(node, dict) else node))
    return deepest


def _strings(value: Any) -> list[str]:
    """Every string in ``value`` (keys too), at most :data:`MAX_VALUE_DEPTH` deep."""
    found, stack = [], [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            found.append(node)
        elif isinstance(node, dict | list) and depth <= MAX_VALUE_DEPTH:
            items = [*node.keys(), *node.values()] if isinstance(node, dict) else node
            stack.extend((v, depth + 1) for v in items)
    return found


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
        except RecursionError:
            raise ValueError("value: nested too deeply") from None
        if _depth(self.value) > MAX_VALUE_DEPTH:
            raise ValueError(f"value: nested too deeply (at most {MAX_VALUE_DEPTH} levels)")
        try:
            for name in ("text", "where", "key", "env"):
                if getattr(self, name) is not None:
                    utf8_text(getattr(self, name), name)
            for text in _strings(self.value):
                utf8_text(text, "value")
            if self.where is not None:
                check_where(self.where)
        except ConfigError as e:  # pydantic reports ValueErrors, with the key
            raise ValueError(str(e)) from None
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


def parse_intervention(data: Any, source: str, *, flags: bool = False) -> Intervention:
    """An intervention from a mapping; ConfigError naming ``source`` and the key if bad
    (``flags``: the key as the command line spells it, ``--text``, and no source)."""
    try:
        return Intervention.model_validate(data)
    except RecursionError:
        raise ConfigError(f"{'' if flags else source + ': '}nested too deeply") from None
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        key = ".".join(str(p) for p in first["loc"])
        message = str(first["msg"]).removeprefix("Value error, ")
        if flags:
            name = {"agents": "agent"}.get(str(first["loc"][0]), str(first["loc"][0])) \
                if first["loc"] else ""
            raise ConfigError(f"{'--' + name + ': ' if name else ''}{message}") from None
        raise ConfigError(f"{source}: {key + ': ' if key else ''}{message}") from None


def read_interventions(run_dir: Path) -> list[Intervention]:
    """The interventions of ``run_dir``, in the order they were scheduled (a line cut short
    by a crash is left out: it was never acknowledged). A file edited into something else
    is one line naming it and the line (ConfigError): not a regular file, not UTF-8, not
    JSON, nested too deeply, or an intervention that could not be carried out."""
    return [i for _, i in _numbered(Path(run_dir))]


def check_interventions(run_dir: Path) -> None:
    """Read ``run_dir``'s interventions as :func:`read_interventions` does, and choose each
    message's agents from the run's ``profiles.parquet`` as its step will: an unknown
    agent, a column the profiles lack or a query that matches nobody is one line naming the
    file and the line (ConfigError) now, before a resume or fork changes anything, rather
    than the run failing at that step."""
    path = Path(run_dir) / INTERVENTIONS
    numbered = _numbered(Path(run_dir))
    if not any(i.kind == "message" and (i.where is not None or i.agents is not None)
               for _, i in numbered):
        return
    profiles = RunDirectory(run_dir).read_profiles()
    if profiles is None:
        return  # written by the run itself: checked when its step comes
    for n, i in numbered:
        if i.kind == "message" and (i.where is not None or i.agents is not None):
            try:
                select(profiles, where=i.where, agents=i.agents)
            except ConfigError as e:
                raise ConfigError(f"{path}: line {n}: {e}") from None


def _numbered(run_dir: Path) -> list[tuple[int, Intervention]]:
    path = run_dir / INTERVENTIONS
    data = RunDirectory(run_dir).read_file(INTERVENTIONS, MAX_FILE)
    if data is None:
        return []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        n = data.count(b"\n", 0, e.start) + 1
        raise ConfigError(f"{path}: line {n}: not UTF-8 text (byte 0x{data[e.start]:02x}); "
                          "the file is written in UTF-8") from None
    lines = text.splitlines()
    out = []
    for n, line in enumerate(lines, 1):
        if line.strip():
            try:
                value = json.loads(line)
            except RecursionError:
                raise ConfigError(f"{path}: line {n}: nested too deeply") from None
            except ValueError:
                if n == len(lines) and not text.endswith("\n"):
                    break  # a write cut short by a crash: never acknowledged
                raise ConfigError(f"{path}: line {n}: not JSON") from None
            out.append((n, parse_intervention(value, f"{path}: line {n}")))
    return out


def append(run_dir: Path, intervention: Intervention) -> None:
    """Add ``intervention`` to ``run_dir``'s file, durably (one write, fsynced)."""
    path = Path(run_dir) / INTERVENTIONS
    line = json.dumps(intervention.model_dump(mode="json", exclude_none=True),
                      separators=(",", ":"), allow_nan=False) + "\n"
    if path.exists() and not path.is_file():  # a FIFO would block the write for ever
        raise ConfigError(f"{path}: not a regular file; interventions are written to one")
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


def _reached(profiles: Any, intervention: Intervention, seed: int, t: int, n: int,
             ids: np.ndarray | None = None) -> np.ndarray:
    return select(profiles, where=intervention.where, agents=intervention.agents,
                  sample=intervention.sample, ids=ids,
                  seed=derive_seed(seed, zlib.crc32(b"intervention"), t, n))


def chosen(run: Any, intervention: Intervention, t: int, n: int) -> np.ndarray:
    """The agents message ``intervention`` (the ``n``-th of step ``t``) reaches."""
    every = np.concatenate([g.ids for _, g in run.groups.values()]) \
        if run.groups else np.array([], np.int64)
    written = run.run_dir.read_profiles() if run.run_dir is not None else None
    return _reached(written if written is not None else run.population, intervention,
                    run.seed, t, n, every)


@dataclass(frozen=True)
class Scheduled:
    """What :func:`intervene` wrote: the ``intervention`` (stamped), the number of
    ``agents`` a message reaches (None for an environment change, or a run without
    ``profiles.parquet``), the steps the run had played (``played``), and the step a fork
    continues after to carry it out (``fork_at``; None when ``--resume`` will play it)."""

    intervention: Intervention
    agents: int | None
    played: int
    fork_at: int | None


def _planned(config: dict[str, Any], run_dir: Path) -> int:
    steps = config.get("steps", config.get("rounds"))
    if not isinstance(steps, int) or isinstance(steps, bool):
        raise ConfigError(f"{run_dir}/config.yaml: no number of steps (not a run's config?)")
    return steps


def intervene(run_dir: Path, intervention: Intervention) -> Scheduled:
    """Schedule ``intervention`` in ``run_dir``, a run no process is running: checked as a
    live run checks it (its step one the run plans, a message's agents chosen from
    ``profiles.parquet``), then appended to ``interventions.jsonl``; nothing else of the run
    changes. A step the run has played already is carried out by a fork from before it
    (``Scheduled.fork_at``); a later one, by ``--resume``. ConfigError, one line, for a
    directory that holds no run, a step the run does not plan or no fork can reach, a bad
    choice of agents, and a run that another process is running (that one is changed
    through its studio: only the run's own process knows which step starts next).

    >>> intervene(Path("runs/park"), Intervention(step=3, kind="message",  # doctest: +SKIP
    ...           text="Vote no.", where='age == "old"')).agents
    333
    """
    from ._offline import checkpointed_steps  # (it imports the launcher, which imports us)

    run_dir = Path(run_dir)
    directory = RunDirectory(run_dir)
    if not directory.config_path.is_file():
        raise ConfigError(f"{run_dir}: no config.yaml there (not a run directory?)")
    config = directory.read_config()
    planned, t = _planned(config, run_dir), intervention.step
    if t > planned:
        raise ConfigError(f"step {t}: the run plays steps 1 to {planned} (config.yaml)")
    check_interventions(run_dir)  # one edited into something else: refused, never added to
    try:
        # Writers take turns (managing); no run may start meanwhile: it could miss the line.
        with directory.managing(), directory.hold():
            try:
                played = len(directory.read_summary().get("steps") or ())
            except FileNotFoundError:
                played = 0
            fork_at = None
            if t <= played:  # too late for this run: a fork from before step t plays it
                have = checkpointed_steps(run_dir)
                kept = [s for s in have if s < t]
                if not kept:
                    why = "no fork starts before it (a fork continues after step 1 at the " \
                        "earliest)" if t == 1 else "no checkpoint before it is kept to fork " \
                        f"from (steps with one: {', '.join(map(str, have)) or 'none'})"
                    raise ConfigError(f"step {t}: the run has played it, and {why}")
                fork_at = kept[-1]
            agents = None
            profiles = directory.read_profiles()
            if intervention.kind == "message" and (profiles is not None
                                                   or intervention.where is not None):
                n = sum(i.step == t for i in read_interventions(run_dir))
                agents = int(_reached(profiles, intervention, int(config.get("seed") or 0),
                                      t, n).size)
            written = stamped(intervention)
            append(run_dir, written)
    except RunInUse:
        raise RunInUse(f"{run_dir}: the run is live in another process; intervene from the "
                       "studio that runs it (populace run --studio), which writes it for the "
                       "next step, or fork the run once it has ended") from None
    return Scheduled(written, agents, played, fork_at)


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
