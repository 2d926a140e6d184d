"""Fixtures shared across test packages."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: Test files that take longest (about 20-100 s each on 2 cores, from ``--durations``), in
#: that order: ``make test`` hands them to its two workers first, so that neither is left
#: with a long file at the end while the other idles.
SLOW_FIRST = (
    "reliability/test_platform_scenarios.py", "reliability/test_scenario_faults.py",
    "scenarios/test_survey.py", "reliability/test_node_loss.py", "llm/test_batch.py",
    "scenarios/test_social.py", "reliability/test_partial_round.py", "launch/test_cli.py",
    "reliability/test_worker_loss.py", "reliability/test_kill_and_resume.py",
    "reliability/test_env_loss.py", "test_tutorial.py", "reliability/test_llm_faults.py",
    "scenarios/test_paper_configs.py", "test_scenarios_doc.py", "test_manage_doc.py",
)
TESTS = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test file is one xdist group (``make test``: ``-n 2 --dist loadgroup``), so a
    module's fixtures are built once, on one worker; the tests on the shared Ray cluster are
    one group of their own, so the cluster starts once. The slowest files go first."""
    def file(item: pytest.Item) -> str:
        path = item.path.resolve()
        return path.relative_to(TESTS).as_posix() if path.is_relative_to(TESTS) else str(path)

    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            ray = "ray_cluster" in getattr(item, "fixturenames", ())
            item.add_marker(pytest.mark.xdist_group("ray_cluster" if ray else file(item)))
    ranks = {path: i for i, path in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: ranks.get(file(item), len(ranks)))  # stable: else as found


@pytest.fixture(scope="session")
def ray_nodes() -> Iterator[Any]:
    """A two-node Ray cluster on this machine (1 CPU per node), started once per session.

    Not joined: :func:`ray_cluster` joins it for one module at a time, so a module that
    starts its own Ray (or none) never finds this one joined. Skips when Ray is missing.
    """
    pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        c.add_node(num_cpus=1)
        c.wait_for_nodes()
        yield c
    finally:
        c.shutdown()


@pytest.fixture(scope="module")
def ray_cluster(ray_nodes: Any) -> Iterator[Any]:
    """The session's two-node Ray cluster (:func:`ray_nodes`), joined for one module."""
    import ray

    ray.init(address=ray_nodes.address, include_dashboard=False, configure_logging=False,
             log_to_driver=False)
    yield ray_nodes
    ray.shutdown()
