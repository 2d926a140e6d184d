"""docs/survey.md works as written (see tests/doc_pages.py for what that means)."""

from __future__ import annotations

from pathlib import Path

from doc_pages import run_page

DOC = Path(__file__).resolve().parents[1] / "docs" / "survey.md"


def test_every_block_of_the_survey_page(tmp_path: Path) -> None:
    assert run_page(DOC, tmp_path) >= 5
    figures = {p.stem for p in (tmp_path / "runs" / "survey" / "figures").glob("*.png")}
    assert {"marginals", "treatment_effects", "position_bias", "by_education"} <= figures
