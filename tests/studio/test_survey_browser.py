"""The studio reads a survey as well as it reads the game (issue 29), in real Chromium at
1280×800.

A survey of 3,000 respondents on the scripted model (2 s a question, three waves of
two or three questions, asked 1,500 at a time) is
started from the page. While its first wave is asked: the answers panel shows no empty
histogram axis, the Intervene card names the step the server schedules for, and an agent's
Mind holds its state from the running simulation without blaming a dummy model. Once it
has ended: the steps table keeps every Fork button inside its card, every metric card
headlines its latest value, time cells do not wrap, the answers panel shows each question's
shares, the LLM latency is measured, no text comes from the game, an interview's answers are
listed once, the Mind labels the respondent's state, and a fork's page says it is one.
Screenshots go to ``test-artifacts/studio/``.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chromium_page import ARTIFACTS, open_page, require
from populace.results._compare import _branches, _expand
from populace.results._report import _fmt
from populace.studio import Runs, StudioServer

require()
WIDTH, HEIGHT = 1280, 800
# What only the game may say: its question, its profile query, its message, its settings.
GAME_TEXT = ("choose your number", "profession", "artist", "winning number", "game.ratio",
             "Round 2")

QUESTIONNAIRE = """\
instructions: Answer every question as the person described below would.
questions:
  - {id: happy, type: likert, text: "How happy are you these days?",
     scale: [Not too happy, Pretty happy, Very happy]}
  - {id: trust, type: single_choice, text: "Can most people be trusted?",
     options: [Most people can be trusted, "Can't be too careful", Depends]}
  - {id: trust_science, type: likert, text: "How much do you trust scientists?",
     scale: [Not at all, Not too much, A fair amount, A great deal]}
  - {id: flu_vaccine, type: likert, text: "How likely are you to get a flu vaccine?",
     scale: [Very unlikely, Somewhat unlikely, Unsure, Somewhat likely, Very likely]}
  - {id: climate_worry, type: likert, text: "How worried are you about climate change?",
     scale: [Not at all worried, Not very worried, Somewhat worried, Very worried]}
  - {id: news_hours, type: numeric, text: "Hours of news a week?", range: [0, 40]}
  - {id: voted, type: single_choice, text: "Did you vote?", options: ["Yes", "No"]}
  - {id: politics_interest, type: likert, text: "How interested are you in politics?",
     scale: [Not at all, Not very, Fairly, Very]}
  - {id: life_satisfaction, type: likert, text: "How satisfied are you with your life?",
     scale: [Not at all, Not very, Fairly, Very]}
waves: [[happy, news_hours, politics_interest], [trust_science, flu_vaccine],
        [climate_worry, voted, life_satisfaction]]
"""

RUN_FILE = """\
scenario: survey
name: poll
agents: 3000
seed: 7
workers: 2
models:
  scripted: {provider: scripted, latency: 2.0}
population:
  aspects:
    age_group: {template: age}
    gender: {template: gender}
settings:
  questionnaire: questionnaire.yaml
  batch: 1500          # two batches a wave: the first one's shares show while the second goes
