"""Populace's actor runtime: agents hosted by workers, placeholders, batched calls.

``core`` depends on nothing else in Populace; every other layer builds on its public names.
"""

from ._agent import Agent, Memory, PerWorker, Profile
from ._backend import (
    LOCAL,
    Backend,
    BackendKind,
    LocalBackend,
    ServiceHandle,
    backend_kind,
    backend_names,
    expected_backends,
    make_backend,
    register_backend,
    unregister_backend,
)
from ._columnar import outcomes_table
from ._driver import SharedTimers, Signal, current_agent
from ._errors import (
    CallTimeout,
    ConfigError,
    ModelBadResponse,
    ModelError,
    ModelHTTPError,
    ModelTimeout,
    ModelUnreachable,
    PopulaceError,
    RecordingMiss,
    ServiceLost,
    SimulationClosed,
    WorkerLost,
)
from ._handle import AgentGroup, AgentHandle
from ._msg import Msg
from ._placeholder import Placeholder, PlaceholderSet, UnobservedFailureWarning, gather, wait
from ._ray import RAY, ray_host_port
from ._runtime import Simulation, SimulationStats
from ._seeding import derive_seed, mix64, seed_for, uniform_pick, unit_float
from ._shipping import ship_by_value
from ._tasks import TaskOwner
from ._worker import WorkerStats

# The backends run files know by name; another joins with one register_backend call.
register_backend(LOCAL)
register_backend(RAY)

__all__ = [
    "LOCAL",
    "RAY",
    "Agent",
    "AgentGroup",
    "AgentHandle",
    "Backend",
    "BackendKind",
    "CallTimeout",
    "ConfigError",
    "LocalBackend",
    "Memory",
    "ModelBadResponse",
    "ModelError",
    "ModelHTTPError",
    "ModelTimeout",
    "ModelUnreachable",
    "Msg",
    "PerWorker",
    "Placeholder",
    "PlaceholderSet",
    "PopulaceError",
    "Profile",
    "RecordingMiss",
    "ServiceHandle",
    "ServiceLost",
    "SharedTimers",
    "Signal",
    "Simulation",
    "SimulationClosed",
    "SimulationStats",
    "TaskOwner",
    "UnobservedFailureWarning",
    "WorkerLost",
    "WorkerStats",
    "backend_kind",
    "backend_names",
    "current_agent",
    "derive_seed",
    "expected_backends",
    "gather",
    "make_backend",
    "mix64",
    "outcomes_table",
    "ray_host_port",
    "register_backend",
    "seed_for",
    "ship_by_value",
    "uniform_pick",
    "unit_float",
    "unregister_backend",
    "wait",
]
