"""The survey's analysis, from the ``answers`` table (one row per question asked) and the
``profiles`` table::

    marginals          option shares per wave and question (weighted too)
    numeric_summary    mean, sd, median and 95% CI of numeric answers
    crosstab           option shares per value of a profile column
    treatment_effects  arm − control differences, Welch CIs and p-values
    position_bias      is the shown position of the chosen option uniform?
    read_reference     reference shares from a CSV or Parquet file, checked
    compare_reference  TVD and chi-square of the model's shares against a reference
    rake               post-stratification weights (iterative proportional fitting)
    report_tables      all of the above as the HTML report's tables

The questionnaire enters only as :class:`QuestionInfo` descriptors, so this module knows
nothing of prompts or agents. Every count is a ``np.bincount`` over integer keys built with
``pyarrow.compute.index_in``: ten million answers take seconds, not minutes. Answers to a
question that is not among ``questions`` are ignored.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from populace.core import ConfigError

from .._cells import num, pct, report

SEPARATOR = "; "  # between the labels of a multi_choice answer
CHOICE = ("likert", "single_choice", "open")  # one option (or coding category) per answer
_MAX_VALUES = 12  # profile columns with more distinct values get no cross-tab


def _stats() -> Any:
    """``scipy.stats``, imported on first use (a t or chi-squared test): its import costs
    ~0.5 s of CPU, which every command that merely loads the survey scenario used to pay."""
    from scipy import stats

    return stats


class QuestionInfo(Protocol):
    """What the analysis needs of a question (read-only, so frozen dataclasses fit).

    ``options``: canonical order (likert: the scale, low → high); an open question's coding
    categories, or ``()``; numeric: ``()``. ``range``: numeric questions only.
    """

    @property
    def id(self) -> str: ...
    @property
    def type(self) -> str: ...  # likert | single_choice | multi_choice | numeric | open
    @property
    def options(self) -> tuple[str, ...]: ...
    @property
    def range(self) -> tuple[float, float] | None: ...


# -- integer keys -----------------------------------------------------------------------------
@dataclass(frozen=True)
class _Frame:
    questions: list[QuestionInfo]
    waves: np.ndarray  # the distinct waves, ascending
    w: np.ndarray  # wave index of each row
    q: np.ndarray  # question index of each row, -1 for a question not given
    valid: np.ndarray  # valid answer to a given question

    def types(self, *types: str) -> np.ndarray:
        """Per row: is its question of one of ``types``."""
        of = np.array([x.type in types for x in self.questions] + [False])
        return of[self.q]  # q == -1 reads the trailing False


def _ints(column: pa.ChunkedArray | pa.Array, fill: int = -1) -> np.ndarray:
    return np.asarray(pc.fill_null(column, fill).to_numpy(), dtype=np.int64)


def _index(column: pa.ChunkedArray | pa.Array,
           values: pa.ChunkedArray | pa.Array | list[Any]) -> np.ndarray:
    """Position of each element of ``column`` among ``values``; -1 when absent or null."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    elif not isinstance(values, pa.Array):
        values = pa.array(values, type=column.type)
    return _ints(pc.index_in(column, value_set=pc.cast(values, column.type)))


def _frame(answers: pa.Table, questions: Iterable[QuestionInfo]) -> _Frame:
    qs = list(questions)
    ids = [x.id for x in qs]
    if len(set(ids)) < len(ids):
        raise ConfigError(f"survey analysis: question ids repeat: {', '.join(ids)}")
    wave = pc.fill_null(answers["wave"], 0)
    waves = pc.unique(wave)
    waves = pc.take(waves, pc.sort_indices(waves))
    q = _index(answers["question"], ids)
    valid = np.asarray(pc.fill_null(answers["valid"], False).to_numpy(), dtype=bool)
    return _Frame(qs, np.asarray(waves.to_numpy(), dtype=np.int64), _index(wave, waves), q,
                  valid & (q >= 0))


def _codes(answers: pa.Table) -> np.ndarray:
    return np.asarray(pc.fill_null(pc.cast(answers["code"], pa.float64()), np.nan).to_numpy(),
                      dtype=np.float64)