"""


@pytest.fixture(scope="module")
def survey(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StudioServer, str]]:
    """The studio, and the id of the survey it started (the tests follow its course: the
    first one reads it during its first wave, the others once it has ended)."""
    root = tmp_path_factory.mktemp("survey")
    (root / "questionnaire.yaml").write_text(QUESTIONNAIRE)
    (root / "poll.yaml").write_text(RUN_FILE)
    runs = Runs(root / "runs", roots=[root])
    server = StudioServer(runs, port=0, interval=0.25)
    server.start()
    live = runs.start("poll.yaml")
    deadline = time.monotonic() + 60
    while not (live.control is not None and live.control.live):
        assert time.monotonic() < deadline, "the survey did not start"
        time.sleep(0.05)
    # a message for step 2, so the steps table has a marker whatever the first test does
    request = urllib.request.Request(
        f"{server.url.rstrip('/')}/api/runs/{live.run_id}/interventions", method="POST",
        data=json.dumps({"kind": "message", "text": "Thank you for taking part.",
                         "agents": [7, 8, 9], "step": 2}).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request) as r:
        assert json.load(r)["intervention"]["step"] == 2
    yield server, live.run_id
    server.stop()
    runs.shutdown(timeout=60)


@pytest.fixture
def page() -> Iterator[Any]:
    with open_page(WIDTH) as pg:
        pg.set_viewport_size({"width": WIDTH, "height": HEIGHT})
        yield pg
        assert pg.problems == []


def shot(page: Any, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def cells(page: Any, selector: str) -> list[dict[str, str]]:
    headers = page.locator(f"{selector} thead th").all_inner_texts()
    return [dict(zip(headers, r.locator("td").all_inner_texts(), strict=True))
            for r in page.locator(f"{selector} tbody tr").all()]


def no_game_text(page: Any) -> None:
    """Neither the page's text nor its forms' examples say anything of the game."""
    shown = page.evaluate("""() => document.body.innerText + '\\n' +
      [...document.querySelectorAll('input, textarea')].map(e => e.placeholder).join('\\n')""")
    found = [t for t in GAME_TEXT if t.lower() in shown.lower()]
    assert found == [], found


def snapshot(server: StudioServer, run_id: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{server.url.rstrip('/')}/api/runs/{run_id}") as r:
        data: dict[str, Any] = json.load(r)
    return data


def open_run(page: Any, server: StudioServer, run_id: str, *, done: bool = True) -> None:
    """The run's page (``done``: once the run has completed and its page shows it all)."""
    page.goto(f"{server.url}#/run/{run_id}")
    page.wait_for_selector("#step-text")
    if done:
        page.wait_for_function("document.querySelector('#status').textContent == 'completed'",
                               timeout=90_000)
        page.wait_for_function(
            "document.querySelectorAll('#metrics-table tbody tr').length == 3")


def test_while_the_first_wave_is_asked(survey: tuple[StudioServer, str], page: Any) -> None:
    server, run_id = survey
    open_run(page, server, run_id, done=False)
    page.wait_for_function("/Step 1 of 3/.test(document.querySelector('#step-text').textContent)"
                           " && document.querySelector('#status').textContent == 'running'",
                           timeout=60_000)
    wrong: list[str] = []  # each defect is checked (and named) on its own

    # 2. The Intervene card names the step the server schedules for.
    page.wait_for_function("/step \\d/.test(document.querySelector('#ix-note').textContent)")
    promised = int(re.search(r"step (\d+)", page.inner_text("#ix-note")).group(1))
    page.fill("#ix-text", "A reminder: your answers are anonymous.")
    page.fill("#ix-sample", "5")
    page.click("#ix-submit")
    page.wait_for_function("document.querySelector('#ix-status').textContent"
                           ".startsWith('scheduled for step')")
    scheduled = int(re.search(r"step (\d+)", page.inner_text("#ix-status")).group(1))
    if not scheduled == promised == 2:
        wrong.append(f"2: the card promised step {promised}, the server scheduled {scheduled}")

    # 5. Categorical answers: no empty 0.01–0.99 axis, no "mean 1 · std 0".
    page.wait_for_timeout(500)
    if page.locator("#answers-svg").count() or not page.locator("#answers-shares").count():
        wrong.append("5: the answers are drawn as a histogram of numbers: "
                     + page.inner_text("#answers-card").replace("\n", " ")[:200])
    shot(page, "20-survey-live-1280")

    # 3. An agent's Mind during step 1: read from the running simulation; its calls are
    # recorded (the scripted model's), none has ended yet — no talk of a dummy model.
    page.goto(f"{server.url}#/run/{run_id}/agent/7")
    page.wait_for_selector("#mind-source", timeout=30_000)
    assert snapshot(server, run_id)["steps_done"] == 0
    mind = page.inner_text("#mind")
    if "running simulation" not in page.inner_text("#mind-source") or "dummy" in mind \
            or "no checkpoint" in mind:
        wrong.append("3: " + mind.replace("\n", " ")[:300])
    assert page.locator("#profile-table").count() == 1
    assert wrong == []


