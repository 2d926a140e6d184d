"""Values that would make nonsense are refused before anything runs: one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import run_in_process

GAME = "scenario: guess_number\n"
GAME_BYTES = GAME.encode()


@pytest.mark.parametrize(("text", "message"), [
    (GAME + "agents: true\n", "agents: Input should be a valid integer"),
    (GAME + "rounds: 2.5\n", "steps: Input should be a valid integer"),
    (GAME + "game: {low: .nan}\n", "game.low: Input should be a finite number"),
    (GAME + "game: {offset: .inf}\n", "game.offset: Input should be a finite number"),
    (GAME + "models: {d: {provider: dummy, latency: .inf}}\n",
     "models.d.latency: Input should be a finite number"),
    (GAME + "agents: 10\nagents: 20\n", "the key 'agents' is given twice"),
    (GAME + "game: {ratio: 1/2, ratio: 2/3}\n", "the key 'ratio' is given twice"),
    ("", "the run file is empty"),
    ("# only a comment\n", "the run file is empty"),
], ids=["bool-agents", "float-rounds", "nan-low", "inf-offset", "inf-latency",
        "duplicate-key", "duplicate-nested-key", "empty", "comment-only"])
def test_a_value_that_makes_nonsense_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    text: str, message: str,
) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", path, "--out", tmp_path / "o")
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}"), stderr
    assert message in lines[0]
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("content", "message"), [
    (b"name: caf\xe9\n", "not UTF-8 text (byte 9: 0xe9); save it as UTF-8"),
    ("name: x\n".encode("utf-16"), "not UTF-8 text (byte 0: 0xff)"),
    (b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n", "invalid YAML: nested too deeply"),
    (GAME_BYTES + b"agents: 1000000000000\n",
     "agents: Input should be less than or equal to 1000000000"),
    (GAME_BYTES + b"workers: 1000000\n", "workers: Input should be less than or equal to 4096"),
], ids=["latin-1", "utf-16", "deep", "huge-agents", "huge-workers"])
def test_a_run_file_that_cannot_be_a_run_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    content: bytes, message: str,
) -> None:
    path = tmp_path / "run.yaml"
    path.write_bytes(content)
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", path, "--out", tmp_path / "o")
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in stderr, stderr
    assert not (tmp_path / "o").exists()


def test_a_fifo_or_a_device_as_the_run_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    import os

    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero")):
        code, _, stderr = run_in_process(capsys, monkeypatch, "run", path)
        assert (code, stderr.strip()) == (2, f"error: {path}: not a regular file")


def test_a_run_file_too_large_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(b"# " + b"x" * (5 * 2**20) + b"\n")
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", path)
    assert (code, stderr.strip()) == (2, f"error: {path}: larger than 4 MiB; a run file holds "
                                         "settings, not data")
