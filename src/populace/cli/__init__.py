"""The ``populace`` command line: one module per command group.

Every expected failure (bad config, existing output directory, unreachable server) ends as
one line on stderr and a non-zero exit status; tracebacks are for bugs only (``_app.main``).
"""

from . import _bench, _estimate, _manage, _offline, _population, _results, _run, _studio
from ._app import app, main

# Registered here, not by decorators in their modules: this is the order `populace --help`
# lists them in, which an import order would otherwise decide.
app.command()(_run.run)
app.command()(_estimate.estimate)
app.command()(_studio.studio)
app.command()(_bench.bench)
app.command("serve-llm")(_offline.serve_llm)
app.command("run-batch")(_offline.run_batch)
app.command()(_population.backgrounds)
app.command()(_results.report)
app.command()(_manage.interview)
app.command()(_manage.intervene)
app.command()(_results.compare)
app.add_typer(_population.population_app, name="population")

__all__ = ["app", "main"]
