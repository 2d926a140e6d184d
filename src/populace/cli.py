"""The ``populace`` command line.

Every expected failure (bad config, existing output directory, unreachable server) ends as
one line on stderr and a non-zero exit status; tracebacks are for bugs only.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from populace._procmem import PeakMemory
from populace._strict import (
    MAX_AGENTS,
    MAX_LATENCY_S,
    MAX_SEED,
    MAX_STEPS,
    MAX_TIMEOUT_S,
    MAX_WORKERS,
)
from populace.config import read_yaml, validate
from populace.core import ConfigError, PopulaceError, WorkerLost
from populace.launch import (
    MAX_RECOVERIES,
    ConsoleObserver,
    RunFile,
    ScenarioFailed,
    Terminated,
    launch,
    load_run_file,
    run_until_signalled,
)
from populace.results import RunDirectory, RunMonitor, new_run_dir
from populace.scenarios.guess_number import RunConfig, Timings, play

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Very large-scale LLM multi-agent simulation.",
)
out = Console()
err = Console(stderr=True)

EXIT_CONFIG = 2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


def _flag(name: str, help: str) -> Any:
    """A boolean option, ``--NAME/--no-NAME``; no metavar (typer's help would say <bool>).
    Help text is rich markup: brackets are escaped (``escape("[a, b]")``) or disappear."""
    return typer.Option(f"--{name}/--no-{name}", metavar="", help=help)


class _Fail(Exception):
    """An expected failure: print ``message`` and exit with ``code``."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _launch(run_file: RunFile, run_dir: RunDirectory, *, resume: bool, replay: Path | None,
            studio_port: int | None) -> None:
    """Run any scenario through the launcher, with progress bars, the studio if asked, one
    line and a non-zero exit for every way a run can fail."""
    o = run_file.options
    out.print(f"[bold]{escape(o.name)}[/bold]: scenario {escape(o.scenario)}, {o.agents:,} "
              f"agents × {o.steps} steps on {o.workers} {o.backend} worker(s), seed {o.seed}",
              soft_wrap=True)
    observer = ConsoleObserver(out, err)
    monitor, control, server = _start_studio(run_dir, studio_port) \
        if studio_port is not None else (None, None, None)
    def forced(why: str) -> str:  # the watchdog's line: the step would not stop
        return (f"stopped: {why}; finished steps are in {run_dir.path}; continue with: "
                f"populace run --resume {run_dir.path}")

    try:
        summary = run_until_signalled(launch(run_file, run_dir, monitor=monitor,
                                             observers=[observer], resume=resume,
                                             replay=replay, control=control), say=forced)
    except WorkerLost as e:
        raise _Fail(f"{e}; gave up after {MAX_RECOVERIES} recoveries; continue with: "
                    f"populace run --resume {run_dir.path}", 1) from None
    except (KeyboardInterrupt, Terminated) as e:
        code = EXIT_TERMINATED if isinstance(e, Terminated) else EXIT_INTERRUPTED
        raise _Fail(f"stopped; finished steps are in {run_dir.path}; continue with: "
                    f"populace run --resume {run_dir.path}", code) from None
    except ConfigError:
        raise  # a run file or run directory that does not fit: exit 2
    except ScenarioFailed as e:  # the scenario's own code broke: one line, the traceback kept
        raise _Fail(str(e), 1) from None
    except OSError as e:  # a full disk, a directory made read-only under the run
        # pyarrow's write errors carry no file name: the run directory is where it failed
        where = f"{e.filename}: " if e.filename else f"writing in {run_dir.path}: "
        raise _Fail(f"{where}{e.strerror or e}; finished steps are in {run_dir.path}; "
                    f"continue with: populace run --resume {run_dir.path}", 1) from None
    except PopulaceError as e:
        raise _Fail(f"{type(e).__name__}: {e}; finished steps are in {run_dir.path}; continue "
                    f"with: populace run --resume {run_dir.path}", 1) from None
    finally:
        observer.progress.stop()
        if server is not None:
            server.stop(linger=1.0)  # open pages get the final state first
        run_dir.remove_if_empty()  # failed before writing anything (a preflight): no litter
    out.print(observer.table(summary))
    if summary["status"] == "stopped":
        out.print(f"stopped from the studio; finished steps are in {run_dir.path}; continue "
                  f"with: populace run --resume {run_dir.path}", soft_wrap=True)
    out.print(f"wall time {summary['wall_s']:.2f} s; results in "
              f"[bold]{escape(str(run_dir.path))}[/bold]", soft_wrap=True)


def _is(path: Path, test: Any, flag: str) -> bool:
    """``test(path)`` (``Path.is_file``…), a path the system refuses (a name too long) being
    the flag's one-line error."""
    try:
        return bool(test(path))
    except OSError as e:
        raise _Fail(f"{flag} {path}: {e.strerror or e}", EXIT_CONFIG) from None


def _seconds(flag: str, value: float, most: float) -> None:
    """A flag's number of seconds lies in [0, most] (NaN passes some versions of click's
    range checks)."""
    if not 0 <= value <= most:
        raise _Fail(f"{flag} {value}: expected seconds from 0 to {most:g}", EXIT_CONFIG)


def _writable(path: Path, flag: str) -> None:
    """``path`` can be written as a file: not a directory, in a directory that exists."""
    if _is(path, Path.is_dir, flag):
        raise _Fail(f"{flag} {path}: is a directory", EXIT_CONFIG)
    parent = path.parent
    if not _is(parent, Path.is_dir, flag):
        why = f"{parent} is not a directory" if _is(parent, Path.exists, flag) \
            else f"no such directory {parent}"
        raise _Fail(f"{flag} {path}: {why}", EXIT_CONFIG)


