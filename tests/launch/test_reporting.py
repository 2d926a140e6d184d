"""A scenario's profiles reach the report: what it gave ``run.create`` is written as
``profiles.parquet``, and results are broken down by it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from populace.launch import launch, load_run_file
from populace.results import RunDirectory, load_run, write_report

OPINIONS = Path(__file__).parents[2] / "examples" / "opinions" / "opinions.yaml"


async def test_profiles_given_to_create_are_written_and_broken_down_by(tmp_path: Path
                                                                       ) -> None:
    out = tmp_path / "out"
    await launch(load_run_file(OPINIONS, {"agents": 300, "steps": 2}),
                 RunDirectory.create(out))
    profiles = pq.read_table(out / "profiles.parquet")
    assert profiles.column_names == ["agent_id", "town", "first_opinion"]
    assert profiles.column("agent_id").to_pylist() == list(range(300))
    run = load_run(out)
    # The table writes `west`/`east`, the profile `global/west`: the table's own values win.
    by_town = run.breakdown("opinions", "opinion", "town")
    assert set(by_town.values) == {"west", "east"}
    assert np.isfinite(by_town.means).all()
    east, west = (by_town.means[by_town.values.index(v)] for v in ("east", "west"))
    assert (east > 0.6).all() and (west < 0.4).all()  # the east leans high, the west low
    report = write_report(out)
    assert "opinions_by_town" in report.figures
