"""``populace report`` and ``populace compare``: figures and HTML pages from finished run
(and sweep) directories. matplotlib is imported only when one of them runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from populace.core import ConfigError
from populace.results import new_run_dir

from ._app import EXIT_CONFIG, Fail, bool_option, err, one_line, out, path_is


def report(
    run_dir: Annotated[Path, typer.Argument(help="run or sweep directory")],
    points: Annotated[bool, bool_option("points", "for a sweep, also report every point directory")
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
            skipped[str(run.path)] = one_line(e)
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
        raise Fail(str(e), EXIT_CONFIG) from None
    for path, why in skipped.items():
        err.print(f"[yellow]warning:[/yellow] {escape(path)}: no scenario figures: {why}",
                  soft_wrap=True)
    for table in written.tables:
        out.print(table)
    out.print(f"{len(written.figures)} figures in {written.path.parent / 'figures'}; "
              f"report: [bold]{written.path}[/bold]", soft_wrap=True)


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
    if path_is(target, Path.exists, "--out") and not path_is(target, Path.is_dir, "--out"):
        raise Fail(f"{where}: not a directory", EXIT_CONFIG)
    try:
        written = write_comparison(run_dirs, target)
    except FileNotFoundError as e:
        if e.filename is not None and Path(e.filename).is_relative_to(target):
            raise Fail(f"{where}: cannot create the comparison: {e.strerror or e}",
                       EXIT_CONFIG) from None
        raise Fail(str(e), EXIT_CONFIG) from None
    except OSError as e:  # under a file, read-only, /proc
        raise Fail(f"{where}: cannot create the comparison: {e.strerror or e}",
                   EXIT_CONFIG) from None
    out.print(written.table)
    out.print(f"comparison: [bold]{written.path}[/bold]", soft_wrap=True)
