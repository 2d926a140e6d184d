"""``populace run``: one run from a run file, a sweep (``sweep:`` in the file), a resume
(``--resume``) or a fork (``--fork``); every one through the launcher."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from populace.config import read_yaml
from populace.core import ConfigError, PopulaceError, WorkerLost
from populace.launch import (
    MAX_RECOVERIES,
    ConsoleObserver,
    RunFile,
    RunOptions,
    ScenarioFailed,
    Terminated,
    launch,
    load_run_file,
    run_until_signalled,
)
from populace.results import RunDirectory, new_run_dir

from ._app import (
    EXIT_CONFIG,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    Fail,
    bool_option,
    err,
    out,
    path_is,
)
from ._confirm import Start, confirm
from ._studio import studio_beside


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
    studio: Annotated[bool, bool_option(
        "studio", "serve the web studio beside this run and print its URL")] = False,
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
    without_interventions: Annotated[bool, bool_option(
        "without-interventions", "with --fork: leave out the source's interventions after "
        "--at")] = False,
    yes: Annotated[bool, typer.Option(
        "--yes", "-y", metavar="", help="start a run on a served model that is predicted to "
        "make more LLM calls than the run file's confirm_above: (default "
        f"{RunOptions.model_fields['confirm_above'].default:,}) without estimating it and "
        "asking first")
    ] = False,
) -> None:
    """Run a simulation from a run file and write its run directory."""
    if fork is not None or at is not None or set_:
        if fork is None or at is None:
            raise Fail("--fork RUN_DIR and --at STEP go together (--set needs both)",
                       EXIT_CONFIG)
        if config is not None or resume is not None or replay is not None:
            raise Fail("--fork takes its config from RUN_DIR/config.yaml; give no CONFIG, "
                       "--resume or --replay", EXIT_CONFIG)
        if any(v is not None for v in (agents, rounds, seed, workers, backend, address)):
            raise Fail("--fork changes settings with --set KEY=VALUE only", EXIT_CONFIG)
        _fork(fork, at, set_ or [], out_dir, without_interventions,
              studio_port if studio else None, yes=yes)
        return
    if resume is not None:
        if config is not None or out_dir is not None:
            raise Fail("--resume RUN_DIR takes its config from RUN_DIR/config.yaml; "
                       "give no CONFIG and no --out", EXIT_CONFIG)
        if agents is not None or rounds is not None or seed is not None:
            # Only where the run happens may change; a checkpoint fits its own run alone.
            raise Fail("--resume continues the run as it was configured; --agents, --rounds "
                       "and --seed cannot change", EXIT_CONFIG)
        config, out_dir = RunDirectory(resume).config_path, resume
        if not path_is(config, Path.is_file, "--resume"):
            raise Fail(f"--resume {resume}: no config.yaml there (not a run directory?)",
                       EXIT_CONFIG)
    if config is None:
        raise Fail("missing the run file: populace run CONFIG.yaml", EXIT_CONFIG)
    data = read_yaml(config)
    if "sweep" in data:  # a grid of runs, one sub-directory each
        _run_sweep(config, {"agents": agents, "rounds": rounds, "workers": workers, "seed": seed,
                            "backend": backend, "address": address}, out_dir, replay, yes=yes)
        return
    overrides = {"agents": agents, "steps": rounds, "seed": seed, "workers": workers,
                 "backend": backend, "address": address}
    run_file = load_run_file(config, overrides)
    _check_address(run_file, config, given=address is not None)
    if replay is not None and not path_is(replay / "llm_calls", Path.is_dir, "--replay") \
            and any(m.provider != "dummy" for m in run_file.options.models.values()):
        raise ConfigError(f"--replay {replay}: no llm_calls/ recording in that directory")
    if replay is None:  # a replay answers from its recording: no calls to count
        # A resume plays the steps its run has not finished; its pilot plays the run file.
        remaining = None if resume is None else \
            max(0, run_file.options.steps - _finished_steps(resume))
        confirm([Start(run_file, data, overrides, remaining)],
                "the run" if resume is None else "the resume", yes=yes)
    target = out_dir or new_run_dir("runs", run_file.name)
    run_dir = _run_dir(target, resume is not None, given=out_dir is not None)
    _launch(run_file, run_dir, resume=resume is not None, replay=replay,
            studio_port=studio_port if studio else None)


def _finished_steps(run_dir: Path) -> int:
    """Steps run directory ``run_dir`` finished (0 when its summary cannot be read: the
    resume itself will say why)."""
    try:
        return len(RunDirectory(run_dir).read_summary().get("steps") or ())
    except (OSError, ValueError):
        return 0


def _fork(source: Path, at: int, pairs: list[str], out_dir: Path | None,
          without_interventions: bool, studio_port: int | None, *, yes: bool) -> None:
    from populace.launch import fork, parse_sets

    if not path_is(source / "config.yaml", Path.is_file, "--fork"):
        raise Fail(f"--fork {source}: no config.yaml there (not a run directory?)",
                   EXIT_CONFIG)
    target = out_dir or new_run_dir(source.parent, f"{source.name}-fork{at}")
    if path_is(target, os.path.lexists, "--out"):
        raise Fail(f"{'--out ' if out_dir else ''}{target}: exists already; choose another "
                   "with --out", EXIT_CONFIG)
    try:
        run_file = fork(source, at, parse_sets(pairs), target,
                        without_interventions=without_interventions)
    except OSError as e:
        raise Fail(f"{e.filename or target}: cannot create the fork: {e.strerror or e}",
                   EXIT_CONFIG) from None
    try:  # the fork plays the steps after --at, as the fork's config says
        confirm([Start(run_file, run_file.resolved(), remaining=run_file.options.steps - at)],
                "the fork", yes=yes)
    except BaseException:  # not started (or the pilot failed): no fork left behind
        shutil.rmtree(target, ignore_errors=True)
        raise
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
        raise Fail(f"{flag}: {why}", EXIT_CONFIG)


def _run_dir(target: Path, resume: bool, *, given: bool = True) -> RunDirectory:
    """The run directory at ``target`` (``given`` by --out, else the default name)."""
    if not resume and os.path.islink(target) and not os.path.exists(target):  # no OSError
        where = f"--out {target}" if given else str(target)
        raise Fail(f"{where}: a broken symbolic link (to {target.readlink()}); remove it or "
                   "choose another directory", EXIT_CONFIG)
    try:
        return RunDirectory(target) if resume else RunDirectory.create(target)
    except FileExistsError as e:
        raise Fail(str(e), EXIT_CONFIG) from None
    except OSError as e:  # a parent that is a file, read-only, /proc, a name too long
        where, hint = (f"--out {target}", "") if given else (str(target),
                                                             "; choose one with --out")
        raise Fail(f"{where}: cannot create the run directory: {e.strerror or e}{hint}",
                   EXIT_CONFIG) from None


def _launch(run_file: RunFile, run_dir: RunDirectory, *, resume: bool, replay: Path | None,
            studio_port: int | None) -> None:
    """Run any scenario through the launcher, with progress bars, the studio if asked, one
    line and a non-zero exit for every way a run can fail."""
    o = run_file.options
    out.print(f"[bold]{escape(o.name)}[/bold]: scenario {escape(o.scenario)}, {o.agents:,} "
              f"agents × {o.steps} steps on {o.workers} {o.backend} worker(s), seed {o.seed}",
              soft_wrap=True)
    observer = ConsoleObserver(out, err)
    monitor, control, server = studio_beside(run_dir, studio_port) \
        if studio_port is not None else (None, None, None)
    def forced(why: str) -> str:  # the watchdog's line: the step would not stop
        return (f"stopped: {why}; finished steps are in {run_dir.path}; continue with: "
                f"populace run --resume {run_dir.path}")

    try:
        summary = run_until_signalled(launch(run_file, run_dir, monitor=monitor,
                                             observers=[observer], resume=resume,
                                             replay=replay, control=control), say=forced)
    except WorkerLost as e:
        raise Fail(f"{e}; gave up after {MAX_RECOVERIES} recoveries; continue with: "
                   f"populace run --resume {run_dir.path}", 1) from None
    except (KeyboardInterrupt, Terminated) as e:
        code = EXIT_TERMINATED if isinstance(e, Terminated) else EXIT_INTERRUPTED
        raise Fail(f"stopped; finished steps are in {run_dir.path}; continue with: "
                   f"populace run --resume {run_dir.path}", code) from None
    except ConfigError:
        raise  # a run file or run directory that does not fit: exit 2
    except ScenarioFailed as e:  # the scenario's own code broke: one line, the traceback kept
        raise Fail(str(e), 1) from None
    except OSError as e:  # a full disk, a directory made read-only under the run
        # pyarrow's write errors carry no file name: the run directory is where it failed
        where = f"{e.filename}: " if e.filename else f"writing in {run_dir.path}: "
        raise Fail(f"{where}{e.strerror or e}; finished steps are in {run_dir.path}; "
                   f"continue with: populace run --resume {run_dir.path}", 1) from None
    except PopulaceError as e:
        raise Fail(f"{type(e).__name__}: {e}; finished steps are in {run_dir.path}; continue "
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


def _run_sweep(config: Path, overrides: dict[str, Any], out_dir: Path | None,
               replay: Path | None, *, yes: bool) -> None:
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
    if replay is None:  # the points together, before the sweep's directory exists
        confirm([Start(run_files[p.dirname], p.data, label=p.dirname) for p in points],
                "the sweep", yes=yes)
    root = out_dir or new_run_dir("runs", name)
    try:
        index = SweepIndex.create(root, name, str(config), data, points)
    except FileExistsError as e:
        raise Fail(str(e), EXIT_CONFIG) from None
    except OSError as e:
        where = f"--out {root}" if out_dir is not None else str(root)
        raise Fail(f"{where}: cannot create the sweep directory: {e.strerror or e}",
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
        raise Fail(f"stopped; finished points are in {root} (see sweep.json)", code) from None
    out.print(sweep_table(result))
    failed = [p["dir"] for p in result["points"] if p["status"] == "failed"]
    if failed:
        raise Fail(f"{len(failed)} of {len(points)} sweep points failed ({', '.join(failed)}); "
                   f"see {root / 'sweep.json'}", 1)
    out.print(f"sweep index: [bold]{root / 'sweep.json'}[/bold]; figures: populace report "
              f"{root}", soft_wrap=True)
