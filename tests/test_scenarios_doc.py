"""docs/scenarios.md works as written (see tests/doc_pages.py for what that means)."""

from __future__ import annotations

from pathlib import Path

from doc_pages import run_page

DOC = Path(__file__).resolve().parents[1] / "docs" / "scenarios.md"


def test_every_block_of_the_scenarios_page(tmp_path: Path, ray_address: str) -> None:
    ran = run_page(DOC, tmp_path, ray_address=ray_address)  # its Ray run joins the session's
    assert ran >= 9
    assert (tmp_path / "runs" / "rumour" / "report.html").exists()
    figures = {p.stem for p in (tmp_path / "runs" / "rumour" / "figures").glob("*.png")}
    assert {"metric_told", "metric_believers", "distribution_times_heard"} <= figures
    assert (tmp_path / "runs" / "sweep" / "sweep.json").exists()
