"""Sweeps: one run file, a grid of runs, for any scenario.

A run file may declare ``sweep:``, a mapping of dotted keys to lists of values; the run is
repeated for every combination (the grid), each point in its own sub-directory::

    sweep:
      settings.bias: [0.1, 0.3, 0.5]   # a scenario setting
      seed: [1, 2]                     # a second key: 3 × 2 = 6 points

    RUN_DIR/sweep.yaml                          the run file as given
    RUN_DIR/sweep.json                          the index, rewritten as points finish
    RUN_DIR/settings.bias=0.1,seed=1/           an ordinary run directory
    ...

Directory names are ``key=value`` pairs joined by commas, with ``/`` written ``_``
(``settings.share=1_2``); ``sweep.json`` keeps the real values. Every point is validated before
the first one runs. The index lists each point's values, directory, status (pending,
running, completed, failed, interrupted) and ``final``: the last step's metrics, the steps
done and, for LLM runs, calls and tokens (:func:`populace.results.headline`).
"""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Callable
from copy import deepcopy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from populace.config import set_dotted
from populace.core import ConfigError
from populace.results import RunDirectory, atomic_write, headline

__all__ = ["SweepIndex", "SweepPoint", "expand", "point_dirname", "run_sweep", "sweep_axes"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._=,+-]")


@dataclass(frozen=True)
class SweepPoint:
    """One combination of the grid: its values, directory name and complete run file."""

    values: dict[str, Any]
    dirname: str
    data: dict[str, Any]


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def point_dirname(values: dict[str, Any]) -> str:
    """``{"settings.share": "1/2", "seed": 1}`` → ``settings.share=1_2,seed=1``."""
    return ",".join(_UNSAFE.sub("_", f"{k}={_show(v)}") for k, v in values.items())


def sweep_axes(data: dict[str, Any], source: str) -> dict[str, list[Any]] | None:
    """The ``sweep:`` mapping of a run file (None when it has none), checked."""
    if "sweep" not in data:
        return None
    axes = data["sweep"]
    if not isinstance(axes, dict) or not axes:
        raise ConfigError(f"{source}: sweep: expected a mapping of dotted keys to lists of "
                          f"values, like settings.bias: [0.1, 0.5]")
    for key, values in axes.items():
        if not isinstance(key, str) or not key or key.startswith("sweep"):
            raise ConfigError(f"{source}: sweep: {key!r} is not a key to sweep")
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{source}: sweep.{key}: expected a non-empty list of values, "
                              f"got {values!r}")
        if any(isinstance(v, dict | list) for v in values):
            raise ConfigError(f"{source}: sweep.{key}: values must be plain numbers, text or "
                              "booleans")
        shown = [_show(v) for v in values]
        if len(set(shown)) != len(shown):
            raise ConfigError(f"{source}: sweep.{key}: a value is listed twice")
    return axes


def expand(data: dict[str, Any], source: str,
           overrides: dict[str, Any] | None = None) -> list[SweepPoint]:
    """Every point of the grid of ``data["sweep"]``, in row-major order (the last key
    varies fastest); ``overrides`` (dotted keys; None values skipped) apply to all points."""
    axes = sweep_axes(data, source)
    if axes is None:
        raise ConfigError(f"{source}: no sweep: to expand")
    base = {k: v for k, v in data.items() if k != "sweep"}
    points = []
    for combo in itertools.product(*axes.values()):
        values = dict(zip(axes, combo, strict=True))
        point = deepcopy(base)
        for key, value in values.items():
            set_dotted(point, key, value)
        for key, value in (overrides or {}).items():
            if value is not None:
                set_dotted(point, key, value)
        points.append(SweepPoint(values, point_dirname(values), point))
    return points


class SweepIndex:
    """``RUN_DIR/sweep.json``: the points of a sweep and how each one went."""

    def __init__(self, root: Path, name: str, source: str, points: list[SweepPoint]) -> None:
        self.root = root
        self.data: dict[str, Any] = {
            "name": name, "config": source, "status": "running",
            "keys": list(points[0].values) if points else [],
            "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "points": [{"values": p.values, "dir": p.dirname, "status": "pending",
                        "error": None, "final": None, "wall_s": None} for p in points],
        }

    @classmethod
    def create(cls, root: str | Path, name: str, source: str, raw: dict[str, Any],
               points: list[SweepPoint]) -> SweepIndex:
        """A new sweep directory; refuses one that already holds a sweep or a run."""
        path = Path(root)
        if (path / "sweep.json").exists() or RunDirectory(path).holds_run():
            raise FileExistsError(f"{path} already holds a run; choose another output directory")
        path.mkdir(parents=True, exist_ok=True)
        atomic_write(path / "sweep.yaml",
                     yaml.safe_dump(raw, sort_keys=False, allow_unicode=True).encode())
        index = cls(path, name, source, points)
        index.write()
        return index

    def write(self) -> None:
        atomic_write(self.root / "sweep.json",
                     (json.dumps(self.data, indent=2, allow_nan=False) + "\n").encode())

    def mark(self, i: int, status: str, summary: dict[str, Any] | None = None,
             error: str | None = None) -> None:
        entry = self.data["points"][i]
        entry["status"] = status
        entry["error"] = error
        if summary is not None:
            entry["final"] = headline(summary)
            entry["wall_s"] = summary.get("wall_s")
        self.write()

    def finish(self, status: str) -> None:
        self.data["status"] = status
        self.write()


def run_sweep(index: SweepIndex, points: list[SweepPoint],
              run_point: Callable[[SweepPoint, Path], dict[str, Any]],
              interrupts: tuple[type[BaseException], ...] = ()) -> dict[str, Any]:
    """Run every point with ``run_point(point, directory) -> summary``, keeping the index.

    A point that raises a :class:`~populace.core.PopulaceError` is marked failed and the
    sweep goes on; Ctrl-C (or one of ``interrupts``) marks the point interrupted and ends
    the sweep. Returns the final index.
    """
    from populace.core import PopulaceError

    stops: tuple[type[BaseException], ...] = (KeyboardInterrupt, SystemExit, *interrupts)
    failed = 0
    for i, point in enumerate(points):
        index.mark(i, "running")
        try:
            summary = run_point(point, index.root / point.dirname)
        except stops:
            index.mark(i, "interrupted")
            index.finish("interrupted")
            raise
        except (PopulaceError, FileExistsError) as e:
            failed += 1
            index.mark(i, "failed", error=f"{type(e).__name__}: {e}")
            continue
        except BaseException as e:
            index.mark(i, "failed", error=f"{type(e).__name__}: {e}")
            index.finish("failed")
            raise
        index.mark(i, str(summary.get("status", "completed")), summary)
    index.finish("failed" if failed else "completed")
    return index.data
