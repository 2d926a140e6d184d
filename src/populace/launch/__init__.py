"""Runs: the Scenario API and the one launcher behind ``populace run``, the studio and sweeps.

Write a :class:`Scenario` (settings, ``setup``, ``step``), point a run file at it
(``scenario: my_file.py:MyScenario``), and :func:`launch` gives it the whole platform:
per-step Parquet tables, ``summary.json``, a checkpoint after every step, ``--resume``,
recovery from a lost worker, LLM recording and ``--replay``, the studio's live view and
``populace report``. See ``docs/scenarios.md``.
"""

from ._console import ConsoleObserver
from ._estimate import PILOT_AGENTS, Estimate, ModelEstimate, estimate
from ._launcher import (
    MAX_RECOVERIES,
    STATUSES,
    Observer,
    ScenarioFailed,
    Terminated,
    launch,
    run_until_signalled,
)
from ._run import AllAnswersFailed, Measure, Rows, Run, StepAbandoned, as_numbers
from ._runfile import (
    ENTRY_POINTS,
    RunFile,
    RunOptions,
    load_run_file,
    parse_run_file,
    ray_host_port,
    resolve_scenario,
    scenario_of,
    where,
)
from ._scenario import COMMON_OPTIONS, Scenario, ScenarioSettings

__all__ = [
    "COMMON_OPTIONS",
    "ENTRY_POINTS",
    "MAX_RECOVERIES",
    "PILOT_AGENTS",
    "STATUSES",
    "AllAnswersFailed",
    "ConsoleObserver",
    "Estimate",
    "Measure",
    "ModelEstimate",
    "Observer",
    "Rows",
    "Run",
    "RunFile",
    "RunOptions",
    "Scenario",
    "ScenarioFailed",
    "ScenarioSettings",
    "StepAbandoned",
    "Terminated",
    "as_numbers",
    "estimate",
    "launch",
    "load_run_file",
    "parse_run_file",
    "ray_host_port",
    "resolve_scenario",
    "run_until_signalled",
    "scenario_of",
    "where",
]
