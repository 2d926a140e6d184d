"""docs/manage.md works as written (see tests/doc_pages.py for what that means)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from doc_pages import run_page

DOC = Path(__file__).resolve().parents[1] / "docs" / "manage.md"


def test_every_block_of_the_manage_page(tmp_path: Path) -> None:
    assert run_page(DOC, tmp_path) >= 10
    asked = pq.read_table(tmp_path / "runs" / "town" / "interviews.parquet")
    assert sorted(set(asked.column("interview").to_pylist())) == [1, 2, 3]
    assert asked.num_rows == 2 + 5 + 3
    summary = json.loads((tmp_path / "runs" / "town-half" / "summary.json").read_text())
    assert summary["forked_from"]["set"] == {"game.ratio": 0.5}
    assert not (tmp_path / "runs" / "bad").exists()
    assert "forked from town after step 2" in (tmp_path / "compare" / "compare.html").read_text()
