"""``populace population sample`` and ``populace backgrounds``: the personas of a run,
sampled, and the backgrounds an LLM writes for them."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from populace._strict import MAX_AGENTS, MAX_SEED
from populace.config import read_yaml
from populace.core import ConfigError
from populace.launch import load_run_file, run_until_signalled

from ._app import EXIT_CONFIG, Fail, out

population_app = typer.Typer(no_args_is_help=True, help="Sample populations of personas.")


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
        raise Fail(f"--out {out_file}: cannot write: {e.strerror or e}", EXIT_CONFIG) from None
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
        raise Fail(f"{result.failed} agents have no background; see the error column of "
                   f"{out_file} (rerun to retry only those)", 1)