def _choices(answers: pa.Table, f: _Frame) -> tuple[np.ndarray, np.ndarray]:
    """The (row, option index) of every option chosen: one per valid likert, single_choice
    or coded open answer (its ``code``), one per label of a multi_choice answer."""
    code = _codes(answers)
    k = np.array([len(x.options) for x in f.questions] + [0])[f.q]
    one = f.valid & f.types(*CHOICE) & (code >= 1) & (code <= k) & (code == np.floor(code))
    rows = np.flatnonzero(one)
    opts = code[rows].astype(np.int64) - 1
    multi = np.flatnonzero(f.valid & f.types("multi_choice"))
    if not multi.size:
        return rows, opts
    labels = list(dict.fromkeys(o for x in f.questions if x.type == "multi_choice"
                                for o in x.options))
    lookup = np.full((len(f.questions) + 1, len(labels) + 1), -1, dtype=np.int64)
    for i, x in enumerate(f.questions):
        if x.type == "multi_choice":
            lookup[i, [labels.index(o) for o in x.options]] = np.arange(len(x.options))
    parts = pc.split_pattern(pc.take(answers["answer"], pa.array(multi)), SEPARATOR)
    label = _index(pc.list_flatten(parts), labels)
    row = multi[np.asarray(pc.list_parent_indices(parts).to_numpy(), dtype=np.int64)]
    opt = lookup[f.q[row], label]  # label -1 reads the trailing -1
    keep = opt >= 0
    width = max(len(labels), 1)
    pairs = row[keep] * width + opt[keep]
    if pairs.size > 1 and not (np.diff(pairs) > 0).all():  # not in canonical order
        pairs = np.unique(pairs)  # a label given twice counts once
    return np.concatenate([rows, pairs // width]), np.concatenate([opts, pairs % width])


@dataclass(frozen=True)
class _Counts:
    n: np.ndarray  # (wave, question, group, option): respondents choosing the option
    total: np.ndarray  # (wave, question, group): respondents of the question
    wn: np.ndarray | None = None  # the same, summing weights
    wtotal: np.ndarray | None = None


def _count(answers: pa.Table, f: _Frame, group: np.ndarray | None = None, groups: int = 1,
           weight: np.ndarray | None = None) -> _Counts:
    """Option counts per wave × question × group (``group``: per row, -1 leaves it out).
    A multi_choice question's respondents are its valid answers; the others' those with
    an option (an open question's: the coded answers)."""
    g = np.zeros(f.q.size, dtype=np.int64) if group is None else group
    shape = (f.waves.size, len(f.questions), groups)
    width = max([len(x.options) for x in f.questions] + [1])
    cell = (f.w * shape[1] + f.q) * groups + g
    rows, opts = _choices(answers, f)
    rows_ok = g[rows] >= 0
    rows, opts = rows[rows_ok], opts[rows_ok]
    one = f.valid & f.types(*CHOICE) & (g >= 0)
    one_rows = rows[one[rows]]
    respondents = np.concatenate([one_rows, np.flatnonzero(
        f.valid & f.types("multi_choice") & (g >= 0))])
    size = math.prod(shape)

    def tally(weights: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        n = np.bincount(cell[rows] * width + opts, minlength=size * width,
                        weights=None if weights is None else weights[rows])
        t = np.bincount(cell[respondents], minlength=size,
                        weights=None if weights is None else weights[respondents])
        return n.reshape(*shape, width), t.reshape(shape)

    n, total = tally(None)
    if weight is None:
        return _Counts(n, total)
    wn, wtotal = tally(weight)
    return _Counts(n, total, wn, wtotal)


def _texts(values: pa.Array) -> list[str]:
    return [str(v) for v in pc.cast(values, pa.string()).to_pylist()]


def _profile_groups(answers: pa.Table, profiles: pa.Table, column: str, who: str
                    ) -> tuple[list[str], np.ndarray]:
    """The distinct values of profile ``column`` (as text, in sorted order) and the index
    of each answer's value (-1: no profile, or a null value)."""
    if column == "agent_id" or column not in profiles.column_names:
        raise ConfigError(f"{who}: {column!r} is not a profile column (columns: "
                          f"{', '.join(c for c in profiles.column_names if c != 'agent_id')})")
    col = profiles[column]
    distinct = pc.unique(col).drop_null()
    distinct = pc.take(distinct, pc.sort_indices(distinct))
    of_profile = np.append(_index(col, distinct), -1)
    row = _index(answers["agent_id"], profiles["agent_id"])
    return _texts(distinct), of_profile[row]  # row -1 reads the trailing -1


def _schema(**fields: pa.DataType) -> pa.Schema:
    return pa.schema(list(fields.items()))


def _table(columns: dict[str, list[Any]], schema: pa.Schema) -> pa.Table:
    return pa.table({f.name: pa.array(columns[f.name], type=f.type, from_pandas=True)
                     for f in schema}, schema=schema)


# -- marginals and cross-tabs -----------------------------------------------------------------
_MARGINALS = _schema(wave=pa.int16(), question=pa.string(), option=pa.string(),
                     n=pa.int64(), share=pa.float64())


def _weights(answers: pa.Table, f: _Frame, weights: pa.Table) -> np.ndarray:
    row = _index(answers["agent_id"], weights["agent_id"])
    lost = f.valid & (row < 0)
    if lost.any():
        agent = answers["agent_id"][int(np.flatnonzero(lost)[0])].as_py()
        raise ConfigError(f"marginals: {int(lost.sum()):,} valid answers come from agents "
                          f"without a weight (agent {agent}, …)")
    values = np.asarray(pc.cast(weights["weight"], pa.float64()).to_numpy(), dtype=np.float64)
    return np.append(values, 0.0)[row]


def _option_rows(f: _Frame, c: _Counts, values: list[str] | None) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {k: [] for k in
                                 ("wave", "question", "value", "option", "n", "share",
                                  "weighted_share")}
    for wi, wave in enumerate(f.waves.tolist()):
        for qi, x in enumerate(f.questions):
            if x.type not in (*CHOICE, "multi_choice") or not x.options:
                continue
            for gi in range(c.total.shape[2]):
                total = c.total[wi, qi, gi]
                if total == 0:
                    continue
                for j, option in enumerate(x.options):
                    out["wave"].append(wave)
                    out["question"].append(x.id)
                    out["value"].append(None if values is None else values[gi])
                    out["option"].append(option)
                    out["n"].append(int(c.n[wi, qi, gi, j]))
                    out["share"].append(c.n[wi, qi, gi, j] / total)
                    if c.wn is not None and c.wtotal is not None:
                        wt = c.wtotal[wi, qi, gi]
                        out["weighted_share"].append(c.wn[wi, qi, gi, j] / wt if wt else None)
    return out


def marginals(answers: pa.Table, questions: Iterable[QuestionInfo], *,
              weights: pa.Table | None = None) -> pa.Table:
    """Per wave × question × option (every canonical option, zeros included): ``n`` and
    ``share`` of the valid answers, and with ``weights`` (``agent_id, weight``, such as
    :func:`rake`'s) ``weighted_share``. A multi_choice option's share is that of the
    respondents choosing it; an open question's, that of its coded answers. Numeric
    questions and open ones without categories are left out.

    >>> marginals(answers, questions).to_pylist()[0]                 # doctest: +SKIP
    {'wave': 0, 'question': 'trust', 'option': 'not at all', 'n': 12, 'share': 0.12}
    """
    f = _frame(answers, questions)
    weight = None if weights is None else _weights(answers, f, weights)
    out = _option_rows(f, _count(answers, f, weight=weight), None)
    schema = _MARGINALS if weights is None else _MARGINALS.append(
        pa.field("weighted_share", pa.float64()))
    return _table(out, schema)


def crosstab(answers: pa.Table, profiles: pa.Table, questions: Iterable[QuestionInfo],
             by: str) -> pa.Table:
    """Per wave × question × value of profile column ``by`` (as text, column ``value``) ×
    option: ``n`` and ``share`` within the value, counted as :func:`marginals` does.
    Answers of agents without a profile, or with a null ``by``, are left out."""
    f = _frame(answers, questions)
    values, group = _profile_groups(answers, no_profiles(profiles), by, "crosstab")
    out = _option_rows(f, _count(answers, f, group, len(values)), values)
    return _table(out, _schema(wave=pa.int16(), question=pa.string(), value=pa.string(),
                               option=pa.string(), n=pa.int64(), share=pa.float64()))


# -- numeric answers ---------------------------------------------------------------------------
def numeric_summary(answers: pa.Table, questions: Iterable[QuestionInfo]) -> pa.Table:
    """Per wave × numeric question: ``n``, ``mean``, ``sd`` (n − 1), ``median`` and the 95%
    t interval of the mean (``ci_low``, ``ci_high``; null below two answers)."""
    f = _frame(answers, questions)
    code = _codes(answers)
    keep = f.valid & f.types("numeric") & np.isfinite(code)
    key, x = f.w[keep] * len(f.questions) + f.q[keep], code[keep]
    order = np.lexsort((x, key))
    key, x = key[order], x[order]
    cells, start, n = np.unique(key, return_index=True, return_counts=True)
    schema = _schema(wave=pa.int16(), question=pa.string(), n=pa.int64(), mean=pa.float64(),
                     sd=pa.float64(), median=pa.float64(), ci_low=pa.float64(),
                     ci_high=pa.float64())
    if not cells.size:
        return schema.empty_table()
    mean = np.add.reduceat(x, start) / n
    ss = np.add.reduceat((x - np.repeat(mean, n)) ** 2, start)
    with np.errstate(divide="ignore", invalid="ignore"):
        sd = np.where(n > 1, np.sqrt(ss / (n - 1)), np.nan)
        half = _stats().t.ppf(0.975, np.maximum(n - 1, 1)) * sd / np.sqrt(n)
    mid = start + n // 2
    median = np.where(n % 2 == 1, x[mid], (x[mid - 1] + x[mid]) / 2)
    ids = [question.id for question in f.questions]
    return _table({"wave": f.waves[cells // len(ids)].tolist(),
                   "question": [ids[i] for i in (cells % len(ids)).tolist()],
                   "n": n.tolist(), "mean": mean.tolist(), "sd": sd.tolist(),
                   "median": median.tolist(), "ci_low": (mean - half).tolist(),
                   "ci_high": (mean + half).tolist()}, schema)


# -- treatments --------------------------------------------------------------------------------
def welch(m1: np.ndarray, v1: np.ndarray, n1: np.ndarray, m0: np.ndarray, v0: np.ndarray,
          n0: np.ndarray, level: float = 0.95
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Welch's t for m1 − m0 from means, variances (n − 1) and sizes: estimate, CI low,
    CI high, two-sided p. NaN where a side has fewer than two answers or the standard
    error is 0 (every answer the same on both sides)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        a, b = v1 / n1, v0 / n0
        se = np.sqrt(a + b)
        df = (a + b) ** 2 / (a**2 / (n1 - 1) + b**2 / (n0 - 1))
        ok = (n1 > 1) & (n0 > 1) & (se > 0)
        df = np.where(ok, df, 1.0)
        half = np.where(ok, _stats().t.ppf(0.5 + level / 2, df) * se, np.nan)
        p = np.where(ok, 2 * _stats().t.sf(np.abs((m1 - m0) / np.where(ok, se, 1.0)), df), np.nan)
    est = m1 - m0
    return est, est - half, est + half, p


def treatment_effects(answers: pa.Table, questions: Iterable[QuestionInfo], *,
                      control: str) -> pa.Table:
    """Per wave × question × arm other than ``control``: for likert and numeric questions
    the difference in mean ``code`` (measure ``mean``), for single and multi choice ones
    the difference in the share choosing each option (``share: <option>``), with Welch's
    95% CI (Welch–Satterthwaite df) and two-sided p-value (see :func:`welch`)."""
    f = _frame(answers, questions)
    arms = sorted({a for a in pc.unique(answers["arm"]).to_pylist() if a is not None})
    if control not in arms:
        raise ConfigError(f"treatment_effects: control arm {control!r} is not among the "
                          f"answers' arms ({', '.join(arms) or 'none: no treatments'})")
    arm = _index(answers["arm"], arms)
    A, Q, c0 = len(arms), len(f.questions), arms.index(control)
    # means: sufficient statistics per wave × question × arm, variance in two passes
    code = _codes(answers)
    keep = f.valid & (arm >= 0) & f.types("likert", "numeric") & np.isfinite(code)
    cell, x = ((f.w * Q + f.q) * A + arm)[keep], code[keep]
    size = f.waves.size * Q * A
    n = np.bincount(cell, minlength=size).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.bincount(cell, x, minlength=size) / n
        var = np.bincount(cell, (x - mean[cell]) ** 2, minlength=size) / (n - 1)
    shape = (f.waves.size, Q, A)
    mean, var, n = mean.reshape(shape), var.reshape(shape), n.reshape(shape)
    shares = _count(answers, f, np.where(f.types("single_choice", "multi_choice"), arm, -1), A)
    out: dict[str, list[Any]] = {k: [] for k in ("wave", "question", "arm", "measure", "m1",
                                                 "v1", "n1", "m0", "v0", "n0")}

    def add(wave: int, qid: str, a: str, measure: str, s1: tuple[float, float, float],
            s0: tuple[float, float, float]) -> None:
        for k, v in zip(("wave", "question", "arm", "measure", "m1", "v1", "n1", "m0", "v0",
                         "n0"), (wave, qid, a, measure, *s1, *s0), strict=True):
            out[k].append(v)

    def share_stats(c: float, t: float) -> tuple[float, float, float]:
        p = c / t
        return p, (t / (t - 1) * p * (1 - p) if t > 1 else math.nan), t

    for wi, wave in enumerate(f.waves.tolist()):
        for qi, x_ in enumerate(f.questions):
            for ai, a in enumerate(arms):
                if ai == c0:
                    continue
                if x_.type in ("likert", "numeric"):
                    if n[wi, qi, ai] and n[wi, qi, c0]:
                        add(wave, x_.id, a, "mean",
                            (mean[wi, qi, ai], var[wi, qi, ai], n[wi, qi, ai]),
                            (mean[wi, qi, c0], var[wi, qi, c0], n[wi, qi, c0]))
                elif x_.type in ("single_choice", "multi_choice"):
                    t1, t0 = shares.total[wi, qi, ai], shares.total[wi, qi, c0]
                    if t1 and t0:
                        for j, option in enumerate(x_.options):
                            add(wave, x_.id, a, f"share: {option}",
                                share_stats(shares.n[wi, qi, ai, j], t1),
                                share_stats(shares.n[wi, qi, c0, j], t0))
    arr = {k: np.array(out[k], dtype=np.float64) for k in ("m1", "v1", "n1", "m0", "v0", "n0")}
    est, low, high, p = welch(arr["m1"], arr["v1"], arr["n1"], arr["m0"], arr["v0"], arr["n0"])
    return _table({"wave": out["wave"], "question": out["question"], "arm": out["arm"],
                   "measure": out["measure"], "estimate": est.tolist(), "ci_low": low.tolist(),
                   "ci_high": high.tolist(), "n_arm": arr["n1"].astype(np.int64).tolist(),
                   "n_control": arr["n0"].astype(np.int64).tolist(), "p_value": p.tolist()},
                  _schema(wave=pa.int16(), question=pa.string(), arm=pa.string(),
                          measure=pa.string(), estimate=pa.float64(), ci_low=pa.float64(),
                          ci_high=pa.float64(), n_arm=pa.int64(), n_control=pa.int64(),
                          p_value=pa.float64()))


# -- position bias -----------------------------------------------------------------------------
def position_bias(answers: pa.Table, questions: Iterable[QuestionInfo]) -> pa.Table:
    """Per question whose options were shown in varying order × shown position (waves
    pooled): ``n`` answers whose chosen option was shown there, their ``share``, the
    ``expected`` share if position did not matter (1/k; the mean of 1/k over answers when k
    varies) and, repeated on each of the question's rows, the chi-square statistic, df and
    p-value against that expectation.

    Single choice and likert questions count, when a chosen option was ever shown at a
    position other than its canonical index (a fixed order confounds position with
    content). Multi choice answers carry no position in the table, so none are tested.
    """
    f = _frame(answers, questions)
    Q = len(f.questions)
    pos, k, code = _ints(answers["position"], 0), _ints(answers["options_shown"], 0), \
        _codes(answers)
    keep = f.valid & f.types("single_choice", "likert") & (pos >= 1) & (pos <= k)
    q, pos, k, code = f.q[keep], pos[keep], k[keep], code[keep]
    varied = np.bincount(q, pos != code, minlength=Q) > 0
    width = int(k.max()) if k.size else 1
    chosen = np.bincount(q * width + pos - 1, minlength=Q * width).reshape(Q, width)
    shown = np.bincount(q * width + k - 1, minlength=Q * width).reshape(Q, width)
    out: dict[str, list[Any]] = {c: [] for c in ("question", "position", "n", "share",
                                                 "expected", "chi2", "df", "p_value")}
    for qi, x in enumerate(f.questions):
        total = chosen[qi].sum()
        if not varied[qi] or not total:
            continue
        # answers shown k options expect 1/k at each of positions 1..k
        per = shown[qi] / np.arange(1, width + 1)
        expected = np.cumsum(per[::-1])[::-1] / total
        top = int(np.flatnonzero(shown[qi]).max()) + 1
        e = expected[:top] * total
        chi2 = float(((chosen[qi, :top] - e) ** 2 / e).sum())
        df = top - 1
        p = float(_stats().chi2.sf(chi2, df)) if df else math.nan
        for j in range(top):
            for c, v in zip(out, (x.id, j + 1, int(chosen[qi, j]), chosen[qi, j] / total,
                                  float(expected[j]), chi2, df, p), strict=True):
                out[c].append(v)
    return _table(out, _schema(question=pa.string(), position=pa.int16(), n=pa.int64(),
                               share=pa.float64(), expected=pa.float64(), chi2=pa.float64(),
                               df=pa.int64(), p_value=pa.float64()))


# -- reference data ----------------------------------------------------------------------------
_REFERENCE = _schema(question=pa.string(), option=pa.string(), share=pa.float64(),
                     aspect=pa.string(), value=pa.string())


def _where(unit: str, places: list[int]) -> str:
    if len(places) == 1:
        return f"{unit} {places[0]}"
    shown = ", ".join(map(str, places[:5]))
    return f"{unit}s {shown}" + (f", … ({len(places)} {unit}s)" if len(places) > 5 else "")


def _read_rows(path: Path) -> tuple[str, list[str], list[tuple[int, dict[str, Any]]]]:
    """The unit rows are counted in (``line`` of a CSV, header = line 1; ``row`` of a
    Parquet file, from 1), the columns and each row by its number."""
    if path.suffix.lower() == ".csv":
        with path.open(newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh)
            header = [h.strip() for h in next(reader, [])]
            rows = []
            for cells in reader:
                if not any(c.strip() for c in cells):
                    continue
                extra = [c for c in cells[len(header):] if c.strip()]
                if extra:
                    raise ConfigError(f"{path}: line {reader.line_num}: {len(cells)} cells, "
                                      f"expected the header's {len(header)}")
                rows.append((reader.line_num, {h: (cells[i].strip() if i < len(cells) else "")
                                               for i, h in enumerate(header)}))
        return "line", header, rows
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as e:
        raise ConfigError(f"{path}: not a readable Parquet file ({e})") from None
    data = table.to_pylist()
    return "row", table.column_names, [(i + 1, r) for i, r in enumerate(data)]


def _cell(value: Any) -> str | None:
    text = "" if value is None else str(value).strip()
    return text or None


def read_reference(path: str | Path, *, questions: Mapping[str, Any] | None = None,
                   aspects: Mapping[str, Sequence[str] | None] | None = None) -> pa.Table:
    """Reference shares from a CSV or Parquet file with columns ``question, option, share``
    and optionally ``aspect, value`` (shares among respondents with that profile value):
    a table ``question, option, share, aspect, value`` (aspect and value null for overall
    shares). Each problem is a :class:`~populace.core.ConfigError` of one line naming the
    file, the row (CSV: its line, the header being line 1) and the column.

    Given the run's ``questions`` (id → question) and profile ``aspects`` (name → its
    values, None when any value goes), each row is checked against them too — a question
    the questionnaire lacks or whose answers are not one option each, an option it lacks,
    an aspect the profiles lack, a value the aspect does not take — so a run refuses before
    its first step what its report would fail on.

    >>> read_reference("gss_2022.csv").num_rows                      # doctest: +SKIP
    42
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such file (reference data)")
    if path.suffix.lower() not in (".csv", ".parquet", ".pq"):
        raise ConfigError(f"{path}: unknown extension {path.suffix!r} for reference data, "
                          "expected .csv or .parquet")
    unit, header, rows = _read_rows(path)
    top = "line 1, " if unit == "line" else ""
    for column in ("question", "option", "share"):
        if column not in header:
            raise ConfigError(f"{path}: {top}column {column!r}: missing (the columns are "
                              f"{', '.join(header) or 'none'})")
    if ("aspect" in header) != ("value" in header):
        lacking, has = ("value", "aspect") if "aspect" in header else ("aspect", "value")
        raise ConfigError(f"{path}: {top}column {lacking!r}: missing (column {has!r} "
                          "needs it)")
    out: dict[str, list[Any]] = {c: [] for c in _REFERENCE.names}
    seen: dict[tuple[Any, ...], int] = {}
    groups: dict[tuple[Any, ...], tuple[list[int], list[float]]] = {}
    for at, row in rows:
        here = f"{path}: {unit} {at}, column"
        q, option = _cell(row["question"]), _cell(row["option"])
        for column, v in (("question", q), ("option", option)):
            if v is None:
                raise ConfigError(f"{here} {column!r}: expected a {column}, got an empty cell")
        try:
            share = float(row["share"])
        except (TypeError, ValueError):
            share = math.nan
        if not 0.0 <= share <= 1.0:
            raise ConfigError(f"{here} 'share': expected a number in [0, 1], "
                              f"got {row['share']!r}")
        aspect, value = _cell(row.get("aspect")), _cell(row.get("value"))
        if (aspect is None) != (value is None):
            lacking = "value" if value is None else "aspect"
            raise ConfigError(f"{here} {lacking!r}: empty, but {'aspect' if aspect else 'value'}"
                              f" is {aspect or value!r}: give both or neither")
        if questions is not None and q is not None and option is not None:
            _against_questions(here, q, option, questions)
        if aspects is not None and aspect is not None:
            if aspect not in aspects:
                raise ConfigError(f"{here} 'aspect': {aspect!r} is not a profile column of the "
                                  f"run (have: {', '.join(sorted(aspects)) or 'none'})")
            values = aspects[aspect]
            if values is not None and value not in values:
                raise ConfigError(f"{here} 'value': {value!r} is not a value of {aspect} "
                                  f"(values: {', '.join(values)})")
        key = (q, option, aspect, value)
        if key in seen:
            raise ConfigError(f"{here} 'option': {option!r} of question {q!r} given again "
                              f"(first on {unit} {seen[key]})")
        seen[key] = at
        ats, shares = groups.setdefault((q, aspect, value), ([], []))
        ats.append(at)
        shares.append(share)
        for column, cell in zip(_REFERENCE.names, (q, option, share, aspect, value),
                                strict=True):
            out[column].append(cell)
    for (q, aspect, value), (ats, shares) in groups.items():
        total = math.fsum(shares)
        if abs(total - 1.0) > 0.01:
            among = f" ({aspect} = {value})" if aspect is not None else ""
            raise ConfigError(f"{path}: {_where(unit, ats)}, column 'share': the shares of "
                              f"question {q!r}{among} sum to {total:.4g}, expected 1 ± 0.01")
    return _table(out, _REFERENCE)


def _against_questions(here: str, q: str, option: str, questions: Mapping[str, Any]) -> None:
    x = questions.get(q)
    if x is None:
        raise ConfigError(f"{here} 'question': {q!r} is not a question of the questionnaire "
                          f"(have: {', '.join(questions)})")
    if x.type not in ("single_choice", "likert") and not x.coded:
        raise ConfigError(f"{here} 'question': {q!r} is {x.type}: only single-choice, likert "
                          "and coded open questions have reference shares")
    if option not in x.options:
        raise ConfigError(f"{here} 'option': {option!r} is not an option of {q!r} "
                          f"(options: {', '.join(x.options)})")


def compare_reference(answers: pa.Table, profiles: pa.Table,
                      questions: Iterable[QuestionInfo], reference: pa.Table) -> pa.Table:
    """Per wave × question × (aspect, value) of ``reference`` (:func:`read_reference`'s
    table; aspect and value null for overall shares): ``n`` valid answers (of respondents
    with that profile value), ``tvd`` = ½ Σ |p − q| between the model's and the reference's
    option shares, and a chi-square goodness of fit of the observed counts against the
    reference (``chi2``, ``df``, ``p_value``).

    The reference's shares of a question are rescaled to sum to 1; an option it does not
    list has reference share 0. Answers on options of reference share 0 count in ``tvd``
    but would make chi-square infinite, so the test runs on the reference's positive
    options only (their observed counts against their total × the rescaled shares) and
    ``outside`` says how many answers it left out. A reference question the questionnaire
    lacks, one without a single answer per respondent (numeric, multi_choice, open without
    categories), an option it lacks, a profile column or value the population lacks: each
    is a ConfigError naming it.
    """
    f = _frame(answers, questions)
    where = {x.id: i for i, x in enumerate(f.questions)}
    ref: dict[tuple[str | None, str | None], dict[int, np.ndarray]] = {}
    missing = [c for c in ("question", "option", "share") if c not in reference.column_names]
    if missing:
        raise ConfigError(f"compare_reference: the reference lacks column {missing[0]!r}")
    for r in reference.to_pylist():
        r.setdefault("aspect", None)
        r.setdefault("value", None)
        if r["question"] not in where:
            raise ConfigError(f"compare_reference: reference question {r['question']!r} is "
                              "not in the questionnaire")
        qi = where[r["question"]]
        x = f.questions[qi]
        if x.type not in CHOICE or not x.options:
            raise ConfigError(f"compare_reference: reference question {x.id!r} is {x.type}"
                              f"{' without categories' if x.type == 'open' else ''}: its "
                              "answers are not one option each")
        if r["option"] not in x.options:
            raise ConfigError(f"compare_reference: question {x.id!r} has no option "
                              f"{r['option']!r} (options: {', '.join(x.options)})")
        shares = ref.setdefault((r["aspect"], r["value"]), {}).setdefault(
            qi, np.zeros(len(x.options)))
        shares[x.options.index(r["option"])] += r["share"]
    counts: dict[str | None, tuple[list[str] | None, _Counts]] = {}
    for aspect, value in ref:
        if aspect not in counts:
            if aspect is None:
                counts[None] = (None, _count(answers, f))
            else:
                texts, group = _profile_groups(answers, no_profiles(profiles), aspect,
                                               "compare_reference")
                counts[aspect] = (texts, _count(answers, f, group, len(texts)))
        known = counts[aspect][0]
        if known is not None and value not in known:
            raise ConfigError(f"compare_reference: no respondent has {aspect} = {value!r} "
                              f"(values: {', '.join(known)})")
    out: dict[str, list[Any]] = {c: [] for c in ("wave", "question", "aspect", "value", "n",
                                                 "tvd", "chi2", "df", "p_value", "outside")}
    for wi, wave in enumerate(f.waves.tolist()):
        for (aspect, value), by_question in ref.items():
            values, c = counts[aspect]
            gi = 0 if values is None else values.index(str(value))
            for qi in sorted(by_question):
                n = float(c.total[wi, qi, gi])
                if not n:
                    continue
                q = by_question[qi] / by_question[qi].sum()
                obs = c.n[wi, qi, gi, :q.size].astype(np.float64)
                tvd = 0.5 * float(np.abs(obs / n - q).sum())
                inside = q > 0
                m = float(obs[inside].sum())
                df = int(inside.sum()) - 1
                if m and df:
                    e = m * q[inside]
                    chi2 = float(((obs[inside] - e) ** 2 / e).sum())
                    p = float(_stats().chi2.sf(chi2, df))
                else:
                    chi2 = p = math.nan
                for col, v in zip(out, (wave, f.questions[qi].id, aspect, value, int(n), tvd,
                                        chi2, df, p, int(n - m)), strict=True):
                    out[col].append(v)
    return _table(out, _schema(wave=pa.int16(), question=pa.string(), aspect=pa.string(),
                               value=pa.string(), n=pa.int64(), tvd=pa.float64(),
                               chi2=pa.float64(), df=pa.int64(), p_value=pa.float64(),
                               outside=pa.int64()))


# -- weights -----------------------------------------------------------------------------------
def rake(profiles: pa.Table, targets: Mapping[str, Mapping[str, float]], *,
         max_iter: int = 200, tol: float = 1e-9) -> np.ndarray:
    """Post-stratification weights, one per profile row (mean 1), by iterative proportional
    fitting to the target shares of each aspect's values (matched as text: ``"30"`` for
    the integer 30). Shares are rescaled to sum to 1; profiles whose value a target does
    not list (or is null) get weight 0. Converged means every weighted share is within
    ``tol`` of its target; a population already there gets weights of exactly 1.

    >>> rake(profiles, {"gender": {"female": 0.52, "male": 0.48}})   # doctest: +SKIP
    array([0.96, 1.04, ...])
    """
    profiles = no_profiles(profiles)
    n = profiles.num_rows
    parts = []
    for aspect, wanted in targets.items():
        if aspect == "agent_id" or aspect not in profiles.column_names:
            raise ConfigError(f"rake: target aspect {aspect!r} is not a profile column "
                              f"(columns: {', '.join(profiles.column_names)})")
        col = profiles[aspect]
        distinct = pc.unique(col).drop_null()
        values = _texts(distinct)
        shares = {("true" if k else "false") if isinstance(k, bool) else str(k): float(v)
                  for k, v in wanted.items()}
        for value, share in shares.items():
            if value not in values:
                raise ConfigError(f"rake: target {aspect} = {value!r} is not in the "
                                  f"population (values: {', '.join(sorted(values))})")
            if not share >= 0:
                raise ConfigError(f"rake: target {aspect} = {value!r} has share {share}, "
                                  "expected a number ≥ 0")
        total = sum(shares.values())
        if abs(total - 1.0) > 0.01:
            raise ConfigError(f"rake: the target shares of {aspect!r} sum to {total:.4g}, "
                              "expected 1 ± 0.01")
        idx = _index(col, distinct)
        idx[idx < 0] = len(values)  # nulls: a value of target 0
        parts.append((aspect, idx, np.array([shares.get(v, 0.0) / total for v in values]
                                            + [0.0])))
    w = np.ones(n)
    for _ in range(max_iter + 1):
        gaps = [(float(np.abs(np.bincount(idx, w, target.size) / w.sum() - target).max()),
                 aspect) for aspect, idx, target in parts]
        gap, aspect = max(gaps, default=(0.0, ""))
        if gap <= tol:
            return w * (n / w.sum())
        for _, idx, target in parts:
            now = np.bincount(idx, w, target.size)
            w = w * np.divide(target * w.sum(), now, out=np.zeros_like(now),
                              where=now > 0)[idx]
        if not w.sum() > 0:
            break
    raise ConfigError(f"rake: the weights did not converge in {max_iter} iterations "
                      f"(largest gap {gap:.3g} in {aspect!r}): are the targets consistent?")


def weights_table(profiles: pa.Table, targets: Mapping[str, Mapping[str, float]]) -> pa.Table:
    """:func:`rake`'s weights as the ``agent_id, weight`` table :func:`marginals` takes."""
    return pa.table({"agent_id": profiles["agent_id"],
                     "weight": pa.array(rake(profiles, targets), pa.float64())})


# -- the report's tables -----------------------------------------------------------------------
def _p(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def _ci(low: float | None, high: float | None) -> str:
    return "-" if low is None or high is None else f"[{num(low)}, {num(high)}]"


def crosstab_columns(profiles: pa.Table) -> list[str]:
    """Profile columns worth a cross-tab: 2 to 12 distinct values."""
    profiles = no_profiles(profiles)
    return [c for c in profiles.column_names if c != "agent_id"
            and 2 <= pc.count_distinct(profiles[c]).as_py() <= _MAX_VALUES]


def as_reference(reference: pa.Table | str | Path) -> pa.Table:
    return reference if isinstance(reference, pa.Table) else read_reference(reference)


def no_profiles(profiles: pa.Table | None) -> pa.Table:
    """``profiles`` with dictionary-encoded columns decoded (as a run directory's
    ``profiles.parquet`` stores aspects), or an empty profile table for a run that has
    none."""
    if profiles is None:
        return pa.table({"agent_id": pa.array([], pa.int64())})
    for i, field in enumerate(profiles.schema):
        if pa.types.is_dictionary(field.type):
            profiles = profiles.set_column(i, field.name,
                                           profiles[field.name].cast(field.type.value_type))
    return profiles


def report_tables(answers: pa.Table, profiles: pa.Table | None,
                  questions: Iterable[QuestionInfo],
                  *, control: str | None = None, reference: pa.Table | str | Path | None = None,
                  targets: Mapping[str, Mapping[str, float]] | None = None
                  ) -> list[dict[str, Any]]:
    """The report's tables (``{"title", "head", "rows"}``, cells as text): marginals (with
    a weighted share when ``targets``), numeric summaries, a cross-tab per profile column
    of 2 to 12 values, treatment effects against arm ``control``, position bias and the
    comparison with ``reference`` (a table or a file); tables without rows are left out.

    >>> [t["title"] for t in report_tables(answers, profiles, questions)]  # doctest: +SKIP
    ['Answers per question', 'Numeric answers', 'Answers by education', ...]
    """
    qs = list(questions)
    profiles = no_profiles(profiles)
    out = []
    weights = None if targets is None else weights_table(profiles, targets)
    m = marginals(answers, qs, weights=weights).to_pylist()
    weighted = ("weighted share",) if weights is not None else ()
    out.append(report("Answers per question", ("wave", "question", "option", "n", "share",
                                                *weighted),
                       [[str(r["wave"]), r["question"], r["option"], num(r["n"]),
                         pct(r["share"]),
                         *((pct(r["weighted_share"]),) if weights is not None else ())]
                        for r in m]))
    out.append(report("Numeric answers", ("wave", "question", "n", "mean", "sd", "median",
                                           "95% CI of the mean"),
                       [[str(r["wave"]), r["question"], num(r["n"]), num(r["mean"]),
                         num(r["sd"]), num(r["median"]), _ci(r["ci_low"], r["ci_high"])]
                        for r in numeric_summary(answers, qs).to_pylist()]))
    for by in crosstab_columns(profiles):
        out.append(report(f"Answers by {by}", ("wave", "question", by, "option", "n",
                                                f"share within {by}"),
                           [[str(r["wave"]), r["question"], r["value"], r["option"],
                             num(r["n"]), pct(r["share"])]
                            for r in crosstab(answers, profiles, qs, by).to_pylist()]))
    if control is not None:
        out.append(report(f"Treatment effects (arm − {control}, 95% Welch CI)",
                           ("wave", "question", "arm", "measure", "estimate", "95% CI",
                            "n arm", "n control", "p"),
                           [[str(r["wave"]), r["question"], r["arm"], r["measure"],
                             num(r["estimate"]), _ci(r["ci_low"], r["ci_high"]),
                             num(r["n_arm"]), num(r["n_control"]), _p(r["p_value"])]
                            for r in treatment_effects(answers, qs, control=control)
                            .to_pylist()]))
    out.append(report("Position of the chosen option (shuffled options)",
                       ("question", "shown at", "n", "share", "expected", "p (uniform)"),
                       [[r["question"], str(r["position"]), num(r["n"]), pct(r["share"]),
                         pct(r["expected"]), _p(r["p_value"])]
                        for r in position_bias(answers, qs).to_pylist()]))
    if reference is not None:
        rows = compare_reference(answers, profiles, qs, as_reference(reference)).to_pylist()
        out.append(report("Model against reference", ("wave", "question", "aspect", "value",
                                                       "n", "TVD", "chi²", "df", "p",
                                                       "outside reference"),
                           [[str(r["wave"]), r["question"], r["aspect"] or "all",
                             r["value"] or "-", num(r["n"]), num(r["tvd"]),
                             num(r["chi2"], 2), str(r["df"]), _p(r["p_value"]),
                             num(r["outside"])] for r in rows]))
    return [t for t in out if t["rows"]]
