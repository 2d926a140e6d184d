"""The votes scenario reporting every kind of NaN a step may report: metrics and cells."""

from __future__ import annotations

import numpy as np
from votes import Votes  # beside this file: a scenario file's folder is importable

from populace.launch import Run


class NaNVotes(Votes):
    name = "nan-votes"

    async def step(self, run: Run, t: int) -> None:
        await super().step(run, t)
        run.metric("nan", float("nan"))
        run.metric("np_nan", np.float32("nan"))
        run.metric("inf", float("inf"))
        run.metric("series", [1.0, float("nan")])
        run.metric("by_side", {"yes": np.nan, "no": 0.5})
        run.distribution("all_nan", [float("nan")] * 3)
        run.record("nan_rows", {"agent_id": [0, 1], "value": [float("nan"), 1.0]})
