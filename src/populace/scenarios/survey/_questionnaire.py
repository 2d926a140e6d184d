"""Questionnaires, waves and treatment arms: what a survey asks, of whom, and when.

A questionnaire is YAML (or the same mapping inline under ``settings.questionnaire``)::

    instructions: You are taking part in a survey about public life.
    questions:
      - {id: voted, type: single_choice, text: Did you vote?, options: ["yes", "no"]}
      - {id: why_not, type: open, text: Why not?, ask_if: 'voted == "no"',
         code_into: [time, interest, other]}
    waves: [[voted, why_not]]          # optional: one wave with every question

Every problem is one :class:`~populace.core.ConfigError` line naming the file and the key.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from populace.config import read_yaml, validate
from populace.core import ConfigError

QuestionType = Literal["single_choice", "likert", "numeric", "multi_choice", "open"]
#: Types whose answer is one of the listed options.
CHOICE = frozenset({"single_choice", "likert"})
#: The most options a multi-choice question may have (a chosen set travels as a bitmask).
MAX_MULTI = 52

DEFAULT_INSTRUCTIONS = ("You are taking part in a survey. Answer every question as the "
                        "person described below would, honestly and in character.")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Question(_Strict):
    """One question. ``options`` holds a likert question's scale (``scale:`` in the file),
    low to high, and an open question's coding categories (``code_into:``)."""

    id: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=64)
    type: QuestionType
    text: str = Field(min_length=1)
    options: tuple[str, ...] = ()
    range: tuple[float, float] | None = None
    unit: str | None = None
    ask_if: str | None = None
    randomize: bool | None = Field(
        None, description="shuffle the options per respondent (default: choice questions)")

    @model_validator(mode="before")
    @classmethod
    def _spellings(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        for alias, kind in (("scale", "likert"), ("code_into", "open")):
            if alias in data:
                if data.get("type") != kind:
                    raise ValueError(f"{alias}: is for {kind} questions (this one is "
                                     f"{data.get('type')!r}; use options:)")
                if "options" in data:
                    raise ValueError(f"give {alias}: or options:, not both")
                data["options"] = data.pop(alias)
        return data

    @model_validator(mode="after")
    def _shape(self) -> Question:
        kind, n = self.type, len(self.options)
        what = {"likert": "scale", "open": "code_into"}.get(kind, "options")
        if kind in ("single_choice", "multi_choice", "likert") and n < 2:
            raise ValueError(f"question {self.id!r}: a {kind} question needs {what}: with at "
                             f"least 2 entries (got {n})")
        if kind == "open" and n == 1:
            raise ValueError(f"question {self.id!r}: code_into: needs at least 2 categories")
        if kind == "numeric":
            if n:
                raise ValueError(f"question {self.id!r}: a numeric question has range:, "
                                 "not options:")
            if self.range is None or not self.range[0] < self.range[1]:
                raise ValueError(f"question {self.id!r}: a numeric question needs range: "
                                 f"[low, high] with low < high (got {self.range})")
        elif self.range is not None or self.unit is not None:
            raise ValueError(f"question {self.id!r}: range:/unit: are for numeric questions")
        if len(set(self.options)) != n or any(not o.strip() for o in self.options):
            raise ValueError(f"question {self.id!r}: {what}: entries must be distinct and "
                             "non-empty")
        if kind == "multi_choice":
            if n > MAX_MULTI:
                raise ValueError(f"question {self.id!r}: at most {MAX_MULTI} options")
            if any(";" in o for o in self.options):
                raise ValueError(f"question {self.id!r}: multi_choice options may not "
                                 "contain ';' (chosen options are joined with it)")
        if self.randomize and kind in ("numeric", "open"):
            raise ValueError(f"question {self.id!r}: randomize: is for questions with options")
        return self

    @property
    def shuffled(self) -> bool:
        """Whether each respondent sees the options in their own order."""
        if self.randomize is not None:
            return self.randomize
        return self.type in ("single_choice", "multi_choice")

    @property
    def coded(self) -> bool:
        return self.type == "open" and bool(self.options)


# -- ask_if: a small, safe expression language --------------------------------------------
_COMPARE = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn)


def _names(tree: ast.AST, source: str) -> list[str]:
    """The question ids ``tree`` reads; ValueError for anything but comparisons of names and
    constants joined by and/or/not."""
    names: list[str] = []

    def walk(node: ast.AST) -> None:
        if isinstance(node, ast.BoolOp):
            for v in node.values:
                walk(v)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            walk(node.operand)
        elif isinstance(node, ast.Compare) and all(isinstance(o, _COMPARE) for o in node.ops):
            for v in (node.left, *node.comparators):
                walk(v)
        elif isinstance(node, ast.Name):
            names.append(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str | int | float):
            pass
        elif isinstance(node, ast.List | ast.Tuple) and all(
                isinstance(e, ast.Constant) for e in node.elts):
            pass
        else:
            raise ValueError(f"ask_if {source!r}: only comparisons of question ids with "
                             "values, joined by and/or/not, are allowed")
    walk(tree)
    return names


