"""Fixtures shared across test packages."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: Test files that take longest (about 20-80 s each on 2 cores, from ``--junitxml``), in
#: that order: they are run first, so that none of ``make test``'s workers is left with a
#: long file at the end while the others idle. The shared Ray cluster's files (one unit,
#: :data:`RAY_CLUSTER_FILES`, ~160 s together) come first through their longest file.
SLOW_FIRST = (
    "core/test_ray_backend.py", "reliability/test_platform_scenarios.py",
    "studio/test_survey_browser.py", "reliability/test_scenario_faults.py",
    "llm/test_batch_finish.py", "scenarios/test_survey_archetypes.py",
    "reliability/test_adversarial.py", "reliability/test_node_loss.py", "scenarios/test_survey.py",
    "reliability/test_stop_hangs.py", "llm/test_batch.py", "reliability/test_persona_runs.py",
    "launch/test_cli.py", "scenarios/test_social.py", "studio/test_scenario_pages.py",
    "reliability/test_env_loss.py", "studio/test_browser.py", "test_scenarios_doc.py",
    "reliability/test_pinned_inputs.py", "test_manage_doc.py", "studio/test_manage_browser.py",
    "scenarios/test_paper_configs.py", "reliability/test_partial_round.py", "test_tutorial.py",
    "reliability/test_llm_faults.py", "reliability/test_silent_server.py", "test_survey_doc.py",
    "studio/test_pause_browser.py", "scenarios/test_survey_acceptance.py",
    "reliability/test_kill_and_resume.py", "reliability/test_worker_loss.py",
    "studio/test_cli_studio.py",
)
#: The files whose tests use :func:`ray_cluster`: ``make test`` runs them on one worker, so
#: the cluster starts once (a file missing here still works, on a cluster of its worker's).
RAY_CLUSTER_FILES = frozenset({
    "core/test_columnar_table.py", "core/test_current_agent.py", "core/test_ray_backend.py",
    "core/test_worker_stats.py", "environment/test_many_remote.py", "environment/test_parity.py",
    "environment/test_remote.py", "environment/test_rumour_scale.py",
    "environment/test_served_map.py", "environment/test_shards.py",
})
TESTS = Path(__file__).resolve().parent


def _in_tests(path: Path) -> str:
    path = path.resolve()
    return path.relative_to(TESTS).as_posix() if path.is_relative_to(TESTS) else str(path)


def pytest_configure(config: pytest.Config) -> None:
    # The CLI's rich consoles take their width from COLUMNS when populace.cli is imported, and
    # keep it: a width from the environment (the xdist workers of `make test` had COLUMNS=80)
    # would override the one a test sets. Tests set the width they need; subprocess helpers
    # drop COLUMNS already.
    os.environ.pop("COLUMNS", None)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slowest files first; otherwise as collected."""
    ranks = {path: i for i, path in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: ranks.get(_in_tests(item.path), len(ranks)))  # stable


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, absent without it
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` (``make test``), with the Ray cluster's files as one unit.

    A test file runs on one worker, so its module fixtures are built once. (xdist's own
    ``loadgroup`` does not group under pytest 9: it renames ``item._nodeid``, which pytest 9
    no longer reads.)
    """
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = nodeid.split("::", 1)[0]
            in_tests = _in_tests(config.rootpath / file)
            return "ray_cluster" if in_tests in RAY_CLUSTER_FILES else file

    return Scheduling(config, log)


@pytest.fixture(scope="module", autouse=True)
def _close_the_modules_browser() -> Iterator[None]:
    """After a module of browser tests, its shared Chromium (tests/chromium_page.py)."""
    yield
    page = sys.modules.get("chromium_page")
    if page is not None:
        page.close_browser()


@pytest.fixture(scope="session")
def ray_nodes() -> Iterator[Any]:
    """A two-node Ray cluster on this machine (1 CPU per node), started once per session.

    Not joined: :func:`ray_cluster` joins it for one module at a time, so a module that
    starts its own Ray (or none) never finds this one joined. Skips when Ray is missing.
    """
    pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    # No dashboard and no log monitor: modules join with log_to_driver=False, and the log
    # monitor alone polled its files at 2.6% of a core for the whole session (20 CPU-s).
    c = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "include_log_monitor": False})
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
