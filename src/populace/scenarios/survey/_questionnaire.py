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

from pydantic import Field, model_validator

from populace._strict import StrictModel
from populace.config import read_yaml, validate
from populace.core import ConfigError

QuestionType = Literal["single_choice", "likert", "numeric", "multi_choice", "open"]
#: Types whose answer is one of the listed options.
CHOICE = frozenset({"single_choice", "likert"})
#: The most options a multi-choice question may have (a chosen set travels as a bitmask).
MAX_MULTI = 52

DEFAULT_INSTRUCTIONS = ("You are taking part in a survey. Answer every question as the "
                        "person described below would, honestly and in character.")


class Question(StrictModel):
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
#: Comparison operators an ``ask_if`` may use, by AST node type.
_COMPARE: dict[type, Any] = {
    ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b,
    ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}
_ORDER = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _value(node: ast.AST) -> bool:
    """A literal: a string, a number, or a list/tuple of them."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str | int | float) and not isinstance(node.value, bool)
    return isinstance(node, ast.List | ast.Tuple) and all(_value(e) for e in node.elts)


def _check(node: ast.AST, source: str, names: list[str]) -> None:
    """Comparisons of question ids with literals, joined by and/or/not; ValueError else."""
    if isinstance(node, ast.BoolOp):
        for v in node.values:
            _check(v, source, names)
        return
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        _check(node.operand, source, names)
        return
    if isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
        sides = (node.left, *node.comparators)  # a chain too: 18 <= age < 30
        ids = [s.id for s in sides if isinstance(s, ast.Name)]
        if len(ids) == 1 and all(isinstance(s, ast.Name) or _value(s) for s in sides):
            names.append(ids[0])
            return
    raise ValueError(f"ask_if {source!r}: write comparisons of one question id with a value "
                     "(voted == \"no\", age >= 30, \"TV\" in media), joined by and/or/not")


def compile_condition(source: str) -> tuple[ast.expr, tuple[str, ...]]:
    """``(tree, names)`` for an ``ask_if`` expression; ValueError with one line if invalid."""
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"ask_if {source!r}: not an expression (e.g. voted == \"no\")") \
            from None
    names: list[str] = []
    _check(tree.body, source, names)
    return tree.body, tuple(dict.fromkeys(names))


def holds(tree: ast.expr, answers: Mapping[str, Any]) -> bool:
    """Whether a compiled condition holds for ``answers`` (id → answer). A comparison with
    a question that was not answered (skipped, or invalid: None) is false, whatever its
    operator (``!=`` and ``not in`` too); ``not`` and ``or`` then combine as usual."""
    if isinstance(tree, ast.BoolOp):
        parts = (holds(v, answers) for v in tree.values)
        return all(parts) if isinstance(tree.op, ast.And) else any(parts)
    if isinstance(tree, ast.UnaryOp):
        return not holds(tree.operand, answers)
    assert isinstance(tree, ast.Compare)
    sides = [answers.get(s.id) if isinstance(s, ast.Name) else ast.literal_eval(s)
             for s in (tree.left, *tree.comparators)]
    if any(v is None for v in sides):
        return False
    try:
        return all(_COMPARE[type(op)](a, b)
                   for op, a, b in zip(tree.ops, sides, sides[1:], strict=False))
    except TypeError:  # "a" < 3: a question of another type than the value
        return False


class Arm(StrictModel):
    """A treatment arm: its share of respondents and the message it shows."""

    share: float = Field(gt=0, le=1)
    message: str | None = Field(None, min_length=1)
    #: Questions the message is shown before (default: the first question of every wave).
    before: tuple[str, ...] | None = None


class Treatments(StrictModel):
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


class Questionnaire(StrictModel):
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
        position = {qid: i for i, qid in enumerate(ids)}
        for wave in self.plan:
            for qid in wave:
                q = by_id[qid]
                if q.ask_if is not None:
                    key = f"questions.{position[qid]}.ask_if of {qid!r}"
                    try:
                        _, names = compile_condition(q.ask_if)
                    except ValueError as e:
                        raise ValueError(f"{key}: {e}") from None
                    for name in names:
                        if name not in asked:
                            raise ValueError(f"{key}: "
                                             f"{_unknown(name, sorted(asked), 'an earlier')}")
                        _check_values(key, by_id[name], q.ask_if)
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


def _check_values(key: str, ref: Question, source: str) -> None:
    """Comparisons that could never be true are typos: a choice question compared with a
    value that is not an option, ordered comparisons of anything but numbers, ``==`` on a
    multi-choice answer (a set: use ``"TV" in media``)."""
    tree = ast.parse(source.strip(), mode="eval")
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        sides = (node.left, *node.comparators)
        if not any(isinstance(s, ast.Name) and s.id == ref.id for s in sides):
            continue
        values = []
        for literal in (s for s in sides if not isinstance(s, ast.Name)):
            value = ast.literal_eval(literal)
            values += list(value) if isinstance(value, list | tuple) else [value]
        if any(isinstance(op, _ORDER) for op in node.ops) and ref.type != "numeric":
            raise ValueError(f"{key}: {ref.id!r} is {ref.type}: order "
                             "comparisons (<, >=) are for numeric questions; use == or in")
        if ref.type == "numeric":
            if any(not isinstance(v, int | float) for v in values):
                raise ValueError(f"{key}: {ref.id!r} is numeric: compare "
                                 "it with numbers")
            continue
        if ref.type == "multi_choice" and any(isinstance(op, ast.Eq | ast.NotEq)
                                              for op in node.ops):
            raise ValueError(f"{key}: {ref.id!r} is multi_choice: write "
                             f"\"option\" in {ref.id}")
        if ref.type in (*CHOICE, "multi_choice") or ref.coded:
            for v in values:
                if v not in ref.options:
                    raise ValueError(f"{key}: {v!r} is not an option of "
                                     f"{ref.id!r} (options: {', '.join(ref.options)})")


def load_questionnaire(value: str | Mapping[str, Any], source: Path) -> tuple[Questionnaire,
                                                                               str]:
    """The questionnaire given as a path (relative to the run file ``source``) or inline;
    also the name errors are reported under."""
    if isinstance(value, str):
        path = (source.parent / value)
        if not path.is_file():  # missing, a directory, a device: read_yaml says which
            try:
                read_yaml(path)
            except ConfigError as e:
                raise ConfigError(f"{source}: settings.questionnaire: {e}") from None
        return validate(read_yaml(path), Questionnaire, str(path)), str(path)
    where = f"{source}: settings.questionnaire"
    return validate(dict(value), Questionnaire, where), where
