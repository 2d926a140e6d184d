"""Runs: the Scenario API and the one launcher behind ``populace run``, the studio and sweeps.

Write a :class:`Scenario` (settings, ``setup``, ``step``), point a run file at it
(``scenario: my_file.py:MyScenario``), and :func:`launch` gives it the whole platform:
per-step Parquet tables, ``summary.json``, a checkpoint after every step, ``--resume``,
recovery from a lost worker, LLM recording and ``--replay``, the studio's live view and
``populace report``. See ``docs/scenarios.md``.
"""

from populace.core import ray_host_port  # Ray's address forms, for scripts that check one

from ._console import ConsoleObserver
from ._control import RunControl, RunNotLive
from ._estimate import PILOT_AGENTS, Estimate, ModelEstimate, estimate
from ._inputs import INPUTS, check_inputs
from ._interventions import (
    INTERVENTIONS,
    Intervention,
    Scheduled,
    intervene,
    parse_intervention,
    read_interventions,
)
from ._interview import (
    INTERVIEWER,
    INTERVIEWS,
    InterviewError,
    interview,
    interview_run,
    read_interviews,
    save_interview,
    written_profiles,
)
from ._launcher import (
    MAX_RECOVERIES,
    STATUSES,
    Observer,
    ScenarioFailed,
    launch,
)
from ._models import ModelChoice
from ._offline import checkpointed_steps, fork, parse_sets, reopen
from ._run import AllAnswersFailed, Measure, Rows, Run, StepAbandoned, as_numbers
from ._runfile import (
    ENTRY_POINTS,
    RunFile,
    RunOptions,
    load_run_file,
    parse_run_file,
    resolve_scenario,
    scenario_of,
    where,
)
from ._scenario import COMMON_OPTIONS, Scenario, ScenarioSettings, StudioView
from ._select import SelectionError, select, where_filter
from ._watchdog import STOP_GRACE_S, Terminated, run_until_signalled

__all__ = [
    "COMMON_OPTIONS",
    "ENTRY_POINTS",
    "INPUTS",
    "INTERVENTIONS",
    "INTERVIEWER",
    "INTERVIEWS",
    "MAX_RECOVERIES",
    "PILOT_AGENTS",
    "STATUSES",
    "STOP_GRACE_S",
    "AllAnswersFailed",
    "ConsoleObserver",
    "Estimate",
    "Intervention",
    "InterviewError",
    "Measure",
    "ModelChoice",
    "ModelEstimate",
    "Observer",
    "Rows",
    "Run",
    "RunControl",
    "RunFile",
    "RunNotLive",
    "RunOptions",
    "Scenario",
    "ScenarioFailed",
    "ScenarioSettings",
    "Scheduled",
    "SelectionError",
    "StepAbandoned",
    "StudioView",
    "Terminated",
    "as_numbers",
    "check_inputs",
    "checkpointed_steps",
    "estimate",
    "fork",
    "intervene",
    "interview",
    "interview_run",
    "launch",
    "load_run_file",
    "parse_intervention",
    "parse_run_file",
    "parse_sets",
    "ray_host_port",
    "read_interventions",
    "read_interviews",
    "reopen",
    "resolve_scenario",
    "run_until_signalled",
    "save_interview",
    "scenario_of",
    "select",
    "where",
    "where_filter",
    "written_profiles",
]
