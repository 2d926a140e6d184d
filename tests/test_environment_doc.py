"""Every Python example of docs/environment.md runs as written and prints what its comments
say (the pattern of tests/test_readme.py)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

import forkserver

DOC = Path(__file__).resolve().parents[1] / "docs" / "environment.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
# "print(x)  # 5000": the comment is what the line prints (a token, or the whole line).
EXPECTED = re.compile(r"print\(.*\)\s+#\s*(.+?)\s*$", re.M)


def expected_prints(code: str) -> list[str]:
    return [m.group(1) for m in EXPECTED.finditer(code)]


def missing_in_order(expected: list[str], stdout: str) -> str | None:
    """The first expected text that is not a whole line of ``stdout`` after the line of the
    previous one, or None (lines that no comment announces are skipped)."""
    lines = iter(line.strip() for line in stdout.splitlines())
    for text in expected:
        if not any(line == text for line in lines):
            return text
    return None


def test_the_page_has_examples() -> None:
    assert len(BLOCKS) >= 8
    assert all(expected_prints(code) for code in BLOCKS)  # every example says what it prints


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block-{i}" for i in range(len(BLOCKS))])
def test_example_runs(code: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = forkserver.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    missing = missing_in_order(expected_prints(code), done.stdout)
    assert missing is None, f"{missing!r} not printed (in order); stdout:\n{done.stdout}"


def test_a_wrong_comment_is_caught() -> None:
    assert missing_in_order(["1 11", "['hello']"], "1 11\n['hello']\n") is None
    assert missing_in_order(["['hello']", "1 11"], "1 11\n['hello']\n") == "1 11"
    assert missing_in_order(["1 12"], "1 11\n") == "1 12"
    assert missing_in_order(["1"], "11\n") == "1"  # a whole line, not a piece of one
    assert missing_in_order(["3.0"], "step\n3.0\n") is None