def _run_dir(target: Path, resume: bool, *, given: bool = True) -> RunDirectory:
    """The run directory at ``target`` (``given`` by --out, else the default name)."""
    if not resume and os.path.islink(target) and not os.path.exists(target):  # no OSError
        where = f"--out {target}" if given else str(target)
        raise _Fail(f"{where}: a broken symbolic link (to {target.readlink()}); remove it or "
                    "choose another directory", EXIT_CONFIG)
    try:
        return RunDirectory(target) if resume else RunDirectory.create(target)
    except FileExistsError as e:
        raise _Fail(str(e), EXIT_CONFIG) from None
    except OSError as e:  # a parent that is a file, read-only, /proc, a name too long
        where, hint = (f"--out {target}", "") if given else (str(target),
                                                             "; choose one with --out")
        raise _Fail(f"{where}: cannot create the run directory: {e.strerror or e}{hint}",
                    EXIT_CONFIG) from None


@app.command()
def run(
    config: Annotated[Path | None, typer.Argument(
        help="run file (YAML); not needed with --resume")] = None,
    agents: Annotated[int | None, typer.Option(help="override agents:")] = None,
    rounds: Annotated[int | None, typer.Option(
        "--rounds", "--steps", help="override rounds: (the steps of any scenario)")] = None,
    workers: Annotated[int | None, typer.Option(help="override workers:")] = None,
    seed: Annotated[int | None, typer.Option(help="override seed:")] = None,
    backend: Annotated[str | None, typer.Option(help="override backend: (local or ray)")] = None,
    address: Annotated[str | None, typer.Option(help="Ray cluster to join (auto, ray://…)")
                       ] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="run directory to create "
                                                 "(default runs/NAME-TIMESTAMP)")] = None,
    replay: Annotated[Path | None, typer.Option(
        help="answer every LLM call from this earlier run's recording (no requests)")] = None,
    resume: Annotated[Path | None, typer.Option(
        help="continue this interrupted run directory from its last checkpoint")] = None,
    studio: Annotated[bool, _flag("studio", "serve the web studio beside this run and print "
                                        "its URL")] = False,
    studio_port: Annotated[int, typer.Option(min=0, max=65535, help="the studio's port")
                           ] = 8765,
    fork: Annotated[Path | None, typer.Option(
        help="start a new run from this run directory's checkpoint at --at (a counterfactual)")
    ] = None,
    at: Annotated[int | None, typer.Option(min=1, help="with --fork: the step to continue "
                                           "after")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="with --fork: change a setting, KEY=VALUE (dotted: game.ratio=0.5); "
        "repeatable")] = None,
    without_interventions: Annotated[bool, _flag(
        "without-interventions", "with --fork: leave out the source's interventions after "
        "--at")] = False,
) -> None:
    """Run a simulation from a run file and write its run directory."""
    if fork is not None or at is not None or set_:
        if fork is None or at is None:
            raise _Fail("--fork RUN_DIR and --at STEP go together (--set needs both)",
                        EXIT_CONFIG)
        if config is not None or resume is not None or replay is not None:
            raise _Fail("--fork takes its config from RUN_DIR/config.yaml; give no CONFIG, "
                        "--resume or --replay", EXIT_CONFIG)
        if any(v is not None for v in (agents, rounds, seed, workers, backend, address)):
            raise _Fail("--fork changes settings with --set KEY=VALUE only", EXIT_CONFIG)
        _fork(fork, at, set_ or [], out_dir, without_interventions,
              studio_port if studio else None)
        return
    if resume is not None:
        if config is not None or out_dir is not None:
            raise _Fail("--resume RUN_DIR takes its config from RUN_DIR/config.yaml; "
                        "give no CONFIG and no --out", EXIT_CONFIG)
        if agents is not None or rounds is not None or seed is not None:
            # Only where the run happens may change; a checkpoint fits its own run alone.
            raise _Fail("--resume continues the run as it was configured; --agents, --rounds "
                        "and --seed cannot change", EXIT_CONFIG)
        config, out_dir = RunDirectory(resume).config_path, resume
        if not _is(config, Path.is_file, "--resume"):
            raise _Fail(f"--resume {resume}: no config.yaml there (not a run directory?)",
                        EXIT_CONFIG)
    if config is None:
        raise _Fail("missing the run file: populace run CONFIG.yaml", EXIT_CONFIG)
    if "sweep" in read_yaml(config):  # a grid of runs, one sub-directory each
        _run_sweep(config, {"agents": agents, "rounds": rounds, "workers": workers, "seed": seed,
                            "backend": backend, "address": address}, out_dir, replay)
        return
    run_file = load_run_file(config, {"agents": agents, "steps": rounds, "seed": seed,
                                      "workers": workers, "backend": backend,
                                      "address": address})
    _check_address(run_file, config, given=address is not None)
    if replay is not None and not _is(replay / "llm_calls", Path.is_dir, "--replay") \
            and any(m.provider != "dummy" for m in run_file.options.models.values()):
        raise ConfigError(f"--replay {replay}: no llm_calls/ recording in that directory")
    target = out_dir or new_run_dir("runs", run_file.name)
    run_dir = _run_dir(target, resume is not None, given=out_dir is not None)
    _launch(run_file, run_dir, resume=resume is not None, replay=replay,
            studio_port=studio_port if studio else None)


def _fork(source: Path, at: int, pairs: list[str], out_dir: Path | None,
          without_interventions: bool, studio_port: int | None) -> None:
    from populace.launch import fork, parse_sets

    if not _is(source / "config.yaml", Path.is_file, "--fork"):
        raise _Fail(f"--fork {source}: no config.yaml there (not a run directory?)",
                    EXIT_CONFIG)
    target = out_dir or new_run_dir(source.parent, f"{source.name}-fork{at}")
    if _is(target, os.path.lexists, "--out"):
        raise _Fail(f"{'--out ' if out_dir else ''}{target}: exists already; choose another "
                    "with --out", EXIT_CONFIG)
    try:
        run_file = fork(source, at, parse_sets(pairs), target,
                        without_interventions=without_interventions)
    except OSError as e:
        raise _Fail(f"{e.filename or target}: cannot create the fork: {e.strerror or e}",
                    EXIT_CONFIG) from None
    out.print(f"forked {escape(str(source))} after step {at} into "
              f"[bold]{escape(str(target))}[/bold]", soft_wrap=True)
    _launch(run_file, RunDirectory(target), resume=True, replay=None,
            studio_port=studio_port)