def test_live_answer_shares(survey: tuple[StudioServer, str], page: Any) -> None:
    # While a wave is asked: each question's shares among the answers in so far (the first
    # batch's, at least, while the second one goes).
    server, run_id = survey
    open_run(page, server, run_id, done=False)
    page.wait_for_selector("#answers-shares.live .share-latest", timeout=60_000)
    blocks = page.locator("#answers-shares.live .share-latest")
    for k in range(blocks.count()):
        text = blocks.nth(k).inner_text()
        found = re.search(r"step \d, so far: ([\d,]+)", text)
        assert found and 0 < int(found.group(1).replace(",", "")) <= 3000, text
        percents = [float(p) for p in re.findall(r"([\d.]+)%", text)]
        assert 97 <= sum(percents) <= 103, text
    shot(page, "26-survey-live-shares-1280")
    # The live update, shares included, stays small.
    size = len(json.dumps(snapshot(server, run_id), separators=(",", ":")).encode())
    assert size <= 5_000, size


def test_the_steps_table_keeps_its_buttons_in_its_card(survey: tuple[StudioServer, str],
                                                      page: Any) -> None:
    # 1. Every step's Fork button and the ⚑ marker lie inside the card and the window.
    server, run_id = survey
    open_run(page, server, run_id)
    page.wait_for_selector("#metrics-table .marker[data-step='2']")
    assert page.inner_text("#metrics-table .marker[data-step='2']").startswith("⚑")
    boxes = page.evaluate("""() => {
      const card = document.querySelector('#metrics-card').getBoundingClientRect();
      const box = (e) => { const r = e.getBoundingClientRect();  // as shown: no scrolling
                           return {left: r.left, right: r.right, card: card.right}; };
      return [...document.querySelectorAll('#metrics-table .fork-button, #metrics-table .marker')]
        .map(box);
    }""")
    assert len(boxes) == 4, boxes
    assert all(b["left"] >= 0 and b["right"] <= min(b["card"], WIDTH) for b in boxes), boxes
    page.click("#metrics-table .fork-button[data-step='3']")  # reachable as it is
    assert page.inner_text("#fork-step") == "3"


def test_metric_cards_headline_the_latest_values(survey: tuple[StudioServer, str],
                                                 page: Any) -> None:
    # 6. Every metric card headlines its latest value (mean_news_hours: asked in wave 1).
    server, run_id = survey
    open_run(page, server, run_id)
    values = page.eval_on_selector_all(
        "#metric-charts .spark", "ss => ss.map(s => [s.dataset.metric, "
        "s.querySelector('.spark-value').textContent])")
    assert values and all(v.strip() not in ("", "–") for _, v in values), values
    assert dict(values)["mean_news_hours"].endswith("step 1"), values
    # … and a time never wraps ("2.1 s" on one line).
    lines = page.evaluate("""() => {
      const head = [...document.querySelectorAll('#metrics-table thead th')]
        .map(t => t.textContent);
      const col = head.indexOf('wall_s');
      return [...document.querySelectorAll('#metrics-table tbody tr')].map(tr => {
        const range = document.createRange();
        range.selectNodeContents(tr.children[col]);
        return [tr.children[col].textContent, range.getClientRects().length];
      });
    }""")
    assert [n for _, n in lines] == [1, 1, 1], lines

    # A card clicked opens its metric over the steps, large: a point per step, the step of
    # the interventions marked; clicked again, it closes.
    page.click("#metric-charts .spark[data-metric=prompt_tokens]")
    page.wait_for_selector("#metric-detail-svg")
    points = page.eval_on_selector_all("#metric-detail-svg circle.dot",
                                       "cs => cs.map(c => [c.dataset.step, c.dataset.value])")
    series = snapshot(server, run_id)["series"]["metrics"]["prompt_tokens"]
    assert points == [[str(t), str(v)] for t, v in zip([1, 2, 3], series, strict=True)], points
    assert page.locator("#metric-detail-svg line.fork-at").count() == 1  # step 2's ⚑
    page.click("#metric-charts .spark[data-metric=prompt_tokens]")
    page.wait_for_selector("#metric-detail-svg", state="detached")


