"""What every command shares: the typer app, the consoles, the exit statuses and ``main``,
which turns every expected failure into one line on stderr and an exit status."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from populace.core import ConfigError, PopulaceError
from populace.launch import Terminated

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


def bool_option(name: str, help: str) -> Any:
    """A boolean option, ``--NAME/--no-NAME``; no metavar (typer's help would say <bool>).
    Help text is rich markup: brackets are escaped (``escape("[a, b]")``) or disappear."""
    return typer.Option(f"--{name}/--no-{name}", metavar="", help=help)


class Fail(Exception):
    """An expected failure: print ``message`` and exit with ``code``."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def path_is(path: Path, test: Any, flag: str) -> bool:
    """``test(path)`` (``Path.is_file``…), a path the system refuses (a name too long) being
    the flag's one-line error."""
    try:
        return bool(test(path))
    except OSError as e:
        raise Fail(f"{flag} {path}: {e.strerror or e}", EXIT_CONFIG) from None


def check_seconds(flag: str, value: float, most: float) -> None:
    """A flag's number of seconds lies in [0, most] (NaN passes some versions of click's
    range checks)."""
    if not 0 <= value <= most:
        raise Fail(f"{flag} {value}: expected seconds from 0 to {most:g}", EXIT_CONFIG)


def check_writable(path: Path, flag: str) -> None:
    """``path`` can be written as a file: not a directory, in a directory that exists."""
    if path_is(path, Path.is_dir, flag):
        raise Fail(f"{flag} {path}: is a directory", EXIT_CONFIG)
    parent = path.parent
    if not path_is(parent, Path.is_dir, flag):
        why = f"{parent} is not a directory" if path_is(parent, Path.exists, flag) \
            else f"no such directory {parent}"
        raise Fail(f"{flag} {path}: {why}", EXIT_CONFIG)


def one_line(message: object) -> str:
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
        err.print(f"[red]error:[/red] {one_line(e)}", highlight=False, soft_wrap=True)
        sys.exit(EXIT_CONFIG)
    except Fail as e:
        err.print(f"[red]error:[/red] {one_line(e)}", highlight=False, soft_wrap=True)
        sys.exit(e.code)
    except Terminated:  # a signal, not a failure; run, sweep and studio say more themselves
        err.print("[red]terminated[/red]")
        sys.exit(EXIT_TERMINATED)
    except PopulaceError as e:
        err.print(f"[red]error:[/red] {one_line(f'{type(e).__name__}: {e}')}", highlight=False,
                  soft_wrap=True)
        sys.exit(1)
    except KeyboardInterrupt:
        err.print("[red]interrupted[/red]")
        sys.exit(EXIT_INTERRUPTED)
    except OSError as e:  # a file the system refused (full disk, no permission): one line
        where = f"{e.filename}: " if e.filename else ""
        err.print(f"[red]error:[/red] {one_line(f'{where}{e.strerror or e}')}", highlight=False,
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
            err.print(f"[red]error:[/red] {one_line(usage.format_message())}", highlight=False,
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
