"""The public surface of populace.population is exactly its ``__all__``."""

from __future__ import annotations

import types

import populace.population


def test_all_is_exactly_the_public_names() -> None:
    listed = populace.population.__all__
    assert len(set(listed)) == len(listed), "duplicates"
    public = {name for name, value in vars(populace.population).items()
              if not name.startswith("_") and not isinstance(value, types.ModuleType)}
    assert set(listed) == public
    assert set(listed) == {
        "DEFAULT_META_PROMPT", "DEFAULT_SYSTEM_PROMPT", "TEMPLATES", "AspectConfig",
        "BackgroundConfig", "BackgroundResult", "GroupsConfig", "PopulationConfig",
        "diversity_report", "generate_backgrounds", "largest_remainder",
        "load_population_config", "sample_population",
        # the persona step tables the scripted model's rules share (issue 30)
        "EDUCATION_STEPS", "PROFESSION_STEPS", "persona_steps",
    }
