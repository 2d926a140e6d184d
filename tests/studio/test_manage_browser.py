"""Managing a run from the studio page, in a real browser (Debian's Chromium + Playwright).

While a guess_number run is live, the page reads the workers' CPU and memory, interviews a
sample of 20 agents, schedules a message to the agents a profile query picks and sees it
listed and then carried out (a marker on its step), opens an agent's mind and interviews that
agent alone; then it forks the run from step 2 (refused while the run is going, with the
server's one line beside the form; started once it is stopped) and lands on the new run's
page. All of it fits a 1280 px wide page.

One test plays 100,000 agents on the dummy model (about 25 s on 2 cores), the other 300 on
the scripted model, whose calls are recorded, so the mind lists them and their messages.
Screenshots go to the test's tmp dir and to ``test-artifacts/studio/``. Never downloads a
browser: without /usr/bin/chromium the tests are skipped and say why.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chromium_page import ARTIFACTS, open_page, require
from populace.results import RunDirectory, read_summary
from populace.studio import Runs, StudioServer

require()
WIDTH = 1280

# Two earlier rounds stay in memory, so an agent's mind has something in it; the profession
# is what the profile queries ask about.
RUN_FILE = """\
scenario: guess_number
name: {name}
agents: {agents}
rounds: 40
workers: 2
seed: 7
models:
  {model}: {{provider: {model}, latency: {latency}}}
population:
  aspects:
    profession:
      values: [economist, artist, writer]
  groups: {{by: profession}}
game:
  memory_rounds: 2
"""


@pytest.fixture
def studio(tmp_path: Path) -> Iterator[tuple[StudioServer, Path]]:
    (tmp_path / "town.yaml").write_text(RUN_FILE.format(
        name="town", agents=300, model="scripted", latency=0.4))
    (tmp_path / "city.yaml").write_text(RUN_FILE.format(
        name="city", agents=100_000, model="dummy", latency=1.0))
    runs = Runs(tmp_path / "runs", roots=[tmp_path])
    server = StudioServer(runs, port=0, interval=0.25)
    server.start()
    yield server, tmp_path
    server.stop()
    runs.shutdown(timeout=60)


@pytest.fixture
def page() -> Iterator[Any]:
    with open_page(WIDTH, refusals_seen=True) as pg:  # the 400s and 409s it provokes
        yield pg


class Shots:
    """Full-page screenshots into the test's tmp dir and ``test-artifacts/studio/``."""

    def __init__(self, page: Any, tmp: Path, suffix: str) -> None:
        self.page, self.tmp, self.suffix = page, tmp / "screenshots", suffix
        self.tmp.mkdir(exist_ok=True)

    def __call__(self, name: str) -> None:
        path = self.tmp / f"{name}{self.suffix}.png"
        self.page.screenshot(path=str(path), full_page=True)
        shutil.copy(path, ARTIFACTS / path.name)


def cells(page: Any, selector: str) -> list[dict[str, str]]:
    """The rows of a table as {header: text}."""
    headers = page.locator(f"{selector} thead th").all_inner_texts()
    return [dict(zip(headers, r.locator("td").all_inner_texts(), strict=True))
            for r in page.locator(f"{selector} tbody tr").all()]


def steps_done(page: Any) -> int:
    return page.locator("#metrics-table tbody tr").count()


def fits(page: Any) -> None:
    """Nothing on the page is wider than the window, nor clipped inside its card."""
    widths = page.evaluate("""() => ({
      page: document.documentElement.scrollWidth,
      clipped: [...document.querySelectorAll('.card')]
        .filter(c => c.scrollWidth > c.clientWidth + 1).map(c => c.id || c.className)})""")
    assert widths["page"] <= WIDTH and widths["clipped"] == [], widths


