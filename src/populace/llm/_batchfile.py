"""Batch files: the JSONL of the OpenAI Batch API and of vLLM's offline ``run_batch``.

Input, one request a line::

    {"custom_id": "a1", "method": "POST", "url": "/v1/chat/completions", "body": {...}}

Output, one result a line (OpenAI's ``BatchRequestOutput``, which vLLM's run_batch writes
too)::

    {"id": ..., "custom_id": "a1",
     "response": {"status_code": 200, "request_id": ..., "body": <chat completion>},
     "error": null}

The two differ only in how a failure reads. OpenAI keeps the error object in
``response.body`` (``{"error": {"message", "type", ...}}``) and puts failures that never got
an HTTP answer in ``error`` as ``{"code", "message"}`` with ``response`` null; vLLM leaves
``body`` null and puts its ``ErrorResponse`` (``{"error": {..., "code": <status>}}``; older
versions a flat ``{"object": "error", "message", ...}``) or a plain message in ``error``.
:func:`read_output` reads all of these.

>>> write_input("in.jsonl", [("a1", {"model": "m", "messages": [{"role": "user",
...                                                              "content": "Hi"}]})])
... # doctest: +SKIP
>>> read_output("out.jsonl")["a1"]  # doctest: +SKIP
BatchResult(text='Hello', prompt_tokens=1, completion_tokens=1, error=None)
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, NamedTuple

CHAT_URL = "/v1/chat/completions"

Style = Literal["openai", "vllm"]


class BatchResult(NamedTuple):
    """One request's outcome in an output file: the reply text (None when it failed, or
    when the model answered no text), its token counts, and the failure as one line."""

    text: str | None
    prompt_tokens: int
    completion_tokens: int
    error: str | None


class InputProblem(NamedTuple):
    """Why a line of an input file cannot be run; ``code`` is the OpenAI Batch API's."""

    line: int | None
    code: str
    message: str


# -- input -----------------------------------------------------------------------------------
def encode_lines(lines: Iterable[Mapping[str, Any]]) -> bytes:
    """JSON lines, each ending in a newline."""
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def write_input(path: str | os.PathLike[str],
                requests: Iterable[tuple[str, Mapping[str, Any]]], *,
                url: str = CHAT_URL) -> None:
    """Write a batch input file: one ``{"custom_id", "method": "POST", "url", "body"}`` line
    per ``(custom_id, body)``, in order. Custom ids must be unique non-empty strings."""
    seen: set[str] = set()
    lines = []
    for custom_id, body in requests:
        if not isinstance(custom_id, str) or not custom_id:
            raise ValueError(f"custom_id must be a non-empty string, got {custom_id!r}")
        if custom_id in seen:
            raise ValueError(f"custom_id {custom_id!r} is used twice")
        if not isinstance(body, Mapping):
            raise ValueError(f"the body of {custom_id!r} must be a mapping, "
                             f"got {type(body).__name__}")
        seen.add(custom_id)
        lines.append({"custom_id": custom_id, "method": "POST", "url": url, "body": dict(body)})
    _replace(Path(path), encode_lines(lines))