def _check_address(run_file: RunFile, config: Path, *, given: bool) -> None:
    """The cluster a run joins answers now (its backend says how to tell), or one line;
    ``given``: the address came from --address."""
    from populace.core import backend_kind

    o = run_file.options
    why = backend_kind(o.backend).unreachable(o.address) if o.address is not None else None
    if why is not None:
        flag = f"--address {o.address}" if given else f"{config}: address: {o.address}"
        raise _Fail(f"{flag}: {why}", EXIT_CONFIG)


@app.command()
def estimate(
    config: Annotated[Path, typer.Argument(help="run file (YAML)")],
    agents: Annotated[int | None, typer.Option(help="override agents:")] = None,
    rounds: Annotated[int | None, typer.Option(
        "--rounds", "--steps", help="override rounds: (the steps of any scenario)")] = None,
    workers: Annotated[int | None, typer.Option(help="override workers:")] = None,
    seed: Annotated[int | None, typer.Option(help="override seed:")] = None,
    pilot: Annotated[int | None, typer.Option(
        min=1, help="agents in the pilot run (default 50; at most the run's agents)")] = None,
    json_out: Annotated[bool, _flag("json", "print the estimate as JSON")] = False,
) -> None:
    """Predict a run's LLM calls, tokens, cost and wall time from a small pilot run."""
    from populace.launch import estimate as run_estimate

    overrides = {"agents": agents, "steps": rounds, "seed": seed, "workers": workers}
    result = asyncio.run(run_estimate(read_yaml(config), config, overrides, pilot=pilot))
    if json_out:
        out.print_json(json.dumps(result.as_dict()))
        return
    table = Table(title=f"{escape(str(config))}: {result.agents:,} agents × {result.steps} "
                        f"steps, from a pilot of {result.pilot_agents} × "
                        f"{result.pilot_steps} ({result.pilot_wall_s:.1f} s)")
    for column in ("model", "calls", "prompt tokens", "completion tokens", "cost",
                   "latency s", "in flight", "wall s"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for m in result.all_models:
        table.add_row(escape(m.model), f"{m.calls:,}", f"{m.prompt_tokens:,}",
                      f"{m.completion_tokens:,}", "-" if m.cost is None else f"{m.cost:,.2f}",
                      "-" if m.latency_s is None else f"{m.latency_s:.3f}",
                      "unbounded" if m.concurrency is None else f"{m.concurrency:,}",
                      "-" if m.wall_s is None else f"{m.wall_s:,.1f}")
    out.print(table)
    for m in result.all_models:
        if m.individual is not None:
            out.print(f"{escape(m.model)} samples archetypes: {m.calls:,} calls; asking every "
                      f"agent: ~{m.individual['calls']:,} calls, "
                      f"{m.individual['prompt_tokens']:,} prompt tokens", soft_wrap=True)
    wall, span = result.wall_s, result.wall_range
    out.print(f"predicted: {result.calls:,} calls"
              f"{'' if result.cost is None else f', cost {result.cost:,.2f}'}"
              f"{'' if wall is None else f', about {_duration(wall)} of model time'}"
              f"{'' if span is None else f' ({_duration(span[0])} to {_duration(span[1])})'}"
              " (the platform's own time per agent is not included)", soft_wrap=True)


def _duration(seconds: float) -> str:
    return f"{seconds:,.1f} s" if seconds < 120 else f"{seconds / 60:,.1f} min"


def _start_studio(run_dir: RunDirectory, port: int) -> tuple[Any, Any, Any]:
    """A monitor and a control for this run, and a studio showing it (on 127.0.0.1, in a
    thread)."""
    from populace.launch import RunControl
    from populace.studio import Runs, StudioServer

    runs = Runs(run_dir.path.parent)
    monitor, control = RunMonitor(), RunControl()
    live = runs.attach(run_dir.path, monitor, control)
    try:
        server = StudioServer(runs, port=port)
    except OSError as e:
        run_dir.remove_if_empty()  # nothing ran: no empty run directory left behind
        raise _Fail(f"studio: cannot listen on 127.0.0.1:{port}: {e.strerror} (choose another "
                    "port with --studio-port)", 1) from None
    server.start()
    out.print(f"studio: [bold]{server.url}#/run/{live.run_id}[/bold]", soft_wrap=True)
    return monitor, control, server


@app.command()
def studio(
    host: Annotated[str, typer.Option(
        help="address to bind; anything but loopback requires a token")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="port (0: any free one)")] = 8765,
    runs_dir: Annotated[Path | None, typer.Option(
        "--runs", help="directory holding the run directories (default runs, made when the "
        "first run starts; one given must exist)")] = None,
    token: Annotated[str | None, typer.Option(
        envvar="POPULACE_STUDIO_TOKEN",
        help="token every request must carry (generated when binding beyond localhost)")
    ] = None,
) -> None:
    """Serve the web studio: live runs, past runs and reports, agents; start and stop runs."""
    from populace.studio import Runs, StudioServer

    runs = runs_dir if runs_dir is not None else Path("runs")
    if _is(runs, Path.exists, "--runs"):
        if not runs.is_dir():
            raise _Fail(f"--runs {runs}: not a directory", EXIT_CONFIG)
    elif runs_dir is not None:  # a typo would serve an empty studio, its runs made there
        raise _Fail(f"--runs {runs}: no such directory", EXIT_CONFIG)
    if token is not None and not token.strip():
        raise _Fail("--token: empty (give a token, or leave --token and "
                    "POPULACE_STUDIO_TOKEN unset)", EXIT_CONFIG)
    try:
        server = StudioServer(Runs(runs), host=host, port=port, token=token)
    except OSError as e:
        raise _Fail(f"studio: cannot listen on {host}:{port}: {e.strerror}", 1) from None
    # The web server takes SIGINT while it serves and hands it on when it has stopped: to
    # this handler, not asyncio's (which would let the stop pass as a clean exit, status 0).
    # Both are in place before the address is printed: whoever reads it may signal at once.
    before = signal.signal(signal.SIGINT, _interrupt)
    before_term = signal.signal(signal.SIGTERM, _terminate)
    try:
        out.print(f"studio at [bold]{server.url}[/bold] (runs in {runs}; Ctrl-C stops)",
                  soft_wrap=True)
        server.serve()
    except (KeyboardInterrupt, Terminated) as e:  # its runs are stopped and saved by now
        out.print("studio stopped")
        raise typer.Exit(EXIT_TERMINATED if isinstance(e, Terminated) else EXIT_INTERRUPTED
                         ) from None
    finally:
        signal.signal(signal.SIGINT, before)
        signal.signal(signal.SIGTERM, before_term)
    out.print("studio stopped")


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _terminate(signum: int, frame: Any) -> None:
    raise Terminated()


