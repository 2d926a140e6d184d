"""Run files for the launcher's tests: the votes scenario of ``votes.py``, any settings."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

VOTES = Path(__file__).with_name("votes.py")


@pytest.fixture
def votes_file(tmp_path: Path) -> Callable[..., Path]:
    """``votes_file(agents=300, settings={...})``: a run file for ``votes.py:Votes``."""

    def write(cls: str = "Votes", name: str = "votes.yaml", **keys: Any) -> Path:
        path = tmp_path / name
        path.write_text(yaml.safe_dump({"scenario": f"{VOTES}:{cls}", **keys}))
        return path

    return write
