"""Every scenario's page reads as well as the game's (issue 29's acceptance), in real Chromium
at 1280×800 and 1920×1080: the game, the survey, the social network and the opinions
example, each a small finished run. On each page no control lies outside its card (nor its
scroller), no card is wider than itself, no text of the game appears unless the run is the
game, and every metric card headlines a value whenever a step reported one. Screenshots
go to ``test-artifacts/studio/30-SCENARIO-WIDTH.png`` (and ``31-…`` for an agent's page).
The tables shown download whole: a search of agents as CSV and Parquet, the steps as CSV.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest

from chromium_page import ARTIFACTS, open_page, require
from populace.launch import launch, load_run_file
from populace.results import RunDirectory, read_summary, read_table
from populace.studio import Runs, StudioServer

require()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GAME_TEXT = ("choose your number", "profession", "artist", "winning number", "game.ratio",
             "Round 2")
SIZES = [(1280, 800), (1920, 1080)]

GAME = """\
scenario: guess_number
name: game
agents: 300
rounds: 3
workers: 2
seed: 7
population:
  aspects:
    profession: {values: [economist, artist, writer]}
"""

# name → (run file, overrides)
RUNS = {
    "game": (None, {}),
    "survey": (EXAMPLES / "survey" / "gss5-dummy.yaml", {}),
    "social": (EXAMPLES / "social" / "small.yaml", {"steps": 4}),
    "opinions": (EXAMPLES / "opinions" / "opinions.yaml", {"agents": 500, "steps": 4}),
}


# A scenario whose steps warn and whose agents sometimes fail: the page's log of them.
NOISY = """\
from populace.core import Agent
from populace.launch import Run, Scenario


class Flaky(Agent):
    async def answer(self, t: int) -> float:
        if self.id % 10 == 0:
            raise ValueError("no answer today")
        return 1.0


class Noisy(Scenario):
    name = "noisy"

    async def setup(self, run: Run) -> None:
        self.people = await run.create(Flaky)

    async def step(self, run: Run, t: int) -> None:
        out = await run.collect(self.people.map(Flaky.answer, t), on_error="return")
        run.metric("answered", sum(not isinstance(x, BaseException) for x in out))
        run.warn(f"step {t}: the weather was bad")
