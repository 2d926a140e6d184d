"""The survey as a :class:`~populace.launch.Scenario`: one step per wave.

Respondents live in workers and answer a wave each step; the central process assigns the
treatment arms (exact counts, seeded, optionally per stratum), decodes the packed answers
into the ``answers`` table and reports each question's marginals as the step's metrics.
"""

from __future__ import annotations

import math
import string
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from populace.core import ConfigError, derive_seed
from populace.launch import Rows, Run, RunFile, Scenario, ScenarioSettings

from ._agents import SEP, Plan, Respondent
from ._questionnaire import CHOICE, Questionnaire, Treatments, load_questionnaire

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from populace.results import RunData

ANSWER_SCHEMA = pa.schema([
    ("step", pa.int32()),
    ("wave", pa.int16()),
    ("agent_id", pa.int64()),
    ("question", pa.string()),
    ("answer", pa.string()),
    ("code", pa.float64()),
    ("position", pa.int16()),
    ("options_shown", pa.int16()),
    ("valid", pa.bool_()),
    ("raw", pa.string()),
    ("arm", pa.string()),
    ("prompt_tokens", pa.int32()),
    ("completion_tokens", pa.int32()),
    ("calls", pa.int8()),
    ("error", pa.string()),
])


@dataclass(frozen=True)
class SurveyConfig:
    """What :meth:`Survey.check` made of the run file."""

    questionnaire: Questionnaire
    model: str
    #: Where the questionnaire came from (for messages); the reference file, made absolute.
    source: str
    reference: Path | None


def assign_arms(treatments: Treatments, n: int, rng: np.random.Generator,
                strata: np.ndarray | None = None) -> np.ndarray:
    """Each respondent's arm index: exact counts per arm (largest remainder of ``n × share``)
    within each stratum, in a seeded random order."""
    shares = np.array([a.share for a in treatments.arms.values()])
    arms = np.empty(n, dtype=np.int16)
    groups = [np.arange(n)] if strata is None else [
        np.flatnonzero(strata == v) for v in np.unique(strata)]
    for members in groups:
        counts = _apportion(shares, members.size)
        labels = np.repeat(np.arange(shares.size, dtype=np.int16), counts)
        arms[members] = labels[rng.permutation(members.size)]
    return arms


def _apportion(shares: np.ndarray, n: int) -> np.ndarray:
    """Integer counts summing to ``n``, each within one of ``n × share`` (largest remainder;
    ties to the earlier arm)."""
    exact = shares * n
    counts = np.floor(exact).astype(np.int64)
    left = n - int(counts.sum())
    order = np.argsort(-(exact - counts), kind="stable")
    counts[order[:left]] += 1
    return counts


def _fields(template: str) -> set[str]:
    return {f for _, f, _, _ in string.Formatter().parse(template) if f}


