"""The console's line for a model answered by archetypes: calls and tokens made against
what asking every agent would have made, in money for a model with ``price_per_million``."""

from __future__ import annotations

from pathlib import Path

import yaml
from rich.console import Console

from populace.launch import ConsoleObserver, load_run_file
from populace.launch._console import sampling_lines

#: Two steps' summary entries, as a run writes them (numbers chosen by hand).
SUMMARY = {"steps": [
    {"step": 1, "llm": {"m": {"requests": 100, "prompt_tokens": 7_000, "completion_tokens": 1_000}},
     "sampling": {"m": {"shared": 5_000,
                        "decisions": {"q": {"audited": 50, "tv": 0.02, "low": 0.01,
                                            "high": 0.05}},
                        "individual": {"calls": 5_000, "prompt_tokens": 350_000,
                                       "completion_tokens": 50_000}}}},
    {"step": 2, "llm": {"m": {"requests": 100, "prompt_tokens": 3_000, "completion_tokens": 1_000}},
     "sampling": {"m": {"shared": 5_000,
                        "decisions": {"q": {"audited": 50, "tv": 0.04, "low": 0.02,
                                            "high": 0.07}},
                        "individual": {"calls": 5_000, "prompt_tokens": 150_000,
                                       "completion_tokens": 50_000}}}},
]}


def test_calls_and_tokens_against_asking_everyone() -> None:
    (line,) = sampling_lines(SUMMARY)
    assert line == ("m: 10,000 decisions answered by archetypes or a surrogate (200 calls, "
                    "12,000 tokens; asking every agent: ~10,000 calls, ~600,000 tokens, 50x); "
                    "audit's largest distance TV 0.040 (95% interval 0.020-0.070, 50 audited) "
                    "for q at step 2")


def test_in_money_with_a_price() -> None:
    # made: 10,000 prompt tokens at $1 and 2,000 completion tokens at $4 per million: $0.018;
    # everyone: 500,000 at $1 and 100,000 at $4: $0.90
    (line,) = sampling_lines(SUMMARY, {"m": (1.0, 4.0)})
    assert "50x; $0.02 instead of ~$0.90)" in line


def test_the_console_takes_the_prices_of_the_run_file(tmp_path: Path) -> None:
    run = tmp_path / "run.yaml"
    run.write_text(yaml.safe_dump({
        "scenario": "guess_number", "agents": 10,
        "models": {"m": {"provider": "openai", "model": "x", "base_urls": ["http://127.0.0.1:9/v1"],
                         "price_per_million": [1.0, 4.0]},
                   "d": {"provider": "dummy"}},
        "model": "m"}))
    console = Console(record=True, width=400)
    observer = ConsoleObserver(console)
    observer.run_started(load_run_file(run), {})
    observer.run_finished(SUMMARY)
    assert "$0.02 instead of ~$0.90" in console.export_text()


def test_a_decision_that_fell_back_is_named_with_its_first_individual_step() -> None:
    steps = [dict(e) for e in SUMMARY["steps"]]
    steps[1] = {**steps[1], "sampling": {"m": {**steps[1]["sampling"]["m"], "fell_back": ["q"]}}}
    (line,) = sampling_lines({"steps": steps})
    assert line.endswith("; asked individually after the audit: q from step 3")
