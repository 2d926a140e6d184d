"""What tests of persona scenarios share: the tutorial's files as docs/scenarios.md writes
them, and a run's recorded LLM calls with their prompts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from doc_pages import BLOCK

ROOT = Path(__file__).resolve().parents[1]


def tutorial_files(*names: str) -> dict[str, str]:
    """The files named ``names`` (``park.py``, ``park.yaml``) as docs/scenarios.md has them."""
    found = {b["file"]: b["body"] for b in BLOCK.finditer(
        (ROOT / "docs" / "scenarios.md").read_text()) if b["file"] in names}
    missing = set(names) - set(found)
    assert not missing, f"docs/scenarios.md has no file {sorted(missing)}"
    return found


def recorded_calls(run_dir: Path) -> list[dict[str, Any]]:
    """Every call recorded under ``run_dir/llm_calls`` (one dict per line)."""
    out = []
    for path in sorted((run_dir / "llm_calls").glob("*.jsonl")):
        out += [json.loads(line) for line in path.read_text().splitlines() if line]
    return out


def prompt_text(call: dict[str, Any]) -> str:
    """A recorded call's messages as one text."""
    return "\n".join(m["content"] for m in call["request"]["messages"])
