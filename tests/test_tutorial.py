"""Every shell command of docs/tutorial.md, run in order in a copy of the repository.

The copy shares this test run's virtual environment (``.venv`` holds links to it and an
up-to-date install stamp, so ``make demo`` installs nothing). Sizes are scaled down by the
substitutions in SCALE, each of which must still match the page; the demo's example file
is shrunk the same way in the copy.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from populace.results import read_summary

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "tutorial.md"

#: (text on the page, what the test runs instead): small sizes, same commands.
SCALE = [
    ("agents: 2000", "agents: 240"),
    ("examples/paper/education.yaml --out", "examples/paper/education.yaml --agents 200 --out"),
]


def _venv_copy(target: Path) -> None:
    """A ``.venv`` made of links to this interpreter's environment, marked installed."""
    real = Path(sys.prefix)
    target.mkdir()
    for entry in real.iterdir():
        if entry.name != ".installed":
            (target / entry.name).symlink_to(entry)
    (target / ".installed").touch()


def _repo_copy(work: Path) -> None:
    work.mkdir()
    for name in ("Makefile", "pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, work / name)
    shutil.copytree(ROOT / "examples", work / "examples")
    shutil.copytree(ROOT / "docs", work / "docs")
    demo = work / "examples" / "guess_number.yaml"
    data = yaml.safe_load(demo.read_text())
    data["agents"], data["models"]["dummy"]["latency"] = 1000, 0.05
    demo.write_text(yaml.safe_dump(data, sort_keys=False))
    _venv_copy(work / ".venv")


def test_every_command_in_the_tutorial_works(tmp_path: Path) -> None:
    blocks = re.findall(r"```sh\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert len(blocks) >= 7
    script = "set -euo pipefail\n"
    for i, block in enumerate(blocks, 1):
        script += f"echo '::: block {i}'\n{block}\n"
    for page, scaled in SCALE:
        assert page in script, page
        script = script.replace(page, scaled)
    work = tmp_path / "repo"
    _repo_copy(work)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "FORCE_COLOR")}
    env.update(NO_COLOR="1", COLUMNS="120", MAKEFLAGS="--assume-old=.venv/.installed")
    proc = subprocess.run(["bash", "-c", script], cwd=work, env=env, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout

    (demo,) = (work / "runs").glob("guess-number-demo-*")
    assert read_summary(demo)["status"] == "completed"
    assert "education.yaml" in out and "scale_1m.yaml" in out  # ls examples/paper
    assert (work / "runs" / "education" / "figures" / "by_education.png").exists()
    mine = read_summary(work / "runs" / "mine")
    means = [r["mean"] for r in mine["steps"]]
    assert len(means) == 4 and means == sorted(means, reverse=True)
    assert {"by_profession.png", "by_age.png", "mean_by_round.png"} <= {
        p.name for p in (work / "runs" / "mine" / "figures").iterdir()}
    half = read_summary(work / "runs" / "mine-half")
    assert half["steps"][0]["target"] == pytest.approx(half["steps"][0]["mean"] / 2)
    index = json.loads((work / "runs" / "my-sweep" / "sweep.json").read_text())
    assert [p["status"] for p in index["points"]] == ["completed", "completed"]
    assert (work / "runs" / "my-sweep" / "report.html").exists()
    assert (work / "runs" / "compare" / "compare.html").exists()
    assert "'profession': 'economist', 'round': 1" in out  # the pyarrow query printed
