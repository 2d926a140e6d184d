"""The survey in archetype mode (examples/survey/archetypes.yaml on the scripted model),
through the CLI: far fewer calls than respondents' answers, the audit in the summary, the
console and the report; a replay makes no call and gives the same tables; a run killed
mid-questionnaire resumes to the tables of an undisturbed one; archetypes that leave out
what drives the answers show a large distance."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli_helpers import kill_9_after, populace
from populace.agents import archetype_sizes
from populace.llm import SamplingConfig
from populace.results import read_summary, read_table

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "survey"


def example(tmp: Path, *, waves: bool = False, latency: float = 0.0,
            **sampling: Any) -> Path:
    """The example (and its questionnaire) in ``tmp``, with ``sampling`` changed."""
    tmp.mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLE / "questionnaire.yaml", tmp)
    config = yaml.safe_load((EXAMPLE / "archetypes.yaml").read_text())
    config["agents"] = 1000
    model = config["models"]["scripted"]
    model["sampling"].update({"samples": 8, **sampling})
    model["latency"] = latency
    if waves:
        questionnaire = yaml.safe_load((tmp / "questionnaire.yaml").read_text())
        ids = [q["id"] for q in questionnaire["questions"]]
        questionnaire["waves"] = [ids[:4], ids[4:7], ids[7:]]
        (tmp / "questionnaire.yaml").write_text(yaml.safe_dump(questionnaire))
    path = tmp / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_archetypes_answer_for_a_few_calls_and_the_audit_is_reported(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = populace("run", example(tmp_path, audit=0.05), "--out", out)
    assert done.returncode == 0, done.stderr
    summary = read_summary(out)
    entry = summary["steps"][0]
    sent = entry["llm"]["scripted"]["sent"]
    answers = read_table(out, "answers")
    sampling = entry["sampling"]["scripted"]
    audited = sum(d["audited"] for q, d in sampling["decisions"].items() if "=" not in q)
    assert sampling["shared"] == answers.num_rows
    assert sent < answers.num_rows / 2 and sent >= audited
    happy = sampling["decisions"]["happy"]
    assert 20 < happy["audited"] < 90 and happy["low"] <= happy["tv"] <= happy["high"]
    assert "wasserstein" in sampling["decisions"]["news_hours"]
    assert {f"news_sources={o}" for o in ("Radio", "Television")} <= set(sampling["decisions"])
    assert "decisions answered by archetypes or a surrogate (" in done.stdout
    assert "audit's largest distance" in done.stdout
    individual = entry["sampling"]["scripted"]["individual"]
    assert individual["calls"] > 2 * entry["llm"]["scripted"]["requests"]
    # only the archetype's columns reach its prompts
    calls = [json.loads(line) for p in (out / "llm_calls").glob("*.jsonl")
             for line in p.read_text().splitlines()]
    systems = {c["request"]["messages"][0]["content"].split("\n\n")[-1] for c in calls}
    assert any(s.startswith("About you: age: ") and "region" not in s for s in systems)

    again = tmp_path / "replay"
    replayed = populace("run", out / "config.yaml", "--replay", out, "--out", again)
    assert replayed.returncode == 0, replayed.stderr
    assert read_table(again, "answers").equals(answers)
    assert read_summary(again)["steps"][0]["llm"]["scripted"]["sent"] == 0

    report = populace("report", out)
    assert report.returncode == 0, report.stderr
    assert "Archetype sampling: the audit" in (out / "report.html").read_text()


def test_archetypes_blind_to_what_drives_the_answers_show_a_large_distance(
        tmp_path: Path) -> None:
    good, bad = tmp_path / "good", tmp_path / "bad"
    assert populace("run", example(tmp_path / "g", audit=0.3), "--out", good).returncode == 0
    assert populace("run", example(tmp_path / "b", audit=0.3, by=["region"]), "--out",
                    bad).returncode == 0
    tv = {name: read_summary(d)["steps"][0]["sampling"]["scripted"]["decisions"][
        "trust_science"] for name, d in (("good", good), ("bad", bad))}
    # education and age left out: a distance whose interval excludes 0
    assert tv["bad"]["low"] > 0 == tv["good"]["low"] and tv["bad"]["tv"] > tv["good"]["tv"], tv


@pytest.mark.parametrize("allocate", ["equal", "proportional"])
def test_kill_9_mid_questionnaire_then_resume_equals_an_undisturbed_run(
        tmp_path: Path, allocate: str) -> None:
    path, out = example(tmp_path / "killed", waves=True, latency=0.3, audit=0.05,
                        allocate=allocate), tmp_path / "out"
    kill_9_after(tmp_path / "stdout.txt", "step 1/3:", 0.4,  # inside wave 2
                 "run", path, "--out", out, timeout=120)
    done = populace("run", "--resume", out)
    assert done.returncode == 0, done.stderr
    assert read_summary(out)["resumed_from_step"] == 1
    whole = tmp_path / "whole"
    assert populace("run", example(tmp_path / "w", waves=True, audit=0.05, allocate=allocate),
                    "--out", whole).returncode == 0
    assert read_table(out, "answers").equals(read_table(whole, "answers"))
    assert [e["sampling"] for e in read_summary(out)["steps"][1:]] == \
        [e["sampling"] for e in read_summary(whole)["steps"][1:]]


def test_proportional_samples_follow_the_whole_population_on_any_workers(
        tmp_path: Path) -> None:
    """``allocate: proportional``: each archetype's samples of a question asked of everyone
    are its share of archetypes × samples by its size in the whole population (on each
    worker); the answers are those of one worker on two; a replay makes no call."""
    path, out = example(tmp_path, audit=0.05, allocate="proportional"), tmp_path / "out"
    done = populace("run", path, "--out", out)
    assert done.returncode == 0, done.stderr
    sizes = archetype_sizes(read_table(out, "profiles"), ["age", "education"])
    allocation = SamplingConfig(by=["age", "education"], samples=8,
                                allocate="proportional").allocation(sizes)
    assert len(set(allocation.values())) > 3 and sum(allocation.values()) == 8 * len(sizes)
    shown = {f"About you: age: {a}; education: {e}.": n for (a, e), n in allocation.items()}
    calls = [json.loads(line)["request"]["messages"] for p in (out / "llm_calls").glob("*.jsonl")
             for line in p.read_text().splitlines()]
    for q in (1, 2, 3):  # happy, trust, trust_science: one prompt per archetype
        asked = Counter(m[-2]["content"].split("\n\n")[-1] for m in calls if len(m) > 1
                        and m[-1]["content"].startswith(f"Question {q} of"))
        assert {k: n for k, n in asked.items() if k in shown} == shown
    same_on_two_workers_and_replayed(path, out, tmp_path)


def test_archetypes_of_a_column_the_profiles_lack_are_refused_before_step_1(
        tmp_path: Path) -> None:
    done = populace("run", example(tmp_path, by=["age", "educaton"]), "--out",
                    tmp_path / "out")
    assert done.returncode == 2, done.stderr
    line, = done.stderr.strip().splitlines()
    assert line.startswith(f"error: {tmp_path / 'run.yaml'}: models.scripted.sampling.by.1: "
                           "no profile column 'educaton' (have: age, "), line


def same_on_two_workers_and_replayed(path: Path, out: Path, tmp: Path) -> None:
    """Run file ``path``, run once into ``out``, gives the same answers on two workers, and a
    replay of ``out`` gives them again without sending a call."""
    answers = read_table(out, "answers")
    two = tmp / "two"
    assert populace("run", path, "--out", two, "--workers", "2").returncode == 0
    assert read_table(two, "answers").equals(answers)
    again = tmp / "replay"
    assert populace("run", out / "config.yaml", "--replay", out, "--out",
                    again).returncode == 0
    assert read_table(again, "answers").equals(answers)
    assert all(e["llm"]["scripted"]["sent"] == 0 for e in read_summary(again)["steps"])


def panel(tmp: Path, **sampling: Any) -> Path:
    """A panel: the same five questions in each of three waves, sampled by ``sampling``."""
    path = example(tmp, **sampling)
    questionnaire = yaml.safe_load((tmp / "questionnaire.yaml").read_text())
    questionnaire["waves"] = [["happy", "trust", "trust_science", "news_hours",
                               "news_sources"]] * 3
    (tmp / "questionnaire.yaml").write_text(yaml.safe_dump(questionnaire))
    config = yaml.safe_load(path.read_text())
    config["agents"] = 3000
    config["settings"] = {"questionnaire": "questionnaire.yaml", "memory": False}
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_surrogate_answers_a_panel_after_its_first_wave(tmp_path: Path) -> None:
    """Wave 1 is sampled by archetypes; waves 2 and 3 are answered by a surrogate fitted
    to the audited answers before them: only the audited respondents are asked. The same
    answers on two workers, and a replay makes no call."""
    path, out = panel(tmp_path, mode="surrogate", audit=0.1), tmp_path / "out"
    done = populace("run", path, "--out", out)
    assert done.returncode == 0, done.stderr
    steps = read_summary(out)["steps"]
    first = steps[0]["llm"]["scripted"]["requests"]
    for e in steps[1:]:
        got = e["sampling"]["scripted"]
        assert e["llm"]["scripted"]["requests"] == got["audit_cost"]["calls"] < first
        assert got["shared"] == 3000 * 5 and got["cells"]
        happy = got["decisions"]["happy"]
        assert happy["audited"] > 200 and happy["low"] <= happy["tv"] <= happy["high"]
    same_on_two_workers_and_replayed(path, out, tmp_path)
