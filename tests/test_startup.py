"""What every ``populace`` command pays before it starts: the imports of ``populace.cli``.

The suite starts hundreds of such processes, and a user each command; a module that only a
few commands need is imported by those commands, not by all.
"""

from __future__ import annotations

import subprocess
import sys

#: Loaded only by what needs them: aiohttp by a call to a server (or ``serve-llm``),
#: matplotlib by ``report``, the studio's web stack by ``studio``.
NOT_AT_START = ("aiohttp", "matplotlib", "fastapi", "uvicorn", "populace.llm.offline._server",
                "populace.studio")


def test_the_command_line_starts_without_what_only_some_commands_need() -> None:
    code = ("import sys, populace.cli; "
            f"print(*[m for m in {NOT_AT_START!r} if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split() == []


def test_the_survey_scenario_loads_without_scipy() -> None:
    # scipy.stats (~0.5 CPU-s to import) serves the survey's statistical tests in reports,
    # not every command that loads the scenario (a run, an estimate, a check)
    code = "import sys, populace.scenarios.survey; print('scipy' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split() == ["False"]