def test_the_answers_panel_shows_each_questions_shares(survey: tuple[StudioServer, str],
                                                       page: Any) -> None:
    # 5. Once the run has ended: each question's shares at the last step that asked it.
    server, run_id = survey
    open_run(page, server, run_id)
    page.wait_for_selector("#answers-shares .share-latest")
    assert page.locator("#answers-shares .share-latest").count() == 7  # the choices
    happy = page.inner_text("#answers-shares .share-latest[data-question=happy]")
    assert "step 1" in happy and "Pretty happy" in happy, happy
    percents = [int(p) for p in re.findall(r"(\d+)%", page.inner_text(
        "#answers-shares .share-latest[data-question=voted]"))]
    assert len(percents) == 2 and 98 <= sum(percents) <= 102, percents
    assert page.locator("#answers-svg").count() == 0
    # … and step by step in their own card.
    rows = page.locator("#shares .share-block[data-question=voted] .share-row")
    assert rows.count() == 1 and rows.first.get_attribute("data-step") == "3"
    shot(page, "21-survey-done-1280")


def test_llm_latency_is_measured(survey: tuple[StudioServer, str], page: Any) -> None:
    # 10. A scenario that measures no latency per answer: from its collection to arrival.
    server, run_id = survey
    open_run(page, server, run_id)
    llm = page.inner_text("#llm")
    for q in ("p50", "p90", "p99"):
        found = re.search(rf"latency {q}\s+([\d.]+) s", llm)
        assert found is not None and 1.5 < float(found.group(1)) < 30, llm
    assert page.locator("#latency-basis").count() == 1


def test_each_process_cpu_and_memory_over_the_run(survey: tuple[StudioServer, str],
                                                  page: Any) -> None:
    # Per-worker history: the process both local workers share, sampled over the whole run.
    server, run_id = survey
    open_run(page, server, run_id)
    page.wait_for_selector("#worker-history .proc", timeout=10_000)
    proc = page.locator("#worker-history .proc")
    assert proc.count() == 1
    assert int(proc.get_attribute("data-points")) >= 10  # a sample a second, or rarer
    assert "workers 0, 1" in proc.inner_text()
    for kind in ("cpu", "mem"):
        assert (proc.locator(f"path.line.{kind}").get_attribute("d") or "").count("L") >= 5


def test_no_game_text_and_each_answer_once(survey: tuple[StudioServer, str],
                                           page: Any) -> None:
    # 8. Nothing of the game, neither in text nor in examples.
    server, run_id = survey
    open_run(page, server, run_id)
    no_game_text(page)
    assert 'age_group == "' in page.get_attribute("#iv-where", "placeholder")
    # 9. An interview's answers are listed once.
    page.fill("#iv-question", "Why did you answer the last question as you did?")
    page.fill("#iv-sample", "5")
    page.click("#iv-ask")
    page.wait_for_selector("#iv-answers-table tbody tr", timeout=60_000)
    page.wait_for_function("document.querySelector('#iv-history').textContent.length > 0")
    page.wait_for_timeout(300)  # the list below is read again after the answer
    answered = [a["agent"] for a in cells(page, "#iv-answers-table")]
    assert len(answered) == 5
    listed = page.locator("#iv-card a[href*='/agent/']").all_inner_texts()
    assert sorted(listed) == sorted(answered), listed


