"""Prompt layout vs a real server's prefix cache: persona_first against shared_first.

    .venv/bin/python benchmarks/real_prefix.py --base-url http://127.0.0.1:8090/v1 \\
        --model smollm2-135m-instruct [--restart 'CMD'] [--repeat 2]

Plays the guessing game (1 round, ``protocol: direct``, small ``max_tokens``) once per
layout with the same population — aspect ``education``, a background per agent written by
the scripted model (no server time), so every agent has its own persona — by writing a run
file per layout and calling ``populace run`` as a subprocess. Around each run it reads the
server's Prometheus counters (llama.cpp's ``/metrics``; start llama-server with
``--metrics``): ``llamacpp:prompt_tokens_total`` (prompt tokens actually computed, cached ones
excluded) and ``llamacpp:prompt_tokens_cached_total`` (prompt tokens reused from the cache),
and prints, per layout, the prompt tokens the server processed, the prompt tokens Populace
sent (summary.json usage, as the server reported them), the ratio, the cached tokens and
the wall time.

Fairness. Both runs use the same seed, so the same agents with the same backgrounds and the
same rules: the two prompts of an agent hold the same text in a different order, and the
sent token counts differ only by the few tokens of the layouts' glue. What one run leaves
in the server's cache must not help the next one:

- ``--restart CMD`` runs a shell command before every run that must leave a fresh server
  behind (e.g. kill it and start it again); the script waits for ``/health``. This is the
  clean comparison: llama.cpp's host-memory prompt cache (``--cache-ram``) survives
  anything but a restart.
- without it, the script tries to erase every slot's KV cache (``POST
  /slots/ID?action=erase``, which llama.cpp allows only with ``--slot-save-path``) before
  each run, and in any case runs the layouts in the order given (persona_first first by default):
  a persona_first slot opens with a persona, which no shared_first prompt starts with, so
  leftovers cannot help shared_first by more than a few template tokens. The cached counter
  of each run shows what was reused anyway.

The counters are server-wide: nothing else should use the server meanwhile (the script
checks ``llamacpp:requests_processing`` is 0 before each run).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import yaml

LAYOUTS = ("persona_first", "shared_first")
COUNTERS = {
    "processed": "llamacpp:prompt_tokens_total",
    "cached": "llamacpp:prompt_tokens_cached_total",
    "prompt_s": "llamacpp:prompt_seconds_total",
    "predicted": "llamacpp:tokens_predicted_total",
    "decode_s": "llamacpp:tokens_predicted_seconds_total",
}


def server_root(base_url: str) -> str:
    """``http://host:port/v1`` → ``http://host:port`` (where /metrics and /slots live)."""
    return re.sub(r"/v1/?$", "", base_url.rstrip("/"))


