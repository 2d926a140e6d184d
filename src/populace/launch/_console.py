"""Progress in a terminal: a bar per step and one line of metrics after each."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ._runfile import RunFile
from ._scenario import _cell, _scalar


def warned_steps(summary: dict[str, Any]) -> int:
    """How many steps of ``summary`` warned (:meth:`Run.warn`, or failed answers)."""
    return sum(1 for e in summary.get("steps") or () if isinstance(e, dict)
               and (e.get("warnings") or e.get("failed")))


class ConsoleObserver:
    """An :class:`~populace.launch.Observer` that draws on a rich console."""

    def __init__(self, console: Console, errors: Console | None = None, *,
                 lines: bool = True) -> None:
        self.console = console
        self.errors = errors or console  # warnings go here (stderr in the CLI)
        self.lines = lines  # False: the bars only (benchmarks)
        self._prices: dict[str, tuple[float, float]] = {}  # price_per_million, per model
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[unit]}"), TimeElapsedColumn(),
            console=console, transient=True)
        self._task: Any = None
        self._steps = 0
        self._describe: Any = None
        self._shown: tuple[str, ...] | None = None
        self.warned = 0  # steps of the finished run with warnings or failed answers

    def run_started(self, run_file: RunFile, summary: dict[str, Any]) -> None:
        self._steps = run_file.options.steps
        self._describe = run_file.scenario.describe_step
        self._shown = run_file.scenario.shown
        self._prices = {name: price for name, m in run_file.options.models.items()
                        if (price := getattr(m, "price_per_million", None))}

    def step_started(self, t: int, steps: int) -> None:
        self._steps = steps

    def creating(self, name: str, done: int, total: int) -> None:
        self._bar(f"creating {name}", done, total, "agents")
        if done >= total:
            self._clear()

    def step_progress(self, t: int, done: int, total: int) -> None:
        self._bar(f"step {t}/{self._steps}", done, total, "answers")

    def _bar(self, what: str, done: int, total: int, unit: str) -> None:
        if not self.console.is_terminal:
            return  # a bar in a log file is noise: the step's line says it all
        if self._task is None:
            self.progress.start()
            self._task = self.progress.add_task(what, total=total, unit=unit)
        self.progress.update(self._task, completed=done, total=total, description=what,
                             unit=unit)

    def _clear(self) -> None:
        if self._task is not None:
            self.progress.remove_task(self._task)
            self._task = None
            self.progress.stop()

    def step_finished(self, t: int, entry: dict[str, Any]) -> None:
        self._clear()
        failed = entry.get("failed")
        if failed:
            worst = max(failed["kinds"].items(), key=lambda kv: kv[1])
            self.errors.print(
                f"[yellow]warning:[/yellow] step {t}: {failed['answers']:,} of "
                f"{failed['of']:,} answers failed (most common: {escape(worst[0])} "
                f"×{worst[1]:,}: {escape(failed['example'])})", soft_wrap=True)
        for warning in entry.get("warnings") or ():
            self.errors.print(f"[yellow]warning:[/yellow] step {t}: {escape(str(warning))}",
                              soft_wrap=True)
        if not self.lines:
            return
        line = self._describe(t, self._steps, entry)
        self.console.print(f"{escape(line)} [dim]({entry['wall_s']:.2f} s)[/dim]",
                           soft_wrap=True)  # one line per step, even in a narrow terminal

    def stalled(self, t: int, line: str) -> None:
        """A step has had no answer for a model's ``timeout`` (a server that never answers):
        said at once, and again as long after, rather than silence until the calls fail."""
        self._clear()
        self.errors.print(f"[yellow]warning:[/yellow] {escape(line)}", soft_wrap=True)

    def recovering(self, error: BaseException) -> None:
        self._clear()
        line = escape(" ".join(str(error).splitlines()))
        self.errors.print(f"[yellow]warning:[/yellow] {line}; restarting the workers from the "
                           "last checkpoint", soft_wrap=True)

    def run_finished(self, summary: dict[str, Any]) -> None:
        self._clear()
        if not self.lines:
            return
        if summary.get("already_complete"):  # a resume of a finished run
            done = len(summary.get("steps") or ())
            repaired = summary.get("repaired")
            if repaired:
                tables = ", ".join(f"{name}.parquet" for name in repaired)
                self.console.print(f"already complete: {done:,} of {done:,} steps; nothing to "
                                   f"run; {tables} rewritten from the step files (it was "
                                   "missing or damaged)", soft_wrap=True)
                return
            self.console.print(f"already complete: {done:,} of {done:,} steps; nothing to "
                               "run, nothing changed", soft_wrap=True)
            return
        for line in [*traffic_lines(summary), *sampling_lines(summary, self._prices)]:
            self.console.print(line, soft_wrap=True, highlight=False)
        self.warned = warned_steps(summary)
        if self.warned:
            done = len(summary.get("steps") or ())
            self.errors.print(f"[yellow]warning:[/yellow] {self.warned:,} of {done:,} steps "
                              "warned (see each step's warnings in summary.json)",
                              soft_wrap=True)

    def table(self, summary: dict[str, Any], most: int = 6) -> Table:
        """Steps × metrics of a finished run: the scenario's ``shown`` metrics, else the
        first ``most`` scalar ones."""
        steps = summary["steps"]
        names = list(self._shown) if self._shown is not None else list(dict.fromkeys(
            k for e in steps for k, v in e.items()
            if k not in ("step", "wall_s") and _scalar(v)))[:most]
        table = Table(title=f"{summary['name']}: {summary['agents']:,} agents, "
                            f"{len(steps)}/{summary['steps_planned']} steps, "
                            f"{summary['status']}")
        for col in ("step", *names, "wall s"):
            table.add_column(col, justify="right")
        for e in steps:
            table.add_row(str(e["step"]), *(escape(_cell(e.get(k))) for k in names),
                          f"{e['wall_s']:.2f}")
        return table


_COST_KEYS = ("calls", "prompt_tokens", "completion_tokens")


def sampling_lines(summary: dict[str, Any],
                   prices: Mapping[str, tuple[float, float]] | None = None) -> list[str]:
    """One line per model with archetype sampling: the decisions its archetypes answered;
    the calls and tokens made against what asking every agent would have made (and, for a
    model with ``price_per_million``, both in money); the audit's largest distance (of any
    step and decision) with its interval; the decisions that fell back (``fallback:``)."""
    shared: dict[str, int] = {}
    worst: dict[str, tuple[float, str, int, dict[str, Any]]] = {}
    made: dict[str, Counter[str]] = {}  # calls and tokens made in the steps that sampled
    individual: dict[str, Counter[str]] = {}  # and what asking everyone would have made there
    fell: dict[str, dict[str, int]] = {}  # decision → the step after which it fell back
    for entry in summary.get("steps") or ():
        for model, got in (entry.get("sampling") or {}).items():
            shared[model] = shared.get(model, 0) + got.get("shared", 0)
            for decision in got.get("fell_back") or ():
                fell.setdefault(model, {}).setdefault(decision, entry["step"])
            if "individual" in got:
                individual.setdefault(model, Counter()).update(got["individual"])
                llm = (entry.get("llm") or {}).get(model, {})
                made.setdefault(model, Counter()).update(
                    calls=llm.get("requests", 0), prompt_tokens=llm.get("prompt_tokens", 0),
                    completion_tokens=llm.get("completion_tokens", 0))
            for decision, d in (got.get("decisions") or {}).items():
                value = d.get("tv", d.get("wasserstein"))
                if value is not None and (model not in worst or value > worst[model][0]):
                    worst[model] = (value, decision, entry["step"], d)
    lines = []
    for model, n in shared.items():
        line = f"{model}: {n:,} decisions answered by archetypes or a surrogate"
        if model in made and made[model]["calls"]:
            mine, every = made[model], individual[model]
            ratio = every["calls"] / mine["calls"]
            times = f"{ratio:,.1f}" if ratio < 10 else f"{ratio:,.0f}"
            tokens = mine["prompt_tokens"] + mine["completion_tokens"]
            line += (f" ({mine['calls']:,} calls, {tokens:,} tokens; asking every agent: "
                     f"~{every['calls']:,} calls, "
                     f"~{every['prompt_tokens'] + every['completion_tokens']:,} tokens, "
                     f"{times}x")
            price = (prices or {}).get(model)
            if price:
                cost = [(c["prompt_tokens"] * price[0] + c["completion_tokens"] * price[1]) / 1e6
                        for c in (mine, every)]
                line += f"; ${cost[0]:,.2f} instead of ~${cost[1]:,.2f}"
            line += ")"
        if model in worst:
            value, decision, step, d = worst[model]
            kind = "TV" if "tv" in d else "Wasserstein"
            line += (f"; audit's largest distance {kind} {value:.3f} (95% interval "
                     f"{d['low']:.3f}-{d['high']:.3f}, {d['audited']:,} audited) for "
                     f"{decision} at step {step}")
        if model in fell:
            line += "; asked individually after the audit: " + ", ".join(
                f"{decision} from step {step + 1}" for decision, step in fell[model].items())
        lines.append(line)
    return lines


def traffic_lines(summary: dict[str, Any]) -> list[str]:
    """One line per model that went to a server: its calls, requests sent, and the prompt
    tokens the servers' prefix caches gave back (or the client estimated they could)."""
    totals: dict[str, dict[str, int]] = {}
    for entry in summary.get("steps") or ():
        for model, counts in (entry.get("llm") or {}).items():
            acc = totals.setdefault(model, {})
            for key, value in counts.items():
                if isinstance(value, int):
                    acc[key] = acc.get(key, 0) + value
    lines = []
    for model, t in totals.items():
        prompt = t.get("prompt_tokens", 0)
        if not prompt:  # the dummy and scripted models: nothing was sent
            continue
        line = (f"{model}: {t.get('requests', 0):,} calls, {t.get('sent', 0):,} requests "
                f"sent, {prompt:,} prompt tokens")
        if t.get("replayed"):
            line += f" ({t['replayed']:,} calls answered from the recording)"
        if t.get("cached_tokens"):
            line += f", {t['cached_tokens'] / prompt:.0%} from the servers' prefix caches"
        elif t.get("prefix_tokens"):
            line += f", {t['prefix_tokens'] / prompt:.0%} repeating a prefix already sent"
        lines.append(line)
    return lines