@app.command()
def bench(
    agents: Annotated[int, typer.Option(min=1, max=MAX_AGENTS, help="number of agents")
                      ] = 100_000,
    latency: Annotated[float, typer.Option(min=0, max=MAX_LATENCY_S,
                                           help="dummy model latency, seconds")] = 1.0,
    rounds: Annotated[int, typer.Option(min=1, max=MAX_STEPS)] = 1,
    workers: Annotated[int, typer.Option(min=1, max=MAX_WORKERS)] = 1,
    backend: Annotated[str, typer.Option(help="local or ray")] = "local",
    address: Annotated[str | None, typer.Option(help="Ray cluster to join")] = None,
    as_json: Annotated[bool, _flag("json", "print one JSON object")] = False,
) -> None:
    """Time the guessing game on the dummy model: creation, rounds, CPU per agent, memory.

    Bars on stderr show the agents being created and each round's answers (in a terminal).
    """
    _seconds("--latency", latency, MAX_LATENCY_S)
    try:
        cfg = validate({
            "name": "bench", "agents": agents, "rounds": rounds, "workers": workers,
            "models": {"dummy": {"provider": "dummy", "latency": latency}},
            "backend": backend, "address": address,
        }, RunConfig, "bench")
    except ConfigError as e:  # name the flag: "--backend: ..."
        key, _, why = str(e).removeprefix("bench: ").partition(": ")
        flag = "--latency" if key == "models.dummy.latency" else f"--{key}"
        raise _Fail(f"{flag}: {why}" if why else str(e), EXIT_CONFIG) from None
    timings = Timings()
    with PeakMemory() as peak:
        asyncio.run(play(cfg, None, None, timings,
                         observers=[ConsoleObserver(err, err, lines=False)]))
    cpu_us = [c / agents * 1e6 for c in timings.round_cpu_s]
    result = {
        "agents": agents, "latency_s": latency, "rounds": rounds, "workers": workers,
        "backend": cfg.backend, "create_s": round(timings.create_s, 4),
        "round_s": [round(w, 4) for w in timings.round_wall_s],
        "overhead_s": [round(w - latency, 4) for w in timings.round_wall_s],
        "cpu_us_per_agent": [round(c, 2) for c in cpu_us],
        "peak_rss_mb": round(peak.mb, 1),
        "peak_pss_mb": None if peak.pss_mb is None else round(peak.pss_mb, 1),
        "python": sys.version.split()[0],
    }
    if as_json:
        print(json.dumps(result))
        return
    table = Table(title=f"bench: {agents:,} agents, latency {latency} s, {workers} worker(s)")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("agent creation", f"{timings.create_s:.3f} s")
    for i, (w, c) in enumerate(zip(timings.round_wall_s, cpu_us, strict=True), 1):
        table.add_row(f"round {i} wall", f"{w:.3f} s")
        table.add_row(f"round {i} CPU per agent", f"{c:.2f} µs")
    table.add_row("peak RSS, all processes", f"{result['peak_rss_mb']:.0f} MB")
    if peak.pss_mb is not None:  # shared pages counted once: the memory really held
        table.add_row("peak PSS, all processes", f"{peak.pss_mb:.0f} MB")
    out.print(table)


