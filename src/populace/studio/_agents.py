"""The agent browser: search a run's agents, open one and read every row it has.

It works on whatever the run recorded per agent: the profile table (when the run sampled a
population) and every per-step table with an ``agent_id`` column (a scenario's
``run.record("flips", {...})``, the game's ``responses``). A search lists the rows of one
table — the profiles, or a per-step table at one step — filtered and paged here, so the
browser receives one page, never a million rows. One agent's page shows its profile and,
step by step, its rows in every table next to the run's metrics of that step.

An agent's *mind* (:meth:`AgentBrowser.mind`) is what any scenario's agent holds and says:
its state from a checkpoint (memory and other fields), its LLM calls from the run's call log
(``llm_calls/``, found through its index), and the messages its model saw last. A persona
(:class:`populace.agents.Persona`) is shown as its model sees it: the persona text and its
memory's events — its own ``mind()`` when it is live, else rendered from the run's profiles
and ``settings.persona`` and read from the checkpointed memory. It reads one checkpoint
slice and this agent's lines of the log, so it costs the same with a million agents as with
ten.

Tables are read through :class:`populace.results.RunDirectory` and kept (a few at a time)
until the run writes another step of them.
"""

from __future__ import annotations

import itertools
import json
import math
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import ValidationError

from populace.agents import Memory, PersonaOptions
from populace.core import Msg, PopulaceError
from populace.llm import read_agent_calls
from populace.results import CheckpointError, RunDirectory, plain_categories, read_agent_state

MAX_PAGE = 200
MAX_CELL = 160           # characters of a text cell in a search result
MAX_TEXT = 20_000        # characters of a text cell on an agent's page
MAX_DISTINCT = 60
MAX_AGENT_ROWS = 500     # rows of one table on an agent's page (the latest)
MAX_CALLS = 50           # LLM calls in an agent's mind (the latest)
MAX_ITEMS = 100          # items of a list or mapping of an agent's state shown
MAX_DEPTH = 6            # nesting of an agent's state shown; deeper is shown as text
PROFILES = "profiles"    # the run's profile table (one row per agent), when it has one
_HIDDEN = ("background",)  # long text: shown on the agent's own page only
_STEP_COLUMNS = ("step", "round")  # a per-step table's step column ("round": the game's)
_INT64 = (-(2**63), 2**63 - 1)     # what an integer filter can be compared with


class AgentQueryError(PopulaceError, ValueError):
    """A filter the browser cannot apply; the message is one line for the user."""


class UnknownAgent(PopulaceError, LookupError):
    """The run has no agent with that id."""


def _cell(value: Any, limit: int = MAX_CELL) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, str) and len(value) > limit:
        return value[:limit] + "…"
    return value


def _step_column(table: pa.Table) -> str | None:
    return next((c for c in _STEP_COLUMNS if c in table.column_names), None)