def compile_condition(source: str) -> tuple[Any, tuple[str, ...]]:
    """``(code, names)`` for an ``ask_if`` expression; ValueError with one line if invalid."""
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"ask_if {source!r}: not an expression (e.g. voted == \"no\")") \
            from None
    names = tuple(dict.fromkeys(_names(tree.body, source)))
    return compile(tree, "<ask_if>", "eval"), names


def holds(code: Any, answers: Mapping[str, Any]) -> bool:
    """Whether a compiled condition holds for ``answers`` (id → answer; an unanswered or
    skipped question is None, and any comparison with it is false)."""
    try:
        return bool(eval(code, {"__builtins__": {}}, answers))  # the AST holds only comparisons
    except TypeError:  # None < 3, "a" in None: the question was not answered
        return False


class Arm(_Strict):
    """A treatment arm: its share of respondents and the message it shows."""

    share: float = Field(gt=0, le=1)
    message: str | None = Field(None, min_length=1)
    #: Questions the message is shown before (default: the first question of every wave).
    before: tuple[str, ...] | None = None


class Treatments(_Strict):
    """Arms assigned with exact counts (per stratum of ``stratify_by``), seeded."""

    arms: dict[str, Arm] = Field(min_length=2)
    control: str | None = None
    stratify_by: str | None = None

    @model_validator(mode="after")
    def _shares(self) -> Treatments:
        total = sum(a.share for a in self.arms.values())
        if abs(total - 1) > 1e-6:
            raise ValueError(f"arms: shares sum to {total:g}, expected 1")
        if self.control is not None and self.control not in self.arms:
            raise ValueError(f"control: {self.control!r} is not an arm (arms: "
                             f"{', '.join(self.arms)})")
        return self

    @property
    def control_arm(self) -> str | None:
        """The arm effects are measured against: ``control``, else the one arm without a
        message."""
        if self.control is not None:
            return self.control
        plain = [name for name, arm in self.arms.items() if arm.message is None]
        return plain[0] if len(plain) == 1 else None


class Questionnaire(_Strict):
    instructions: str = Field(DEFAULT_INSTRUCTIONS, min_length=1)
    questions: tuple[Question, ...] = Field(min_length=1)
    waves: tuple[tuple[str, ...], ...] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Questionnaire:
        ids = [q.id for q in self.questions]
        seen: set[str] = set()
        for qid in ids:
            if qid in seen:
                raise ValueError(f"questions: id {qid!r} is used twice")
            seen.add(qid)
        for w, wave in enumerate(self.waves or ()):
            if not wave:
                raise ValueError(f"waves.{w}: a wave asks at least one question")
            for qid in wave:
                if qid not in seen:
                    raise ValueError(f"waves.{w}: {_unknown(qid, ids)}")
            if len(set(wave)) != len(wave):
                raise ValueError(f"waves.{w}: a question is asked twice in one wave")
        by_id = {q.id: q for q in self.questions}
        asked: set[str] = set()
        for wave in self.plan:
            for qid in wave:
                q = by_id[qid]
                if q.ask_if is not None:
                    _, names = compile_condition(q.ask_if)
                    for name in names:
                        if name not in asked:
                            raise ValueError(f"question {qid!r}: ask_if: "
                                             f"{_unknown(name, sorted(asked), 'an earlier')}")
                        _check_values(q, by_id[name], q.ask_if)
                asked.add(qid)
        return self

    @property
    def plan(self) -> tuple[tuple[str, ...], ...]:
        """The question ids of each wave, in order."""
        return self.waves or (tuple(q.id for q in self.questions),)

    def question(self, qid: str) -> Question:
        return next(q for q in self.questions if q.id == qid)

    def referenced(self) -> frozenset[str]:
        """The questions some ``ask_if`` reads (respondents remember those answers)."""
        return frozenset(n for q in self.questions if q.ask_if is not None
                         for n in compile_condition(q.ask_if)[1])


def _unknown(name: str, known: list[str], what: str = "a") -> str:
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"{name!r} is not {what} question{hint}"


def _check_values(q: Question, ref: Question, source: str) -> None:
    """A condition comparing a choice question with a value it cannot take is a typo."""
    if ref.type not in (*CHOICE, "multi_choice") and not ref.coded:
        return
    tree = ast.parse(source.strip(), mode="eval")
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = (node.left, *node.comparators)
            if not any(isinstance(s, ast.Name) and s.id == ref.id for s in sides):
                continue
            for s in sides:
                values = [e.value for e in s.elts] if isinstance(s, ast.List | ast.Tuple) \
                    else [s.value] if isinstance(s, ast.Constant) else []
                for v in values:
                    if v not in ref.options:
                        raise ValueError(f"question {q.id!r}: ask_if: {v!r} is not an option "
                                         f"of {ref.id!r} (options: {', '.join(ref.options)})")


def load_questionnaire(value: str | Mapping[str, Any], source: Path) -> tuple[Questionnaire,
                                                                               str]:
    """The questionnaire given as a path (relative to the run file ``source``) or inline;
    also the name errors are reported under."""
    if isinstance(value, str):
        path = (source.parent / value)
        if not path.is_file():
            raise ConfigError(f"{source}: settings.questionnaire: no such file {path}")
        return validate(read_yaml(path), Questionnaire, str(path)), str(path)
    where = f"{source}: settings.questionnaire"
    return validate(dict(value), Questionnaire, where), where
