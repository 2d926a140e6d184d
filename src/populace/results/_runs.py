"""A run directory loaded for analysis: per-round statistics and per-category numbers.

Works on finished and partial runs alike: the responses come from ``responses.parquet`` or,
when the run stopped early, from its round files; ``summary.json`` may lag behind or be
missing, and then what it would say (target, winner, usage) is computed from the responses.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from ._rundir import read_table

#: Profile columns that are never categories to split by.
_NOT_CATEGORIES = frozenset({"agent_id", "background", "round", "number", "valid"})
_MAX_VALUES = 24  # more distinct values than this: not a category worth a panel each


def show_value(value: Any) -> str:
    """A config value as a run file spells it (``false``, not ``False``)."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _sum_usage(usage: dict[str, dict[str, int]] | None) -> dict[str, int] | None:
    if not usage:
        return None
    keys = ("calls", "prompt_tokens", "completion_tokens")
    return {k: sum(int(m.get(k, 0)) for m in usage.values()) for k in keys}


def headline(summary: dict[str, Any]) -> dict[str, Any]:
    """The last round's statistics and the run's totals, from a summary.

    >>> headline({"rounds": [], "status": "running"})["rounds_done"]
    0
    """
    rounds = summary.get("rounds") or []
    last = rounds[-1] if rounds else {}
    out: dict[str, Any] = {k: last.get(k) for k in (
        "round", "n", "n_valid", "mean", "median", "std", "target", "winner_number")}
    totals = [_sum_usage(r.get("usage")) for r in rounds]
    out["rounds_done"] = len(rounds)
    out["calls"] = sum(t["calls"] for t in totals if t)
    out["tokens"] = sum(t["prompt_tokens"] + t["completion_tokens"] for t in totals if t)
    out["status"] = summary.get("status")
    return out


