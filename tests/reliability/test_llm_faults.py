"""A misbehaving LLM server: 20% injected errors and a 5 s outage in the middle of the run.

The run talks to ``populace serve-llm`` over loopback with the ``openai`` provider, as it
would to vLLM. Retries (with the server's ``Retry-After``) carry every call through; the
answers depend only on each request's seed, so the numbers equal those of a run against a
server that never fails.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pyarrow.compute as pc
import pytest

from game_helpers import game_file
from populace.llm.offline import ServerOptions, running_server
from populace.results import RunDirectory, read_summary, read_table
from populace.scenarios.guess_number import play

AGENTS, ROUNDS = 200, 3


def run_data(base_url: str) -> dict[str, Any]:
    """A run of the game against the server at ``base_url`` (two calls per agent-round)."""
    return {
        "scenario": "guess_number", "name": "faulty-llm", "seed": 5, "agents": AGENTS,
        "rounds": ROUNDS, "workers": 2,
        "models": {"llm": {
            "provider": "openai", "model": "dummy", "base_urls": [base_url],
            # Enough retries to outlast the outage (one every 0.25 s, by Retry-After) plus
            # the injected errors around it; 4 (the default) would give up inside it.
            # Backoff capped at 1 s: after that many failures the default (8 s) would make
            # the last calls of a round wait long after the server is back.
            "max_retries": 40, "max_backoff": 1.0, "max_concurrency": 512, "timeout": 10,
        }},
        "game": {"protocol": "two_call"},
    }


async def _against_clean_server(run_dir: Path) -> None:
    async with running_server(ServerOptions(policy="reasoning", seed=99)) as url:
        await play(game_file(run_data(url)), RunDirectory.create(run_dir))


def _stats(base_url: str) -> dict[str, Any]:
    root = base_url.removesuffix("/v1")
    with urllib.request.urlopen(f"{root}/stats", timeout=10) as resp:
        return json.loads(resp.read())  # type: ignore[no-any-return]


def test_errors_and_an_outage_lose_nothing(
    tmp_path: Path, populace: Callable[..., Any], helpers: Any,
) -> None:
    server = populace("serve-llm", "--port", "0", "--policy", "reasoning", "--seed", "3",
                      "--latency", "0.2", "--error-500", "0.08", "--error-429", "0.06",
                      "--malformed", "0.06", "--outage", "1", "5", "--retry-after", "0.25")
    line = server.wait_for("serving dummy at ", timeout=60)
    base_url = line.split(" at ", 1)[1].split()[0]
    path = tmp_path / "run.yaml"
    path.write_text(json.dumps(run_data(base_url)))  # JSON is YAML
    out = tmp_path / "out"
    rc, _, stderr = populace("run", path, "--out", out).finish(timeout=120)
    assert rc == 0, stderr
    assert "Traceback" not in stderr

    stats = _stats(base_url)
    injected = stats["injected"]
    assert injected.get("outage", 0) > 0  # the run went on through the outage...
    assert {"500", "429", "malformed"} <= set(injected)  # ...and through the errors
    assert stats["status"]["503"] == injected["outage"]
    # Every agent-round made its two calls; the failed attempts were retried.
    table = read_table(out)
    assert pc.sum(table.column("calls")).as_py() == 2 * AGENTS * ROUNDS
    assert pc.sum(table.column("retries")).as_py() > 0
    assert table.column("error").null_count == table.num_rows  # no call gave up
    assert pc.all(table.column("valid")).as_py()

    clean = tmp_path / "clean"
    asyncio.run(_against_clean_server(clean))
    helpers.assert_complete_and_equal(out, read_table(clean))
    assert [r["winner_number"] for r in read_summary(out)["steps"]] == \
        [r["winner_number"] for r in read_summary(clean)["steps"]]


def test_answers_depend_on_the_request_seed_only() -> None:
    """The property the test above relies on: server seed, latency and faults do not change
    what a request is answered (its fate and timing aside)."""

    async def ask(options: ServerOptions) -> list[str]:
        import aiohttp

        async with running_server(options) as url, aiohttp.ClientSession() as session:
            texts = []
            for seed in range(40):
                body = {"model": "dummy", "seed": seed,
                        "messages": [{"role": "user", "content": f"Pick a number ({seed})"}]}
                for _ in range(20):  # retry injected failures
                    async with session.post(f"{url}/chat/completions", json=body) as resp:
                        raw = await resp.read()
                    if resp.status == 200:
                        try:
                            texts.append(json.loads(raw)["choices"][0]["message"]["content"])
                            break
                        except ValueError:
                            continue  # a malformed body
                else:
                    pytest.fail("no answer after 20 attempts")
            return texts

    async def both() -> tuple[list[str], list[str]]:
        clean = await ask(ServerOptions(policy="reasoning", seed=1))
        faulty = await ask(ServerOptions(policy="reasoning", seed=2, latency=(0.0, 0.01),
                                         rate_500=0.1, rate_429=0.1, rate_malformed=0.1,
                                         retry_after=0))
        return clean, faulty

    clean, faulty = asyncio.run(both())
    assert clean == faulty
    assert len(set(clean)) > 10  # and they do differ from seed to seed


def test_outage_answers_503_for_its_duration() -> None:
    async def probe() -> list[int]:
        import aiohttp

        options = ServerOptions(outage=(0.2, 0.3), retry_after=0.5)
        body = {"model": "dummy", "seed": 1, "messages": [{"role": "user", "content": "hi"}]}
        statuses = []
        async with running_server(options) as url, aiohttp.ClientSession() as session:
            for delay in (0.0, 0.25, 0.1, 0.3):  # at 0, 0.25, 0.35 and 0.65 s
                await asyncio.sleep(delay)
                async with session.post(f"{url}/chat/completions", json=body) as resp:
                    statuses.append(resp.status)
                    if resp.status == 503:
                        assert resp.headers["Retry-After"] == "0.5"
            async with session.get(url.removesuffix("/v1") + "/stats") as resp:
                stats = await resp.json()
        assert stats["injected"] == {"outage": 2}
        assert stats["requests"] == 2  # outage answers do not shift the others' fates
        return statuses

    assert asyncio.run(probe()) == [200, 503, 503, 200]


@pytest.mark.parametrize("outage", [(1.0,), (1.0, -1.0), (-1.0, 2.0)])
def test_outage_is_validated(outage: Any) -> None:
    with pytest.raises(ValueError, match="outage must be"):
        ServerOptions(outage=outage)


def test_serve_llm_refuses_a_bad_outage(monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    from populace.cli import main

    monkeypatch.setattr(sys, "argv", ["populace", "serve-llm", "--outage", "1", "-2"])
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 2
    assert capsys.readouterr().err.strip() == (
        "error: serve-llm: outage must be (start, duration) with both >= 0, got (1.0, -2.0)")


async def _half_failing_run(run_dir: Path) -> int:
    data = run_data("")
    data.update(rounds=2, game={"on_model_error": "continue", "protocol": "two_call"})
    async with running_server(ServerOptions(policy="reasoning", seed=4, rate_500=0.3)) as url:
        data["models"]["llm"].update(base_urls=[url], max_retries=1, max_backoff=0.0)
        await play(game_file(data), RunDirectory.create(run_dir))
        async with aiohttp.ClientSession() as session, \
                session.get(f"{url.removesuffix('/v1')}/stats") as resp:
            return (await resp.json())["requests"]  # type: ignore[no-any-return]


def test_every_request_sent_is_counted_failed_ones_too(tmp_path: Path) -> None:
    """Each step's summary entry counts the calls its models made (``llm``): requests,
    retries, what was sent in all, failures. They add up to what the server received,
    including the calls that gave up, and the failures match the rows that have an error."""
    run_dir = tmp_path / "run"
    seen = asyncio.run(_half_failing_run(run_dir))
    steps = read_summary(run_dir)["steps"]
    counted = [s["llm"]["llm"] for s in steps]
    assert sum(c["sent"] for c in counted) == seen
    assert all(c["sent"] == c["requests"] + c["retries"] for c in counted)
    table = read_table(run_dir)
    failed_rows = table.num_rows - table.column("error").null_count
    assert sum(c["failures"] for c in counted) >= failed_rows > 0  # a row fails on any call
    assert sum(c["retries"] for c in counted) > 0


def test_a_replay_restores_each_rows_retries(tmp_path: Path) -> None:
    """``--replay`` answers from the recording with the retries each answer needed then,
    so the replayed rows equal the recorded run's (they were all 0 before)."""
    run_dir = tmp_path / "run"
    asyncio.run(_half_failing_run(run_dir))
    data = run_data("http://127.0.0.1:9/v1")  # nothing listens: every answer is replayed
    data.update(rounds=2, game={"on_model_error": "continue", "protocol": "two_call"})
    replayed = tmp_path / "replayed"
    asyncio.run(play(game_file(data), RunDirectory.create(replayed),
                     replay=run_dir))
    before, after = read_table(run_dir), read_table(replayed)
    answered = pc.is_null(before.column("error"))
    assert pc.sum(before.filter(answered).column("retries")).as_py() > 0
    assert after.filter(answered).column("retries").equals(
        before.filter(answered).column("retries"))
    assert after.filter(answered).column("number").equals(
        before.filter(answered).column("number"))