class Survey(Scenario):
    """A questionnaire asked of every agent, wave by wave (``scenario: survey``)."""

    name = "survey"
    options = Scenario.options - {"steps"}  # one step per wave of the questionnaire
    defaults = {"agents": 1000}
    shown = ("respondents", "answers", "valid_share", "calls")
    answer_range = (0.0, 1.0)  # the live histogram: each respondent's share of valid answers

    class Settings(ScenarioSettings):
        questionnaire: str | dict[str, Any] = Field(
            description="a questionnaire file (relative to the run file) or the mapping itself")
        model: str | None = Field(None, description="the model that answers (default: the "
                                                    "only one under models:)")
        structured: bool = Field(True, description="ask for a JSON answer constrained to the "
                                                   "options (response_format)")
        memory: bool = Field(True, description="earlier questions and answers stay in the "
                                               "conversation, across waves too")
        temperature: float | None = Field(None, ge=0, le=2)
        max_tokens: int | None = Field(None, ge=1, le=100_000)
        persona: str | None = Field(None, description="a template of profile fields, e.g. "
                                    "'You are {age} years old.' (default: the background, "
                                    "else every aspect)")
        treatments: Treatments | None = None
        reference: str | None = Field(None, description="published marginals to compare "
                                      "with (CSV or Parquet: question, option, share)")
        targets: dict[str, dict[str, float]] | None = Field(
            None, description="population shares per aspect value, for weighted marginals")

    @classmethod
    def check(cls, data: dict[str, Any], source: str) -> SurveyConfig:
        path = Path(source)
        settings = data  # the settings' keys, with the run options beside them
        questionnaire, where = load_questionnaire(settings["questionnaire"], path)
        waves = len(questionnaire.plan)
        if "steps" in data and data["steps"] != waves:
            raise ConfigError(f"{source}: steps: the questionnaire has {waves} wave(s), one "
                              f"step each (got {data['steps']}; leave steps: out)")
        models = list(data.get("models") or {"dummy": None})
        model = settings.get("model") or (models[0] if len(models) == 1 else None)
        if model is None:
            raise ConfigError(f"{source}: model: several models are configured ("
                              f"{', '.join(models)}); name the one that answers")
        if model not in models:
            raise ConfigError(f"{source}: model: {model!r} is not under models: (have: "
                              f"{', '.join(models)})")
        population = data.get("population") or {}
        aspects = set((population.get("aspects") or {}) if isinstance(population, dict)
                      else ())
        if isinstance(population, dict) and population.get("backgrounds"):
            aspects.add("background")
        have = ", ".join(sorted(aspects)) or "none"
        persona = settings.get("persona")
        if persona is not None:
            unknown = sorted(_fields(persona) - aspects)
            if unknown:
                raise ConfigError(f"{source}: persona: {{{unknown[0]}}} is not an aspect of "
                                  f"the population (aspects: {have})")
        treatments = settings.get("treatments")
        if treatments:
            checked = Treatments.model_validate(treatments)
            if checked.stratify_by is not None and checked.stratify_by not in aspects:
                raise ConfigError(f"{source}: treatments.stratify_by: {checked.stratify_by!r} "
                                  f"is not an aspect of the population (aspects: {have})")
            ids = {q.id for q in questionnaire.questions}
            for name, arm in checked.arms.items():
                for qid in arm.before or ():
                    if qid not in ids:
                        raise ConfigError(f"{source}: treatments.arms.{name}.before: {qid!r} "
                                          f"is not a question of {Path(where).name}")
                if arm.before and arm.message is None:
                    raise ConfigError(f"{source}: treatments.arms.{name}.before: the arm has "
                                      "no message to show")
        targets = settings.get("targets") or {}
        for aspect in targets:
            if aspect not in aspects:
                raise ConfigError(f"{source}: targets.{aspect}: not an aspect of the "
                                  f"population (aspects: {have})")
        reference = None
        if settings.get("reference"):
            from ._analysis import read_reference

            reference = (path.parent / settings["reference"]).resolve()
            ref = read_reference(reference)
            known = {q.id: q for q in questionnaire.questions}
            for row in ref.select(["question", "option"]).to_pylist():
                q = known.get(row["question"])
                if q is None:
                    raise ConfigError(f"{reference}: question {row['question']!r} is not in "
                                      f"the questionnaire")
                if q.type != "numeric" and row["option"] not in q.options:
                    raise ConfigError(f"{reference}: question {q.id!r}: {row['option']!r} is "
                                      f"not one of its options ({', '.join(q.options)})")
        return SurveyConfig(questionnaire, model, where, reference)

    @classmethod
    def planned_steps(cls, config: SurveyConfig) -> int:
        return len(config.questionnaire.plan)

    @classmethod
    def resolved(cls, run_file: RunFile) -> dict[str, Any]:
        """The generic form with the questionnaire written inline and the reference path
        absolute: the run directory resumes and reports on its own."""
        config: SurveyConfig = run_file.config
        data = run_file.options.model_dump(mode="json", exclude={"settings"})
        data["scenario"] = run_file.scenario_ref
        settings = run_file.settings.model_dump(mode="json")
        settings["questionnaire"] = config.questionnaire.model_dump(mode="json",
                                                                   exclude_none=True)
        if config.reference is not None:
            settings["reference"] = str(config.reference)
        data["settings"] = settings
        return data

    # -- the run ----------------------------------------------------------------------------
    async def setup(self, run: Run) -> None:
        config: SurveyConfig = run.config
        settings = run.settings
        self.questionnaire = q = config.questionnaire
        self.ids = np.arange(run.agents, dtype=np.int64)
        people = run.population
        profiles = people if people is not None else pa.table({"agent_id": self.ids})
        treatments: Treatments | None = settings.treatments
        self.arm_names: list[str] = list(treatments.arms) if treatments else []
        self.arms: np.ndarray | None = None
        if treatments is not None:
            strata = None
            if treatments.stratify_by is not None and people is not None:
                strata = people.column(treatments.stratify_by).to_numpy(zero_copy_only=False)
            self.arms = assign_arms(treatments, run.agents, run.rng("arms"), strata)
            profiles = profiles.append_column(
                "arm", pa.DictionaryArray.from_arrays(pa.array(self.arms),
                                                      pa.array(self.arm_names)).cast(pa.string()))
        run.write_profiles(profiles)
        notes: dict[str, dict[str, str]] = {}
        for name, arm in (treatments.arms.items() if treatments else ()):
            if arm.message is not None:
                before = arm.before or tuple(wave[0] for wave in q.plan)
                notes[name] = {qid: arm.message for qid in before}
        attributes = tuple(c for c in profiles.column_names
                           if c not in ("agent_id", "arm", "background", "group"))
        plan = Plan(
            questionnaire=q, model=config.model,
            bases=tuple(tuple(derive_seed(run.seed, w + 1, i) for i in range(len(wave)))
                        for w, wave in enumerate(q.plan)),
            structured=settings.structured, memory=settings.memory,
            temperature=settings.temperature, max_tokens=settings.max_tokens,
            persona=settings.persona, attributes=attributes, notes=notes or None)
        columns = [c for c in profiles.column_names if c != "agent_id"]
        self.respondents = await run.create(
            Respondent, name="respondents",
            profiles=profiles.select(columns) if columns else None,
            init={"models": run.models([config.model]), "plan": plan})

    def _rows(self, wave: int) -> Rows:
        def rows(at: np.ndarray, outcomes: list[Any]) -> pa.Table:
            return self.table(wave, self.ids[at], outcomes)
        return rows

    async def step(self, run: Run, t: int) -> None:
        wave = t - 1
        results = await run.collect(self.respondents.map(Respondent.answer, wave),
                                    measure=_valid_share, partial=("answers", self._rows(wave)),
                                    on_error="return")
        table = self.table(wave, self.ids, results)
        run.record("answers", table)
        self._metrics(run, table)

    def table(self, wave: int, ids: np.ndarray, results: Sequence[Any]) -> pa.Table:
        """The ``answers`` rows of ``results`` (respondents ``ids``, in order)."""
        return decode(self.questionnaire, wave, ids, results, self.arms, self.arm_names)

    def _metrics(self, run: Run, table: pa.Table) -> None:
        valid = table.column("valid")
        n = table.num_rows
        run.metric("respondents", int(pc.count_distinct(table.column("agent_id")).as_py()))
        run.metric("answers", n)
        run.metric("valid_share", pc.mean(valid.cast(pa.float64())).as_py() if n else None)
        run.metric("calls", int(pc.sum(table.column("calls")).as_py() or 0))
        run.metric("prompt_tokens", int(pc.sum(table.column("prompt_tokens")).as_py() or 0))
        run.metric("completion_tokens",
                   int(pc.sum(table.column("completion_tokens")).as_py() or 0))
        errors = int(pc.sum(pc.is_valid(table.column("error"))).as_py() or 0)
        run.metric("failed_questions", errors)
        if self.arms is not None:
            counts = np.bincount(self.arms, minlength=len(self.arm_names))
            run.metric("arms", dict(zip(self.arm_names, counts.tolist(), strict=True)))
        marginals: dict[str, Any] = {}
        ok = table.filter(valid)
        for qid, rows in _by_question(ok):
            q = self.questionnaire.question(qid)
            codes = rows.column("code").to_numpy(zero_copy_only=False)
            if q.type in ("numeric", "likert"):
                mean = float(np.nanmean(codes)) if codes.size else math.nan
                run.metric(f"mean_{qid}", mean)
            if q.type in CHOICE or q.coded:
                counts = np.bincount(codes[~np.isnan(codes)].astype(np.int64),
                                     minlength=len(q.options) + 1)[1:]
                total = max(int(counts.sum()), 1)
                marginals[qid] = {o: round(c / total, 6)
                                  for o, c in zip(q.options, counts.tolist(), strict=True)}
        if marginals:
            run.metric("marginals", marginals)

    # -- the report -------------------------------------------------------------------------
    def _inputs(self, run: RunData) -> dict[str, Any] | None:
        if "answers" not in run.tables:
            return None
        settings = run.config.get("settings") or {}
        questionnaire = Questionnaire.model_validate(settings["questionnaire"])
        treatments = settings.get("treatments")
        reference = None
        if settings.get("reference"):
            from ._analysis import read_reference

            reference = read_reference(Path(settings["reference"]))
        return {
            "answers": run.table("answers"), "profiles": run.profiles,
            "questions": list(questionnaire.questions),
            "control": Treatments.model_validate(treatments).control_arm if treatments else None,
            "reference": reference, "targets": settings.get("targets"),
        }

    def figures(self, run: RunData) -> dict[str, Figure]:
        from ._figures import figures

        inputs = self._inputs(run)
        if inputs is None:
            return {}
        answers, profiles, questions = (inputs.pop(k) for k in ("answers", "profiles",
                                                                 "questions"))
        return figures(answers, profiles, questions, **inputs)

    def tables(self, run: RunData) -> list[dict[str, Any]]:
        from ._analysis import report_tables

        inputs = self._inputs(run)
        if inputs is None:
            return []
        answers, profiles, questions = (inputs.pop(k) for k in ("answers", "profiles",
                                                                 "questions"))
        return report_tables(answers, profiles, questions, **inputs)


