"""Every Python example of README.md runs as written and prints what its comments say."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import forkserver

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
EXAMPLE = ROOT / "examples" / "guess_number.yaml"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_the_readme_has_examples() -> None:
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block-{i}" for i in range(len(BLOCKS))])
def test_example_runs(code: str, tmp_path: Path) -> None:
    if "runs/mine" in code:  # reads the run the README's first command makes (smaller here)
        made = forkserver.run(
            [sys.executable, "-m", "populace.cli", "run", str(EXAMPLE), "--agents", "300",
             "--rounds", "2", "--out", "runs/mine"],
            cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert made.returncode == 0, made.stderr
    done = forkserver.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # "print(x)   # 5000": the comment says what the line prints.
    expected = [m.group(1) for m in re.finditer(r"print\(.*\)\s+#\s*(\S+)\s*$", code, re.M)]
    if expected:
        assert done.stdout.split()[-len(expected):] == expected
