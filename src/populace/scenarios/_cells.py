"""The text cells of a scenario's report tables (``Scenario.tables``), shared by the
built-in scenarios so that their numbers read the same way."""

from __future__ import annotations

import math
from typing import Any

#: Rows of one report table, at most (the title says how many there were).
MAX_ROWS = 500


def num(value: Any, digits: int = 3) -> str:
    """``1,234`` for integers, ``12,345`` for large floats, ``0.123`` otherwise; ``-`` for
    a missing value."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:.{digits}f}"


def pct(value: float | None) -> str:
    """A share as ``12.3%``; ``-`` when missing."""
    return "-" if value is None or math.isnan(value) else f"{100 * value:.1f}%"


def report(title: str, head: tuple[str, ...], rows: list[list[str]]) -> dict[str, Any]:
    """A report table, cut at :data:`MAX_ROWS` rows."""
    more = f" (first {MAX_ROWS} of {len(rows):,} rows)" if len(rows) > MAX_ROWS else ""
    return {"title": title + more, "head": head, "rows": rows[:MAX_ROWS]}