@app.command("serve-llm")
def serve_llm(
    host: Annotated[str, typer.Option(help="address to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="port (0: any free one)")] = 8000,
    model: Annotated[list[str] | None, typer.Option(help="model name served (repeatable)")
                     ] = None,
    latency: Annotated[float, typer.Option(min=0, max=MAX_LATENCY_S, help="seconds per "
                                           "answer")] = 0.0,
    latency_max: Annotated[float | None, typer.Option(
        min=0, max=MAX_LATENCY_S,
        help=escape("with --latency: answer after a uniform time in [latency, latency-max]"))
    ] = None,
    policy: Annotated[str, typer.Option(help="random | reasoning | echo | scripted")
                      ] = "reasoning",
    low: Annotated[int, typer.Option(help="smallest number answered")] = 0,
    high: Annotated[int, typer.Option(help="largest number answered")] = 100,
    error_500: Annotated[float, typer.Option(min=0, max=1, help="share of HTTP 500s")] = 0.0,
    error_429: Annotated[float, typer.Option(min=0, max=1, help="share of HTTP 429s")] = 0.0,
    error_timeout: Annotated[float, typer.Option(min=0, max=1, help="share never answered")
                             ] = 0.0,
    malformed: Annotated[float, typer.Option(min=0, max=1, help="share of broken JSON bodies")
                         ] = 0.0,
    seed: Annotated[int, typer.Option(help="seed of answers and injected errors")] = 0,
    api_key: Annotated[str | None, typer.Option(help="require this bearer token")] = None,
    outage: Annotated[tuple[float, float] | None, typer.Option(
        help="START DURATION: answer 503 to every completion from START to START+DURATION "
             "seconds after the first one")] = None,
    retry_after: Annotated[float, typer.Option(
        min=0, max=MAX_TIMEOUT_S,
        help="seconds asked to wait by the Retry-After of 429s and outage 503s")] = 1.0,
    batch_latency: Annotated[float, typer.Option(
        min=0, max=MAX_TIMEOUT_S,
        help="seconds a batch job (/v1/batches) takes for all its requests")] = 0.5,
    reasoning_tokens: Annotated[tuple[int, int], typer.Option(
        help="LOW HIGH: with --policy reasoning, tokens of reasoning answering a prompt "
             "that asks to think step by step, uniform in [LOW, HIGH] (0 0: one sentence)")
    ] = (100, 300),
    engine: Annotated[bool, _flag(
        "engine", "time completions on a simulated GPU engine (an 8B model on one A100 "
        "under vLLM unless changed below; docs/engine.md)")] = False,
    gpu: Annotated[str | None, typer.Option(
        help="with --engine: a100 or h100, the parameters of an 8B model on that GPU")] = None,
    prefill_rate: Annotated[float | None, typer.Option(
        help="with --engine: prompt tokens computed per second")] = None,
    decode_step: Annotated[float | None, typer.Option(
        help="with --engine: seconds of one decode step at batch size 1")] = None,
    decode_step_per_seq: Annotated[float | None, typer.Option(
        help="with --engine: seconds each running sequence adds to a decode step")] = None,
    decode_step_per_token: Annotated[float | None, typer.Option(
        help="with --engine: seconds each token of context adds to a decode step")] = None,
    max_batched_tokens: Annotated[int | None, typer.Option(
        help="with --engine: most tokens computed in one iteration "
             "(vLLM's max_num_batched_tokens)")] = None,
    max_batch: Annotated[int | None, typer.Option(
        help="with --engine: most sequences decoded at once (vLLM's max_num_seqs)")] = None,
    cache_blocks: Annotated[int | None, typer.Option(
        help="with --engine: KV cache capacity (running sequences and cached prefixes), "
             "in blocks of 16 tokens")] = None,
    time_scale: Annotated[float | None, typer.Option(
        help="with --engine: simulated seconds per real second")] = None,
    max_running: Annotated[int | None, typer.Option(
        help="answer 429 to a completion arriving while this many are in flight")] = None,
) -> None:
    """Serve an OpenAI-compatible test LLM (/v1/models, /v1/chat/completions, /v1/completions,
    /v1/files and /v1/batches)."""
    from populace.llm.offline import ServerOptions, serve

    _seconds("--latency", latency, MAX_LATENCY_S)
    if latency_max is not None:
        _seconds("--latency-max", latency_max, MAX_LATENCY_S)
    _seconds("--retry-after", retry_after, MAX_TIMEOUT_S)
    _seconds("--batch-latency", batch_latency, MAX_TIMEOUT_S)
    tuning = {"prefill_tokens_per_s": ("--prefill-rate", prefill_rate),
              "decode_step_s": ("--decode-step", decode_step),
              "decode_step_per_seq_s": ("--decode-step-per-seq", decode_step_per_seq),
              "decode_step_per_token_s": ("--decode-step-per-token", decode_step_per_token),
              "max_batch": ("--max-batch", max_batch),
              "max_batched_tokens": ("--max-batched-tokens", max_batched_tokens),
              "cache_blocks": ("--cache-blocks", cache_blocks),
              "time_scale": ("--time-scale", time_scale)}
    given = {name: value for name, (_, value) in tuning.items() if value is not None}
    if (given or gpu is not None) and not engine:
        flag = next((f for name, (f, _) in tuning.items() if name in given), "--gpu")
        raise _Fail(f"serve-llm: {flag} needs --engine", EXIT_CONFIG)

    try:
        engine_params = None
        if engine:
            from populace.llm.offline import EngineParams

            engine_params = EngineParams.for_gpu(gpu or "a100", **given)
        options = ServerOptions(
            models=tuple(model or ["dummy"]),
            latency=(latency, latency_max) if latency_max is not None else latency,
            policy=policy,  # type: ignore[arg-type]
            low=low, high=high, rate_500=error_500, rate_429=error_429,
            rate_timeout=error_timeout, rate_malformed=malformed, seed=seed, api_key=api_key,
            outage=outage, retry_after=retry_after, batch_latency=batch_latency,
            engine=engine_params, max_running=max_running, reasoning_tokens=reasoning_tokens,
        )
    except ValueError as e:
        message = str(e)  # the engine's messages name the field: name the flag instead
        for name, (flag, _) in {**tuning, "max_running": ("--max-running", None),
                                "reasoning_tokens": ("--reasoning-tokens", None),
                                "gpu": ("--gpu", None)}.items():
            if message.startswith(f"{name} "):
                message = flag + message.removeprefix(name)
        raise _Fail(f"serve-llm: {message}", EXIT_CONFIG) from None

    def ready(url: str) -> None:
        if engine_params is not None:
            p = engine_params
            out.print(f"engine: {p.prefill_tokens_per_s:g} prompt tokens/s, decode step "
                      f"{p.decode_step_s:g} s + {p.decode_step_per_seq_s:g} s per sequence + "
                      f"{p.decode_step_per_token_s:g} s per context token, batch up to "
                      f"{p.max_batch} sequences and {p.max_batched_tokens} tokens, "
                      f"{p.cache_blocks} KV blocks, time x{p.time_scale:g}",
                      soft_wrap=True, highlight=False)
        out.print(f"serving {', '.join(options.models)} at [bold]{url}[/bold] (Ctrl-C stops)",
                  soft_wrap=True)

    try:
        asyncio.run(serve(host, port, options, ready=ready))
    except OSError as e:
        raise _Fail(f"serve-llm: cannot listen on {host}:{port}: {e.strerror}", 1) from None


@app.command("run-batch")
def run_batch(
    input_file: Annotated[Path, typer.Option(
        "-i", "--input-file", help="batch input file (JSONL: custom_id, method, url, body)")],
    output_file: Annotated[Path, typer.Option(
        "-o", "--output-file", help="output file to write (vLLM run_batch's format)")],
    model: Annotated[str, typer.Option(help="model name answered; others get 404 lines")
                     ] = "dummy",
    policy: Annotated[str, typer.Option(help="random | reasoning | echo | scripted")
                      ] = "reasoning",
    latency: Annotated[float, typer.Option(min=0, max=MAX_TIMEOUT_S,
                                           help="seconds for the whole batch")] = 0.0,
    seed: Annotated[int, typer.Option(help="seed of answers and injected errors")] = 0,
    low: Annotated[int, typer.Option(help="smallest number answered")] = 0,
    high: Annotated[int, typer.Option(help="largest number answered")] = 100,
    error_500: Annotated[float, typer.Option(min=0, max=1, help="share of HTTP 500 lines")
                         ] = 0.0,
) -> None:
    """Answer a batch file offline like vLLM's run_batch, with serve-llm's answers (no GPU)."""
    from populace.llm.offline import ServerOptions
    from populace.llm.offline import run_batch as answer_batch

    _seconds("--latency", latency, MAX_TIMEOUT_S)
    try:
        options = ServerOptions(models=(model,), policy=policy,  # type: ignore[arg-type]
                                low=low, high=high, rate_500=error_500, seed=seed,
                                batch_latency=latency)
    except ValueError as e:
        raise _Fail(f"run-batch: {e}", EXIT_CONFIG) from None
    if not _is(input_file, Path.is_file, "--input-file"):  # a FIFO or /dev/zero would hang
        why = "not a regular file" if _is(input_file, Path.exists, "--input-file") \
            else "no such file"
        raise _Fail(f"--input-file {input_file}: {why}", EXIT_CONFIG)
    _writable(output_file, "--output-file")
    try:
        counts = asyncio.run(answer_batch(input_file, output_file, options))
    except ValueError as e:  # a bad line of the input file
        raise _Fail(str(e), EXIT_CONFIG) from None
    except OSError as e:  # the output file: a full disk, no permission
        raise _Fail(f"--output-file {output_file}: cannot write: {e.strerror or e}",
                    EXIT_CONFIG) from None
    out.print(f"{counts['total']:,} requests: {counts['completed']:,} answered, "
              f"{counts['failed']:,} failed; written to [bold]{escape(str(output_file))}[/bold]",
              soft_wrap=True)


population_app = typer.Typer(no_args_is_help=True, help="Sample populations of personas.")
app.add_typer(population_app, name="population")


@population_app.command("sample")
def population_sample(
    config: Annotated[Path, typer.Argument(help="population file, or a run file with "
                                           "a population: block")],
    seed: Annotated[int | None, typer.Option(
        min=0, max=MAX_SEED,
        help="override the seed (default: the file's seed; a run file's run seed)")
    ] = None,
    size: Annotated[int | None, typer.Option(
        min=1, max=MAX_AGENTS, help="override the size (default: size:; a run file's agents:)")
    ] = None,
    out_file: Annotated[Path, typer.Option("--out", help="Parquet file to write")
                        ] = Path("population.parquet"),
) -> None:
    """Sample a population exactly (counts match the shares) and write it as Parquet."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from populace.population import load_population_config, sample_population

    if "population" in read_yaml(config):  # a run file: exactly what its run will sample
        run_file = load_run_file(config)
        started = time.perf_counter()
        table = run_file.sample_population(seed=seed, size=size)
        if table is None:
            raise ConfigError(f"{config}: population: empty; nothing to sample")
    else:
        cfg = load_population_config(config, {"size": size} if size else None)
        started = time.perf_counter()
        table = sample_population(cfg, seed)
    elapsed = time.perf_counter() - started
    try:
        out_file.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, out_file)
    except OSError as e:
        raise _Fail(f"--out {out_file}: cannot write: {e.strerror or e}", EXIT_CONFIG) from None
    summary = Table(title=f"{table.num_rows:,} agents sampled in {elapsed:.2f} s")
    summary.add_column("aspect")
    summary.add_column("counts")
    for name in table.column_names:
        if name in ("agent_id", "group"):
            continue
        column = table.column(name)
        if _is_numeric(column.type):
            summary.add_row(name, f"mean {pc.mean(column).as_py():.3g}, "
                                  f"min {pc.min(column).as_py()}, max {pc.max(column).as_py()}")
        else:
            tally = pc.value_counts(column.combine_chunks()).to_pylist()
            top = sorted(tally, key=lambda r: -r["counts"])[:8]
            more = f", … ({len(tally) - 8} more)" if len(tally) > 8 else ""
            summary.add_row(name, ", ".join(f"{r['values']}: {r['counts']:,}" for r in top)
                            + more)
    out.print(summary)
    out.print(f"written to [bold]{out_file}[/bold]", soft_wrap=True)


def _is_numeric(t: Any) -> bool:
    import pyarrow.types as pt

    return bool(pt.is_integer(t) or pt.is_floating(t))


@app.command()
def backgrounds(
    config: Annotated[Path, typer.Argument(help="run file with models: and a population: "
                                           "block whose backgrounds.model names a model")],
    seed: Annotated[int | None, typer.Option(help="override the seed")] = None,
    out_file: Annotated[Path, typer.Option("--out", help="Parquet file to write")
                        ] = Path("backgrounds.parquet"),
    cache: Annotated[Path, typer.Option(help="cache of answers (reruns resume from it)")
                     ] = Path(".populace-cache/backgrounds"),
) -> None:
    """Sample the population and have an LLM write each agent's background (cached)."""
    from populace.llm import ModelSet, preflight
    from populace.population import generate_backgrounds

    run_file = load_run_file(config, {"seed": seed})
    o, population = run_file.options, run_file.options.population
    if population is None or population.backgrounds.model is None:
        raise ConfigError(f"{config}: population.backgrounds.model: required to write "
                          "backgrounds (name a model under models:)")
    name = population.backgrounds.model
    if name not in o.models:
        raise ConfigError(f"{config}: population.backgrounds.model: {name!r} is not under "
                          f"models: (have: {', '.join(o.models)})")
    profiles = run_file.sample_population()

    async def write() -> Any:
        await preflight({name: o.models[name]})
        client = ModelSet.build({name: o.models[name]})[name]
        try:
            return await generate_backgrounds(profiles, client, population, cache, out_file,
                                              seed=o.seed)
        finally:
            await client.aclose()

    result = run_until_signalled(write())
    out.print(f"{result.total:,} backgrounds: {result.cached:,} from the cache, "
              f"{result.generated:,} written, {result.failed:,} failed "
              f"({result.requests:,} requests, {result.elapsed_s:.1f} s); "
              f"written to [bold]{out_file}[/bold]", soft_wrap=True)
    if result.failed:
        raise _Fail(f"{result.failed} agents have no background; see the error column of "
                    f"{out_file} (rerun to retry only those)", 1)


def _run_sweep(config: Path, overrides: dict[str, Any], out_dir: Path | None,
               replay: Path | None) -> None:
    """``sweep:`` in the run file: every point of the grid into its own sub-directory."""
    from populace.launch import parse_run_file
    from populace.results import sweep_table
    from populace.sweep import SweepIndex, expand, run_sweep

    data = read_yaml(config)
    if "steps" in overrides:  # the step count under the key the file uses
        overrides["rounds" if "rounds" in data else "steps"] = overrides.pop("steps")
    points = expand(data, str(config), overrides)
    run_files = {p.dirname: parse_run_file(p.data, Path(f"{config} [{p.dirname}]"))
                 for p in points}
    # every point is checked before the first one runs
    name = next(iter(run_files.values())).name
    root = out_dir or new_run_dir("runs", name)
    try:
        index = SweepIndex.create(root, name, str(config), data, points)
    except FileExistsError as e:
        raise _Fail(str(e), EXIT_CONFIG) from None
    except OSError as e:
        where = f"--out {root}" if out_dir is not None else str(root)
        raise _Fail(f"{where}: cannot create the sweep directory: {e.strerror or e}",
                    EXIT_CONFIG) from None
    out.print(f"[bold]{name}[/bold]: sweep of {len(points)} runs over "
              f"{', '.join(index.data['keys'])} into [bold]{root}[/bold]", soft_wrap=True)

    def run_point(point: Any, directory: Path) -> dict[str, Any]:
        run_file = run_files[point.dirname]
        o = run_file.options
        out.print(f"[bold]{escape(point.dirname)}[/bold]: {o.agents:,} agents × {o.steps} "
                  "steps", soft_wrap=True)
        observer = ConsoleObserver(out, err)
        try:
            return run_until_signalled(launch(
                run_file, RunDirectory.create(directory), observers=[observer],
                replay=replay / point.dirname if replay is not None else None))
        finally:
            observer.progress.stop()

    try:
        result = run_sweep(index, points, run_point, interrupts=(Terminated,))
    except (KeyboardInterrupt, Terminated) as e:
        code = EXIT_TERMINATED if isinstance(e, Terminated) else EXIT_INTERRUPTED
        raise _Fail(f"stopped; finished points are in {root} (see sweep.json)", code) from None
    out.print(sweep_table(result))
    failed = [p["dir"] for p in result["points"] if p["status"] == "failed"]
    if failed:
        raise _Fail(f"{len(failed)} of {len(points)} sweep points failed ({', '.join(failed)}); "
                    f"see {root / 'sweep.json'}", 1)
    out.print(f"sweep index: [bold]{root / 'sweep.json'}[/bold]; figures: populace report "
              f"{root}", soft_wrap=True)


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="run or sweep directory")],
    points: Annotated[bool, _flag("points", "for a sweep, also report every point directory")
                      ] = True,
) -> None:
    """Write PNG figures and a self-contained report.html for a run (or sweep) directory."""
    from populace.launch import check_inputs, scenario_of
    from populace.results import RunData, write_report

    skipped: dict[str, str] = {}

    def scenario(run: RunData) -> Any:
        """An instance of the scenario that made ``run``; None when it names none or cannot
        be loaded (its file moved or broke: the generic report still comes)."""
        try:
            check_inputs(run.path)  # its figures would read a data file changed since
            cls = scenario_of(run.path)
        except ConfigError as e:
            skipped[str(run.path)] = _line(e)
            return None
        return cls() if cls is not None else None

    def scenario_figures(run: RunData) -> dict[str, Any]:
        made = scenario(run)
        return made.figures(run) if made is not None else {}

    def scenario_tables(run: RunData) -> list[dict[str, Any]]:
        made = scenario(run)
        return made.tables(run) if made is not None else []

    try:
        written = write_report(run_dir, points=points, extra_figures=scenario_figures,
                               extra_tables=scenario_tables)
    except FileNotFoundError as e:
        raise _Fail(str(e), EXIT_CONFIG) from None
    for path, why in skipped.items():
        err.print(f"[yellow]warning:[/yellow] {escape(path)}: no scenario figures: {why}",
                  soft_wrap=True)
    for table in written.tables:
        out.print(table)
    out.print(f"{len(written.figures)} figures in {written.path.parent / 'figures'}; "
              f"report: [bold]{written.path}[/bold]", soft_wrap=True)


