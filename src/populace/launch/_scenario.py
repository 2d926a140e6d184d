"""What a user writes: a :class:`Scenario` with validated :class:`ScenarioSettings`.

The launcher (:mod:`populace.launch._launcher`) owns everything around the scenario — run
directory, checkpoints, resume, recovery, recording, the studio, the summary — so a
scenario only says how its world is set up and what one step does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from populace._strict import StrictModel

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from populace.results import RunData

    from ._run import Run
    from ._runfile import RunFile, RunOptions

#: The run options every scenario takes unless it says otherwise (``Scenario.options``).
COMMON_OPTIONS = frozenset({"agents", "steps", "seed", "workers", "backend", "address"})


#: Metrics shown on a step's line in a terminal, at most (the summary has them all).
SHOWN = 10


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, bool | int | float | str)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


@dataclass(frozen=True)
class StudioView:
    """What the studio shows of a scenario's runs beyond what every run reports
    (:meth:`Scenario.studio`). Every field is optional; the studio's generic panels stand
    in for what is not given, and never show another scenario's text.

    >>> StudioView(answers="share of a respondent's answers that were valid",
    ...            categorical=("marginals",), question="Why did you answer as you did?",
    ...            where='gender == "female"')                  # doctest: +SKIP
    """

    #: What the numbers of the live answers histogram are (its caption; default
    #: "numbers"). None with ``categorical``: the shares stand in for a histogram.
    answers: str | None = None
    #: Summary metrics that are shares of options: ``{option: share}``, or per question
    #: ``{question: {option: share}}``. Drawn as stacked shares per step; the last step's
    #: also in the answers panel.
    categorical: tuple[str, ...] = ()
    #: The questions and options of the live answer shares — ``((question, (option,
    #: …)), …)`` in the order of the question indexes its measure's ``categories`` gives
    #: (:data:`~populace.launch.Measure`) — shown while a step collects.
    choices: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: Example texts of the page's forms: an interview question, a profile query, a
    #: message to agents, a fork's changed settings.
    question: str | None = None
    where: str | None = None
    message: str | None = None
    changes: str | None = None


class ScenarioSettings(StrictModel):
    """A scenario's own settings (the run file's ``settings:`` block and its other top-level
    keys). Subclass it with typed fields and defaults; an unknown key or a wrong value is a
    one-line error naming the run file and the key. Numbers are taken as written: ``true``
    for an ``int`` or ``float`` field is refused, as is ``2.5`` for an ``int``;
    a model nested in the settings gets the same checks when it subclasses this class."""


class Scenario:
    """A simulation the launcher can run, resume, recover, record and report.

    Subclasses set :attr:`name`, a nested ``Settings`` class, and implement :meth:`setup` and
    :meth:`step`. Agents are created with :meth:`Run.create` (their ``get_state`` is
    checkpointed after every step) and environments served with :meth:`Run.serve` (their
    state is checkpointed too); anything else the scenario keeps across steps goes in
    :meth:`get_state` / :meth:`set_state`.
    """

    #: The name of the scenario (run directories default to ``runs/NAME-TIMESTAMP``).
    name: ClassVar[str] = "scenario"
    #: The settings' model; replace with a subclass of :class:`ScenarioSettings`.
    Settings: ClassVar[type[ScenarioSettings]] = ScenarioSettings
    #: Run options (``agents``, ``steps``, ``seed``, ``workers``, ``backend``, ``address``)
    #: this scenario honours; setting any other one, in the run file or on the command line,
    #: is refused with one line.
    options: ClassVar[frozenset[str]] = COMMON_OPTIONS
    #: Defaults for run options when the run file does not set them (e.g. ``{"steps": 14}``).
    defaults: ClassVar[dict[str, Any]] = {}
    #: Metrics in the terminal's table of steps (default: the first few).
    shown: ClassVar[tuple[str, ...] | None] = None
    #: The range of the studio's live histogram of collected answers, if they are numbers.
    answer_range: ClassVar[tuple[float, float] | None] = None

    async def setup(self, run: Run) -> None:
        """Build the world and create the agents (runs again, identically, on resume)."""

    async def step(self, run: Run, t: int) -> None:  # pragma: no cover - abstract
        """Play step ``t`` (1-based): collect answers, record rows, report metrics.
        Call :meth:`Run.end` to end the run after this step."""
        raise NotImplementedError(f"{type(self).__name__}.step(run, t) is not implemented")

    def get_state(self) -> Any:
        """The scenario's own state after a step (plain, picklable); None if it has none."""
        return None

    def set_state(self, state: Any) -> None:
        """Restore what :meth:`get_state` returned (after :meth:`setup`, on resume)."""

    # -- hooks for what a class says about its runs (before any instance exists) ------------
    @classmethod
    def check(cls, options: RunOptions, settings: Any, source: str) -> Any:
        """Checks across the run options and the settings (both already validated, command
        line overrides applied) beyond those ``Settings`` makes on its own: a setting
        against ``agents``, ``models`` or the population. Raise
        :class:`~populace.core.ConfigError` with one line, ``f"{source}: settings.KEY:
        …"`` for a setting (the run file's name for it is put in: ``KEY`` alone when the
        file sets it at the top level) or ``f"{source}: KEY: …"`` for a run option. What it
        returns is :attr:`Run.config` (None by default).

        >>> @classmethod                                            # doctest: +SKIP
        ... def check(cls, options, settings, source):
        ...     if settings.radius > options.agents:
        ...         raise ConfigError(f"{source}: settings.radius: {settings.radius} is "
        ...                           f"more than the {options.agents} agents")
        """
        return None

    @classmethod
    def planned_steps(cls, config: Any) -> int | None:
        """The number of steps the scenario's own settings imply (``config``: what
        :meth:`check` returned), used when the run file gives no ``steps``; None: the
        run options decide (``defaults``, else 1)."""
        return None

    @classmethod
    def resolved(cls, run_file: RunFile) -> dict[str, Any] | None:
        """The run file as ``config.yaml`` records it; None for the generic form (options,
        ``scenario:`` and ``settings:``). Either must load again with ``--resume``."""
        return None

    @classmethod
    def live_range(cls, run_file: RunFile) -> tuple[float, float] | None:
        """The range of the studio's live answer histogram (default :attr:`answer_range`)."""
        return cls.answer_range

    @classmethod
    def describe_step(cls, t: int, steps: int, entry: dict[str, Any]) -> str:
        """The line a terminal shows when step ``t`` is written (rich markup escaped)."""
        shown = [f"{k}={_cell(v)}" for k, v in entry.items()
                 if k not in ("step", "wall_s") and _scalar(v)][:SHOWN]
        return f"step {t}/{steps}: {' '.join(shown)}"

    @classmethod
    def studio(cls, config: Mapping[str, Any]) -> StudioView:
        """What the studio shows of a run beyond the generic panels (``config``: the run's
        ``config.yaml``); the default declares nothing."""
        return StudioView()

    @classmethod
    def agent_state(cls, state: Any, config: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """An agent's state (what its ``get_state()`` returned, beside a persona's memory)
        as labelled fields for the studio's Mind (``{"answers": {...}, "conversation":
        [...]}``); None: the studio labels it generically."""
        return None

    def figures(self, run: RunData) -> dict[str, Figure]:
        """Extra figures for ``populace report`` (name → matplotlib figure)."""
        return {}

    def tables(self, run: RunData) -> list[dict[str, Any]]:
        """Extra tables for ``populace report``: ``{"title": …, "head": (column, …),
        "rows": [[cell, …], …]}`` with cells as text."""
        return []
