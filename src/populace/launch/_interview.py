"""Interviews: ask agents a question with their own model, persona and memory.

An interview runs inside each agent's worker (:func:`ask`), between steps of a live run or
on a run rebuilt from a checkpoint, and touches nothing the run keeps: the agent's memory
is read, never written; the call's seed comes from the question, the agent and the step,
never from the run's random streams. So the run's tables are the same with or without
interviews. Answers go to ``RUN_DIR/interviews.parquet`` (one row per agent asked).

An agent class may say how it is interviewed by defining
``interview_messages(self, question) -> list[ChatMessage]``; by default the messages are an
interviewer's instruction, the agent's persona (its background, else its profile), its
memory as the conversation so far, and the question.
"""

from __future__ import annotations

import os
import time
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from populace.agents import persona_columns
from populace.core import Agent, ConfigError, ModelError, derive_seed
from populace.llm import ChatMessage, conversation

INTERVIEWER = ("You are being interviewed by a researcher about the simulation you take "
               "part in. Answer the question in character, briefly and in your own words.")
MAX_QUESTION = 2000   # characters
MAX_ASKED = 10_000    # agents one interview asks
MAX_TOKENS = 256      # of an answer
INTERVIEWS = "interviews.parquet"

SCHEMA = pa.schema([
    ("interview", pa.int32()), ("step", pa.int32()), ("agent_id", pa.int64()),
    ("question", pa.string()), ("answer", pa.string()), ("error", pa.string()),
    ("model", pa.string()), ("prompt_tokens", pa.int64()), ("completion_tokens", pa.int64()),
    ("latency_s", pa.float64()), ("source", pa.string()), ("time", pa.float64())])


class InterviewError(ConfigError):
    """An interview that cannot be held (no question, agents without a model); one line."""


def check_question(question: str) -> str:
    from ._select import utf8_text

    text = " ".join(utf8_text(str(question), "the question").split())
    if not text:
        raise InterviewError("the question is empty")
    if len(text) > MAX_QUESTION:
        raise InterviewError(f"the question is over {MAX_QUESTION} characters")
    return text


def persona_of(profile: Mapping[str, Any]) -> str | None:
    """An agent's persona: its written background, else its profile's attributes (but the
    internal ones, :data:`populace.agents.INTERNAL`)."""
    if profile.get("background"):
        return str(profile["background"])
    attributes = persona_columns(profile)  # never the run's internal columns
    if not attributes:
        return None
    return "About you: " + "; ".join(f"{a}: {profile[a]}" for a in attributes) + "."


def interview_messages(agent: Agent, question: str) -> list[ChatMessage]:
    """What ``agent``'s model is shown when asked ``question`` (the agent's own
    ``interview_messages`` if it defines one)."""
    own = getattr(agent, "interview_messages", None)
    if callable(own):
        try:
            return list(own(question))
        except Exception as e:  # the scenario's code: one line naming it, not a traceback
            raise InterviewError(f"{type(agent).__name__}.interview_messages raised "
                                 f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
                                 ) from None
    history: list[ChatMessage] = []
    memory = getattr(agent, "_memory", None)  # read, never created: an empty one stays None
    for m in memory or ():
        role = "assistant" if m.sender == agent.id else "user"
        history.append({"role": role, "content": str(m.content)})
    return conversation(INTERVIEWER, question, persona=persona_of(agent.profile),
                        history=history)


def _model(agent: Agent) -> Any:
    """The agent's model client: its ``model``, else the one model of its ``models`` (the
    :class:`~populace.llm.ModelSet` that ``run.models()`` hands every agent)."""
    model = getattr(agent, "model", None)
    if model is None:
        models = getattr(agent, "models", None)
        if isinstance(models, Mapping) and len(models) == 1:
            model = next(iter(models.values()))
    if model is None or not callable(getattr(model, "complete", None)):
        raise InterviewError(f"agents of {type(agent).__name__} have no model to answer with "
                             "(an interview needs a .model client, or .models holding one)")
    return model


async def ask(agent: Agent, question: str, seed: int) -> dict[str, Any]:
    """Ask ``agent`` (inside its worker); the answer, or the model's error, as a row."""
    model = _model(agent)
    messages = interview_messages(agent, question)
    started = time.perf_counter()
    row: dict[str, Any] = {"agent_id": int(agent.id), "model": str(getattr(model, "name", ""))}
    try:
        answer = await model.complete(messages, temperature=0.7,
                                      seed=derive_seed(seed, int(agent.id)),
                                      max_tokens=MAX_TOKENS)
    except ModelError as e:
        row.update(answer=None, error=f"{type(e).__name__}: {e}"[:500], prompt_tokens=0,
                   completion_tokens=0)
    else:
        row.update(answer=answer.text, error=None, prompt_tokens=answer.prompt_tokens,
                   completion_tokens=answer.completion_tokens)
    row["latency_s"] = round(time.perf_counter() - started, 4)
    return row


