"""docs/inference.md works as written (see tests/doc_pages.py for what that means)."""

from __future__ import annotations

import json
from pathlib import Path

from doc_pages import run_page

DOC = Path(__file__).resolve().parents[1] / "docs" / "inference.md"


def test_every_block_of_the_inference_page(tmp_path: Path) -> None:
    assert run_page(DOC, tmp_path) >= 2
    for layout in ("persona_first", "shared_first"):
        summary = json.loads((tmp_path / "runs" / layout / "summary.json").read_text())
        assert summary["status"] == "completed"
        (step,) = summary["steps"]
        assert step["llm"]["llm"]["cached_tokens"] > 0  # the engine's cache, as it reports
