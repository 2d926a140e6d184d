"""``populace serve-llm`` and ``populace run-batch``: a test LLM with no GPU, served over
HTTP or answering a batch file (``populace.llm.offline``)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from populace._strict import MAX_LATENCY_S, MAX_TIMEOUT_S

from ._app import EXIT_CONFIG, Fail, bool_option, check_seconds, check_writable, out, path_is


def serve_llm(
    host: Annotated[str, typer.Option(help="address to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="port (0: any free one)")] = 8000,
    model: Annotated[list[str] | None, typer.Option(help="model name served (repeatable)")
                     ] = None,
    latency: Annotated[float, typer.Option(min=0, max=MAX_LATENCY_S, help="seconds per "
                                           "answer")] = 0.0,
    latency_max: Annotated[float | None, typer.Option(
        min=0, max=MAX_LATENCY_S,
        help=escape("with --latency: answer after a uniform time in [latency, latency-max]"))
    ] = None,
    policy: Annotated[str, typer.Option(help="random | reasoning | echo | scripted")
                      ] = "reasoning",
    low: Annotated[int, typer.Option(help="smallest number answered")] = 0,
    high: Annotated[int, typer.Option(help="largest number answered")] = 100,
    error_500: Annotated[float, typer.Option(min=0, max=1, help="share of HTTP 500s")] = 0.0,
    error_429: Annotated[float, typer.Option(min=0, max=1, help="share of HTTP 429s")] = 0.0,
    error_timeout: Annotated[float, typer.Option(min=0, max=1, help="share never answered")
                             ] = 0.0,
    malformed: Annotated[float, typer.Option(min=0, max=1, help="share of broken JSON bodies")
                         ] = 0.0,
    seed: Annotated[int, typer.Option(help="seed of answers and injected errors")] = 0,
    api_key: Annotated[str | None, typer.Option(help="require this bearer token")] = None,
    outage: Annotated[tuple[float, float] | None, typer.Option(
        help="START DURATION: answer 503 to every completion from START to START+DURATION "
             "seconds after the first one")] = None,
    retry_after: Annotated[float, typer.Option(
        min=0, max=MAX_TIMEOUT_S,
        help="seconds asked to wait by the Retry-After of 429s and outage 503s")] = 1.0,
    batch_latency: Annotated[float, typer.Option(
        min=0, max=MAX_TIMEOUT_S,
        help="seconds a batch job (/v1/batches) takes for all its requests")] = 0.5,
    reasoning_tokens: Annotated[tuple[int, int], typer.Option(
        help="LOW HIGH: with --policy reasoning, tokens of reasoning answering a prompt "
             "that asks to think step by step, uniform in [LOW, HIGH] (0 0: one sentence)")
    ] = (100, 300),
    engine: Annotated[bool, bool_option(
        "engine", "time completions on a simulated GPU engine (an 8B model on one A100 "
        "under vLLM unless changed below; docs/engine.md)")] = False,
    gpu: Annotated[str | None, typer.Option(
        help="with --engine: a100 or h100, the parameters of an 8B model on that GPU")] = None,
    prefill_rate: Annotated[float | None, typer.Option(
        help="with --engine: prompt tokens computed per second")] = None,
    decode_step: Annotated[float | None, typer.Option(
        help="with --engine: seconds of one decode step at batch size 1")] = None,
    decode_step_per_seq: Annotated[float | None, typer.Option(
        help="with --engine: seconds each running sequence adds to a decode step")] = None,
    decode_step_per_token: Annotated[float | None, typer.Option(
        help="with --engine: seconds each token of context adds to a decode step")] = None,
    max_batched_tokens: Annotated[int | None, typer.Option(
        help="with --engine: most tokens computed in one iteration "
             "(vLLM's max_num_batched_tokens)")] = None,
    max_batch: Annotated[int | None, typer.Option(
        help="with --engine: most sequences decoded at once (vLLM's max_num_seqs)")] = None,
    cache_blocks: Annotated[int | None, typer.Option(
        help="with --engine: KV cache capacity (running sequences and cached prefixes), "
             "in blocks of 16 tokens")] = None,
    time_scale: Annotated[float | None, typer.Option(
        help="with --engine: simulated seconds per real second")] = None,
    max_running: Annotated[int | None, typer.Option(
        help="answer 429 to a completion arriving while this many are in flight")] = None,
) -> None:
    """Serve an OpenAI-compatible test LLM (/v1/models, /v1/chat/completions, /v1/completions,
    /v1/files and /v1/batches)."""
    from populace.llm.offline import ServerOptions, serve

    check_seconds("--latency", latency, MAX_LATENCY_S)
    if latency_max is not None:
        check_seconds("--latency-max", latency_max, MAX_LATENCY_S)
    check_seconds("--retry-after", retry_after, MAX_TIMEOUT_S)
    check_seconds("--batch-latency", batch_latency, MAX_TIMEOUT_S)
    tuning = {"prefill_tokens_per_s": ("--prefill-rate", prefill_rate),
              "decode_step_s": ("--decode-step", decode_step),
              "decode_step_per_seq_s": ("--decode-step-per-seq", decode_step_per_seq),
              "decode_step_per_token_s": ("--decode-step-per-token", decode_step_per_token),
              "max_batch": ("--max-batch", max_batch),
              "max_batched_tokens": ("--max-batched-tokens", max_batched_tokens),
              "cache_blocks": ("--cache-blocks", cache_blocks),
              "time_scale": ("--time-scale", time_scale)}
    given = {name: value for name, (_, value) in tuning.items() if value is not None}
    if (given or gpu is not None) and not engine:
        flag = next((f for name, (f, _) in tuning.items() if name in given), "--gpu")
        raise Fail(f"serve-llm: {flag} needs --engine", EXIT_CONFIG)

    try:
        engine_params = None
        if engine:
            from populace.llm.offline import EngineParams

            engine_params = EngineParams.for_gpu(gpu or "a100", **given)
        options = ServerOptions(
            models=tuple(model or ["dummy"]),
            latency=(latency, latency_max) if latency_max is not None else latency,
            policy=policy,  # type: ignore[arg-type]
            low=low, high=high, rate_500=error_500, rate_429=error_429,
            rate_timeout=error_timeout, rate_malformed=malformed, seed=seed, api_key=api_key,
            outage=outage, retry_after=retry_after, batch_latency=batch_latency,
            engine=engine_params, max_running=max_running, reasoning_tokens=reasoning_tokens,
        )
    except ValueError as e:
        message = str(e)  # the engine's messages name the field: name the flag instead
        for name, (flag, _) in {**tuning, "max_running": ("--max-running", None),
                                "reasoning_tokens": ("--reasoning-tokens", None),
                                "gpu": ("--gpu", None)}.items():
            if message.startswith(f"{name} "):
                message = flag + message.removeprefix(name)
        raise Fail(f"serve-llm: {message}", EXIT_CONFIG) from None

    def ready(url: str) -> None:
        if engine_params is not None:
            p = engine_params
            out.print(f"engine: {p.prefill_tokens_per_s:g} prompt tokens/s, decode step "
                      f"{p.decode_step_s:g} s + {p.decode_step_per_seq_s:g} s per sequence + "
                      f"{p.decode_step_per_token_s:g} s per context token, batch up to "
                      f"{p.max_batch} sequences and {p.max_batched_tokens} tokens, "
                      f"{p.cache_blocks} KV blocks, time x{p.time_scale:g}",
                      soft_wrap=True, highlight=False)
        out.print(f"serving {', '.join(options.models)} at [bold]{url}[/bold] (Ctrl-C stops)",
                  soft_wrap=True)

    try:
        asyncio.run(serve(host, port, options, ready=ready))
    except OSError as e:
        raise Fail(f"serve-llm: cannot listen on {host}:{port}: {e.strerror}", 1) from None


def run_batch(
    input_file: Annotated[Path, typer.Option(
        "-i", "--input-file", help="batch input file (JSONL: custom_id, method, url, body)")],
    output_file: Annotated[Path, typer.Option(
        "-o", "--output-file", help="output file to write (vLLM run_batch's format)")],
    model: Annotated[str, typer.Option(help="model name answered; others get 404 lines")
                     ] = "dummy",
    policy: Annotated[str, typer.Option(help="random | reasoning | echo | scripted")
                      ] = "reasoning",
    latency: Annotated[float, typer.Option(min=0, max=MAX_TIMEOUT_S,
                                           help="seconds for the whole batch")] = 0.0,
    seed: Annotated[int, typer.Option(help="seed of answers and injected errors")] = 0,
    low: Annotated[int, typer.Option(help="smallest number answered")] = 0,
    high: Annotated[int, typer.Option(help="largest number answered")] = 100,
    error_500: Annotated[float, typer.Option(min=0, max=1, help="share of HTTP 500 lines")
                         ] = 0.0,
) -> None:
    """Answer a batch file offline like vLLM's run_batch, with serve-llm's answers (no GPU)."""
    from populace.llm.offline import ServerOptions
    from populace.llm.offline import run_batch as answer_batch

    check_seconds("--latency", latency, MAX_TIMEOUT_S)
    try:
        options = ServerOptions(models=(model,), policy=policy,  # type: ignore[arg-type]
                                low=low, high=high, rate_500=error_500, seed=seed,
                                batch_latency=latency)
    except ValueError as e:
        raise Fail(f"run-batch: {e}", EXIT_CONFIG) from None
    if not path_is(input_file, Path.is_file, "--input-file"):  # a FIFO or /dev/zero would hang
        why = "not a regular file" if path_is(input_file, Path.exists, "--input-file") \
            else "no such file"
        raise Fail(f"--input-file {input_file}: {why}", EXIT_CONFIG)
    check_writable(output_file, "--output-file")
    try:
        counts = asyncio.run(answer_batch(input_file, output_file, options))
    except ValueError as e:  # a bad line of the input file
        raise Fail(str(e), EXIT_CONFIG) from None
    except OSError as e:  # the output file: a full disk, no permission
        raise Fail(f"--output-file {output_file}: cannot write: {e.strerror or e}",
                   EXIT_CONFIG) from None
    out.print(f"{counts['total']:,} requests: {counts['completed']:,} answered, "
              f"{counts['failed']:,} failed; written to [bold]{escape(str(output_file))}[/bold]",
              soft_wrap=True)