"""


@pytest.fixture(scope="module")
def studio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StudioServer]:
    root = tmp_path_factory.mktemp("scenarios")
    (root / "game.yaml").write_text(GAME)
    (root / "noisy.py").write_text(NOISY)
    (root / "noisy.yaml").write_text("scenario: noisy.py:Noisy\nagents: 50\nsteps: 2\n")
    for name, (path, overrides) in {**RUNS, "noisy": (root / "noisy.yaml", {})}.items():
        run = load_run_file(path or root / "game.yaml", dict(overrides))
        asyncio.run(launch(run, RunDirectory.create(root / "runs" / name),
                           cache=root / "cache"))
    runs = Runs(root / "runs", roots=[root])
    server = StudioServer(runs, port=0, interval=0.25)
    server.start()
    yield server
    server.stop()


@pytest.fixture(params=SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def page(request: pytest.FixtureRequest) -> Iterator[Any]:
    width, height = request.param
    with open_page(width) as pg:
        pg.set_viewport_size({"width": width, "height": height})
        pg.width = width
        yield pg
        assert pg.problems == []


OUTSIDE = """() => {
  // Controls (and the ⚑ markers) as shown: inside their card and their nearest scroller.
  const out = [];
  const scroller = (e) => { for (let p = e.parentElement; p; p = p.parentElement) {
      const o = getComputedStyle(p).overflowX;
      if (o === 'auto' || o === 'scroll' || o === 'hidden') return p; } return null; };
  for (const e of document.querySelectorAll('.card button, .card a, .card input, .card select,'
                                            + '.card textarea, .card .marker')) {
    if (!e.getClientRects().length) continue;  // hidden
    const r = e.getBoundingClientRect(), card = e.closest('.card').getBoundingClientRect();
    const s = scroller(e), box = s ? s.getBoundingClientRect() : card;
    if (r.left < Math.max(card.left, box.left) - 1 || r.right > Math.min(card.right, box.right) + 1)
      out.push((e.id || e.className || e.tagName) + ' ' + e.textContent.slice(0, 20));
  }
  const wide = [...document.querySelectorAll('.card')]
    .filter(c => c.scrollWidth > c.clientWidth + 1).map(c => c.id || c.className);
  return {outside: out, wide, page: document.documentElement.scrollWidth};
}"""


def check_layout(page: Any) -> None:
    found = page.evaluate(OUTSIDE)
    assert found["outside"] == [] and found["wide"] == [], found
    assert found["page"] <= page.width, found


def run_dir(studio: StudioServer, name: str) -> Path:
    with urllib.request.urlopen(f"{studio.url.rstrip('/')}/api/runs/{name}") as r:
        return Path(json.load(r)["run_dir"])


def game_text(page: Any) -> list[str]:
    shown = page.evaluate("""() => document.body.innerText + '\\n' +
      [...document.querySelectorAll('input, textarea')].map(e => e.placeholder).join('\\n')""")
    return [t for t in GAME_TEXT if t.lower() in shown.lower()]


@pytest.mark.parametrize("name", list(RUNS))
def test_a_scenarios_pages(studio: StudioServer, page: Any, name: str) -> None:
    page.goto(f"{studio.url}#/run/{name}")
    page.wait_for_function("document.querySelectorAll('#metrics-table tbody tr').length > 0",
                           timeout=30_000)
    page.wait_for_function("document.querySelector('#updates').dataset.n > 0")
    page.wait_for_timeout(500)  # what the page reads once: the scenario's view, the shares
    check_layout(page)
    found = game_text(page)
    if name == "game":
        assert "choose your number" in found, found  # the game's own examples
    else:
        assert found == [], found
    # Every metric card headlines a value when a step reported one.
    with urllib.request.urlopen(f"{studio.url.rstrip('/')}/api/runs/{name}") as r:
        series = json.load(r)["series"]["metrics"]
    cards = dict(page.eval_on_selector_all(
        "#metric-charts .spark", "ss => ss.map(s => [s.dataset.metric, "
        "s.querySelector('.spark-value').textContent.trim()])"))
    assert set(cards) == set(series), (cards, series)
    if name == "game":  # its headline metrics first (the terminal line's)
        assert list(cards)[:6] == ["n_valid", "mean", "median", "std", "target",
                                   "winner_number"], list(cards)
    blank = [k for k, v in cards.items() if v == "–" and any(x is not None for x in series[k])]
    assert blank == [], (blank, cards)
    # The LLM card of a run read from disk: the requests its steps report.
    summary = read_summary(run_dir(studio, name))
    requests = sum(c.get("requests", 0) for e in summary["steps"]
                   for c in (e.get("llm") or {}).values())
    assert page.inner_text("#llm .kv > div:first-child b") == f"{requests:,}"
    assert page.locator("#llm-from-disk").count() == 1
    page.screenshot(path=str(ARTIFACTS / f"30-{name}-{page.width}.png"), full_page=True)

    # An agent's page: the same rules.
    page.goto(f"{studio.url}#/run/{name}/agent/1")
    page.wait_for_selector("#mind-source", timeout=30_000)
    page.wait_for_timeout(300)
    check_layout(page)
    found = game_text(page)
    assert found == [] if name != "game" else "choose your number" in found, found
    page.screenshot(path=str(ARTIFACTS / f"31-{name}-agent-{page.width}.png"), full_page=True)


def test_tables_download_as_csv_and_parquet(studio: StudioServer, page: Any,
                                            tmp_path: Path) -> None:
    # The agents of a search, whole (not the page of 50 shown), as CSV and as Parquet; the
    # steps table as CSV.
    page.goto(f"{studio.url}#/run/survey/agents")
    page.wait_for_selector("#agents-table")
    page.select_option("#f-table", "answers")
    page.wait_for_function("document.querySelector('#agents-table-note').textContent"
                           ".includes('answers')")
    page.select_option("#f-attr", "question")
    page.select_option("#f-value", "happy")
    page.click("#agents-form button[type=submit]")
    page.wait_for_function("document.querySelector('#agents-total').textContent"
                           ".startsWith('100 agents')")
    files = {}
    for kind in ("csv", "parquet"):
        with page.expect_download() as info:
            page.click(f"#export-{kind}")
        files[kind] = tmp_path / info.value.suggested_filename
        info.value.save_as(files[kind])
    assert files["csv"].name == "survey-answers-step1.csv", files
    answers = read_table(run_dir(studio, "survey"), "answers")
    happy = answers.filter(pc.and_(pc.equal(answers["step"], 1),
                                   pc.equal(answers["question"], "happy")))
    parquet = pq.read_table(files["parquet"])
    csv = pa_csv.read_csv(files["csv"])
    assert parquet.num_rows == csv.num_rows == happy.num_rows == 100
    assert parquet.column("agent_id").to_pylist() == happy.column("agent_id").to_pylist()
    assert parquet.column("answer").to_pylist() == happy.column("answer").to_pylist()
    assert csv.column("answer").to_pylist() == happy.column("answer").to_pylist()

    page.goto(f"{studio.url}#/run/survey")
    page.wait_for_selector("#metrics-csv")
    with page.expect_download() as info:
        page.click("#metrics-csv")
    path = tmp_path / "steps.csv"
    info.value.save_as(path)
    steps = pa_csv.read_csv(path)
    summary = read_summary(run_dir(studio, "survey"))
    assert steps.column("step").to_pylist() == [e["step"] for e in summary["steps"]]
    assert steps.column("valid_share").to_pylist() == [e["valid_share"]
                                                       for e in summary["steps"]]


def test_warnings_and_failures_are_listed_per_step(studio: StudioServer, page: Any) -> None:
    # Each step's warnings and failed answers (by kind, with an example), from the summary;
    # a run with none has no such card.
    page.goto(f"{studio.url}#/run/noisy")
    page.wait_for_selector("#log-card:not([hidden]) #log-table tbody tr", timeout=30_000)
    rows = [r.locator("td").all_inner_texts() for r in page.locator("#log-table tbody tr").all()]
    assert [r[:2] for r in rows] == [["1", "warning"], ["1", "failed"],
                                     ["2", "warning"], ["2", "failed"]], rows
    assert rows[0][2] == "step 1: the weather was bad"
    assert rows[1][2].startswith("5 of 50: ValueError ×5") and "no answer today" in rows[1][2]
    check_layout(page)
    page.goto(f"{studio.url}#/run/game")
    page.wait_for_selector("#metrics-table tbody tr")
    page.wait_for_timeout(500)
    assert page.is_hidden("#log-card")
