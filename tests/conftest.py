"""Fixtures shared across test packages."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

#: Test files that take longest (about 20-90 s each on 2 cores, from a full run), in that
#: order: they are run first, so that none of ``make test``'s workers is left with a long
#: file at the end while the others idle.
SLOW_FIRST = (
    "reliability/test_platform_scenarios.py", "scenarios/test_paper_configs.py",
    "studio/test_survey_browser.py", "scenarios/test_social.py", "llm/test_batch_finish.py",
    "reliability/test_scenario_faults.py", "scenarios/test_survey_archetypes.py",
    "studio/test_browser.py", "llm/test_batch.py", "studio/test_scenario_pages.py",
    "test_tutorial.py", "reliability/test_stop_hangs.py", "studio/test_manage_browser.py",
    "test_scenarios_doc.py", "core/test_ray_backend.py", "reliability/test_env_loss.py",
    "reliability/test_worker_loss.py", "results/test_report.py",
    "environment/test_remote.py", "reliability/test_partial_round.py", "test_manage_doc.py",
    "reliability/test_persona_runs.py", "reliability/test_llm_faults.py",
    "scenarios/test_survey.py", "reliability/test_node_loss.py",
    "reliability/test_pinned_inputs.py", "environment/test_rumour_scale.py",
    "launch/test_cli.py", "launch/test_estimate_allocation.py",
    "reliability/test_silent_server.py", "studio/test_pause_browser.py",
    "reliability/test_adversarial.py", "scenarios/test_survey_acceptance.py",
    "core/test_worker_stats.py",
)
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


@pytest.fixture(scope="module", autouse=True)
def _close_the_modules_browser() -> Iterator[None]:
    """After a module of browser tests, its shared Chromium (tests/chromium_page.py)."""
    yield
    page = sys.modules.get("chromium_page")
    if page is not None:
        page.close_browser()


def _session_owner(config: pytest.Config) -> int:
    """The pid of the session's main pytest process (the xdist controller, or this one)."""
    return os.getppid() if hasattr(config, "workerinput") else os.getpid()


def pytest_unconfigure(config: pytest.Config) -> None:
    if _session_owner(config) == os.getpid():  # the owner's end is its shared cluster's
        import ray_session

        ray_session.stop(os.getpid())


@pytest.fixture(scope="session")
def ray_address(pytestconfig: pytest.Config) -> str:
    """The address of the session's two-node Ray cluster (1 CPU per node, on this machine),
    shared by every pytest worker (tests/ray_session.py): pass it as ``--address`` to a
    ``populace run`` that needs a Ray cluster but not one of its own. Skips without Ray."""
    pytest.importorskip("ray")
    import ray_session

    return ray_session.address(_session_owner(pytestconfig))


@pytest.fixture(scope="module")
def ray_cluster(ray_address: str) -> Iterator[str]:
    """The session's two-node Ray cluster (:func:`ray_address`), joined by this process for
    one module (so a module that starts its own Ray, or none, never finds it joined)."""
    import ray

    ray.init(address=ray_address, include_dashboard=False, configure_logging=False,
             log_to_driver=False)
    yield ray_address
    ray.shutdown()