def _get(url: str, timeout: float = 10.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def metrics(root: str) -> dict[str, float]:
    """Every sample of the server's Prometheus text, by metric name (no labels here)."""
    out: dict[str, float] = {}
    for line in _get(root + "/metrics").splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                out[name.strip()] = float(value)
            except ValueError:
                pass
    missing = [m for m in COUNTERS.values() if m not in out]
    if missing:
        raise SystemExit(f"{root}/metrics lacks {', '.join(missing)}: is this llama.cpp's "
                         "server, started with --metrics?")
    return out


def wait_healthy(root: str, seconds: float = 300.0) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            _get(root + "/health", timeout=5)
            return
        except (urllib.error.URLError, OSError):
            if time.monotonic() > deadline:
                raise SystemExit(f"{root}/health does not answer after {seconds:.0f} s") from None
            time.sleep(1)


def erase_slots(root: str) -> str:
    """Erase every slot's KV cache (llama.cpp allows it only with ``--slot-save-path``);
    says what was done."""
    try:
        slots = json.loads(_get(root + "/slots"))
    except (urllib.error.URLError, OSError, ValueError) as e:
        return f"slots not erased (GET /slots: {e})"
    n, why = 0, ""
    for slot in slots:
        req = urllib.request.Request(f"{root}/slots/{slot['id']}?action=erase", data=b"{}",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10):
                n += 1
        except urllib.error.HTTPError as e:
            why = e.read().decode(errors="replace")[:200]
        except (urllib.error.URLError, OSError) as e:
            why = str(e)
    if n == len(slots):
        return f"erased {n} slots (the host-memory prompt cache stays)"
    return f"slots NOT erased ({why}); earlier runs' cache may be reused"


def layout_supported() -> bool:
    from populace.scenarios.guess_number._config import GameConfig

    return "layout" in GameConfig.model_fields


def run_file(args: argparse.Namespace, layout: str | None) -> dict[str, Any]:
    population: dict[str, Any] = {
        "aspects": {"education": {"values": ["primary school", "high school",
                                             "bachelor's degree", "master's degree",
                                             "doctorate"]}},
        "groups": {"by": "education"},
    }
    models: dict[str, Any] = {"real": {
        "provider": "openai", "model": args.model, "base_urls": [args.base_url],
        "max_concurrency": args.concurrency, "timeout": args.timeout,
    }}
    if args.words:
        population["backgrounds"] = {"model": "scripted", "words": args.words}
        models["scripted"] = {"provider": "scripted"}
    game: dict[str, Any] = {"level": args.level, "protocol": "direct",
                            "max_tokens": args.max_tokens}
    if layout is not None:
        game["layout"] = layout
    return {
        "scenario": "guess_number", "name": f"real-prefix-{layout or 'default'}",
        "seed": args.seed,
        "agents": args.agents, "rounds": 1, "workers": 1,
        "models": models, "model": "real", "population": population, "game": game,
    }


def first_messages(out: Path) -> list[dict[str, Any]]:
    """The messages of the first recorded call (to show which layout was sent)."""
    for path in sorted((out / "llm_calls").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            call = json.loads(line)
            if call.get("model") == "real":
                return call["request"]["messages"]
    return []


def measure(args: argparse.Namespace, layout: str, tmp: Path, i: int) -> dict[str, Any]:
    root = server_root(args.base_url)
    if args.restart:
        subprocess.run(args.restart, shell=True, check=True)
        wait_healthy(root)
        reset = "restarted"
    else:
        reset = erase_slots(root)
    before = metrics(root)
    if before.get("llamacpp:requests_processing", 0):
        raise SystemExit("the server is busy with other requests: its counters would mix them in")
    key = layout if args.layout_key else None
    cfg = tmp / f"{i:02d}-{layout}.yaml"
    cfg.write_text(yaml.safe_dump(run_file(args, key), sort_keys=False))
    out = tmp / f"{i:02d}-{layout}"
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    # --yes: no pilot run before it, in the server's metrics or the wall time
    proc = subprocess.run([sys.executable, "-m", "populace.cli", "run", str(cfg), "--out",
                           str(out), "--yes"], capture_output=True, text=True, env=_env())
    wall = time.perf_counter() - t0
    load1 = os.getloadavg()[0]
    after = metrics(root)
    if proc.returncode != 0:
        raise SystemExit(f"populace run ({layout}) exited {proc.returncode}:\n"
                         f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    summary = json.loads((out / "summary.json").read_text())
    step = summary["steps"][0]
    usage = step["usage"]["real"]
    llm = step.get("llm", {}).get("real", {})
    rows = pq.read_table(out / "responses.parquet").to_pylist()
    delta = {k: after[m] - before[m] for k, m in COUNTERS.items()}
    msgs = first_messages(out)
    return {
        "layout": layout, "reset": reset, "status": summary["status"],
        "sent": usage["prompt_tokens"], "completion": usage["completion_tokens"],
        "processed": int(delta["processed"]), "cached": int(delta["cached"]),
        "prompt_s": round(delta["prompt_s"], 2), "predicted": int(delta["predicted"]),
        "decode_s": round(delta["decode_s"], 2), "load": (round(load0, 2), round(load1, 2)),
        "ratio": delta["processed"] / usage["prompt_tokens"] if usage["prompt_tokens"] else None,
        "wall_s": round(wall, 2), "round_s": step["wall_s"], "n_valid": step["n_valid"],
        "errors": sorted({r["error"] for r in rows if r["error"]}),
        "retries": usage["retries"],
        # what Populace itself saw, where this version records it: the servers' reported
        # usage.prompt_tokens_details.cached_tokens, and its own estimate of the prompt
        # tokens that repeat a prefix already sent to the endpoint
        "populace_cached": llm.get("cached_tokens"), "populace_prefix": llm.get("prefix_tokens"),
        "first_call": [(m["role"], m["content"][:60]) for m in msgs],
        "out": str(out),
    }


def _env() -> dict[str, str]:
    return {**os.environ, "COLUMNS": "200"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", required=True, help="the server's API root, ending in /v1")
    ap.add_argument("--model", required=True, help="model name as the server knows it")
    ap.add_argument("--agents", type=int, default=20)
    ap.add_argument("--concurrency", type=int, default=4,
                    help="Populace's max_concurrency: at most the server's slots")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--level", default="P1")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--words", type=int, default=120,
                    help="background length asked of the scripted writer; 0: no backgrounds "
                         "(the persona is then the one line 'About you: education: ...')")
    ap.add_argument("--layouts", default=",".join(LAYOUTS),
                    help="comma-separated, in the order they are run")
    ap.add_argument("--repeat", type=int, default=1, help="run the whole sequence N times")
    ap.add_argument("--restart", default=None,
                    help="shell command run before every run that leaves a fresh server")
    ap.add_argument("--keep", type=Path, default=None,
                    help="write run files and run directories here (default: a temp dir)")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args()
    layouts = [x.strip() for x in args.layouts.split(",") if x.strip()]
    bad = [x for x in layouts if x not in LAYOUTS]
    if bad:
        ap.error(f"unknown layout {bad[0]!r} (expected {', '.join(LAYOUTS)})")
    args.layout_key = layout_supported()
    if not args.layout_key:
        if layouts != ["persona_first"]:
            ap.error("this Populace has no game.layout setting: only persona_first (its "
                     "fixed layout) can be measured, with --layouts persona_first")
        print("note: no game.layout setting in this Populace; its fixed layout is "
              "persona_first, run without the key")
    root = server_root(args.base_url)
    wait_healthy(root, 30)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="real-prefix-") as td:
        tmp = args.keep or Path(td)
        tmp.mkdir(parents=True, exist_ok=True)
        i = 0
        for rep in range(args.repeat):
            for layout in layouts:
                r = measure(args, layout, tmp, i)
                r["repeat"] = rep
                i += 1
                results.append(r)
                print(f"[{rep}] {layout:13s} processed {r['processed']:6d} / sent "
                      f"{r['sent']:6d} = {r['ratio']:.3f}  cached {r['cached']:6d}  "
                      f"prompt {r['prompt_s']:6.1f} s  decode {r['decode_s']:6.1f} s  "
                      f"wall {r['wall_s']:6.1f} s  valid {r['n_valid']}/{args.agents}  "
                      f"load {r['load'][0]:.1f}->{r['load'][1]:.1f}  ({r['reset']})", flush=True)
                if r["populace_cached"] is not None:
                    print(f"    populace summary: cached_tokens {r['populace_cached']}, "
                          f"prefix_tokens (client estimate) {r['populace_prefix']}")
                if r["errors"]:
                    print(f"    errors: {r['errors']}")
    print()
    print(f"{args.agents} agents, 1 round, direct, max_tokens {args.max_tokens}, "
          f"max_concurrency {args.concurrency}, seed {args.seed}, backgrounds "
          f"{args.words or 'none'} words; server {args.base_url} model {args.model}")
    print(f"{'layout':13s} {'runs':>4s} {'processed':>9s} {'sent':>7s} {'ratio':>6s} "
          f"{'cached':>7s} {'prompt s':>8s} {'decode s':>8s} {'wall s':>7s} {'valid':>5s}"
          "  (medians; prompt/decode s: llama.cpp's per-slot seconds, summed over slots)")
    for layout in layouts:
        rs = [r for r in results if r["layout"] == layout]

        def med(k: str, rs: list[dict[str, Any]] = rs) -> float:
            return statistics.median(r[k] for r in rs)

        print(f"{layout:13s} {len(rs):4d} {med('processed'):9.0f} {med('sent'):7.0f} "
              f"{med('ratio'):6.3f} {med('cached'):7.0f} {med('prompt_s'):8.1f} "
              f"{med('decode_s'):8.1f} {med('wall_s'):7.1f} {med('n_valid'):5.0f}")
        print(f"    first call: {rs[0]['first_call']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
