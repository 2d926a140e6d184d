"""``populace studio``, and the studio ``populace run --studio`` serves beside its run.

The web server's packages (fastapi, uvicorn) are imported only when a studio starts: every
other command starts without them."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated, Any

import typer

from populace.launch import Terminated
from populace.results import RunDirectory, RunMonitor

from ._app import EXIT_CONFIG, EXIT_INTERRUPTED, EXIT_TERMINATED, Fail, out, path_is


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
    if path_is(runs, Path.exists, "--runs"):
        if not runs.is_dir():
            raise Fail(f"--runs {runs}: not a directory", EXIT_CONFIG)
    elif runs_dir is not None:  # a typo would serve an empty studio, its runs made there
        raise Fail(f"--runs {runs}: no such directory", EXIT_CONFIG)
    if token is not None and not token.strip():
        raise Fail("--token: empty (give a token, or leave --token and "
                   "POPULACE_STUDIO_TOKEN unset)", EXIT_CONFIG)
    try:
        server = StudioServer(Runs(runs), host=host, port=port, token=token)
    except OSError as e:
        raise Fail(f"studio: cannot listen on {host}:{port}: {e.strerror}", 1) from None
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


def studio_beside(run_dir: RunDirectory, port: int) -> tuple[Any, Any, Any]:
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
        raise Fail(f"studio: cannot listen on 127.0.0.1:{port}: {e.strerror} (choose another "
                   "port with --studio-port)", 1) from None
    server.start()
    out.print(f"studio: [bold]{server.url}#/run/{live.run_id}[/bold]", soft_wrap=True)
    return monitor, control, server