def test_the_mind_labels_a_respondents_state(survey: tuple[StudioServer, str],
                                             page: Any) -> None:
    # 4. The Mind labels a respondent's state (its conversation, question by question);
    # the profile is shown once.
    server, run_id = survey
    open_run(page, server, run_id)
    page.goto(f"{server.url}#/run/{run_id}/agent/7")
    page.wait_for_selector("#mind-fields dt[data-field=conversation]", timeout=30_000)
    assert "checkpoint after step 3" in page.inner_text("#mind-source")
    conversation = page.locator("#mind-fields dd[data-field=conversation] table")
    assert conversation.locator("thead th").all_inner_texts() == ["#", "question", "reply"]
    assert conversation.locator("tbody tr").count() == 8
    assert not re.search(r"^\s*\[\[", page.inner_text("#mind"), re.MULTILINE)
    tables = page.eval_on_selector_all("table", "ts => ts.filter(t => "
                                       "t.querySelector('th')?.textContent == 'attribute').length")
    assert tables == 1  # the profile's table, and no second one
    no_game_text(page)

    # Its timeline: per step its answers, and at step 2 the message sent to it (in its
    # memory too); the message sent to a sample of 5 it shows only if its memory has it.
    page.wait_for_selector("#timeline .tl-step")
    assert page.eval_on_selector_all("#timeline .tl-step", "ss => ss.map(s => s.dataset.step)"
                                     ) == ["1", "2", "3"]
    step2 = page.locator("#timeline .tl-step[data-step='2']")
    told = step2.locator("li.tl[data-kind=intervention]").all_inner_texts()
    assert any("Thank you for taking part" in t for t in told), told
    assert all("sample" not in t for t in told), told  # reached, or not listed
    assert step2.locator("li.tl[data-kind=row]").inner_text().count("question") == 2
    shot(page, "22-survey-mind-1280")


def test_a_forks_page_says_it_is_a_fork(survey: tuple[StudioServer, str], page: Any) -> None:
    # 7. A fork's page says it is a fork, with what changed; so does its snapshot.
    server, run_id = survey
    open_run(page, server, run_id)
    page.click("#metrics-table .fork-button[data-step='2']")
    assert "seed=3" in page.get_attribute("#fork-set", "placeholder")
    page.fill("#fork-set", "seed=3")
    page.click("#fork-submit")
    page.wait_for_url(re.compile(rf"#/run/{re.escape(run_id)}-fork2-"), timeout=30_000)
    fork_id = page.url.split("#/run/")[1]
    page.wait_for_selector("#fork-banner:not([hidden])", timeout=30_000)
    banner = page.inner_text("#fork-banner")
    assert run_id in banner and "after step 2" in banner and "seed=3" in banner, banner
    assert page.get_attribute("#fork-source", "href") == f"#/run/{run_id}"
    origin = snapshot(server, fork_id)["forked_from"]
    assert origin == {"run": run_id, "step": 2, "set": {"seed": 3}}, origin
    shot(page, "23-survey-fork-1280")
    page.wait_for_function("document.querySelector('#status').textContent == 'completed'",
                           timeout=60_000)
    assert page.inner_text("#fork-banner") == banner

    # The fork beside its source: a chart per metric, and the numbers populace compare
    # sets side by side (its branch table: step, then each metric's source and fork).
    # Its numbers once the fork's last step is in (the table was drawn while it ran).
    page.wait_for_function(
        "[...document.querySelectorAll('#branch-table tbody tr:last-child td:nth-child(3) "
        "span')].some(s => s.dataset.value)", timeout=30_000)
    assert page.locator("#branch-charts .spark path.line.source").count() >= 5
    shown = page.eval_on_selector_all(
        "#branch-table tbody tr", "rs => rs.map(r => [...r.children].map((c, i) => i ? "
        "c.firstChild.dataset.value : c.textContent))")
    runs_dir = Path(snapshot(server, run_id)["run_dir"]).parent
    [compared] = _branches(_expand([runs_dir / run_id, runs_dir / fork_id]))
    assert [row[0] for row in compared["rows"]] == [r[0] for r in shown] == ["3"]
    head = page.locator("#branch-table thead th").all_inner_texts()
    assert len(head) == len(compared["head"]), (head, compared["head"])
    for mine, theirs in zip(shown, compared["rows"], strict=True):
        assert [_fmt(json.loads(v) if v else None) for v in mine[1:]] == theirs[1:]
    shot(page, "24-survey-fork-branch-1280")
