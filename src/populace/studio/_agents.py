"""The agent browser: search a run's agents, open one and read everything it said.

Profiles come from ``profiles.parquet`` (without the long ``background`` column, cached per
file); filtering and paging happen here, so the browser receives one page, never a million
rows. One agent's answers are read from the responses files with a filter on ``agent_id``
(Parquet row-group statistics skip most of each file).
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

MAX_PAGE = 200
MAX_CELL = 160
MAX_DISTINCT = 60
_HIDDEN = ("background",)  # long text: shown on the agent's own page only
_ROUND_COLUMNS = ("round", "model", "number", "valid", "raw", "extract_raw", "error",
                  "latency_s", "calls", "retries", "prompt_tokens", "completion_tokens")


class AgentQueryError(ValueError):
    """A filter the browser cannot apply; the message is one line for the user."""


class UnknownAgent(LookupError):
    """The run has no agent with that id."""


def _cell(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, str) and len(value) > MAX_CELL:
        return value[:MAX_CELL] + "…"
    return value


class AgentBrowser:
    """Queries over the agents of run directories (a few profile tables kept in memory)."""

    def __init__(self, cache_size: int = 4) -> None:
        self._cache: OrderedDict[tuple[str, int, int], pa.Table] = OrderedDict()
        self._cache_size = cache_size

    def _profiles(self, run: Path) -> pa.Table:
        path = run / "profiles.parquet"
        try:
            st = path.stat()
        except OSError:
            raise FileNotFoundError("this run has no profiles.parquet (yet)") from None
        key = (str(path), st.st_mtime_ns, st.st_size)
        table = self._cache.get(key)
        if table is None:
            names = pq.read_schema(path).names
            table = pq.read_table(path, columns=[c for c in names if c not in _HIDDEN])
            for i, field in enumerate(table.schema):  # categories: filter them as text
                if pa.types.is_dictionary(field.type):
                    table = table.set_column(i, field.name,
                                             table.column(i).cast(field.type.value_type))
            self._cache[key] = table
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        self._cache.move_to_end(key)
        return table

    def columns(self, run: Path) -> list[dict[str, Any]]:
        """The filterable columns, with their distinct values where there are few."""
        table = self._profiles(run)
        out = []
        for name in table.column_names:
            col = table.column(name)
            entry: dict[str, Any] = {"name": name, "type": str(col.type)}
            if name != "agent_id" and (pa.types.is_string(col.type)
                                       or pa.types.is_integer(col.type)):
                distinct = pc.unique(col)
                if len(distinct) <= MAX_DISTINCT:
                    entry["values"] = sorted((v for v in distinct.to_pylist() if v is not None),
                                             key=str)
            out.append(entry)
        return out

    def search(self, run: Path, *, agent_id: int | None = None, group: int | None = None,
               attribute: str | None = None, value: str | None = None, page: int = 0,
               size: int = 50) -> dict[str, Any]:
        """One page of the agents matching every filter given."""
        table = self._profiles(run)
        size = max(1, min(size, MAX_PAGE))
        mask = None

        def both(m: Any) -> Any:
            return m if mask is None else pc.and_(mask, m)

        if agent_id is not None:
            mask = both(pc.equal(table.column("agent_id"), agent_id))
        if group is not None and "group" in table.column_names:
            mask = both(pc.equal(table.column("group"), group))
        if attribute:
            if attribute not in table.column_names:
                raise AgentQueryError(f"no attribute {attribute!r} (known: "
                                      f"{', '.join(table.column_names)})")
            if value not in (None, ""):
                mask = both(_match(table.column(attribute), attribute, str(value)))
        if mask is not None:
            table = table.filter(pc.fill_null(mask, False))
        total = table.num_rows
        page = max(0, page)
        rows = table.slice(page * size, size)
        data = [[_cell(v) for v in row.values()] for row in rows.to_pylist()]
        return {"total": total, "page": page, "size": size, "pages": max(1, -(-total // size)),
                "columns": rows.column_names, "rows": data}

    def agent(self, run: Path, agent_id: int, rounds: list[dict[str, Any]] | None = None
              ) -> dict[str, Any]:
        """Agent ``agent_id``: its profile, background and every answer, round by round.

        ``rounds``: the run's summary rows, to show what the moderator told everyone.
        """
        path = run / "profiles.parquet"
        if not path.is_file():
            raise FileNotFoundError("this run has no profiles.parquet (yet)")
        found = pq.read_table(path, filters=[("agent_id", "=", agent_id)])
        if found.num_rows == 0:
            raise UnknownAgent(f"no agent {agent_id} in this run")
        profile = {k: v for k, v in found.slice(0, 1).to_pylist()[0].items()}
        background = profile.pop("background", None)
        told = {r.get("round"): r for r in rounds or []}
        messages = []
        for row in _answers(run, agent_id):
            row = {k: _cell(v) if k not in ("raw", "extract_raw") else v for k, v in row.items()}
            outcome = told.get(row.get("round"))
            if outcome is not None:
                row["result"] = {"target": outcome.get("target"),
                                 "winner_number": outcome.get("winner_number")}
            messages.append(row)
        return {"agent_id": agent_id, "profile": {k: _cell(v) for k, v in profile.items()},
                "background": background, "rounds": messages}


def _match(col: pa.ChunkedArray, name: str, value: str) -> Any:
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        return pc.match_substring(col, value, ignore_case=True)
    if pa.types.is_boolean(col.type):
        return pc.equal(col, value.strip().lower() in ("1", "true", "yes"))
    try:
        number = json.loads(value)
    except ValueError:
        number = None
    if not isinstance(number, int | float) or isinstance(number, bool):
        raise AgentQueryError(f"{name} holds numbers; {value!r} is not one")
    return pc.equal(col, number)


def _answers(run: Path, agent_id: int) -> list[dict[str, Any]]:
    """The agent's rows of every round written so far, in round order."""
    whole = run / "responses.parquet"
    files = [whole] if whole.is_file() else sorted((run / "parts").glob("responses-r*.parquet"))
    rows: list[dict[str, Any]] = []
    for f in files:
        try:
            names = pq.read_schema(f).names
            t = pq.read_table(f, columns=[c for c in _ROUND_COLUMNS if c in names],
                              filters=[("agent_id", "=", agent_id)])
        except (OSError, pa.ArrowInvalid):
            continue  # a file being replaced right now; the next look will find it
        rows.extend(t.to_pylist())
    return sorted(rows, key=lambda r: r.get("round") or 0)
