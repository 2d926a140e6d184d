"""One two-node Ray cluster for a whole test session, shared by every pytest worker (test
infrastructure; the product never uses it).

Starting a Ray cluster costs ~4 CPU-s and a `populace run --backend ray` that starts its own
another ~5: ``make test``'s four workers used to start about twenty. Here the first worker
that asks for a cluster starts a *keeper* process, which starts the cluster, writes its
address, and keeps it until the session ends; every worker (and every ``populace run
--address``) joins it.

The keeper belongs to the session's main pytest process (the xdist controller, or pytest
itself without xdist): that process stops it when it ends (:func:`stop`), and the keeper
also stops on its own as soon as that process is gone, so a killed session leaves no
cluster behind. Tests that take nodes down or need a cluster of a given shape start their
own, as before.

Run as a script, this module is the keeper: ``python ray_session.py DIRECTORY OWNER_PID``.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: How long a worker waits for the keeper to write the cluster's address.
START_TIMEOUT_S = 180
#: Ray's timers, slowed for a cluster that is idle most of the session (it used 4.5% of a
#: core doing nothing, now 3.5%): no memory monitor (no test here fills the memory), no
#: metrics, resources and idle workers checked every second, nodes every ten (none is lost).
QUIET = {"memory_monitor_refresh_ms": 0, "enable_metrics_collection": False,
         "event_stats": False, "raylet_report_resources_period_milliseconds": 1000,
         "kill_idle_workers_interval_ms": 1000, "raylet_check_gc_period_milliseconds": 1000,
         "gcs_pull_resource_loads_period_milliseconds": 5000, "health_check_period_ms": 10_000}
#: The keeper this process started (a worker's outlives the worker; pytest without xdist,
#: the keeper's owner and parent, waits for its own in :func:`stop`).
_keepers: list[subprocess.Popen[bytes]] = []


def session_dir(owner_pid: int) -> Path:
    """Where the session owned by ``owner_pid`` keeps its cluster's lock, address and keeper."""
    return Path(tempfile.gettempdir()) / f"populace-tests-ray-{owner_pid}"


def address(owner_pid: int) -> str:
    """The shared cluster's address, started by the first caller of the session."""
    directory = session_dir(owner_pid)
    directory.mkdir(exist_ok=True)
    with open(directory / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one starter; the others wait here for its address
        written = directory / "address"
        if not written.exists():
            with open(directory / "keeper.log", "wb") as log:
                keeper = subprocess.Popen(
                    [sys.executable, __file__, str(directory), str(owner_pid)],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True)  # its own group: it outlives the worker
            _keepers.append(keeper)
            (directory / "keeper.pid").write_text(str(keeper.pid))
            deadline = time.monotonic() + START_TIMEOUT_S
            while not written.exists():
                if keeper.poll() is not None or time.monotonic() > deadline:
                    keeper.kill()
                    raise RuntimeError("the session's Ray cluster did not start: "
                                       + (directory / "keeper.log").read_text()[-2000:])
                time.sleep(0.1)
        return written.read_text()


def stop(owner_pid: int, timeout: float = 60) -> None:
    """Stop the session's cluster, if one was started (from the owner process, at its end)."""
    directory = session_dir(owner_pid)
    try:
        pid = int((directory / "keeper.pid").read_text())
        os.kill(pid, signal.SIGTERM)
    except (FileNotFoundError, ValueError, ProcessLookupError):
        pass
    else:
        mine = [k for k in _keepers if k.pid == pid]  # without xdist, the keeper is our child
        if mine:
            mine[0].wait(timeout)
        else:
            deadline = time.monotonic() + timeout
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
    shutil.rmtree(directory, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, its parent not told yet) is gone for us
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _keep(directory: Path, owner_pid: int) -> None:
    from ray.cluster_utils import Cluster

    stopping = False

    def on_term(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    # No dashboard and no log monitor: tests join with log_to_driver=False, and the log
    # monitor alone polled its files at 2.6% of a core for the whole session (20 CPU-s).
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "include_log_monitor": False,
        "_system_config": QUIET, "no_monitor": True})  # no autoscaler either
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        (directory / "address.tmp").write_text(cluster.address)
        (directory / "address.tmp").rename(directory / "address")
        while not stopping and _alive(owner_pid):
            time.sleep(0.5)
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    _keep(Path(sys.argv[1]), int(sys.argv[2]))