def _by_question(table: pa.Table) -> list[tuple[str, pa.Table]]:
    if not table.num_rows:
        return []
    keys = table.column("question").combine_chunks().dictionary_encode()
    out = []
    for k, qid in enumerate(keys.dictionary.to_pylist()):
        out.append((qid, table.filter(pc.equal(keys.indices, k))))
    return out


def _valid_share(values: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Per respondent as answers arrive: the share of its answers that were valid."""
    share = np.fromiter((np.frombuffer(v[4], np.int8).mean() if v[4] else np.nan
                         for v in values), np.float64, len(values))
    return share, np.full(len(values), np.nan)


def decode(questionnaire: Questionnaire, wave: int, ids: np.ndarray, results: Sequence[Any],
           arms: np.ndarray | None, arm_names: Sequence[str]) -> pa.Table:
    """The ``answers`` table of one wave from respondents' packed :class:`Answers` (a
    failed respondent: one row per unconditional question of the wave, with its error)."""
    questions = questionnaire.questions
    wave_ids = questionnaire.plan[wave]
    index = {q.id: i for i, q in enumerate(questions)}
    unconditional = np.array([index[qid] for qid in wave_ids
                              if questionnaire.question(qid).ask_if is None], dtype=np.int16)
    cols: list[list[bytes]] = [[] for _ in range(8)]
    raws: list[str] = []
    errors: list[str | None] = []
    counts = np.zeros(len(results), dtype=np.int64)
    for r, result in enumerate(results):
        if isinstance(result, BaseException):
            m = unconditional.size
            packed: tuple[Any, ...] = (
                unconditional.tobytes(), np.full(m, np.nan).tobytes(),
                np.zeros(m, np.int16).tobytes(), np.zeros(m, np.int16).tobytes(),
                np.zeros(m, np.int8).tobytes(), np.zeros(m, np.int32).tobytes(),
                np.zeros(m, np.int32).tobytes(), np.zeros(m, np.int8).tobytes(),
                SEP.join([""] * m), SEP.join([f"{type(result).__name__}: {result}"
                                              .replace(SEP, " ")] * m))
        else:
            packed = result
        m = len(packed[0]) // 2
        counts[r] = m
        if not m:
            continue
        for c in range(8):
            cols[c].append(packed[c])
        raws.append(packed[8])
        errors.append(packed[9] if packed[9] is not None else None)
    qidx = np.frombuffer(b"".join(cols[0]), np.int16)
    code = np.frombuffer(b"".join(cols[1]), np.float64)
    position = np.frombuffer(b"".join(cols[2]), np.int16)
    shown = np.frombuffer(b"".join(cols[3]), np.int16)
    valid = np.frombuffer(b"".join(cols[4]), np.int8).astype(bool)
    ptok = np.frombuffer(b"".join(cols[5]), np.int32)
    ctok = np.frombuffer(b"".join(cols[6]), np.int32)
    calls = np.frombuffer(b"".join(cols[7]), np.int8)
    n = qidx.size
    raw = _split(raws, n)
    had = [e is not None for e in errors]
    if any(had):
        per = counts[counts > 0]
        filled = [e if e is not None else SEP.join([""] * int(k))
                  for e, k in zip(errors, per.tolist(), strict=True)]
        error = _split(filled, n)
        error = pc.if_else(pc.equal(error, ""), pa.scalar(None, pa.string()), error)
    else:
        error = pa.nulls(n, pa.string())
    names = pa.array([q.id for q in questions])
    question = names.take(pa.array(qidx.astype(np.int32)))
    answer = _answers(questionnaire, qidx, code, valid, raw)
    multi = np.array([q.type == "multi_choice" for q in questions])[qidx]
    code_out = code.copy()
    code_out[multi] = np.nan  # the bitmask is an answer, not a code
    agent = np.repeat(ids, counts)
    arm = (pa.DictionaryArray.from_arrays(pa.array(arms[agent]), pa.array(list(arm_names)))
           .cast(pa.string()) if arms is not None else pa.nulls(n, pa.string()))
    has_position = position > 0
    return pa.table({
        "step": pa.array(np.full(n, wave + 1, np.int32)),
        "wave": pa.array(np.full(n, wave + 1, np.int16)),
        "agent_id": pa.array(agent),
        "question": question,
        "answer": answer,
        "code": pa.array(code_out, mask=np.isnan(code_out)),
        "position": pa.array(position, mask=~has_position),
        "options_shown": pa.array(shown),
        "valid": pa.array(valid),
        "raw": raw,
        "arm": arm,
        "prompt_tokens": pa.array(ptok),
        "completion_tokens": pa.array(ctok),
        "calls": pa.array(calls),
        "error": error,
    }, schema=ANSWER_SCHEMA)


def _split(joined: list[str], n: int) -> pa.Array:
    """The texts of ``n`` rows from each respondent's :data:`SEP`-joined string, in Arrow
    (no Python string per row)."""
    if not joined:
        return pa.array([], pa.string())
    parts = pc.split_pattern(pa.array(joined, pa.large_string()), SEP)
    flat = pc.list_flatten(parts).cast(pa.string())
    if len(flat) != n:
        raise ValueError(f"answers: {len(flat)} texts for {n} rows")
    return flat


def _answers(questionnaire: Questionnaire, qidx: np.ndarray, code: np.ndarray,
             valid: np.ndarray, raw: pa.Array) -> pa.Array:
    """The readable answer of every row: the option's label, the number, the chosen
    labels joined by "; ", an open answer's category or text; null when invalid. Built as
    indices into a vocabulary, so ten million rows make no Python string each."""
    n = qidx.size
    index = np.full(n, -1, dtype=np.int32)
    vocabulary: list[str] = []
    free = np.zeros(n, dtype=bool)  # open answers that are their text
    for i, q in enumerate(questionnaire.questions):
        rows = np.flatnonzero((qidx == i) & valid)
        if not rows.size:
            continue
        values = code[rows]
        if q.type in CHOICE or q.coded:
            index[rows] = len(vocabulary) + values.astype(np.int32) - 1
            vocabulary += q.options
        elif q.type == "numeric":
            uniq, inverse = np.unique(values, return_inverse=True)
            index[rows] = len(vocabulary) + inverse
            vocabulary += [f"{v:g}" for v in uniq]
        elif q.type == "multi_choice":
            uniq, inverse = np.unique(values.astype(np.int64), return_inverse=True)
            index[rows] = len(vocabulary) + inverse
            vocabulary += ["; ".join(o for j, o in enumerate(q.options) if int(m) >> j & 1)
                           for m in uniq]
        else:
            free[rows] = True
    answer = pa.DictionaryArray.from_arrays(pa.array(index, mask=index < 0),
                                            pa.array(vocabulary, pa.string())).cast(pa.string())
    if free.any():
        answer = pc.if_else(pa.array(free), raw, answer)
    return answer
