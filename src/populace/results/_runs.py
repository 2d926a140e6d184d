"""A run directory loaded for analysis, whatever its scenario.

:func:`load_run` gives a :class:`RunData`: the metric series over steps (the numeric values
of ``summary.json``'s step entries), the distributions declared per step, the run's tables,
its profiles, and breakdowns of any per-agent numeric column of any table by any profile
column over every step. Works on finished and partial runs alike: tables come from their
consolidated file or, when the run stopped early, from their step files; ``summary.json``
may lag behind the tables or be missing. Summaries written before scenarios existed list
their steps under ``rounds`` with a ``round`` key; they read the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ._rundir import RunDirectory

#: Keys of a step entry that number the step rather than measure it.
_INDEX = ("step", "round")
#: Keys of a step entry that are not metrics.
_NOT_METRICS = frozenset({*_INDEX, "distributions", "failed", "llm"})
#: Profile columns that are never categories to break down by.
_NOT_CATEGORIES = frozenset({"agent_id", "background"})
_MAX_VALUES = 24  # more distinct values than this: not a category worth a line each


def show_value(value: Any) -> str:
    """A config value as a run file spells it (``false``, not ``False``)."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, str)


def _flatten(prefix: str, value: Any, out: dict[str, float]) -> None:
    """Numeric leaves of a metric value, by dotted path (``usage.m.calls``)."""
    if _number(value):
        out[prefix] = float(value)
    elif isinstance(value, dict):
        for key, inner in value.items():
            _flatten(f"{prefix}.{key}", inner, out)


