"""A whole node of a multi-node Ray cluster lost mid-round: the run recovers on the nodes left.

A real cluster on this machine (``ray.cluster_utils.Cluster``): a head node with no CPU,
which hosts no worker, and two worker nodes of one CPU each, so the run's two workers land
one per node. In the middle of round 2 every Ray process of one worker's node is killed
(SIGKILL: a machine that vanishes, not one drained). Ray goes on listing such a node as alive
until its health check gives up on it (15 s by default; 3 s here, see :data:`QUICK_DEATH`),
so the restarted workers may first be pinned to it; they must end on the node left, and the
numbers equal the undisturbed run's.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from populace.results import read_summary

#: The head's health check of the nodes: every second, a node dead after 3 failures in a row
#: (Ray's defaults, every 3 s and 5 failures, keep the lost node listed for 15 s). A killed
#: node refuses at once, so only it fails the check; a merely busy one has 10 s to answer.
QUICK_DEATH = {"health_check_period_ms": 1000, "health_check_failure_threshold": 3,
               "health_check_timeout_ms": 10_000}


@pytest.fixture
def cluster() -> Iterator[Any]:
    """A head node with no CPU and two worker nodes with one CPU each; not joined here."""
    pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "_system_config": QUICK_DEATH})
    try:
        for _ in range(2):
            c.add_node(num_cpus=1)
        c.wait_for_nodes(timeout=60)
        yield c
    finally:
        c.shutdown()


def raylet_pid(node: Any) -> int:
    """The pid of a cluster node's raylet: the parent of the worker processes on that node."""
    from ray._private import ray_constants

    return int(node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid)


def lose(cluster: Any, node: Any, helpers: Any) -> None:
    """Every Ray process of ``node`` killed at once, as when its machine vanishes.

    ``remove_node`` kills the node's own processes (raylet, object store, …) but not the
    worker processes its raylet started: those notice their raylet's death only after a
    while (up to a second) and may meanwhile finish the round they are in.
    """
    workers = helpers.descendants(raylet_pid(node))
    cluster.remove_node(node, allow_graceful=False)  # SIGKILL, no goodbye to the head
    for pid in workers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_node_lost_mid_round_recovers_on_the_nodes_left(
    tmp_path: Path, cluster: Any, populace: Callable[..., Any], run_file: Callable[..., Path],
    undisturbed: pa.Table, helpers: Any,
) -> None:
    if not Path("/proc/self/stat").exists():
        pytest.skip("finds the worker processes in /proc")
    out = tmp_path / "out"
    run = populace("run", run_file(backend="ray"), "--address", cluster.address, "--out", out)
    run.wait_for("round 1/3:", timeout=120)
    time.sleep(0.3)  # inside round 2 (1 s)
    placed = {node: helpers.ray_workers(raylet_pid(node)) for node in cluster.worker_nodes}
    assert sorted(len(w) for w in placed.values()) == [1, 1], placed  # one worker per node
    victim = min(pid for workers in placed.values() for pid in workers)
    lost = next(node for node, workers in placed.items() if victim in workers)
    (survivor,) = (node for node in placed if node is not lost)
    lose(cluster, lost, helpers)

    # The run recovers by itself: both workers again, on the node left, state from the
    # checkpoint of round 1, round 2 played again and reported once.
    run.wait_for("round 2/3:", timeout=120)
    restarted = set(helpers.ray_workers(raylet_pid(survivor))) - set(placed[survivor])
    assert len(restarted) == 2, (restarted, run.lines, run.stderr())
    rc, stdout, stderr = run.finish(timeout=60)
    assert rc == 0, stderr
    helpers.assert_recovered_once(stdout, stderr, f"(pid {victim}) died")
    helpers.assert_complete_and_equal(out, undisturbed)
    assert read_summary(out)["resumed_from_step"] == 1
