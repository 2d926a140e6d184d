"""A run with a population: attributes, backgrounds and the diversity report in the run dir."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from game_helpers import game_file
from populace.launch import RunFile
from populace.results import RunDirectory
from populace.scenarios.guess_number import play


def config(tmp_path: Path) -> RunFile:
    return game_file({
        "name": "pop", "agents": 120, "rounds": 1, "workers": 2, "seed": 4,
        "models": {"scripted": {"provider": "scripted"}},
        "game": {"prompt": "As a {profession}: {instruction}"},
        "population": {
            "aspects": {"profession": {"values": ["economist", "artist", "writer"]}},
            "groups": {"by": "profession"},
            "backgrounds": {"model": "scripted"},
        },
    })


async def test_population_reaches_profiles_prompts_and_diversity_report(
    tmp_path: Path, monkeypatch: object
) -> None:
    monkeypatch.chdir(tmp_path)  # type: ignore[attr-defined]  # the background cache
    run = RunDirectory.create(tmp_path / "run")
    summary = await play(config(tmp_path), run)
    assert summary["status"] == "completed"

    profiles = pq.read_table(run.path / "profiles.parquet")
    assert {"profession", "background", "group"} <= set(profiles.column_names)
    counts = {p: profiles.column("profession").to_pylist().count(p)
              for p in ("economist", "artist", "writer")}
    assert counts == {"economist": 40, "artist": 40, "writer": 40}
    assert all(b for b in profiles.column("background").to_pylist())

    report = json.loads((run.path / "diversity.json").read_text())
    values = report["marginals"]["profession"]["values"]
    assert {k: v["count"] for k, v in values.items()} == counts
    assert report["backgrounds"]["distinct_ratio"] > 0.5

    # Each participant was asked as itself: its profession filled into the prompt.
    calls = [json.loads(line) for f in sorted((run.path / "llm_calls").glob("*.jsonl"))
             for line in f.read_text().splitlines()]
    prompts = {c["request"]["messages"][0]["content"].split(":")[0] for c in calls
               if c["request"]["messages"][0]["content"].startswith("As a ")}
    assert prompts == {"As a economist", "As a artist", "As a writer"}