def step_entries(summary: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The step entries of a summary, each with its ``step``, in order (``rounds`` entries
    of older summaries included)."""
    if not summary:
        return []
    raw = summary.get("steps")
    if not isinstance(raw, list):
        raw = summary.get("rounds")
    out = []
    for i, entry in enumerate(raw if isinstance(raw, list) else [], 1):
        if isinstance(entry, dict):
            step = entry.get("step", entry.get("round"))
            out.append({**entry, "step": int(step) if isinstance(step, int | float) else i})
    return out


def _usage_totals(entries: list[dict[str, Any]]) -> dict[str, int] | None:
    """LLM calls and tokens over all steps, from a ``usage`` metric (``{model: {calls,
    prompt_tokens, completion_tokens}}``, what LLM scenarios report), if any."""
    calls = tokens = 0
    found = False
    for entry in entries:
        usage = entry.get("usage")
        if not isinstance(usage, dict):
            continue
        for per_model in usage.values():
            if isinstance(per_model, dict):
                found = True
                calls += int(per_model.get("calls", 0) or 0)
                tokens += int(per_model.get("prompt_tokens", 0) or 0)
                tokens += int(per_model.get("completion_tokens", 0) or 0)
    return {"calls": calls, "tokens": tokens} if found else None


def last_values(entry: dict[str, Any]) -> dict[str, Any]:
    """The plain (number, text, bool, None) metrics of one step entry."""
    return {k: v for k, v in entry.items() if k not in _NOT_METRICS
            and (v is None or isinstance(v, bool | int | float | str))}


def headline(summary: dict[str, Any]) -> dict[str, Any]:
    """A run at a glance, from its summary: the last step's metrics (plain values), how many
    steps are done, the status, and LLM calls and tokens when the steps report ``usage``.

    >>> headline({"steps": [{"step": 1, "share": 0.5}], "status": "completed"})
    {'share': 0.5, 'step': 1, 'steps_done': 1, 'status': 'completed'}
    """
    entries = step_entries(summary)
    out: dict[str, Any] = last_values(entries[-1]) if entries else {}
    out["step"] = entries[-1]["step"] if entries else None
    for key, value in (_usage_totals(entries) or {}).items():
        out.setdefault(key, value)
    out["steps_done"] = len(entries)
    out["status"] = summary.get("status")
    return out


@dataclass(frozen=True, eq=False)
class Breakdown:
    """The mean of one per-agent column per category of one profile column, per step.

    ``means[i, j]`` is the mean over the rows of category ``values[i]`` in step ``steps[j]``
    (NaN where there is none); ``counts`` holds how many rows had a value.
    """

    table: str
    column: str
    by: str
    steps: tuple[int, ...]
    values: tuple[str, ...]
    means: np.ndarray
    counts: np.ndarray


@dataclass
class RunData:
    """Everything a report needs from one run directory (see :func:`load_run`)."""

    directory: RunDirectory
    summary: dict[str, Any] | None
    config: dict[str, Any]
    profiles: pa.Table | None
    _tables: dict[str, pa.Table] = field(default_factory=dict, repr=False)
    _codes: dict[tuple[str, str], tuple[np.ndarray, list[str]] | None] = field(
        default_factory=dict, repr=False)
    _categories: dict[str, list[str]] | None = field(default=None, repr=False)
    _entries: list[dict[str, Any]] | None = field(default=None, repr=False)
    _series: dict[str, np.ndarray] | None = field(default=None, repr=False)
    _names: list[str] | None = field(default=None, repr=False)
    _columns: dict[tuple[str, str], np.ndarray] = field(default_factory=dict, repr=False)
    _breakdowns: dict[tuple[str, str, str], Breakdown] = field(default_factory=dict,
                                                              repr=False)

    # -- what the run is ----------------------------------------------------------------
    @property
    def path(self) -> Path:
        return self.directory.path

    @property
    def name(self) -> str:
        return str((self.summary or {}).get("name") or self.config.get("name") or self.path.name)

    @property
    def status(self) -> str:
        if self.summary is not None:
            return str(self.summary.get("status", "unknown"))
        return "partial" if self.tables else "empty"

    @property
    def scenario(self) -> str | None:
        value = (self.summary or {}).get("scenario", self.config.get("scenario"))
        return None if value is None else str(value)

    @property
    def agents(self) -> int | None:
        value = (self.summary or {}).get("agents", self.config.get("agents"))
        return int(value) if value is not None else None

    @property
    def seed(self) -> int | None:
        value = (self.summary or {}).get("seed", self.config.get("seed"))
        return int(value) if value is not None else None

    @property
    def steps_planned(self) -> int | None:
        """How many steps the run was to play (``rounds`` in older run files)."""
        s = self.summary or {}
        for value in (s.get("steps_planned"), s.get("rounds_planned"),
                      self.config.get("steps"), self.config.get("rounds")):
            if isinstance(value, int):
                return value
        return None

    @property
    def models(self) -> list[str]:
        if self.summary is not None and self.summary.get("models"):
            return [str(m) for m in self.summary["models"]]
        return sorted(self.config.get("models") or {})

    # -- per step: the summary's metrics and distributions ---------------------------------
    def entries(self) -> list[dict[str, Any]]:
        """The summary's step entries, each with its ``step``, in order."""
        if self._entries is None:
            self._entries = step_entries(self.summary)
        return [dict(e) for e in self._entries]

    def entry(self, step: int) -> dict[str, Any] | None:
        """The summary's entry of ``step`` (None when the summary does not have it)."""
        return next((e for e in self.entries() if e["step"] == step), None)

    def steps(self) -> list[int]:
        """Every step the run has results for: in the summary or in any table."""
        found = {e["step"] for e in self.entries()}
        for name in self.tables:
            found.update(self.table_steps(name))
        return sorted(found)

    def metric_steps(self) -> np.ndarray:
        """The steps of the metric series (those the summary has entries for)."""
        return np.array([e["step"] for e in self.entries()], dtype=np.int64)

    def metrics(self) -> dict[str, np.ndarray]:
        """Every numeric metric series, over :meth:`metric_steps` (NaN where a step lacks
        it), by name in the order first reported. A metric whose value is a mapping
        (``usage``: per model, per counter) gives one series per numeric leaf, named by its
        dotted path (``usage.m.calls``); text and lists are not series."""
        if self._series is None:
            entries = self.entries()
            leaves: list[dict[str, float]] = []
            names: dict[str, None] = {}
            for entry in entries:
                flat: dict[str, float] = {}
                for key, value in entry.items():
                    if key not in _NOT_METRICS:
                        _flatten(key, value, flat)
                leaves.append(flat)
                names.update(dict.fromkeys(flat))
            self._series = {n: np.array([flat.get(n, np.nan) for flat in leaves],
                                        dtype=np.float64) for n in names}
        return dict(self._series)

    def metric(self, name: str) -> np.ndarray:
        """One series of :meth:`metrics`; KeyError naming the ones there are."""
        series = self.metrics()
        if name not in series:
            raise KeyError(f"{self.path}: no metric {name!r} (have: {', '.join(series)})")
        return series[name]

    def last_metrics(self) -> dict[str, Any]:
        """The last step's plain metrics (numbers, text, bools), by name."""
        entries = self.entries()
        return last_values(entries[-1]) if entries else {}

    def distribution_names(self) -> list[str]:
        """The distributions the scenario declared, in the order first reported."""
        names: dict[str, None] = {}
        for entry in self.entries():
            names.update(dict.fromkeys(entry.get("distributions") or {}))
        return list(names)

    def distribution(self, name: str) -> dict[int, dict[str, Any]]:
        """Distribution ``name`` per step: ``{step: {edges, counts, n, missing, mean}}``."""
        return {e["step"]: e["distributions"][name] for e in self.entries()
                if name in (e.get("distributions") or {})}

    # -- tables ----------------------------------------------------------------------------
    @property
    def tables(self) -> list[str]:
        """The names of the run's per-step tables."""
        if self._names is None:
            self._names = self.directory.table_names()
        return list(self._names)

    def table(self, name: str) -> pa.Table:
        """Table ``name`` (read once); FileNotFoundError when the run has no such table."""
        if name not in self._tables:
            self._tables[name] = self.directory.read_table(name)
        return self._tables[name]

    def step_column(self, name: str) -> str | None:
        """The column of table ``name`` that numbers steps (``step``, or ``round`` in older
        runs); None when it has neither."""
        columns = self.table(name).column_names
        return next((c for c in _INDEX if c in columns), None)

    def table_steps(self, name: str) -> list[int]:
        """The steps table ``name`` has rows for."""
        column = self.step_column(name)
        if column is None:
            return self.directory.part_steps(name)
        return sorted(int(s) for s in pc.unique(self.table(name).column(column)).to_pylist()
                      if s is not None)

    def _floats(self, table: str, column: str) -> np.ndarray:
        """A column as float64 (NaN for nulls; booleans as 0/1), converted once."""
        key = (table, column)
        if key not in self._columns:
            col = self.table(table).column(column)
            if pa.types.is_boolean(col.type):
                col = pc.cast(col, pa.int8())
            self._columns[key] = np.asarray(
                pc.cast(col, pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)
        return self._columns[key]

    def _step_mask(self, name: str, step: int | None) -> np.ndarray | None:
        if step is None:
            return None
        column = self.step_column(name)
        if column is None:
            raise ValueError(f"table {name!r} has no step column")
        return self._floats(name, column) == step

    def values(self, table: str, column: str, step: int | None = None, *,
               dropna: bool = True) -> np.ndarray:
        """Column ``column`` of ``table`` as float64 (in step ``step``, or every step); nulls
        and NaN left out unless ``dropna`` is false (then they are NaN)."""
        values = self._floats(table, column)
        mask = self._step_mask(table, step)
        if mask is not None:
            values = values[mask]
        return values[~np.isnan(values)] if dropna else values

    # -- per category -------------------------------------------------------------------------
    def _order(self, column: str, present: list[str], dictionary: list[str]) -> list[str]:
        """``present`` in the order the run file lists the values (population aspects,
        models), then in the column's dictionary order (the sampler's), then sorted
        (numerically when they are numbers)."""
        listed: list[str] = []
        if column == "model" and isinstance(self.config.get("models"), dict):
            listed = [str(m) for m in self.config["models"]]
        else:
            population = self.config.get("population")
            aspects = population.get("aspects") if isinstance(population, dict) else None
            aspect = aspects.get(column) if isinstance(aspects, dict) else None
            if isinstance(aspect, dict):
                for key in ("values", "weights", "percentages"):
                    if aspect.get(key):
                        listed = [str(v) for v in aspect[key]]
                        break
        first = [v for v in dict.fromkeys([*listed, *dictionary]) if v in present]
        rest = [v for v in present if v not in first]
        try:
            rest.sort(key=float)
        except ValueError:
            rest.sort()
        return first + rest

    def _profile_codes(self, table: str | None, name: str
                       ) -> tuple[np.ndarray, list[str]] | None:
        """``name`` for every row of ``table`` (of the profiles when None) as integer codes
        into a list of its values in display order (-1 where unknown): the table's own
        column when it has one, else the agent's profile, joined on ``agent_id``."""
        key = (table or "", name)
        if key in self._codes:
            return self._codes[key]
        result = None
        rows: np.ndarray | None = None
        source: pa.ChunkedArray | None = None
        own = self.table(table) if table is not None else self.profiles
        if own is not None and name in own.column_names:
            source = own.column(name)
        elif (own is not None and self.profiles is not None
              and name in self.profiles.column_names and "agent_id" in own.column_names
              and "agent_id" in self.profiles.column_names):
            ids = self.profiles.column("agent_id").to_numpy()
            order = np.argsort(ids, kind="stable")
            agents = own.column("agent_id").to_numpy()
            pos = np.clip(np.searchsorted(ids[order], agents), 0, max(len(ids) - 1, 0))
            rows = np.where(ids[order][pos] == agents, order[pos], -1) if len(ids) else \
                np.full(len(agents), -1)
            source = self.profiles.column(name)
        if source is not None:
            dictionary: list[str] = []
            if pa.types.is_dictionary(source.type):
                if source.num_chunks:
                    dictionary = [str(v) for v in pc.cast(source.chunk(0).dictionary,
                                                          pa.string()).to_pylist()]
                source = pc.cast(source, source.type.value_type)
            encoded = pc.dictionary_encode(pc.cast(source, pa.string()).combine_chunks())
            codes = np.asarray(encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False),
                               dtype=np.int64)
            if rows is not None:
                codes = np.where(rows >= 0, codes[np.maximum(rows, 0)], -1)
            found = [str(v) for v in encoded.dictionary.to_pylist()]
            ordered = self._order(name, found, dictionary)
            remap = np.array([ordered.index(v) for v in found] + [-1], dtype=np.int64)
            result = (remap[codes], ordered)
        self._codes[key] = result
        return result

    def categories(self) -> dict[str, list[str]]:
        """Profile columns to break results down by, each with its values in display order.

        Text, boolean and integer columns of the profiles with 2 to 24 distinct values, in
        the profiles' order; a column that splits the agents exactly as another one does is
        left out (an integer ``group`` made from ``profession``; of two text columns, the
        later one).
        """
        if self._categories is not None:
            return dict(self._categories)
        out: dict[str, list[str]] = {}
        if self.profiles is not None:
            labels, numbers = [], []
            for f in self.profiles.schema:
                t = f.type.value_type if pa.types.is_dictionary(f.type) else f.type
                if f.name in _NOT_CATEGORIES:
                    continue
                if pa.types.is_string(t) or pa.types.is_large_string(t) or \
                        pa.types.is_boolean(t):
                    labels.append(f.name)
                elif pa.types.is_integer(t):
                    numbers.append(f.name)
            kept: list[np.ndarray] = []
            for name in [*labels, *numbers]:  # a label beats a number code of the same split
                found = self._profile_codes(None, name)
                if found is None:
                    continue
                codes, values = found
                used = np.unique(codes[codes >= 0])
                if not 2 <= used.size <= _MAX_VALUES:
                    continue
                if any(_same_split(codes, other) for other in kept):
                    continue
                kept.append(codes)
                out[name] = [values[i] for i in used]
            out = {n: out[n] for n in self.profiles.column_names if n in out}
        self._categories = out
        return dict(out)

    def values_by(self, table: str, column: str, by: str, step: int | None = None
                  ) -> dict[str, np.ndarray]:
        """Column ``column`` of ``table`` (floats, nulls left out) per value of ``by``, in
        step ``step`` or every step; ``by`` is a column of the table or of the profiles."""
        found = self._profile_codes(table, by)
        if found is None:
            return {}
        codes, values = found
        numbers = self.values(table, column, dropna=False)
        keep = ~np.isnan(numbers)
        mask = self._step_mask(table, step)
        if mask is not None:
            keep &= mask
        shown = self.categories().get(by) or values
        return {v: numbers[keep & (codes == values.index(v))] for v in shown if v in values}

    def agent_columns(self, table: str) -> list[str]:
        """The numeric per-agent columns of ``table`` (it has ``agent_id``), other than its
        step column and the profile columns it repeats."""
        t = self.table(table)
        if "agent_id" not in t.column_names:
            return []
        skip = {"agent_id", *_INDEX, *(self.profiles.column_names if self.profiles else ())}
        return [f.name for f in t.schema if f.name not in skip and (
            pa.types.is_integer(f.type) or pa.types.is_floating(f.type)
            or pa.types.is_boolean(f.type))]

    def breakdown(self, table: str, column: str, by: str) -> Breakdown:
        """The mean of ``column`` of ``table`` per value of ``by`` per step, over every step
        (booleans: the share that is true)."""
        cached = self._breakdowns.get((table, column, by))
        if cached is not None:
            return cached
        found = self._profile_codes(table, by)
        if found is None:
            raise KeyError(f"{self.path}: {by!r} is neither a column of {table!r} nor a "
                           "profile column")
        codes, values = found
        # The profiles' order of the values, unless the table's own column holds others
        # (a table may write its own ``town`` as ``west`` where the profile says ``a/west``).
        ordered = self.categories().get(by)
        shown = ordered if ordered and set(values) <= set(ordered) else values
        step_name = self.step_column(table)
        numbers = self.values(table, column, dropna=False)
        if step_name is None:
            steps = [0]
            at = np.zeros(numbers.size, dtype=np.int64)
        else:
            raw = np.nan_to_num(self._floats(table, step_name), nan=-1).astype(np.int64)
            steps = self.table_steps(table)
            known = np.array(steps, dtype=np.int64)
            at = np.searchsorted(known, raw)
            at = np.where((at < known.size) & (known[np.minimum(at, known.size - 1)] == raw)
                          if known.size else False, at, -1)
        index = np.array([shown.index(v) if v in shown else -1 for v in values] + [-1])
        category = index[codes]
        keep = (category >= 0) & (at >= 0) & ~np.isnan(numbers)
        size = len(shown) * len(steps)
        flat = category[keep] * len(steps) + at[keep]
        counts = np.bincount(flat, minlength=size).reshape(len(shown), len(steps))
        sums = np.bincount(flat, weights=numbers[keep], minlength=size).reshape(counts.shape)
        with np.errstate(invalid="ignore", divide="ignore"):
            means = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
        result = Breakdown(table, column, by, tuple(steps), tuple(shown), means, counts)
        self._breakdowns[(table, column, by)] = result
        return result


def _same_split(codes: np.ndarray, other: np.ndarray) -> bool:
    pairs = np.unique(codes * (int(other.max()) + 2) + other)
    return bool(pairs.size == np.unique(codes).size == np.unique(other).size)


def load_run(run_dir: str | Path) -> RunData:
    """Load ``run_dir`` for analysis; raises FileNotFoundError if it holds no run at all, a
    DamagedRunFile (a ConfigError and a ValueError) naming a file that is damaged.

    >>> run = load_run("runs/demo")  # doctest: +SKIP
    >>> run.metrics()["share_yes"]                                  # doctest: +SKIP
    >>> run.breakdown("votes", "yes", "region").means               # doctest: +SKIP
    """
    path = Path(run_dir)
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such directory")
    directory = RunDirectory(path)
    try:
        summary: dict[str, Any] | None = directory.read_summary()
    except FileNotFoundError:
        summary = None  # killed before its first step ended, or not a run's directory
    # a summary.json that is there but damaged (not JSON, not an object, a FIFO) is a
    # DamagedRunFile naming it: reported, never taken for a run that has no steps
    config = directory.read_config()
    if summary is None and not config and not directory.table_names():
        raise FileNotFoundError(f"{path} holds no run (no summary.json, config.yaml or "
                                "tables)")
    return RunData(directory, summary, config, directory.read_profiles())
