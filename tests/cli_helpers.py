"""Running the ``populace`` command in the test process (shared by several test files)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from populace.cli import main


def run_in_process(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                   *args: str | Path) -> tuple[int, str, str]:
    """Run ``populace ARGS`` here; returns exit status, stdout, stderr (of this call only)."""
    monkeypatch.setattr(sys, "argv", ["populace", *map(str, args)])
    monkeypatch.setenv("COLUMNS", "200")
    capsys.readouterr()
    code = 0
    try:
        main()
    except SystemExit as e:
        code = int(e.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_ok(*args: str | Path) -> None:
    """Run ``populace ARGS`` here and require exit 0 (for module-scoped fixtures, which
    cannot take ``capsys``)."""
    saved = sys.argv
    sys.argv = ["populace", *map(str, args)]
    try:
        main()
    except SystemExit as e:
        assert not e.code, args
    finally:
        sys.argv = saved
