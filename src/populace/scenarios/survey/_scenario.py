"""The survey as a :class:`~populace.launch.Scenario`: one step per wave.

Respondents live in workers and answer a wave each step; the central process assigns the
treatment arms (exact counts, seeded, optionally per stratum), decodes the packed answers
into the ``answers`` table and reports each question's marginals as the step's metrics.
"""

from __future__ import annotations

import difflib
import math
import string
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from populace.agents import persona_columns
from populace.config import key_text
from populace.core import ConfigError, derive_seed
from populace.launch import (
    ModelChoice,
    Rows,
    Run,
    RunFile,
    RunOptions,
    Scenario,
    ScenarioSettings,
    StudioView,
)
from populace.population import PopulationConfig

from ._agents import ROW, SEP, Plan, Respondent
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


#: :data:`~populace.scenarios.survey._agents.ROW` as a NumPy record.
ROW_DTYPE = np.dtype([("question", "<i2"), ("code", "<f8"), ("position", "<i2"),
                      ("shown", "<i2"), ("valid", "i1"), ("prompt_tokens", "<i4"),
                      ("completion_tokens", "<i4"), ("calls", "i1")])
assert ROW_DTYPE.itemsize == ROW.size


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
    exact = shares / shares.sum() * n  # shares sum to 1 within 1e-6: make it exact
    counts = np.floor(exact).astype(np.int64)
    left = n - int(counts.sum())
    order = np.argsort(-(exact - counts), kind="stable")
    counts[order[:left]] += 1
    return counts


def _fields(template: str) -> set[str]:
    return {f for _, f, _, _ in string.Formatter().parse(template) if f}


def _check_persona(persona: str, people: PopulationConfig | None, background: bool,
                   have: str, fail: Callable[[str, str], ConfigError]) -> None:
    """``persona`` is a template respondents can fill: well formed, naming only aspects of
    the population (or ``background`` when there are backgrounds), with conversions and
    format specs that fit their values (text, or a number for a numeric aspect)."""
    try:
        names = _fields(persona)
    except ValueError as e:
        raise fail("persona", f"malformed template: {e}") from None
    samples: dict[str, Any] = {"background": "x"} if background else {}
    for name, aspect in (people.aspects if people is not None else {}).items():
        samples[name] = "x" if aspect.kind != "numeric" else 1 if aspect.round == 0 else 1.5
    unknown = sorted(n for n in names if n not in samples)
    if unknown:
        raise fail("persona", f"{{{unknown[0]}}} is not an aspect of the population {have}")
    try:
        persona.format_map(samples)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
        raise fail("persona", f"cannot fill the template: {e}") from None


