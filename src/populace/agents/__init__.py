"""Persona agents: what a model is told about itself, what it remembers, and how its
answers are asked for and read — one model for every LLM-driven scenario.

:class:`Persona` is the agent (subclass it; ``decide`` asks its model a question whose
answer is a :class:`Choice`, :class:`Number`, :class:`Regex`, :class:`Schema` or
:class:`Text`); :class:`PersonaOptions` declares which profile columns the model is shown
and the memory's budget; :class:`Memory` holds its events compactly. See
``docs/scenarios.md`` ("An LLM persona") for a scenario written with it.
"""

from ._agent import INTERVIEWER, Decision, Persona, render_memory
from ._answers import UNREADABLE, Answer, Choice, Number, Regex, Schema, Text
from ._memory import KINDS, Event, Memory
from ._persona import INTERNAL, PersonaOptions, persona_columns
from ._sampling import (
    SamplingCounts,
    archetype_sizes,
    divergence,
    fallen_back,
    falling_back,
    fit_surrogates,
    instruct,
    sampling_report,
)

__all__ = [
    "INTERNAL",
    "INTERVIEWER",
    "KINDS",
    "UNREADABLE",
    "Answer",
    "Choice",
    "Decision",
    "Event",
    "Memory",
    "Number",
    "Persona",
    "PersonaOptions",
    "Regex",
    "SamplingCounts",
    "Schema",
    "Text",
    "archetype_sizes",
    "divergence",
    "fallen_back",
    "falling_back",
    "fit_surrogates",
    "instruct",
    "persona_columns",
    "render_memory",
    "sampling_report",
]
