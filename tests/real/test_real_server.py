"""Opt-in: the guessing game end to end against a real OpenAI-compatible server.

Skipped unless both variables name a server (so CI only ever sees a skip):

    POPULACE_REAL_LLM_URL=http://127.0.0.1:8090/v1 \\
    POPULACE_REAL_LLM_MODEL=smollm2-135m-instruct \\
        .venv/bin/pytest tests/real -q -rs

Optional: ``POPULACE_REAL_LLM_API_KEY`` (sent as the bearer key, through ``api_key_env``),
``POPULACE_REAL_LLM_CONCURRENCY`` (requests in flight, default 4: keep it at or below the
server's slots) and ``POPULACE_REAL_LLM_TIMEOUT`` (seconds per attempt, default 300: a small
CPU server queues requests). See docs/real-llm-measurements.md for a llama.cpp server on a CPU.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

import forkserver

URL = os.environ.get("POPULACE_REAL_LLM_URL", "").strip()
MODEL = os.environ.get("POPULACE_REAL_LLM_MODEL", "").strip()
AGENTS = 8

pytestmark = pytest.mark.skipif(
    not (URL and MODEL),
    reason="no real LLM server: set POPULACE_REAL_LLM_URL (base URL ending in /v1) and "
           "POPULACE_REAL_LLM_MODEL to run this test against it",
)


def _run_file() -> dict[str, Any]:
    model: dict[str, Any] = {
        "provider": "openai",
        "model": MODEL,
        "base_urls": [URL],
        "max_concurrency": int(os.environ.get("POPULACE_REAL_LLM_CONCURRENCY", "4")),
        "timeout": float(os.environ.get("POPULACE_REAL_LLM_TIMEOUT", "300")),
    }
    if os.environ.get("POPULACE_REAL_LLM_API_KEY"):
        model["api_key_env"] = "POPULACE_REAL_LLM_API_KEY"
    return {
        "scenario": "guess_number",
        "name": "real-llm-smoke",
        "seed": 1,
        "agents": AGENTS,
        "rounds": 1,
        "workers": 1,
        "models": {"real": model},
        "game": {"level": "P1", "protocol": "direct", "max_tokens": 16},
    }


def _rows(path: Path) -> list[dict[str, Any]]:
    return pq.read_table(path).to_pylist()


def test_guess_number_against_real_server(tmp_path: Path) -> None:
    run_file = tmp_path / "real.yaml"
    run_file.write_text(yaml.safe_dump(_run_file(), sort_keys=False))
    out = tmp_path / "run"
    proc = forkserver.run(
        [sys.executable, "-m", "populace.cli", "run", str(run_file), "--out", str(out)],
        capture_output=True, text=True, timeout=1800,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, f"populace run failed ({proc.returncode}):\n" \
        f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"

    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed", summary
    assert summary["agents"] == AGENTS

    rows = _rows(out / "responses.parquet")
    assert len(rows) == AGENTS
    errors = [(r["agent_id"], r["error"]) for r in rows if r["error"]]
    assert not errors, f"model errors: {errors}"
    empty = [r["agent_id"] for r in rows if not (r["raw"] or "").strip()]
    assert not empty, f"agents without a response: {empty}"
    valid = [r["number"] for r in rows if r["valid"]]
    assert valid, "no valid number in: " + "; ".join(repr(r["raw"]) for r in rows)
    assert all(0 <= n <= 100 for n in valid)

    usage = summary["steps"][0]["usage"]["real"]
    assert usage["calls"] == AGENTS
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0, usage
    assert sum(r["prompt_tokens"] for r in rows) == usage["prompt_tokens"]
