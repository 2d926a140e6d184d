"""Populace: very large-scale LLM-driven multi-agent simulation.

The most used names are re-exported here; each layer's package lists its full public API.
"""

from populace.core import (
    Agent,
    AgentGroup,
    AgentHandle,
    ConfigError,
    Msg,
    PerWorker,
    Placeholder,
    PlaceholderSet,
    PopulaceError,
    Simulation,
    gather,
    wait,
)

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "AgentGroup",
    "AgentHandle",
    "ConfigError",
    "Msg",
    "PerWorker",
    "Placeholder",
    "PlaceholderSet",
    "PopulaceError",
    "Simulation",
    "__version__",
    "gather",
    "wait",
]
