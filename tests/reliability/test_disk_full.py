"""A disk that fills up under a run: one line naming where, exit 1, nothing of the finished
steps lost, and the run resumable once there is room (a real tmpfs; skipped where mounting
one is not allowed)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import forkserver
from populace.results import read_summary, read_table, run_snapshot


@pytest.fixture
def tiny(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "tiny"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160k", "tmpfs", str(where)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_disk_is_one_line_and_the_run_resumes(tmp_path: Path, tiny: Path) -> None:
    run_file = tmp_path / "run.yaml"
    run_file.write_text("scenario: guess_number\nname: full\nseed: 3\nagents: 3000\nrounds: 8\n"
                        "models: {dummy: {provider: dummy, latency: 0}}\n")
    out = tiny / "run"
    done = forkserver.run([sys.executable, "-m", "populace.cli", "run", str(run_file),
                           "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("error: ") and "No space left on device" in lines[0]
    assert str(tiny) in lines[0] and f"populace run --resume {out}" in lines[0]
    # The summary could not be saved as failed (no room), but nobody holds the run now:
    assert run_snapshot(out).status in ("interrupted", "failed")

    subprocess.run(["mount", "-o", "remount,size=20m", str(tiny)], check=True)  # room again
    resumed = forkserver.run([sys.executable, "-m", "populace.cli", "run", "--resume", str(out)],
                             capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert read_summary(out)["status"] == "completed"
    assert read_table(out).num_rows == 3000 * 8
