"""docs/social.md works as written (see tests/doc_pages.py for what that means)."""

from __future__ import annotations

from pathlib import Path

from doc_pages import run_page

DOC = Path(__file__).resolve().parents[1] / "docs" / "social.md"


def test_every_block_of_the_social_page(tmp_path: Path) -> None:
    assert run_page(DOC, tmp_path) >= 4
    figures = {p.stem for p in (tmp_path / "runs" / "town" / "figures").glob("*.png")}
    assert {"cascades", "adoption", "race", "echo_chamber"} <= figures