def manage_a_live_run(page: Any, server: StudioServer, root: Path, name: str, *,
                      recorded: bool, shot: Shots) -> None:
    """Start run file ``NAME.yaml`` from the page and manage it; ``recorded``: its model's
    calls are recorded (and it reads prompts, so it remembers the rounds)."""
    page.goto(server.url)
    page.wait_for_selector("#start-form")
    page.fill("#config", f"{name}.yaml")
    page.click("#start")
    page.wait_for_url(re.compile(r"#/run/"), timeout=10_000)
    run_id = page.url.split("#/run/")[1]
    page.wait_for_function("/Step [1-9]/.test(document.querySelector('#step-text').textContent)",
                           timeout=60_000)

    # Workers: each process's CPU and memory, measured again and again while the run goes.
    page.wait_for_selector("#workers-table tbody tr", timeout=30_000)
    reads: list[tuple[str, str]] = []
    deadline = time.monotonic() + 30
    while len(set(reads)) < 2 or len({m for _, m in reads}) < 2:
        assert time.monotonic() < deadline, reads
        row = cells(page, "#workers-table")[0]
        if re.fullmatch(r"[\d.,]+%", row["CPU"]) and re.search(r"\d", row["memory"]):
            reads.append((row["CPU"], row["memory"]))
        page.wait_for_timeout(400)
    assert any(float(c.rstrip("%").replace(",", "")) > 0 for c, _ in reads), reads
    assert all(re.fullmatch(r"[\d.,]+ (MB|GB)", m) and not m.startswith("0 ") for _, m in reads)

    # Interview a sample of 20: asked between steps, answered with each agent's model.
    assert page.is_hidden("#iv-step")  # a live run is asked as it stands
    page.fill("#iv-question", "How did you choose your number?")
    page.fill("#iv-sample", "20")
    page.click("#iv-ask")
    page.wait_for_selector("#iv-answers-table tbody tr", timeout=60_000)
    answers = cells(page, "#iv-answers-table")
    assert len(answers) == 20 and len({a["agent"] for a in answers}) == 20, answers
    assert all(a["answer"].strip() and a["source"] == "live" for a in answers), answers
    assert page.inner_text("#iv-status").startswith("interview 1: 20 answer")
    # listed once: above, not again among the earlier interviews
    page.wait_for_function("document.querySelector('#iv-history').textContent"
                           ".includes('No earlier interviews')")
    # A bad query: the server's one line, beside the form that sent it.
    page.fill("#iv-sample", "")
    page.fill("#iv-where", "salary > 3")
    page.click("#iv-ask")
    page.wait_for_function("document.querySelector('#iv-error').textContent.includes('salary')")

    # Intervene: a message to the artists, for the next step; refused queries say why.
    page.fill("#ix-text", "Breaking news: the winning number was 90.")
    page.fill("#ix-where", "salary > 1")
    page.click("#ix-submit")
    page.wait_for_function("document.querySelector('#ix-error').textContent.includes('salary')")
    page.fill("#ix-where", 'profession == "artist"')
    page.click("#ix-submit")
    page.wait_for_function("document.querySelector('#ix-status').textContent"
                           ".startsWith('scheduled for step')")
    assert page.inner_text("#ix-error") == ""
    step = int(re.search(r"step (\d+)", page.inner_text("#ix-status")).group(1))
    page.wait_for_selector("#ix-table tbody tr")
    listed = cells(page, "#ix-table")
    assert len(listed) == 1 and listed[0]["step"] == str(step), listed
    assert "artist" in listed[0]["what"] and listed[0][""] in ("scheduled", "carried out")
    shot("14-manage-live")
    fits(page)

    # Once its step is over: carried out, and marked on that step of the timeline.
    page.wait_for_selector(f"#metrics-table .marker[data-step='{step}']", timeout=60_000)
    page.wait_for_function("document.querySelector('#ix-table tbody tr').textContent"
                           ".includes('carried out')")
    assert "artist" in page.get_attribute(f"#metrics-table .marker[data-step='{step}']",
                                          "title")

    # An artist: its mind holds the message (from a checkpoint after that step) and, where
    # the model reads prompts (scripted, not dummy), the rounds it remembers.
    profiles = RunDirectory(root / "runs" / run_id).read_profiles()
    assert profiles is not None
    artists = {a for a, p in zip(profiles.column("agent_id").to_pylist(),
                                 profiles.column("profession").to_pylist(), strict=True)
               if p == "artist"}
    asked = [a["agent"] for a in answers if int(a["agent"]) in artists]
    if asked:
        agent = asked[0]
        page.click(f"#iv-answers-table a[href$='/agent/{agent}']")
    else:
        agent = str(min(artists))
        page.goto(f"{server.url}#/run/{run_id}/agent/{agent}")
    page.wait_for_selector("#mind-source", timeout=30_000)
    assert page.inner_text("#agent-title") == f"Agent {agent}"
    deadline = time.monotonic() + 30
    while "Breaking news" not in page.inner_text("#mind"):  # the newest checkpoint is step's
        assert time.monotonic() < deadline, page.inner_text("#mind")
        page.wait_for_timeout(500)
        page.click("#mind-load")
        page.wait_for_function("!document.querySelector('#mind-load').disabled")
    source = page.inner_text("#mind-source")
    if "running simulation" not in source:  # read live from its worker, or a checkpoint
        assert int(re.search(r"after step (\d+)", source).group(1)) >= step, source
    memory = page.locator("#mind-memory li").all_inner_texts()
    assert any("winning number was 90" in m for m in memory), memory
    if recorded:
        # a round's result it read (which one depends on how far the run got: the memory
        # keeps the last 32 events, so round 1's is gone once 16 rounds are played)
        assert any(re.search(r"Round \d+ is over", m) for m in memory), memory
    assert "artist" in page.inner_text("#profile-table")  # once, above the mind
    assert page.locator("#mind-card details.about").count() == 0
    page.fill("#aiv-question", "What do you expect next round?")
    page.click("#aiv-ask")
    page.wait_for_selector("#aiv-answers-table tbody tr", timeout=60_000)
    mine = cells(page, "#aiv-answers-table")
    assert [a["agent"] for a in mine] == [agent] and mine[0]["answer"].strip(), mine
    page.wait_for_function(  # its earlier answers: the sample's (this one is above)
        f"document.querySelectorAll('#aiv-history-table tbody tr').length == {int(bool(asked))}")
    if recorded:  # the mind lists the agent's calls, their messages and its conversation
        page.click("#mind-load")
        page.wait_for_selector("#mind-calls details.call")
        page.click("#mind-calls details.call summary >> nth=0")
        assert page.locator("#mind-calls details.call[open] .msg").count() >= 1
        # read again (as a busy live run is, by itself): the opened call stays open
        page.click("#mind-load")
        page.wait_for_selector("#mind-load:not([disabled])")
        assert page.locator("#mind-calls details.call[open] .msg").count() >= 1
        assert page.locator("#mind-conversation .msg").count() >= 1
    shot("15-mind")
    fits(page)

    # Fork from step 2: refused while the run goes (one run at a time), then started.
    page.go_back()
    page.wait_for_selector("#metrics-table tbody tr", timeout=30_000)
    page.wait_for_function("document.querySelectorAll('#metrics-table tbody tr').length >= 2"
                           " && document.querySelector('#status').textContent == 'running'")
    page.click("#metrics-table .fork-button[data-step='2']")
    assert page.inner_text("#fork-step") == "2"
    page.fill("#fork-set", "game.ratio=0.5")
    page.click("#fork-submit")
    page.wait_for_function("document.querySelector('#fork-error').textContent"
                           ".includes('still going')")
    shot("16-fork-refused")
    page.click("#stop")
    page.wait_for_function("document.querySelector('#status').textContent == 'stopped'",
                           timeout=60_000)
    done = steps_done(page)
    assert done >= 2
    page.click("#fork-submit")
    page.wait_for_url(re.compile(rf"#/run/{re.escape(run_id)}-fork2-"), timeout=30_000)
    fork_id = page.url.split("#/run/")[1]
    page.wait_for_function(f"document.querySelector('#run-title').textContent == '{name}'")
    page.wait_for_function("/Step ([3-9]|\\d\\d) of 40/.test(document.querySelector('#step-text')"
                           ".textContent)", timeout=60_000)
    assert page.inner_text("#fork-error") == ""
    # The new run's timeline starts with the source's first two steps.
    page.wait_for_function("document.querySelectorAll('#metrics-table tbody tr').length >= 2")
    shot("17-fork-live")
    fits(page)
    page.click("#stop")
    page.wait_for_function("document.querySelector('#status').textContent == 'stopped'",
                           timeout=60_000)
    summary = read_summary(root / "runs" / fork_id)
    assert summary["forked_from"]["step"] == 2, summary.get("forked_from")
    assert summary["forked_from"]["set"] == {"game.ratio": 0.5}
    source = read_summary(root / "runs" / run_id)
    assert len(source["steps"]) == done and source["status"] == "stopped"
    assert source["steps"][step - 1]["interventions"][0]["agents"] > 0
    assert page.problems == []


def test_manage_a_live_run_with_recorded_calls(studio: tuple[StudioServer, Path], page: Any,
                                               tmp_path: Path) -> None:
    server, root = studio
    manage_a_live_run(page, server, root, "town", recorded=True, shot=Shots(page, tmp_path, ""))


def test_manage_a_live_run_of_100_000_agents(studio: tuple[StudioServer, Path], page: Any,
                                             tmp_path: Path) -> None:
    server, root = studio
    manage_a_live_run(page, server, root, "city", recorded=False,
                      shot=Shots(page, tmp_path, "-100k"))
