"""What a run's scenario declares for the studio's panels, with generic fallbacks.

The page asks once per run (``GET /api/runs/{id}/view``), never in the live stream: the
scenario's :class:`~populace.launch.StudioView` (what its live answers are, which summary
metrics are shares of options, example texts for the forms) and which of the run's models
are not recorded (the dummy model's calls never are). A scenario that declares nothing —
or whose code cannot be loaded any more — gets the generic panels and generic examples: a
profile query made from the run's own profiles, never another scenario's text.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from populace.core import PopulaceError
from populace.launch import Scenario, StudioView, scenario_of
from populace.results import RunDirectory

log = logging.getLogger("populace.studio")

QUESTION = "What matters most to you right now, and why?"
MESSAGE = "An announcement for everyone: please read this before the next step."
CHANGES = "seed=3"
_SKIP = ("agent_id", "group", "background", "model")  # poor examples of a profile query


def _scenario(run_dir: Path) -> type[Scenario] | None:
    try:
        return scenario_of(run_dir)
    except (PopulaceError, OSError, ValueError, ImportError) as e:
        log.info("studio: the scenario of %s cannot be loaded: %s", run_dir.name, e)
        return None


def _example_where(profiles: pa.Table | None) -> str | None:
    """``column == "value"`` over the first text column of few values of ``profiles``."""
    if profiles is None:
        return None
    for name in profiles.column_names:
        col = profiles.column(name)
        if name in _SKIP or not (pa.types.is_string(col.type)
                                 or pa.types.is_large_string(col.type)
                                 or pa.types.is_dictionary(col.type)):
            continue
        values = sorted(str(v) for v in pc.unique(col.cast(pa.string())).to_pylist()
                        if v is not None)
        if 1 < len(values) <= 60 and name.isidentifier():
            return f'{name} == "{values[0]}"'
    return None


def scenario_view(run_dir: Path) -> dict[str, Any]:
    """What the page shows of run ``run_dir`` beyond the generic panels (see the module)."""
    directory = RunDirectory(run_dir)
    try:
        config = directory.read_config()
    except (OSError, ValueError):
        config = {}
    cls = _scenario(run_dir) if config else None
    declared = StudioView()
    if cls is not None:
        try:
            declared = cls.studio(config)
        except Exception as e:  # the scenario's code: the generic panels stand in
            log.info("studio: %s.studio() failed: %s: %s", cls.__name__, type(e).__name__, e)
    models = config.get("models")
    models = models if isinstance(models, Mapping) else {"dummy": {"provider": "dummy"}}
    unrecorded = sorted(str(k) for k, m in models.items()
                        if isinstance(m, Mapping) and m.get("provider") == "dummy")
    where = declared.where
    if where is None:
        try:
            where = _example_where(directory.read_profiles())
        except (OSError, ValueError, pa.ArrowException):
            where = None
    return {
        "scenario": cls.name if cls is not None else None,
        "answers": declared.answers,
        "categorical": list(declared.categorical),
        # the metrics it shows first: those of its terminal line (Scenario.shown)
        "metrics": [str(m) for m in (cls.shown or ())] if cls is not None else [],
        "choices": [[str(q), [str(o) for o in options]] for q, options in declared.choices],
        "examples": {"question": declared.question or QUESTION, "where": where,
                     "message": declared.message or MESSAGE,
                     "changes": declared.changes or CHANGES},
        "unrecorded_models": unrecorded,
    }


def state_describer(run_dir: Path) -> Callable[[Any], Mapping[str, Any] | None] | None:
    """The scenario's :meth:`~populace.launch.Scenario.agent_state` for run ``run_dir``
    (its labelled fields of an agent's state), or None."""
    cls = _scenario(run_dir)
    if cls is None or cls.agent_state.__func__ is Scenario.agent_state.__func__:  # type: ignore[attr-defined]
        return None
    try:
        config = RunDirectory(run_dir).read_config()
    except (OSError, ValueError):
        return None

    def describe(state: Any) -> Mapping[str, Any] | None:
        try:
            return cls.agent_state(state, config)
        except Exception as e:  # the scenario's code: labelled generically instead
            log.info("studio: %s.agent_state() failed: %s", cls.__name__, e)
            return None

    return describe


MAX_SHARE_STEPS = 100   # steps of a categorical metric sent (the latest)
MAX_OPTIONS = 24        # options of one question shown (the rest are summed as "other")
MAX_QUESTIONS = 40


def _shares(value: Any) -> dict[str, float] | None:
    """``{option: share}`` with numbers, at most :data:`MAX_OPTIONS` (the rest as other)."""
    if not isinstance(value, Mapping):
        return None
    items = [(str(k)[:80], float(v)) for k, v in value.items()
             if isinstance(v, int | float) and not isinstance(v, bool)]
    if not items or len(items) != len(value):
        return None
    if len(items) > MAX_OPTIONS:
        rest = sum(v for _, v in items[MAX_OPTIONS - 1:])
        items = [*items[:MAX_OPTIONS - 1], ("other", rest)]
    return {k: round(v, 6) for k, v in items}


#: Rows of archetype sampling the studio shows (the latest).
MAX_SAMPLING_ROWS = 400


def categorical_history(run_dir: Path, names: list[str]) -> dict[str, Any]:
    """The categorical metrics ``names`` of every written step (the latest
    :data:`MAX_SHARE_STEPS`), from ``summary.json``: ``{name: {"steps": [...], "questions":
    {question: [{option: share} or None per step]}}}``; a metric of one question
    (``{option: share}``) has the question ``""``."""
    from populace.results import read_summary

    try:
        summary = read_summary(run_dir)
    except (OSError, ValueError):
        summary = {}
    entries = [e for e in (summary.get("steps") or summary.get("rounds") or [])
               if isinstance(e, Mapping)][-MAX_SHARE_STEPS:]
    out: dict[str, Any] = {}
    for name in names:
        steps: list[int] = []
        questions: dict[str, list[dict[str, float] | None]] = {}
        for e in entries:
            value = e.get(name)
            if not isinstance(value, Mapping):
                continue
            flat = _shares(value)
            per = {"": flat} if flat is not None else {
                str(q)[:80]: _shares(v) for q, v in list(value.items())[:MAX_QUESTIONS]}
            at = len(steps)
            step = e.get("step", e.get("round"))
            steps.append(step if isinstance(step, int) else at + 1)
            for q, shares in per.items():
                questions.setdefault(q, [None] * at).append(shares)
            for column in questions.values():  # a question this step did not ask
                if len(column) < len(steps):
                    column.append(None)
        out[name] = {"steps": steps, "questions": questions}
    return out


def sampling_history(run_dir: Path) -> dict[str, Any]:
    """Archetype sampling per written step, from ``summary.json``: ``{"rows": [...]}``, one
    row per step, model and decision (the audit's distance and interval, the decisions the
    archetypes answered, the calls made and what asking every agent would have taken)."""
    from populace.results import read_summary

    try:
        summary = read_summary(run_dir)
    except (OSError, ValueError):
        summary = {}
    rows = []
    for e in summary.get("steps") or []:
        if not isinstance(e, Mapping):
            continue
        for model, got in (e.get("sampling") or {}).items():
            calls = (e.get("llm") or {}).get(model, {}).get("requests")
            individual = (got.get("individual") or {}).get("calls")
            for decision, d in list((got.get("decisions") or {}).items())[:MAX_QUESTIONS]:
                kind = "TV" if "tv" in d else "Wasserstein"
                rows.append({"step": e.get("step"), "model": model, "decision": decision[:80],
                             "audited": d.get("audited"), "kind": kind,
                             "value": d.get("tv", d.get("wasserstein")), "low": d.get("low"),
                             "high": d.get("high"), "shared": got.get("shared"),
                             "calls": calls, "individual": individual,
                             "fell_back": decision.split("=")[0] in (got.get("fell_back")
                                                                     or ())})
    return {"rows": rows[-MAX_SAMPLING_ROWS:]}


def _numbers(entry: Mapping[str, Any]) -> list[str]:
    """The metrics ``populace compare`` sets side by side: numbers (not yes/no) of a step's
    entry, its step and wall time aside."""
    return [k for k, v in entry.items() if k not in ("step", "round", "wall_s")
            and isinstance(v, int | float) and not isinstance(v, bool)]


def branch_view(run_dir: Path, source_dir: Path, at: int) -> dict[str, Any]:
    """A fork beside its source, step by step (the latest :data:`MAX_SHARE_STEPS`): the
    metrics ``populace compare`` shows of a branch (numbers of the fork's first step), each
    as ``{"source": [...], "branch": [...]}`` over ``steps``; a step one of them has not
    played is None. Up to ``at`` the branch is its source's copy."""
    from populace.results import read_summary

    def entries(d: Path) -> dict[int, Mapping[str, Any]]:
        try:
            summary = read_summary(d)
        except (OSError, ValueError):
            return {}
        found = summary.get("steps") or summary.get("rounds") or []
        return {int(e.get("step", e.get("round", 0))): e for e in found
                if isinstance(e, Mapping)}

    mine, theirs = entries(run_dir), entries(source_dir)
    steps = sorted(set(mine) | set(theirs))[-MAX_SHARE_STEPS:]
    first = mine.get(min(mine)) if mine else None
    names = _numbers(first)[:MAX_QUESTIONS] if first is not None else []

    def value(e: Mapping[str, Any] | None, name: str) -> Any:
        v = e.get(name) if e is not None else None
        return v if isinstance(v, int | float) and not isinstance(v, bool) else None

    return {"at": at, "steps": steps,
            "metrics": {n: {"source": [value(theirs.get(t), n) for t in steps],
                            "branch": [value(mine.get(t), n) for t in steps]}
                        for n in names}}


MAX_LOG_STEPS = 100   # steps of warnings sent (the latest that have any)
MAX_ERROR = 4000      # characters of error.txt shown


def run_log(run_dir: Path) -> dict[str, Any]:
    """What went wrong in a run, step by step, from ``summary.json``: each step's
    ``warnings`` and ``failed`` answers (the latest :data:`MAX_LOG_STEPS` steps with any),
    and the start of ``error.txt`` (a failed run's traceback)."""
    from populace.results import read_summary

    try:
        summary = read_summary(run_dir)
    except (OSError, ValueError):
        summary = {}
    steps = []
    for e in summary.get("steps") or summary.get("rounds") or []:
        if not isinstance(e, Mapping):
            continue
        warnings = [str(w)[:500] for w in (e.get("warnings") or [])[:20]]
        failed = e.get("failed") if isinstance(e.get("failed"), Mapping) else None
        if warnings or failed:
            steps.append({"step": e.get("step", e.get("round")), "warnings": warnings,
                          "failed": failed})
    try:
        with open(run_dir / "error.txt", encoding="utf-8", errors="replace") as f:
            error: str | None = f.read(MAX_ERROR)
    except OSError:
        error = None
    return {"steps": steps[-MAX_LOG_STEPS:], "error": error,
            "failed_step": summary.get("failed_step")}
