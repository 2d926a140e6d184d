"""``populace estimate`` of an archetype-sampled model whose samples are allocated by the
archetypes' sizes (``allocate: proportional``): its budget is equal allocation's,
archetypes × samples, so the pilot's samples scale by the archetypes as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from populace.launch import estimate, launch, load_run_file
from populace.llm.offline import ServerOptions, running_server
from populace.results import RunDirectory

ARCHETYPES = Path(__file__).resolve().parents[2] / "examples" / "survey" / "archetypes.yaml"


async def test_proportional_samples_are_estimated_like_equal_ones(
        tmp_path: Path, monkeypatch: Any) -> None:
    """A pilot of 50 meets few of the 30 archetypes and allocates among those. Either way
    the full run's calls are within 25% of the estimate; the two allocations' archetype
    samples are within 1% of each other (equal budgets: only a question asked of some, and
    the treatment arms, split them differently), and so are their estimates within 10%."""
    monkeypatch.chdir(tmp_path)
    got = {}
    async with running_server(ServerOptions(policy="scripted", models=("scripted",))) as url:
        for allocate in ("equal", "proportional"):
            data = yaml.safe_load(ARCHETYPES.read_text())
            data["agents"] = 6000
            data["settings"]["questionnaire"] = str(ARCHETYPES.parent / "questionnaire.yaml")
            data["models"] = {"scripted": {
                "provider": "openai", "model": "scripted", "base_urls": [url],
                "max_concurrency": 32, "sampling": {"by": ["age", "education"],
                                                    "samples": 8, "audit": 0.05,
                                                    "allocate": allocate}}}
            source = tmp_path / f"{allocate}.yaml"
            source.write_text(yaml.safe_dump(data))
            guess = await estimate(data, source)
            summary = await launch(load_run_file(source),
                                   RunDirectory.create(tmp_path / allocate))
            (model,) = guess.models
            (step,) = summary["steps"]
            made = step["llm"]["scripted"]["requests"]
            assert abs(model.calls - made) <= 0.25 * made, (allocate, model.calls, made)
            got[allocate] = (model.calls,
                             made - step["sampling"]["scripted"]["audit_cost"]["calls"])
    (guess_eq, samples_eq), (guess_prop, samples_prop) = got["equal"], got["proportional"]
    assert abs(samples_prop - samples_eq) <= 0.01 * samples_eq, got
    assert abs(guess_prop - guess_eq) <= 0.1 * guess_eq, got
