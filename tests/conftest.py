"""Fixtures shared across test packages."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    """A two-node Ray cluster on this machine (1 CPU per node), connected for one module.

    Skips the module's tests when Ray is not installed.
    """
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    c.add_node(num_cpus=1)
    c.wait_for_nodes()
    ray.init(address=c.address, include_dashboard=False, configure_logging=False,
             log_to_driver=False)
    yield c
    ray.shutdown()
    c.shutdown()
