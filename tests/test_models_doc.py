"""docs/models.md works as written (see tests/doc_pages.py for what that means)."""

from __future__ import annotations

import json
from pathlib import Path

from doc_pages import run_page

DOC = Path(__file__).resolve().parents[1] / "docs" / "models.md"


def test_every_block_of_the_models_page(tmp_path: Path) -> None:
    assert run_page(DOC, tmp_path) >= 5
    run = tmp_path / "runs" / "mine"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert [s["n_valid"] for s in summary["steps"]] == [20, 20]
    assert any((run / "llm_calls").glob("mine-*.jsonl"))  # recorded like any model