@app.command()
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
    as_json: Annotated[bool, _flag("json", "print the answers as JSON lines")] = False,
) -> None:
    """Ask agents of a run a question, with their own model, persona and memory (from a
    checkpoint; the run's results do not change). Answers go to RUN_DIR/interviews.parquet."""
    from populace.launch import interview as ask

    if not _is(run_dir / "config.yaml", Path.is_file, "RUN_DIR"):
        raise _Fail(f"{run_dir}: no config.yaml there (not a run directory?)", EXIT_CONFIG)
    if agent is None and where is None and sample is None:
        raise _Fail("choose whom to ask: --agent ID, --where QUERY and/or --sample N",
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
        raise _Fail(f"no agent answered: {rows[0]['error']}", 1)


@app.command()
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
        raise _Fail("give either --text (a message) or --key and --value (an environment "
                    "change)", EXIT_CONFIG)
    if text is not None:
        if not text.strip():
            raise _Fail("--text: empty (give the message)", EXIT_CONFIG)
        given = [f for f, v in (("--value", value), ("--env", env)) if v is not None]
        if given:
            raise _Fail(f"{given[0]} goes with --key (an environment change), not --text",
                        EXIT_CONFIG)
        data: dict[str, Any] = {"step": step, "kind": "message", "text": text,
                                "where": where, "agents": agent, "sample": sample}
    else:
        given = [f for f, v in (("--where", where), ("--agent", agent), ("--sample", sample))
                 if v is not None]
        if given:
            raise _Fail(f"{given[0]} goes with --text (a message), not --key", EXIT_CONFIG)
        if value is None:
            raise _Fail("--key needs --value (JSON: 3, true, '\"text\"')", EXIT_CONFIG)
        try:
            parsed = json.loads(value, parse_constant=_no_constant)
        except ValueError:
            raise _Fail(f"--value {value}: not JSON (text goes in double quotes: "
                        f"'\"{value}\"')", EXIT_CONFIG) from None
        except RecursionError:
            raise _Fail("--value: nested too deeply", EXIT_CONFIG) from None
        data = {"step": step, "kind": "environment", "key": key, "value": parsed, "env": env}
    intervention = parse_intervention({k: v for k, v in data.items() if v is not None},
                                      "intervene", flags=True)
    if not _is(run_dir / "config.yaml", Path.is_file, "RUN_DIR"):
        raise _Fail(f"{run_dir}: no config.yaml there (not a run directory?)", EXIT_CONFIG)
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


@app.command()
def compare(
    run_dirs: Annotated[list[Path], typer.Argument(help="run (or sweep) directories")],
    out_dir: Annotated[Path | None, typer.Option(
        "--out", help="directory for compare.html and figures (default compare-TIMESTAMP)")
    ] = None,
) -> None:
    """Put several runs side by side: a table, overlaid plots and compare.html."""
    from populace.results import write_comparison

    target = out_dir or new_run_dir(".", "compare")
    where = f"--out {target}" if out_dir is not None else str(target)
    if _is(target, Path.exists, "--out") and not _is(target, Path.is_dir, "--out"):
        raise _Fail(f"{where}: not a directory", EXIT_CONFIG)
    try:
        written = write_comparison(run_dirs, target)
    except FileNotFoundError as e:
        if e.filename is not None and Path(e.filename).is_relative_to(target):
            raise _Fail(f"{where}: cannot create the comparison: {e.strerror or e}",
                        EXIT_CONFIG) from None
        raise _Fail(str(e), EXIT_CONFIG) from None
    except OSError as e:  # under a file, read-only, /proc
        raise _Fail(f"{where}: cannot create the comparison: {e.strerror or e}",
                    EXIT_CONFIG) from None
    out.print(written.table)
    out.print(f"comparison: [bold]{written.path}[/bold]", soft_wrap=True)


def _line(message: object) -> str:
    """``message`` as one line of plain text: what users wrote ("[/x]" as a key, a newline
    in a value) is shown as written, never read as rich markup."""
    return escape(" ".join(str(message).splitlines()))


def main() -> None:
    """Entry point: runs the app, turning expected failures into one line + exit status."""
    try:
        code = app(standalone_mode=False)  # a typer.Exit in a command comes back as its code
        if isinstance(code, int) and code:
            sys.exit(code)
    except ConfigError as e:
        err.print(f"[red]error:[/red] {_line(e)}", highlight=False, soft_wrap=True)
        sys.exit(EXIT_CONFIG)
    except _Fail as e:
        err.print(f"[red]error:[/red] {_line(e)}", highlight=False, soft_wrap=True)
        sys.exit(e.code)
    except Terminated:  # a signal, not a failure; run, sweep and studio say more themselves
        err.print("[red]terminated[/red]")
        sys.exit(EXIT_TERMINATED)
    except PopulaceError as e:
        err.print(f"[red]error:[/red] {_line(f'{type(e).__name__}: {e}')}", highlight=False,
                  soft_wrap=True)
        sys.exit(1)
    except KeyboardInterrupt:
        err.print("[red]interrupted[/red]")
        sys.exit(EXIT_INTERRUPTED)
    except OSError as e:  # a file the system refused (full disk, no permission): one line
        where = f"{e.filename}: " if e.filename else ""
        err.print(f"[red]error:[/red] {_line(f'{where}{e.strerror or e}')}", highlight=False,
                  soft_wrap=True)
        sys.exit(1)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        err.print("[red]aborted[/red]")
        sys.exit(1)
    except Exception as e:  # click usage errors come through here in non-standalone mode
        if not isinstance(e, _usage_errors()):
            raise
        usage: Any = e
        if type(e).__name__ == "NoArgsIsHelpError" or not hasattr(e, "format_message"):
            usage.show()  # `populace` alone: the help text
        else:  # a bad flag value, an unknown option, a missing argument: one line
            err.print(f"[red]error:[/red] {_line(usage.format_message())}", highlight=False,
                      soft_wrap=True)
        sys.exit(getattr(e, "exit_code", EXIT_CONFIG))


def _usage_errors() -> tuple[type[Exception], ...]:
    # Newer Typer vendors click (typer._click): its errors derive from typer.TyperException,
    # not from click.ClickException, and click itself may not be installed.
    base = getattr(typer, "TyperException", None)
    if base is not None:
        return (base,)
    import click

    return (click.ClickException,)


if __name__ == "__main__":
    main()
