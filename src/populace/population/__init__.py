"""Populations: aspects, exact seeded sampling, and LLM-written backgrounds.

Typical use (``client`` is any :class:`~populace.llm.ModelClient`)::

    cfg = load_population_config("examples/population/education_200x5.yaml")
    profiles = sample_population(cfg, seed=1)
    result = await generate_backgrounds(profiles, client, cfg, "cache", "backgrounds.parquet")
    report = diversity_report(profiles, cfg, result.table)
"""

from ._backgrounds import BackgroundResult, generate_backgrounds
from ._config import (
    AspectConfig,
    BackgroundConfig,
    GroupsConfig,
    PopulationConfig,
    load_population_config,
)
from ._diversity import diversity_report
from ._prompts import DEFAULT_META_PROMPT, DEFAULT_SYSTEM_PROMPT
from ._sampling import largest_remainder, sample_population
from ._scripted import EDUCATION_STEPS, PROFESSION_STEPS, persona_steps
from ._templates import TEMPLATES

__all__ = [
    "DEFAULT_META_PROMPT",
    "DEFAULT_SYSTEM_PROMPT",
    "EDUCATION_STEPS",
    "PROFESSION_STEPS",
    "TEMPLATES",
    "AspectConfig",
    "BackgroundConfig",
    "BackgroundResult",
    "GroupsConfig",
    "PopulationConfig",
    "diversity_report",
    "generate_backgrounds",
    "largest_remainder",
    "load_population_config",
    "persona_steps",
    "sample_population",
]
