"""``populace interview`` and ``populace intervene``: ask the agents of a run a question,
or schedule a change for a step of it, from its checkpoints while it is not running."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from populace.launch import run_until_signalled

from ._app import EXIT_CONFIG, Fail, bool_option, err, out, path_is


def interview(
    run_dir: Annotated[Path, typer.Argument(help="the run directory")],
    question: Annotated[str, typer.Argument(help="what to ask")],
    agent: Annotated[list[int] | None, typer.Option(
        "--agent", help="an agent id to ask; repeatable")] = None,
    where: Annotated[str | None, typer.Option(
        help="a profile query, e.g. 'education == \"PhD\" and age > 40'")] = None,
    sample: Annotated[int | None, typer.Option(min=1, help="ask a seeded random sample of "
                                               "this many (of those chosen)")] = None,
    step: Annotated[int | None, typer.Option(min=0, help="as the agents stood after this "
                                             "step (default: the newest checkpoint)")] = None,
    as_json: Annotated[bool, bool_option("json", "print the answers as JSON lines")] = False,
) -> None:
    """Ask agents of a run a question, with their own model, persona and memory (from a
    checkpoint; the run's results do not change). Answers go to RUN_DIR/interviews.parquet."""
    from populace.launch import interview as ask

    if not path_is(run_dir / "config.yaml", Path.is_file, "RUN_DIR"):
        raise Fail(f"{run_dir}: no config.yaml there (not a run directory?)", EXIT_CONFIG)
    if agent is None and where is None and sample is None:
        raise Fail("choose whom to ask: --agent ID, --where QUERY and/or --sample N",
                   EXIT_CONFIG)
    number, rows = run_until_signalled(ask(run_dir, question, agents=agent, where=where,
                                           sample=sample, step=step))
    if as_json:
        for row in rows:
            print(json.dumps(row, ensure_ascii=False))
    else:
        shown = Table("agent", "answer", "tokens", "s")
        for row in rows:
            text = row["answer"] if row["answer"] is not None else f"[red]{row['error']}[/red]"
            shown.add_row(str(row["agent_id"]), escape(text) if row["answer"] else text,
                          f"{row['prompt_tokens']}+{row['completion_tokens']}",
                          f"{row['latency_s']:.2f}")
        out.print(shown)
    failed = sum(row["answer"] is None for row in rows)
    step_seen = rows[0]["step"] if rows else step
    (err if as_json else out).print(
        f"interview {number}: {len(rows) - failed} of {len(rows)} agents answered (as after "
        f"step {step_seen}); saved in {escape(str(run_dir / 'interviews.parquet'))}",
        soft_wrap=True)
    if rows and failed == len(rows):
        raise Fail(f"no agent answered: {rows[0]['error']}", 1)


def intervene(
    run_dir: Annotated[Path, typer.Argument(help="the run directory")],
    step: Annotated[int, typer.Option(min=1, help="the step at whose start it is carried "
                                      "out")],
    text: Annotated[str | None, typer.Option(help="a message to the chosen agents")] = None,
    where: Annotated[str | None, typer.Option(
        help="with --text: agents whose profile matches, e.g. 'age == \"old\"'")] = None,
    agent: Annotated[list[int] | None, typer.Option(
        "--agent", help="with --text: this agent (repeatable)")] = None,
    sample: Annotated[int | None, typer.Option(min=1, help="with --text: a seeded random "
                                               "sample of this many (of those chosen)")
                      ] = None,
    key: Annotated[str | None, typer.Option(help="an environment key to set")] = None,
    value: Annotated[str | None, typer.Option(help="with --key: its value, as JSON "
                                              "(3, true, '\"text\"', [1, 2])")] = None,
    env: Annotated[str | None, typer.Option(help="with --key: the child environment's "
                                            "path (default: the root)")] = None,
) -> None:
    """Schedule a message to agents, or a change of the environment, at a step of a run
    that is not running; a fork (or --resume) carries it out. Appended to
    RUN_DIR/interventions.jsonl."""
    from populace.launch import intervene as schedule
    from populace.launch import parse_intervention

    if (text is None) == (key is None):
        raise Fail("give either --text (a message) or --key and --value (an environment "
                   "change)", EXIT_CONFIG)
    if text is not None:
        if not text.strip():
            raise Fail("--text: empty (give the message)", EXIT_CONFIG)
        given = [f for f, v in (("--value", value), ("--env", env)) if v is not None]
        if given:
            raise Fail(f"{given[0]} goes with --key (an environment change), not --text",
                       EXIT_CONFIG)
        data: dict[str, Any] = {"step": step, "kind": "message", "text": text,
                                "where": where, "agents": agent, "sample": sample}
    else:
        given = [f for f, v in (("--where", where), ("--agent", agent), ("--sample", sample))
                 if v is not None]
        if given:
            raise Fail(f"{given[0]} goes with --text (a message), not --key", EXIT_CONFIG)
        if value is None:
            raise Fail("--key needs --value (JSON: 3, true, '\"text\"')", EXIT_CONFIG)
        try:
            parsed = json.loads(value, parse_constant=_no_constant)
        except ValueError:
            raise Fail(f"--value {value}: not JSON (text goes in double quotes: "
                       f"'\"{value}\"')", EXIT_CONFIG) from None
        except RecursionError:
            raise Fail("--value: nested too deeply", EXIT_CONFIG) from None
        data = {"step": step, "kind": "environment", "key": key, "value": parsed, "env": env}
    intervention = parse_intervention({k: v for k, v in data.items() if v is not None},
                                      "intervene", flags=True)
    if not path_is(run_dir / "config.yaml", Path.is_file, "RUN_DIR"):
        raise Fail(f"{run_dir}: no config.yaml there (not a run directory?)", EXIT_CONFIG)
    done = schedule(run_dir, intervention)
    reach = "" if done.agents is None else \
        f"; it reaches {done.agents:,} agent{'' if done.agents == 1 else 's'}"
    if done.fork_at is None:
        then = (f"the run has played {done.played} step(s): it is carried out when it "
                f"resumes: populace run --resume {run_dir}")
    else:
        then = (f"step {step} was played already: carry it out in a fork: populace run "
                f"--fork {run_dir} --at {done.fork_at} --out {run_dir}-fork{done.fork_at}")
    out.print(f"scheduled for step {step}: {escape(done.intervention.describe())}{reach}; "
              f"{escape(then)}", soft_wrap=True, highlight=False)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # NaN, Infinity: Python's json reads them