@dataclass
class RunData:
    """Everything a report needs from one run directory (see :func:`load_run`)."""

    path: Path
    summary: dict[str, Any] | None
    config: dict[str, Any]
    profiles: pa.Table | None
    responses: pa.Table | None
    _rounds: np.ndarray | None = field(default=None, repr=False)
    _numbers: np.ndarray | None = field(default=None, repr=False)
    _rows: list[dict[str, Any]] | None = field(default=None, repr=False)
    _categories: dict[str, list[str]] | None = field(default=None, repr=False)
    _code_cache: dict[str, tuple[np.ndarray, list[str]]] = field(default_factory=dict,
                                                                 repr=False)

    # -- what the run is ----------------------------------------------------------------
    @property
    def name(self) -> str:
        return str((self.summary or {}).get("name") or self.config.get("name") or self.path.name)

    @property
    def status(self) -> str:
        if self.summary is not None:
            return str(self.summary.get("status", "unknown"))
        return "partial" if self.responses is not None else "empty"

    @property
    def agents(self) -> int | None:
        value = (self.summary or {}).get("agents", self.config.get("agents"))
        return int(value) if value is not None else None

    @property
    def game(self) -> dict[str, Any]:
        game = self.config.get("game")
        return game if isinstance(game, dict) else {}

    @property
    def bounds(self) -> tuple[float, float]:
        return float(self.game.get("low", 0.0)), float(self.game.get("high", 100.0))

    @property
    def models(self) -> list[str]:
        if self.summary is not None and self.summary.get("models"):
            return [str(m) for m in self.summary["models"]]
        return sorted(self.config.get("models") or {})

    # -- per round -----------------------------------------------------------------------
    def round_numbers(self) -> list[int]:
        """The rounds that have responses, in order."""
        if self.responses is None:
            return []
        return sorted(int(r) for r in np.unique(self._round_column()))

    def _round_column(self) -> np.ndarray:
        if self._rounds is None:
            assert self.responses is not None
            self._rounds = self.responses.column("round").to_numpy()
        return self._rounds

    def numbers(self, round_no: int | None = None, *, valid_only: bool = True) -> np.ndarray:
        """The numbers reported (in round ``round_no``, or all rounds); NaN for invalid ones
        unless ``valid_only``."""
        if self.responses is None:
            return np.empty(0)
        if self._numbers is None:
            values = self.responses.column("number").to_numpy(zero_copy_only=False)
            self._numbers = np.asarray(values, dtype=np.float64)
        values = self._numbers
        if round_no is not None:
            values = values[self._round_column() == round_no]
        return values[~np.isnan(values)] if valid_only else values

    def _entry(self, round_no: int) -> dict[str, Any] | None:
        for entry in (self.summary or {}).get("rounds") or []:
            if entry.get("round") == round_no:
                return entry
        return None

    def _ratio_offset(self) -> tuple[float, float]:
        try:
            ratio = float(Fraction(str(self.game.get("ratio", "2/3"))))
        except (ValueError, ZeroDivisionError):
            ratio = 2 / 3
        return ratio, float(self.game.get("offset", 0.0) or 0.0)

    def round_rows(self) -> list[dict[str, Any]]:
        """One row per round with responses: counts, statistics, target, winner, usage, wall.

        The statistics are those of every valid answer; target and winner come from the
        summary (group-level play scores groups), or are computed when it lacks the round.
        """
        if self._rows is not None:
            return [dict(r) for r in self._rows]
        rows = []
        ratio, offset = self._ratio_offset()
        for r in self.round_numbers():
            all_numbers = self.numbers(r, valid_only=False)
            valid = all_numbers[~np.isnan(all_numbers)]
            n, k = int(all_numbers.size), int(valid.size)
            row: dict[str, Any] = {
                "round": r, "n": n, "n_valid": k,
                "invalid_rate": (n - k) / n if n else None,
                "mean": float(valid.mean()) if k else None,
                "median": float(np.median(valid)) if k else None,
                "std": float(valid.std()) if k else None,
            }
            entry = self._entry(r)
            if entry is not None:
                row["target"] = entry.get("target")
                row["winner_number"] = entry.get("winner_number")
                row["wall_s"] = entry.get("wall_s")
                usage = _sum_usage(entry.get("usage"))
            else:
                row["target"] = offset + ratio * row["mean"] if k else None
                row["winner_number"] = (float(valid[np.argmin(np.abs(valid - row["target"]))])
                                        if k else None)
                row["wall_s"] = None
                usage = None
            if usage is None:
                usage = self._usage_from_responses(r)
            row.update(usage)
            row["tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            if entry is not None and entry.get("groups") is not None:
                row["groups"] = entry["groups"]
                row["winner_group"] = entry.get("winner_group")
            rows.append(row)
        self._rows = rows
        return [dict(r) for r in rows]

    def _usage_from_responses(self, round_no: int) -> dict[str, int]:
        assert self.responses is not None
        mask = self._round_column() == round_no
        out = {}
        for key in ("calls", "prompt_tokens", "completion_tokens"):
            if key in self.responses.column_names:
                col = np.asarray(self.responses.column(key).to_numpy(zero_copy_only=False))
                out[key] = int(col[mask].sum())
            else:
                out[key] = 0
        return out

    # -- per category --------------------------------------------------------------------
    def _order(self, column: str, present: list[str]) -> list[str]:
        """Values of ``column`` in the order the config lists them, others sorted after."""
        listed: list[str] = []
        if column == "model":
            listed = [str(m) for m in (self.config.get("assign") or self.config.get("models")
                                       or {})]
        else:
            aspect = ((self.config.get("population") or {}).get("aspects") or {}).get(column)
            if isinstance(aspect, dict):
                for key in ("values", "weights", "percentages"):
                    if aspect.get(key):
                        listed = [str(v) for v in aspect[key]]
                        break
        rest = sorted(v for v in present if v not in listed)
        return [v for v in listed if v in present] + rest

    def _codes(self, name: str) -> tuple[np.ndarray, list[str]] | None:
        """``name`` for every response row as integer codes into a list of its values
        (-1 where unknown); from the responses, else joined from the profiles on agent_id."""
        if self.responses is None:
            return None
        cached = self._code_cache.get(name)
        if cached is not None:
            return cached
        if name in self.responses.column_names:
            source, rows = self.responses.column(name), None
        elif self.profiles is not None and name in self.profiles.column_names:
            ids = self.profiles.column("agent_id").to_numpy()
            order = np.argsort(ids, kind="stable")
            agents = self.responses.column("agent_id").to_numpy()
            pos = np.clip(np.searchsorted(ids[order], agents), 0, len(ids) - 1)
            rows = np.where(ids[order][pos] == agents, order[pos], -1)
            source = self.profiles.column(name)
        else:
            return None
        encoded = pc.dictionary_encode(pc.cast(source.combine_chunks(), pa.string()))
        codes = np.asarray(encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False),
                           dtype=np.int64)
        if rows is not None:
            codes = np.where(rows >= 0, codes[np.maximum(rows, 0)], -1)
        result = (codes, [str(v) for v in encoded.dictionary.to_pylist()])
        self._code_cache[name] = result
        return result

    def categories(self) -> dict[str, list[str]]:
        """Columns to split the numbers by, each with its values in display order.

        Text columns of the profiles with 2 to 24 distinct values (education, profession …),
        ``model`` when models were mixed, and ``group`` when there are several groups that
        are not just the values of another category.
        """
        if self._categories is not None:
            return self._categories
        out: dict[str, list[str]] = {}
        names: list[str] = []
        if self.profiles is not None:
            for f in self.profiles.schema:
                if f.name not in _NOT_CATEGORIES and f.name not in ("group", "model") and (
                        pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
                        or pa.types.is_dictionary(f.type)):
                    names.append(f.name)
        for name in [*names, "model", "group"]:
            found = self._codes(name)
            if found is None:
                continue
            codes, values = found
            used = np.unique(codes[codes >= 0])
            present = [values[i] for i in used]
            if not 2 <= len(present) <= (40 if name == "group" else _MAX_VALUES):
                continue
            if name == "group":
                if any(self._same_split(codes, other) for other in out):
                    continue
                out[name] = sorted(present, key=lambda v: (len(v), v))  # numeric order
            else:
                out[name] = self._order(name, present)
        self._categories = out
        return out

    def _same_split(self, codes: np.ndarray, other: str) -> bool:
        found = self._codes(other)
        if found is None:
            return False
        other_codes = found[0]
        pairs = np.unique(codes * (int(other_codes.max()) + 2) + other_codes)
        return pairs.size == np.unique(codes).size == np.unique(other_codes).size

    def numbers_by(self, column: str, round_no: int | None = None
                   ) -> dict[str, np.ndarray]:
        """Valid numbers per value of ``column`` (in round ``round_no``, or all rounds)."""
        found = self._codes(column)
        if found is None:
            return {}
        codes, values = found
        numbers = self.numbers(valid_only=False)
        keep = ~np.isnan(numbers)
        if round_no is not None:
            keep &= self._round_column() == round_no
        order = self.categories().get(column) or values
        position = {v: i for i, v in enumerate(values)}
        return {v: numbers[keep & (codes == position[v])] for v in order if v in position}


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def load_run(run_dir: str | Path) -> RunData:
    """Load ``run_dir`` for a report; raises FileNotFoundError if it holds no run at all.

    >>> run = load_run("runs/demo")  # doctest: +SKIP
    >>> [row["mean"] for row in run.round_rows()]  # doctest: +SKIP
    """
    path = Path(run_dir)
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such directory")
    summary = None
    if (path / "summary.json").exists():
        try:
            summary = json.loads((path / "summary.json").read_text())
        except ValueError:
            summary = None
    config = _read_yaml(path / "config.yaml")
    profiles = pq.read_table(path / "profiles.parquet") \
        if (path / "profiles.parquet").exists() else None
    try:
        responses: pa.Table | None = read_table(path)
    except FileNotFoundError:
        responses = None
    if summary is None and responses is None and not config:
        raise FileNotFoundError(f"{path} holds no run (no summary.json, config.yaml or "
                                "responses)")
    return RunData(path, summary, config, profiles, responses)
