"""The studio shows a run's archetype sampling (issue 31): in real Chromium, a survey whose
model samples archetypes has a card with each step's calls, what asking everyone would
take, and the audit per question (the numbers of summary.json, inside the card at
1280 px); a run without sampling shows no such card."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from chromium_page import ARTIFACTS, open_page, require
from populace.launch import launch, load_run_file
from populace.results import RunDirectory, read_summary
from populace.studio import Runs, StudioServer

require()
SURVEY = Path(__file__).resolve().parents[2] / "examples" / "survey"


@pytest.fixture(scope="module")
def studio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StudioServer]:
    root = tmp_path_factory.mktemp("sampling")
    config = yaml.safe_load((SURVEY / "archetypes.yaml").read_text())
    config["agents"] = 1500
    config["models"]["scripted"]["sampling"].update(samples=4, audit=0.1)
    config["settings"]["questionnaire"] = str(SURVEY / "questionnaire.yaml")
    (root / "sampled.yaml").write_text(yaml.safe_dump(config))
    for name, path in (("sampled", root / "sampled.yaml"), ("plain", SURVEY / "gss5-dummy.yaml")):
        asyncio.run(launch(load_run_file(path, {"agents": 300} if name == "plain" else {}),
                           RunDirectory.create(root / "runs" / name)))
    server = StudioServer(Runs(root / "runs", roots=[root]), port=0, interval=0.25)
    server.start()
    yield server
    server.stop()


def test_the_audit_is_on_the_run_page(studio: StudioServer, tmp_path: Path) -> None:
    entry = read_summary(Path(studio.runs.path("sampled")))["steps"][0]
    happy = entry["sampling"]["scripted"]["decisions"]["happy"]
    with open_page(1280) as page:
        page.set_viewport_size({"width": 1280, "height": 800})
        page.goto(f"{studio.url}#/run/sampled")
        page.wait_for_selector("#sampling-card:not([hidden]) tbody tr", timeout=30_000)
        text = page.inner_text("#sampling-card")
        assert f"TV {happy['tv']:.3f}" in text
        assert f"{happy['low']:.3f} – {happy['high']:.3f}" in text
        assert f"{entry['sampling']['scripted']['shared']:,}" in text
        assert f"~{entry['sampling']['scripted']['individual']['calls']:,}" in text
        card = page.evaluate("""() => { const c = document.querySelector('#sampling-card');
            return [c.scrollWidth, c.clientWidth]; }""")
        assert card[0] <= card[1] + 1, card
        page.screenshot(path=str(ARTIFACTS / "40-sampling-card.png"), full_page=True)
        page.goto(f"{studio.url}#/run/plain")
        page.wait_for_function("document.querySelector('#updates').dataset.n > 0",
                               timeout=30_000)
        page.wait_for_timeout(500)
        assert page.evaluate("document.querySelector('#sampling-card').hidden")
        assert page.problems == []