def _check_targets(key: str, shares: dict[str, float], people: PopulationConfig, aspect: str,
                   fail: Callable[[str, str], ConfigError]) -> None:
    """The target shares of ``aspect``: its own values (a misspelt one would be weighted
    0 without a word), at least 0 and adding up to 1."""
    if people.aspects[aspect].kind != "numeric":
        values = people.values(aspect)
        for value in shares:
            if value not in values:
                close = difflib.get_close_matches(str(value), values, n=1)
                hint = f" (did you mean {close[0]}?)" if close else ""
                raise fail(f"{key}.{key_text(value)}", f"not a value of {aspect}{hint} "
                           f"(values: {', '.join(values)})")
    for value, share in shares.items():
        if share < 0:
            raise fail(f"{key}.{key_text(value)}", f"share {share:g} is below 0")
    total = sum(shares.values())
    if abs(total - 1.0) > 0.01:
        raise fail(key, f"the shares add up to {total:.4g}, expected 1 ± 0.01")


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
        structured: bool | Literal["auto"] = Field(
            "auto", description="ask for a JSON answer constrained to the options "
            "(response_format); auto: unless the server refuses it, then in plain text")
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
        batch: int = Field(50_000, ge=1, le=100_000_000, description="respondents asked at "
                           "once (bounds the memory of answers in flight)")

    @classmethod
    def check(cls, options: RunOptions, settings: Survey.Settings, source: str
              ) -> SurveyConfig:
        path = Path(source)
        questionnaire, where = load_questionnaire(settings.questionnaire, path)

        def fail(key: str, message: str) -> ConfigError:
            return ConfigError(f"{source}: settings.{key}: {message}")

        model = str(ModelChoice.of(options, settings, source).model)
        people = options.population
        aspects = set(people.aspects) if people is not None else set()
        if people is not None and people.backgrounds.model is not None:
            aspects.add("background")
        have = f"(aspects: {', '.join(sorted(aspects)) or 'none'})"
        if settings.persona is not None:
            _check_persona(settings.persona, people, "background" in aspects, have, fail)
        treatments = settings.treatments
        if treatments is not None:
            if treatments.stratify_by is not None and treatments.stratify_by not in aspects:
                raise fail("treatments.stratify_by", f"{treatments.stratify_by!r} is not an "
                           f"aspect of the population {have}")
            ids = {q.id for q in questionnaire.questions}
            for name, arm in treatments.arms.items():
                key = f"treatments.arms.{name}.before"
                for qid in arm.before or ():
                    if qid not in ids:
                        raise fail(key, f"{qid!r} is not a question of {Path(where).name}")
                if arm.before and arm.message is None:
                    raise fail(key, "the arm has no message to show")
        for aspect, shares in (settings.targets or {}).items():
            if aspect not in aspects or people is None or aspect not in people.aspects:
                raise fail(f"targets.{aspect}", f"not an aspect of the population {have}")
            _check_targets(f"targets.{aspect}", shares, people, aspect, fail)
        reference = None
        if settings.reference:
            from ._analysis import read_reference

            reference = (path.parent / settings.reference).resolve()
            # every row against the questionnaire and the profiles, before step 1 (the
            # report would fail on it, naming no file)
            columns: dict[str, Sequence[str] | None] = {"group": None, "model": None}
            for column, spec in (people.aspects if people is not None else {}).items():
                columns[column] = None if spec.kind == "numeric" or people is None \
                    else people.values(column)
            if treatments is not None and treatments.arms:
                columns["arm"] = [str(a) for a in treatments.arms]
            read_reference(reference, aspects=columns,
                           questions={q.id: q for q in questionnaire.questions})
        return SurveyConfig(questionnaire, model, where, reference)

    @classmethod
    def planned_steps(cls, config: SurveyConfig) -> int:
        return len(config.questionnaire.plan)

    @classmethod
    def resolved(cls, run_file: RunFile) -> dict[str, Any]:
        """The generic form with the questionnaire written inline and the reference path
        absolute: the run directory resumes and reports on its own."""
        config: SurveyConfig = run_file.config
        # steps come from the waves: the scenario takes no steps option
        data = run_file.options.model_dump(mode="json", exclude={"settings", "steps"})
        data["scenario"] = run_file.scenario_ref
        settings = run_file.settings.model_dump(mode="json")
        settings["questionnaire"] = config.questionnaire.model_dump(mode="json",
                                                                   exclude_none=True)
        if config.reference is not None:
            settings["reference"] = str(config.reference)
        data["settings"] = settings
        return data

    @classmethod
    def studio(cls, config: Mapping[str, Any]) -> StudioView:
        """The studio draws each question's answer shares (``marginals``) per step."""
        try:
            questions = Questionnaire.model_validate(
                (config.get("settings") or {})["questionnaire"]).questions
        except (KeyError, TypeError, ValueError):
            questions = ()
        return StudioView(answers="share of a respondent's answers that were valid",
                          categorical=("marginals",),
                          choices=tuple((x.id, tuple(x.options)) for x in questions),
                          question="Why did you answer the last question as you did?",
                          message="A reminder: your answers are anonymous.")

    @classmethod
    def agent_state(cls, state: Any, config: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """A respondent's state: the answers a later question's condition reads, and its
        conversation so far (each question as it was put, and the reply)."""
        if not isinstance(state, tuple | list) or len(state) < 2:
            return None
        known, history = state[0], state[1]
        out: dict[str, Any] = {}
        try:
            settings = config.get("settings") or {}
            remembered = sorted(Questionnaire.model_validate(
                settings["questionnaire"]).referenced())
        except (KeyError, TypeError, ValueError):
            remembered = []
        if known and len(remembered) == len(known):
            out["answers its conditions read"] = dict(zip(remembered, known, strict=True))
        out["conversation"] = [{"question": q, "reply": a} for q, a in history]
        return out

    # -- the run ----------------------------------------------------------------------------
    async def setup(self, run: Run) -> None:
        config: SurveyConfig = run.config
        settings = run.settings
        self.questionnaire = q = config.questionnaire
        self.measure = _Measure(q)
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
        attributes = tuple(persona_columns(profiles.column_names))
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

    def _rows(self, wave: int, start: int, done: list[pa.Table]) -> Rows:
        """The rows of the answers received so far in a step: the batches ``done`` and the
        one being collected, starting at respondent ``start``."""
        def rows(at: np.ndarray, outcomes: list[Any]) -> pa.Table:
            return pa.concat_tables([*done, self.table(wave, self.ids[start + at], outcomes)])
        return rows

    async def step(self, run: Run, t: int) -> None:
        wave, n, batch = t - 1, len(self.ids), run.settings.batch
        done: list[pa.Table] = []
        raised = 0  # rows of respondents that raised: collect counted those already
        q = self.questionnaire
        per_raised = sum(q.question(qid).ask_if is None for qid in q.plan[wave])
        for start in range(0, n, batch):  # a batch at a time: answers in flight stay bounded
            group = self.respondents if batch >= n else self.respondents[start:start + batch]
            results = await run.collect(
                group.map(Respondent.answer, wave), measure=self.measure,
                partial=("answers", self._rows(wave, start, done)), on_error="return",
                progress=(start, n))
            table = self.table(wave, self.ids[start:start + len(results)], results)
            failed = sum(isinstance(r, BaseException) for r in results)
            raised += failed * per_raised
            del results
            run.record("answers", table)
            done.append(table)
        self._metrics(run, done, raised)

    def table(self, wave: int, ids: np.ndarray, results: Sequence[Any]) -> pa.Table:
        """The ``answers`` rows of ``results`` (respondents ``ids``, in order)."""
        return decode(self.questionnaire, wave, ids, results, self.arms, self.arm_names)

    def _metrics(self, run: Run, tables: list[pa.Table], raised: int = 0) -> None:
        """The step's totals and each question's marginals (from columns, in batches: no
        copy of the step's rows)."""
        q = self.questionnaire
        k = max(len(x.options) for x in q.questions) + 1
        counts = np.zeros((len(q.questions), k), dtype=np.int64)
        sums = np.zeros(len(q.questions))
        index = {x.id: i for i, x in enumerate(q.questions)}
        n = valid_n = calls = ptok = ctok = errors = respondents = 0
        first_error: str | None = None
        kinds: Counter[str] = Counter()
        for table in tables:
            n += table.num_rows
            valid = table.column("valid").to_numpy(zero_copy_only=False)
            valid_n += int(valid.sum())
            calls += int(pc.sum(table.column("calls")).as_py() or 0)
            ptok += int(pc.sum(table.column("prompt_tokens")).as_py() or 0)
            ctok += int(pc.sum(table.column("completion_tokens")).as_py() or 0)
            errors += table.num_rows - table.column("error").null_count
            if table.column("error").null_count < table.num_rows:
                found = [str(e) for e in pc.drop_null(table.column("error")).to_pylist()]
                first_error = first_error or found[0]
                kinds.update(e.partition(":")[0] for e in found)  # the error's type
            agents = table.column("agent_id").to_numpy()
            respondents += int(np.count_nonzero(np.diff(agents))) + 1 if agents.size else 0
            encoded = pc.dictionary_encode(table.column("question")).combine_chunks()
            qidx = np.array([index[v] for v in encoded.dictionary.to_pylist()],
                            dtype=np.int64)[encoded.indices.to_numpy()]
            code = table.column("code").to_numpy(zero_copy_only=False)
            ok = valid & ~np.isnan(code)
            np.add.at(sums, qidx[ok], code[ok])
            picked = ok & (code >= 1) & (code < k) & (code == np.floor(code))
            np.add.at(counts, (qidx[picked], code[picked].astype(np.int64)), 1)
            counts[:, 0] += np.bincount(qidx[ok], minlength=len(q.questions))
        run.metric("respondents", respondents)
        run.metric("answers", n)
        run.metric("valid_share", valid_n / n if n else None)
        run.metric("calls", calls)
        run.metric("prompt_tokens", ptok)
        run.metric("completion_tokens", ctok)
        run.metric("failed_questions", errors)
        if errors > raised:  # failed questions of respondents that answered the others
            assert first_error is not None
            run.count_failures(errors - raised, n - raised, kinds, first_error)
        if n and valid_n == 0 and errors < n:
            run.warn(f"no valid answer: 0 of {n:,} answers could be used")
        if self.arms is not None:
            arms = np.bincount(self.arms, minlength=len(self.arm_names))
            run.metric("arms", dict(zip(self.arm_names, arms.tolist(), strict=True)))
        marginals: dict[str, Any] = {}
        for i, x in enumerate(q.questions):
            answered = int(counts[i, 0])  # valid answers with a code
            if not answered:
                continue
            if x.type in ("numeric", "likert"):
                run.metric(f"mean_{x.id}", float(sums[i] / answered))
            if x.type in CHOICE or x.coded:
                marginals[x.id] = {o: round(int(c) / answered, 6)
                                   for o, c in zip(x.options, counts[i, 1:len(x.options) + 1],
                                                   strict=True)}
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


def _valid_share(values: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Per respondent as answers arrive: the share of its answers that were valid."""
    share = np.fromiter((np.frombuffer(v[0], ROW_DTYPE)["valid"].mean() if v[0] else np.nan
                         for v in values), np.float64, len(values))
    return share, np.full(len(values), np.nan)


class _Measure:
    """The live view of a wave's answers: each respondent's share of valid answers
    (:func:`_valid_share`), and the options chosen (:meth:`categories`) for the studio's
    live answer shares."""

    def __init__(self, questionnaire: Questionnaire) -> None:
        self.chosen = np.array([q.type in CHOICE or q.coded
                                for q in questionnaire.questions], dtype=bool)

    def __call__(self, values: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
        return _valid_share(values)

    def categories(self, values: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
        """(question index, option index from 0) of every valid choice in ``values``."""
        rows = np.frombuffer(b"".join(v[0] for v in values if not isinstance(v, BaseException)),
                             ROW_DTYPE)
        q, code = rows["question"].astype(np.int64), rows["code"]
        ok = (rows["valid"] == 1) & self.chosen[q] & (code >= 1) & (code == np.floor(code))
        return q[ok], code[ok].astype(np.int64) - 1


def decode(questionnaire: Questionnaire, wave: int, ids: np.ndarray, results: Sequence[Any],
           arms: np.ndarray | None, arm_names: Sequence[str]) -> pa.Table:
    """The ``answers`` table of one wave from respondents' packed :class:`Answers` (a
    failed respondent: one row per unconditional question of the wave, with its error)."""
    questions = questionnaire.questions
    wave_ids = questionnaire.plan[wave]
    index = {q.id: i for i, q in enumerate(questions)}
    unconditional = [index[qid] for qid in wave_ids
                     if questionnaire.question(qid).ask_if is None]
    chunks: list[bytes] = []
    raws: list[str] = []
    errors: list[str | None] = []
    counts = np.zeros(len(results), dtype=np.int64)
    for r, result in enumerate(results):
        if isinstance(result, BaseException):  # one row per question it would have had
            m = len(unconditional)
            why = f"{type(result).__name__}: {result}".replace(SEP, " ")
            result = (b"".join(ROW.pack(i, math.nan, 0, 0, 0, 0, 0, 0) for i in unconditional),
                      SEP.join([""] * m), SEP.join([why] * m))
        rows, raw, error = result
        counts[r] = m = len(rows) // ROW.size
        if m:
            chunks.append(rows)
            raws.append(raw)
            errors.append(error)
    packed = np.frombuffer(b"".join(chunks), ROW_DTYPE)
    del chunks
    qidx, code, position = packed["question"], packed["code"], packed["position"]
    valid = packed["valid"].astype(bool)
    n = packed.size
    raw = _split(raws, n)
    if any(e is not None for e in errors):
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
        "options_shown": pa.array(packed["shown"]),
        "valid": pa.array(valid),
        "raw": raw,
        "arm": arm,
        "prompt_tokens": pa.array(packed["prompt_tokens"]),
        "completion_tokens": pa.array(packed["completion_tokens"]),
        "calls": pa.array(packed["calls"]),
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
