"""populace.results exposes exactly what ``__all__`` lists (STYLE.md, point 2)."""

from __future__ import annotations

import sys
import types

import populace.results


def test_all_is_exactly_the_public_names() -> None:
    listed = populace.results.__all__
    assert sorted(listed) == sorted(set(listed)), "duplicates"
    public = {n for n, v in vars(populace.results).items()
              if not n.startswith("_") and not isinstance(v, types.ModuleType)}
    assert set(listed) == public
    assert {"Breakdown", "Comparison", "Report", "RunData", "RunDirectory", "headline",
            "load_run", "read_table", "sweep_table", "write_comparison",
            "write_report"} <= set(listed)


def test_importing_results_does_not_import_matplotlib() -> None:
    # The run command imports the results layer; drawing is paid for only by reports.
    import subprocess

    code = "import populace.cli, sys; print('matplotlib' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "False"
