"""Before ``populace run`` spends a real model's calls: the estimate, and a question when it
is large (issue 28).

A run on a model behind a server (provider ``openai``) is estimated as ``populace estimate``
estimates it, from a pilot run; when the predicted LLM calls are above the run file's
``confirm_above:`` (10,000 unless it says), the estimate is shown and the run starts on a
yes only. Without a terminal to answer in, it is refused in one line that names ``--yes``.
``--yes`` and ``--replay`` skip all this; the dummy and scripted models cost nothing and
are never estimated, and a python provider's cost cannot be measured from here.

What is counted is what the command is about to spend: a new run's steps and backgrounds,
the steps a resume or a fork still has to play (its backgrounds were written before), a
sweep's points together.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import typer
from rich.markup import escape

from populace.launch import PILOT_AGENTS, Estimate, RunFile, estimate
from populace.llm import OpenAIConfig

from ._app import EXIT_CONFIG, Fail, out
from ._estimate import duration, predicted, show

#: A run is piloted only when its agents × steps × this is above its ``confirm_above:``: a
#: pilot spends calls and time, and a run under that would need more calls per agent and
#: step than any of ours makes to reach the threshold.
CALLS_PER_AGENT_STEP = 10


@dataclass(frozen=True)
class Start:
    """A run a command is about to start."""

    run_file: RunFile
    #: The run file as read, which the pilot plays (with ``overrides``).
    data: dict[str, Any]
    overrides: dict[str, Any] | None = None
    #: Steps a resume or a fork still plays; None: a new run, every step and backgrounds.
    remaining: int | None = None
    #: A sweep point's directory name.
    label: str | None = None

    @property
    def steps(self) -> int:
        return self.run_file.options.steps if self.remaining is None else self.remaining

    @property
    def served(self) -> bool:
        return any(isinstance(m, OpenAIConfig) for m in self.run_file.options.models.values())


@dataclass(frozen=True)
class _Spend:
    calls: int
    tokens: int
    wall_s: float | None  # the models' time (None: not predicted)

    @classmethod
    def of(cls, result: Estimate, remaining: int | None) -> _Spend:
        """What starting spends: the whole run, its backgrounds included, or the share of
        its steps' calls that ``remaining`` steps make."""
        if remaining is None:
            models, share, wall = result.all_models, 1.0, result.wall_s
        else:
            models, share = result.models, remaining / result.steps
            walls = [m.wall_s for m in models if m.wall_s is not None]
            wall = max(walls) * share if walls else None  # models of a step run together
        return cls(round(sum(m.calls for m in models) * share),
                   round(sum(m.prompt_tokens + m.completion_tokens for m in models) * share),
                   wall)

    def __add__(self, other: _Spend) -> _Spend:  # a sweep's points run one after another
        walls = [w for w in (self.wall_s, other.wall_s) if w is not None]
        return _Spend(self.calls + other.calls, self.tokens + other.tokens,
                      sum(walls) if walls else None)

    def __str__(self) -> str:
        time = "" if self.wall_s is None else f", about {duration(self.wall_s)} of model time"
        return f"{self.calls:,} LLM calls ({self.tokens:,} tokens{time})"


def confirm(starts: Sequence[Start], what: str, *, yes: bool) -> None:
    """Ask before ``starts`` (what one command starts: a run, a resume, a fork or a sweep's
    points; ``what`` names it) spend more predicted LLM calls than their run files'
    ``confirm_above:`` (a sweep's points: the lowest); :class:`Fail` when the answer is no
    or nobody is there to give it."""
    served = [s for s in starts if s.served and s.steps > 0]
    if yes or not served:
        return
    above = min(s.run_file.options.confirm_above for s in served)
    reach = sum(s.run_file.options.agents * s.steps for s in served) * CALLS_PER_AGENT_STEP
    if reach <= above:
        return
    results = []
    for s in served:
        out.print(f"estimating {escape(s.label or what)} before it starts: a pilot run of "
                  f"{min(PILOT_AGENTS, s.run_file.options.agents)} agents (--yes skips it)",
                  soft_wrap=True, highlight=False)
        results.append((s, asyncio.run(estimate(s.data, s.run_file.path, s.overrides))))
    spend = sum((_Spend.of(r, s.remaining) for s, r in results), _Spend(0, 0, None))
    if spend.calls <= above:
        out.print(f"predicted for {what}: {spend}; starting", soft_wrap=True, highlight=False)
        return
    for s, result in results:
        if s.label is not None:  # a sweep: a line per point
            out.print(f"{escape(s.label)}: {predicted(result)}", soft_wrap=True)
        else:
            show(result, s.run_file.path)
        if s.remaining is not None:
            out.print(f"{what} plays {s.remaining} of the {result.steps} steps: "
                      f"{_Spend.of(result, s.remaining)}", soft_wrap=True, highlight=False)
    line = (f"{what} is predicted to make {spend}, more than the {above:,} that "
            "populace run starts without asking")
    if not sys.stdin.isatty():
        raise Fail(f"{line}; pass --yes to start it", EXIT_CONFIG)
    if not typer.confirm(f"{line}. Start it?", default=False):
        raise Fail(f"{what} was not started (the answer was no)", 1)