def interview_seed(run_seed: int, question: str, step: int) -> int:
    """The seed of an interview's calls: from the question and the step, not the run's
    streams (asking never moves them)."""
    return derive_seed(run_seed, zlib.crc32(b"interview"), zlib.crc32(question.encode()), step)


async def hold(run: Any, ids: np.ndarray, question: str, *, step: int, source: str
               ) -> list[dict[str, Any]]:
    """Ask the agents ``ids`` of ``run`` (a :class:`~populace.launch.Run`) ``question``
    inside their workers; one row each, in id order."""
    question = check_question(question)
    if ids.size > MAX_ASKED:
        raise InterviewError(f"an interview asks at most {MAX_ASKED:,} agents, not "
                             f"{ids.size:,} (take a --sample)")
    seed = interview_seed(run.seed, question, step)
    rows: list[dict[str, Any]] = []
    for _label, (_cls, group) in run.groups.items():
        mask = np.isin(group.ids, ids)
        if mask.any():
            rows.extend(await group.select(mask).map(ask, question, seed))
    now = round(time.time(), 3)
    for row in rows:
        row.update(step=step, question=question, source=source, time=now)
    return sorted(rows, key=lambda r: r["agent_id"])


def save_interview(run_dir: Path, rows: Sequence[dict[str, Any]]) -> int:
    """Add ``rows`` to ``run_dir/interviews.parquet`` as the next interview; its number.
    Writers take turns (:meth:`~populace.results.RunDirectory.managing`): interviews saved
    at once by several processes are all kept, each with its own number."""
    from populace.results import RunDirectory

    directory = RunDirectory(run_dir)
    path = directory.path / INTERVIEWS
    with directory.managing():
        before = read_interviews(run_dir)
        number = (int(pc.max(before.column("interview")).as_py() or 0) + 1
                  if before is not None and before.num_rows else 1)
        table = pa.Table.from_pylist([{**r, "interview": number} for r in rows],
                                     schema=SCHEMA)
        if before is not None:
            table = pa.concat_tables([before, table])
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "wb") as f:
            pq.write_table(table, f)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
    return number


def written_profiles(run_dir: Path) -> pa.Table | None:
    """The run's ``profiles.parquet`` (what a scenario wrote: a survey's arms too)."""
    from populace.results import RunDirectory

    return RunDirectory(run_dir).read_profiles()


def read_interviews(run_dir: Path) -> pa.Table | None:
    """``RUN_DIR/interviews.parquet``, None when there is none; one line naming it
    (:class:`InterviewError`) when it is damaged, is not a regular file or holds other
    columns."""
    from populace.results import RunDirectory

    path = Path(run_dir) / INTERVIEWS
    try:
        table = RunDirectory(run_dir).read_parquet(INTERVIEWS)
    except ConfigError as e:
        raise InterviewError(f"{e}; move it away to keep interviewing") from None
    if table is None:
        return None
    try:
        return table.select(SCHEMA.names).cast(SCHEMA)
    except (KeyError, ValueError, pa.ArrowException) as e:
        why = " ".join(str(e).split())[:200] or type(e).__name__
        raise InterviewError(f"{path}: not a table of interviews ({why}); move it away to "
                             "keep interviewing") from None


async def interview_run(run: Any, question: str, *, step: int, source: str,
                        agents: Sequence[int] | None = None, where: str | None = None,
                        sample: int | None = None, profiles: pa.Table | None = None
                        ) -> list[dict[str, Any]]:
    """Choose agents of ``run`` (:func:`~populace.launch.select` over ``profiles``, by
    default the run's population) and ask them ``question`` as they stand after ``step``;
    one row each."""
    from ._select import select

    question = check_question(question)
    every = np.concatenate([g.ids for _, g in run.groups.values()]) if run.groups \
        else np.array([], np.int64)
    ids = select(profiles if profiles is not None else run.population, where=where,
                 agents=agents, sample=sample, ids=every,
                 seed=interview_seed(run.seed, question, step))
    return await hold(run, ids, question, step=step, source=source)


async def interview(run_dir: str | Path, question: str, *, agents: Sequence[int] | None = None,
                    where: str | None = None, sample: int | None = None,
                    step: int | None = None) -> tuple[int, list[dict[str, Any]]]:
    """Interview agents of the run in ``run_dir`` as they stood after ``step`` (default: its
    newest checkpoint), rebuilt from its checkpoint; the answers are added to its
    ``interviews.parquet``. Returns ``(interview number, rows)``.

    >>> number, rows = asyncio.run(interview("runs/demo", "How did you choose?",
    ...                                      sample=5))  # doctest: +SKIP
    """
    from ._offline import reopen

    run_dir = Path(run_dir)
    check_question(question)
    read_interviews(run_dir)  # a damaged one is refused before anyone is asked
    async with reopen(run_dir, step) as run:
        rows = await interview_run(run, question, step=run.step, source="checkpoint",
                                   agents=agents, where=where, sample=sample,
                                   profiles=written_profiles(run_dir))
    return save_interview(run_dir, rows), rows