def _json_lines(data: bytes | str) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` of each non-blank line; the value is the
    :class:`ValueError` of a line that is not JSON (each caller has its own policy)."""
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except ValueError as e:
            yield n, e
            continue
        yield n, line


def parse_input(data: bytes | str, *, url: str = CHAT_URL
                ) -> tuple[list[tuple[str, dict[str, Any]]], list[InputProblem]]:
    """The ``(custom_id, body)`` requests of an input file's content, and every problem
    found (a batch with problems is not run). Blank lines are skipped."""
    requests: list[tuple[str, dict[str, Any]]] = []
    problems: list[InputProblem] = []
    first_line: dict[str, int] = {}
    for n, line in _json_lines(data):
        if isinstance(line, ValueError):
            problems.append(InputProblem(n, "invalid_json_line",
                                         f"line {n} is not valid JSON ({line.args[0]})"))
            continue
        problem = _check_request(line, n, url, first_line)
        if problem is not None:
            problems.append(problem)
            continue
        first_line[line["custom_id"]] = n
        requests.append((line["custom_id"], line["body"]))
    if not requests and not problems:
        problems.append(InputProblem(None, "empty_file", "the input file has no requests"))
    return requests, problems


def _check_request(line: Any, n: int, url: str, first_line: dict[str, int]
                   ) -> InputProblem | None:
    if not isinstance(line, dict):
        return InputProblem(n, "invalid_json_line", f"line {n} is not a JSON object")
    for field in ("custom_id", "method", "url", "body"):
        if field not in line:
            return InputProblem(n, "missing_required_parameter", f"line {n} has no {field}")
    custom_id = line["custom_id"]
    if not isinstance(custom_id, str) or not custom_id:
        return InputProblem(n, "invalid_custom_id",
                            f"line {n}: custom_id must be a non-empty string")
    if custom_id in first_line:
        return InputProblem(n, "duplicate_custom_id", f"line {n}: custom_id {custom_id!r} "
                            f"is used by line {first_line[custom_id]} too")
    if line["method"] != "POST":
        return InputProblem(n, "invalid_method",
                            f"line {n}: method must be POST, got {line['method']!r}")
    if line["url"] != url:
        return InputProblem(n, "invalid_url", f"line {n}: url must be {url} (the batch's "
                            f"endpoint), got {line['url']!r}")
    body = line["body"]
    if not isinstance(body, dict):
        return InputProblem(n, "invalid_body", f"line {n}: body must be a JSON object")
    if url == CHAT_URL and (not isinstance(body.get("model"), str)
                            or not isinstance(body.get("messages"), list)):
        return InputProblem(n, "invalid_body", f"line {n}: body must be a chat request "
                            "(a model name and a list of messages)")
    return None


def read_input(path: str | os.PathLike[str], *, url: str = CHAT_URL
               ) -> list[tuple[str, dict[str, Any]]]:
    """The requests of an input file; its first problem raises a one-line ValueError
    naming the file and the line."""
    requests, problems = parse_input(Path(path).read_bytes(), url=url)
    if problems:
        p = problems[0]
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        raise ValueError(f"{path}: {p.message}{more}")
    return requests


# -- output ----------------------------------------------------------------------------------
def result_line(style: Style, *, line_id: str, custom_id: str, request_id: str, status: int,
                body: Mapping[str, Any]) -> dict[str, Any]:
    """One output line for a request answered ``status`` with the JSON ``body`` the chat
    endpoint would send (a completion, or ``{"error": {...}}``), as ``style`` writes it."""
    if 200 <= status < 300 or style == "openai":
        return {"id": line_id, "custom_id": custom_id,
                "response": {"status_code": status, "request_id": request_id,
                             "body": dict(body)},
                "error": None}
    err = body.get("error")
    err = err if isinstance(err, dict) else {}
    return {"id": line_id, "custom_id": custom_id,
            "response": {"status_code": status, "request_id": request_id, "body": None},
            "error": {"error": {"message": err.get("message", ""), "type": err.get("type", ""),
                                "param": err.get("param"), "code": status}}}


def write_output(path: str | os.PathLike[str], lines: Iterable[Mapping[str, Any]]) -> None:
    """Write output lines; the file appears whole or not at all."""
    _replace(Path(path), encode_lines(lines))


def read_output(path: str | os.PathLike[str]) -> dict[str, BatchResult]:
    """Every request's result in an output (or error) file, by custom id: the OpenAI Batch
    API's files and vLLM run_batch's alike. A line that cannot be read raises a one-line
    ValueError naming the file and the line."""
    return parse_output(Path(path).read_bytes(), source=str(path))


def parse_output(data: bytes | str, *, source: str = "batch output"
                 ) -> dict[str, BatchResult]:
    """:func:`read_output` of content already read (a downloaded file); ``source`` names it
    in errors."""
    results: dict[str, BatchResult] = {}
    for n, line in _json_lines(data):
        if isinstance(line, ValueError):
            raise ValueError(f"{source}, line {n}: not valid JSON ({line.args[0]})") from None
        if not isinstance(line, dict):
            raise ValueError(f"{source}, line {n}: not a JSON object")
        custom_id = line.get("custom_id")
        if not isinstance(custom_id, str) or not custom_id:
            raise ValueError(f"{source}, line {n}: no custom_id")
        if custom_id in results:
            raise ValueError(f"{source}, line {n}: custom_id {custom_id!r} appears twice")
        try:
            results[custom_id] = _result(line)
        except ValueError as e:
            raise ValueError(f"{source}, line {n} ({custom_id}): {e}") from None
    return results


def _result(line: dict[str, Any]) -> BatchResult:
    response, error = line.get("response"), line.get("error")
    if response is not None and not isinstance(response, dict):
        raise ValueError("response must be an object or null")
    status = None if response is None else response.get("status_code", 200)
    if status is not None and type(status) is not int:
        raise ValueError(f"status_code must be an integer, got {status!r}")
    body = None if response is None else response.get("body")
    if error is None and status is not None and 200 <= status < 300:
        return _completion(body)
    if response is None and error is None:
        raise ValueError("neither a response nor an error")
    detail = _message_of(error) or _message_of(body) or "no details given"
    return BatchResult(None, 0, 0, f"HTTP {status}: {detail}" if status is not None
                       else detail)


def _completion(body: Any) -> BatchResult:
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ValueError("the response body has no choices")
    choice = choices[0]
    message = choice.get("message")
    text = message.get("content") if isinstance(message, dict) else choice.get("text")
    if text is not None and not isinstance(text, str):
        raise ValueError("the reply content is not a string")
    usage = body.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    prompt, completion = (usage.get(k) for k in ("prompt_tokens", "completion_tokens"))
    return BatchResult(text, prompt if type(prompt) is int else 0,
                       completion if type(completion) is int else 0, None)


def _message_of(x: Any) -> str | None:
    """The message of an error in any of its shapes, on one line."""
    if isinstance(x, str):
        return " ".join(x.split()) or None
    if not isinstance(x, dict):
        return None
    inner = x.get("error")
    if isinstance(inner, str):
        return _message_of(inner)
    if isinstance(inner, dict):
        x = inner
    message = _message_of(x.get("message"))
    if message is None:
        return None
    label = next((v for v in (x.get("code"), x.get("type"))
                  if isinstance(v, str) and v), None)
    return f"{message} ({label})" if label else message


def _replace(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file beside it; an OSError names
    ``path`` (never the temporary file)."""
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise type(e)(e.errno, e.strerror, str(path)) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException as e:
        os.unlink(tmp)
        if isinstance(e, OSError):
            raise type(e)(e.errno, e.strerror, str(path)) from None
        raise