class AgentBrowser:
    """Queries over the agents of run directories (a few tables kept in memory)."""

    def __init__(self, cache_size: int = 8) -> None:
        self._cache: OrderedDict[tuple[str, str], tuple[tuple[int, ...], pa.Table]] = \
            OrderedDict()
        self._cache_size = cache_size

    # -- tables ------------------------------------------------------------------------------
    def _table(self, run: Path, name: str) -> pa.Table:
        """Table ``name`` of ``run`` (FileNotFoundError if it has none), re-read when the run
        has written steps of it since."""
        key = (str(run), name)
        directory = RunDirectory(run)
        version = tuple(directory.part_steps(name)) if name != PROFILES else ()
        hit = self._cache.get(key)
        if hit is not None and hit[0] == version:
            self._cache.move_to_end(key)
            return hit[1]
        if name == PROFILES:
            profiles = directory.read_profiles()
            if profiles is None:
                raise FileNotFoundError("this run has no profiles")
            table = plain_categories(profiles)
        else:
            table = plain_categories(directory.read_table(name))
        self._cache[key] = (version, table)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return table

    def tables(self, run: Path) -> list[dict[str, Any]]:
        """The tables with one row per agent (per step): the profiles first, when there
        are some, then the run's per-step tables that have an ``agent_id`` column."""
        out = []
        recorded = RunDirectory(run).table_names()
        for name in (PROFILES, *(t for t in recorded if t != PROFILES)):
            try:
                table = self._table(run, name)
            except (FileNotFoundError, OSError, pa.ArrowInvalid):
                continue  # not written yet (or being replaced right now)
            if "agent_id" not in table.column_names:
                continue
            step = _step_column(table) if name != PROFILES else None
            steps = sorted(int(s) for s in pc.unique(table.column(step)).to_pylist()
                           if s is not None) if step else []
            out.append({"name": name, "steps": steps, "rows": table.num_rows})
        return out

    def _pick(self, run: Path, table: str | None, step: int | None
              ) -> tuple[dict[str, Any], list[dict[str, Any]], pa.Table]:
        """(the chosen table's entry, every entry, its rows at ``step``)."""
        known = self.tables(run)
        if not known:
            raise FileNotFoundError("this run has recorded no table of agents (yet)")
        chosen = next((t for t in known if t["name"] == table), None) if table else known[0]
        if chosen is None:
            raise AgentQueryError(f"no table of agents named {table!r} (known: "
                                  f"{', '.join(t['name'] for t in known)})")
        rows = self._table(run, chosen["name"])
        column = _step_column(rows) if chosen["name"] != PROFILES else None
        if column is not None and chosen["steps"]:
            at = chosen["steps"][-1] if step is None else step
            if at not in chosen["steps"]:
                raise AgentQueryError(f"{chosen['name']} has no step {at} (it has steps "
                                      f"{chosen['steps'][0]}–{chosen['steps'][-1]})")
            rows = rows.filter(pc.equal(rows.column(column), at)).drop_columns([column])
            chosen = {**chosen, "step": at}
        keep = [c for c in rows.column_names if c not in _HIDDEN]
        order = ["agent_id", *(c for c in keep if c != "agent_id")]
        return chosen, known, rows.select(order)

    # -- queries -----------------------------------------------------------------------------
    def columns(self, run: Path, *, table: str | None = None, step: int | None = None
                ) -> dict[str, Any]:
        """The tables of agents, and the filterable columns of one (``table`` at ``step``;
        by default the profiles, else the first table at its last step), with their
        distinct values where there are few."""
        chosen, known, rows = self._pick(run, table, step)
        out = []
        for name in rows.column_names:
            col = rows.column(name)
            entry: dict[str, Any] = {"name": name, "type": str(col.type)}
            if name != "agent_id" and (pa.types.is_string(col.type)
                                       or pa.types.is_integer(col.type)
                                       or pa.types.is_floating(col.type)
                                       or pa.types.is_boolean(col.type)):
                distinct = pc.unique(col)
                if len(distinct) <= MAX_DISTINCT:
                    entry["values"] = sorted((v for v in distinct.to_pylist() if v is not None),
                                             key=str)
            out.append(entry)
        return {"table": chosen["name"], "step": chosen.get("step"), "tables": known,
                "columns": out}

    def search(self, run: Path, *, table: str | None = None, step: int | None = None,
               agent_id: int | None = None, group: int | None = None,
               attribute: str | None = None, value: str | None = None, page: int = 0,
               size: int = 50) -> dict[str, Any]:
        """One page of the rows of ``table`` (at ``step``) matching every filter given."""
        if not 1 <= size <= MAX_PAGE:
            raise AgentQueryError(f"size: {size} (expected 1 to {MAX_PAGE} rows per page)")
        if page < 0:
            raise AgentQueryError(f"page: {page} (expected 0 or more; the first page is 0)")
        chosen, rows = self.matching(run, table=table, step=step, agent_id=agent_id,
                                     group=group, attribute=attribute, value=value)
        total = rows.num_rows
        shown = rows.slice(page * size, size)
        data = [[_cell(v) for v in row.values()] for row in shown.to_pylist()]
        return {"table": chosen["name"], "step": chosen.get("step"), "total": total,
                "page": page, "size": size, "pages": max(1, -(-total // size)),
                "columns": shown.column_names, "rows": data}

    def matching(self, run: Path, *, table: str | None = None, step: int | None = None,
                 agent_id: int | None = None, group: int | None = None,
                 attribute: str | None = None, value: str | None = None
                 ) -> tuple[dict[str, Any], pa.Table]:
        """(the table's entry, all its rows at ``step`` matching every filter given): what
        a search pages through, and what an export writes whole."""
        chosen, _, rows = self._pick(run, table, step)
        mask = None

        def both(m: Any) -> Any:
            return m if mask is None else pc.and_(mask, m)

        if agent_id is not None:
            mask = both(_equal(rows.column("agent_id"), "agent_id", agent_id))
        if group is not None and "group" in rows.column_names:
            mask = both(_equal(rows.column("group"), "group", group))
        if attribute:
            if attribute not in rows.column_names:
                raise AgentQueryError(f"no attribute {attribute!r} (known: "
                                      f"{', '.join(rows.column_names)})")
            if value not in (None, ""):
                mask = both(_match(rows.column(attribute), attribute, str(value)))
        if mask is not None:
            rows = rows.filter(pc.fill_null(mask, False))
        return chosen, rows

    def agent(self, run: Path, agent_id: int, *,
              metrics: Mapping[int, Mapping[str, Any]] | None = None) -> dict[str, Any]:
        """Agent ``agent_id``: its profile and background, and step by step its rows in
        every table of agents, next to ``metrics`` (step → the run's metrics then)."""
        profile: dict[str, Any] | None = None
        background = None
        rows_by_step: dict[int, dict[str, list[dict[str, Any]]]] = {}
        names = []
        if not _INT64[0] <= agent_id <= _INT64[1]:
            raise UnknownAgent(f"no agent {agent_id} in this run")
        for entry in self.tables(run):
            table = self._table(run, entry["name"])
            found = table.filter(pc.equal(table.column("agent_id"), agent_id))
            if entry["name"] == PROFILES:
                if found.num_rows:
                    profile = found.slice(0, 1).to_pylist()[0]
                    background = profile.pop("background", None)
                continue
            names.append(entry["name"])
            column = _step_column(found)
            for row in found.slice(max(0, found.num_rows - MAX_AGENT_ROWS)).to_pylist():
                at = int(row.pop(column) or 0) if column else 0
                row.pop("agent_id", None)
                shown = {k: _cell(v, MAX_TEXT) for k, v in row.items()}
                rows_by_step.setdefault(at, {}).setdefault(entry["name"], []).append(shown)
        if profile is None and not rows_by_step:
            raise UnknownAgent(f"no agent {agent_id} in this run")
        steps = [{"step": at, "rows": rows_by_step[at],
                  "metrics": dict((metrics or {}).get(at, {}))}
                 for at in sorted(rows_by_step)]
        return {"agent_id": agent_id,
                "profile": {k: _cell(v) for k, v in (profile or {"agent_id": agent_id}).items()},
                "background": background, "tables": names, "steps": steps}


    def mind(self, run: Path, agent_id: int, *, step: int | None = None,
             live_state: Any = None, live_mind: Mapping[str, Any] | None = None,
             calls: int = MAX_CALLS,
             describe: Callable[[Any], Mapping[str, Any] | None] | None = None
             ) -> dict[str, Any]:
        """Agent ``agent_id``'s mind, for any scenario: its profile and background, its
        state, its latest ``calls`` LLM calls (request messages, answer or error, tokens,
        latency, endpoint, time; oldest first) and ``conversation``, the messages of its
        latest call: its last prompt, as its model saw it.

        The state is the live agent's when ``live_state`` or ``live_mind`` is given (what
        its ``get_state()`` and ``mind()`` return in the running simulation), else the
        agent's in the checkpoint after ``step`` (default: the newest). Memory items come
        as role, sender and content; the other keys of the state as JSON, long text and
        long lists cut. A persona's ``persona`` is its text and its memory's events (step,
        kind, text), and its state shows only what the memory is not. ``describe`` (the
        scenario's :meth:`~populace.launch.Scenario.agent_state`) labels a state that is no
        mapping; without it a tuple's items are ``part 1``, ``part 2``…
        :class:`UnknownAgent` when the run knows nothing of the agent.
        """
        if not _INT64[0] <= agent_id <= _INT64[1]:
            raise UnknownAgent(f"no agent {agent_id} in this run")
        row = self._profile(run, agent_id)
        profile = dict(row) if row is not None else None
        background = _cell(profile.pop("background", None), MAX_TEXT) if profile else None
        state: dict[str, Any] | None = None
        state_error = None
        persona = None
        live = live_state is not None or _is_mind(live_mind)
        if live:
            memory, rest = _split_persona(live_state)
            if _is_mind(live_mind):
                persona = _persona(live_mind["persona"], live_mind["memory"], "live")
            elif memory is not None:
                persona = self._rendered(run, row, memory)
            state = {"source": "live", "step": None, "group": None,
                     **(_state(live_state, describe) if persona is None
                        else _rest(rest, describe))}
        else:
            try:
                found = read_agent_state(run, agent_id, step)
            except CheckpointError as e:
                found, state_error = None, str(e)
            if found is not None:
                raw = found[2]
                memory, rest = _split_persona(raw)
                if memory is None and raw is None and _persona_options(run) is not None:
                    memory = Memory()  # a persona of a persona run, remembering nothing yet
                if memory is not None:
                    persona = self._rendered(run, row, memory)
                state = {"source": "checkpoint", "step": found[0], "group": found[1],
                         **(_state(raw, describe) if persona is None
                            else _rest(rest, describe))}
            elif state_error is None:
                state_error = (f"no checkpoint after step {step} is kept" if step is not None
                               else "no checkpoint holds this agent (yet)")
        records = read_agent_calls(run / "llm_calls", agent_id, limit=max(1, calls) + 1)
        more = len(records) > calls
        shown = [_call(r) for r in records[len(records) - calls:]] if calls > 0 else []
        asked = _questions(run, agent_id)
        for call in shown:  # an interview's call ends with its question
            last = call["messages"][-1] if call["messages"] else {}
            call["interview"] = last.get("role") == "user" and last.get("content") in asked
        steps = [c for c in shown if not c["interview"]]
        if profile is None and state is None and not records \
                and not self._in_tables(run, agent_id):
            raise UnknownAgent(f"no agent {agent_id} in this run")
        return {"agent_id": agent_id,
                "profile": {k: _cell(v) for k, v in (profile or {"agent_id": agent_id}).items()},
                "background": background, "state": state, "state_error": state_error,
                "persona": persona, "calls": shown, "more_calls": more,
                "conversation": steps[-1]["messages"] if steps else []}

    def _rendered(self, run: Path, row: Mapping[str, Any] | None, memory: Memory
                  ) -> dict[str, Any]:
        """A persona that is not live: its text rendered from its profile row with the
        run's ``settings.persona`` (the default when the run file has none), the same
        rendering its model was given."""
        options = _persona_options(run)
        if isinstance(options, PersonaOptions):
            text, error = options.render(row or {}), None
        else:  # a scenario that renders its personas its own way (the game, the survey)
            text, error = None, ("the persona text is rendered by the scenario: see the last "
                                 "prompt, or read this agent while the run is live")
        out = _persona(text, [e._asdict() for e in memory.events()], "rendered")
        if error:
            out["error"] = error
        return out

    def _profile(self, run: Path, agent_id: int) -> dict[str, Any] | None:
        """The agent's profile row (background included), or None."""
        try:
            table = self._table(run, PROFILES)
        except (FileNotFoundError, OSError, pa.ArrowInvalid):
            return None
        if "agent_id" not in table.column_names:
            return None
        found = table.filter(pc.equal(table.column("agent_id"), agent_id))
        if not found.num_rows:
            return None
        row: dict[str, Any] = found.slice(0, 1).to_pylist()[0]
        return row

    def _in_tables(self, run: Path, agent_id: int) -> bool:
        """Whether a per-step table of the run has a row of the agent."""
        for entry in self.tables(run):
            if entry["name"] != PROFILES:
                table = self._table(run, entry["name"])
                if pc.any(pc.equal(table.column("agent_id"), agent_id)).as_py():
                    return True
        return False


def _plain(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON: text and sequences cut, floats that JSON lacks as None, other
    objects as their (cut) repr."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return _cell(value, MAX_TEXT)
    if isinstance(value, np.generic):
        return _plain(value.item(), depth)
    if depth < MAX_DEPTH:
        if isinstance(value, Mapping):
            out = {str(k): _plain(v, depth + 1)
                   for k, v in itertools.islice(value.items(), MAX_ITEMS)}
            if len(value) > MAX_ITEMS:
                out["…"] = f"{len(value) - MAX_ITEMS} more"
            return out
        if isinstance(value, list | tuple | np.ndarray):
            items = [_plain(v, depth + 1) for v in value[:MAX_ITEMS]]
            if len(value) > MAX_ITEMS:
                items.append(f"… {len(value) - MAX_ITEMS} more")
            return items
    return _cell(repr(value)[:MAX_TEXT + 1], MAX_TEXT)


def _memory_item(item: Any) -> dict[str, Any]:
    """One memory item (``Memory.get_state``'s ``(sender, content, role, metadata)``, a
    :class:`Msg`, or a mapping with those keys) as role, sender, content and metadata."""
    sender: Any
    role: Any
    if isinstance(item, Msg):
        sender, content, role, meta = item.sender, item.content, item.role, item.metadata
    elif isinstance(item, Mapping):
        sender, content = item.get("sender"), item.get("content")
        role, meta = item.get("role"), item.get("metadata")
    elif isinstance(item, list | tuple) and 2 <= len(item) <= 4:
        sender, content, role, meta = (*item, None, None)[:4]
    else:
        return {"role": None, "sender": None, "content": _plain(item), "metadata": None}
    return {"role": _plain(role), "sender": _plain(sender),
            "content": _plain(content), "metadata": _plain(meta)}


def _state(state: Any, describe: Callable[[Any], Mapping[str, Any] | None] | None = None
           ) -> dict[str, Any]:
    """An agent's state: its ``memory`` items (the latest), and its other keys; a state
    that is no mapping as ``describe`` labels it, else a sequence's items as parts."""
    if not isinstance(state, Mapping):
        labelled = describe(state) if describe is not None and state is not None else None
        if isinstance(labelled, Mapping):
            fields = {str(k): _plain(v) for k, v in itertools.islice(labelled.items(),
                                                                       MAX_ITEMS)}
        elif isinstance(state, tuple | list) and 0 < len(state) <= 12:
            fields = {f"part {i + 1}": _plain(v) for i, v in enumerate(state)}
        else:
            fields = {"state": _plain(state)} if state is not None else {}
        return {"memory": [], "memory_total": 0, "fields": fields}
    items = state.get("memory")
    items = list(items) if isinstance(items, list | tuple) else []
    fields = {str(k): _plain(v) for k, v in itertools.islice(
        ((k, v) for k, v in state.items() if k != "memory"), MAX_ITEMS)}
    return {"memory": [_memory_item(m) for m in items[-MAX_ITEMS:]],
            "memory_total": len(items), "fields": fields}


def _is_mind(mind: Any) -> TypeGuard[Mapping[str, Any]]:
    """Whether ``mind`` is what a persona's ``mind()`` returns."""
    return (isinstance(mind, Mapping) and isinstance(mind.get("persona"), str)
            and isinstance(mind.get("memory"), list | tuple))


def _memory_of(value: Any) -> Memory | None:
    """``value`` as a persona's memory, if it is a memory's state (``Memory.get_state``)."""
    if not (isinstance(value, tuple | list) and len(value) == 2
            and isinstance(value[0], str) and isinstance(value[1], bytes)):
        return None
    memory = Memory()
    try:
        memory.set_state(value)
    except ValueError:
        return None
    return memory


def _split_persona(state: Any) -> tuple[Memory | None, Any]:
    """(a persona's memory, the rest of its state) when ``state`` is a persona's — the
    memory's state, or a subclass's tuple holding it (``(super().get_state(), mine)``);
    else (None, ``state``)."""
    memory = _memory_of(state)
    if memory is not None:
        return memory, None
    if isinstance(state, tuple) and state:
        for i, part in enumerate(state):
            memory = _memory_of(part)
            if memory is not None:
                rest = state[:i] + state[i + 1:]
                return memory, rest[0] if len(rest) == 1 else rest
    return None, state


def _rest(rest: Any, describe: Callable[[Any], Mapping[str, Any] | None] | None = None
          ) -> dict[str, Any]:
    """What a persona's state holds beside its memory (a subclass's own part)."""
    if rest is None:
        return {"memory": [], "memory_total": 0, "fields": {}}
    return _state(rest, describe)


def _persona_options(run: Path) -> PersonaOptions | str | None:
    """The run's ``settings.persona`` (None when its run file has none; a one-line
    reason when it cannot be read)."""
    settings = RunDirectory(run).read_config().get("settings")
    given = settings.get("persona") if isinstance(settings, Mapping) else None
    if not isinstance(given, Mapping):  # none, or a scenario's own form (a survey template)
        return None
    try:
        return PersonaOptions.model_validate(given)
    except ValidationError as e:
        return f"settings.persona cannot be read: {e.errors()[0]['msg']}"


def _persona(text: Any, events: Any, source: str) -> dict[str, Any]:
    """A persona as the mind shows it: its text, its latest memory events (step, kind,
    text) and how many it has."""
    items = [{"step": _plain(e.get("step")), "kind": _plain(e.get("kind")),
              "text": _plain(e.get("text"))}
             for e in list(events)[-MAX_ITEMS:] if isinstance(e, Mapping)]
    return {"source": source, "text": _plain(text), "memory": items,
            "memory_total": len(events)}


def _message(message: Any) -> dict[str, Any]:
    if not isinstance(message, Mapping):
        return {"role": None, "content": _plain(message)}
    return {"role": _plain(message.get("role")), "content": _plain(message.get("content"))}


def _questions(run: Path, agent_id: int) -> set[str]:
    """The questions ``agent_id`` was asked in interviews (``interviews.parquet``)."""
    table = RunDirectory(run).read_parquet("interviews.parquet")
    if table is None:
        return set()
    mine = table.filter(pc.equal(table.column("agent_id"), agent_id))
    return set(mine.column("question").to_pylist())


def _call(record: Mapping[str, Any]) -> dict[str, Any]:
    """One line of the call log as the mind shows it."""
    request = record.get("request")
    request = request if isinstance(request, Mapping) else {}
    messages = request.get("messages")
    out: dict[str, Any] = {
        "time": _plain(record.get("time")), "model": _plain(record.get("model")),
        "latency_s": _plain(record.get("latency_s")), "endpoint": _plain(record.get("endpoint")),
        "retries": _plain(record.get("retries")),
        "prompt_tokens": _plain(record.get("prompt_tokens")),
        "completion_tokens": _plain(record.get("completion_tokens")),
        "messages": [_message(m) for m in (messages if isinstance(messages, list) else [])],
        "params": {k: _plain(request.get(k)) for k in ("temperature", "top_p",
                                                        "max_tokens", "response_format")},
        # as text: a 63-bit seed is past what a JavaScript number holds exactly
        "seed": None if request.get("seed") is None else str(request.get("seed")),
    }
    if "error" in record:
        out["error"] = _plain(record["error"])
    else:
        out["text"] = _plain(record.get("text"))
    return out


def _short(value: str, limit: int = 40) -> str:
    return value if len(value) <= limit else value[:limit] + "…"


def _equal(col: pa.ChunkedArray, name: str, number: int | float) -> Any:
    """The rows of ``col`` equal to ``number``; :class:`AgentQueryError` for a number no
    cell of its type can hold (beyond int64, or beyond a float) or a column of another kind."""
    try:
        if pa.types.is_floating(col.type):
            number = float(number)
        elif isinstance(number, int) and not _INT64[0] <= number <= _INT64[1]:
            raise OverflowError
        return pc.equal(col, number)
    except OverflowError:
        raise AgentQueryError(f"{name}: {_short(str(number))} is out of range") from None
    except (pa.ArrowException, TypeError):
        raise AgentQueryError(f"{name} cannot be compared with {_short(str(number))}") from None


def _match(col: pa.ChunkedArray, name: str, value: str) -> Any:
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        return pc.match_substring(col, value, ignore_case=True)
    if pa.types.is_boolean(col.type):
        return pc.equal(col, value.strip().lower() in ("1", "true", "yes"))
    try:
        number = json.loads(value)
    except ValueError:  # not JSON, or an integer of more digits than int() takes
        number = None
    if not isinstance(number, int | float) or isinstance(number, bool):
        raise AgentQueryError(f"{name} holds numbers; {_short(value)!r} is not one")
    return _equal(col, name, number)
