"""The directories Populace names itself have one form and never meet (issue 30: one owner
for run-directory names, used by run, sweeps, forks, compare and the studio)."""

from __future__ import annotations

import re
from pathlib import Path

from populace.results import new_run_dir


def test_the_name_is_base_and_the_second(tmp_path: Path) -> None:
    path = new_run_dir(tmp_path, "town")
    assert path.parent == tmp_path
    assert re.fullmatch(r"town-\d{8}-\d{6}", path.name), path.name
    assert not path.exists()  # named, not made


def test_names_taken_in_the_same_second_get_a_number(tmp_path: Path) -> None:
    first = new_run_dir(tmp_path, "town")
    first.mkdir()
    second = new_run_dir(tmp_path, "town")
    if second.name.startswith(first.name):  # the same second (the usual case)
        assert second.name == f"{first.name}-2"
    second.mkdir()
    taken = {f"{first.name}-3"}
    third = new_run_dir(tmp_path, "town", taken=taken.__contains__)
    assert third not in (first, second) and third.name not in taken


def test_a_dangling_link_is_taken_too(tmp_path: Path) -> None:
    first = new_run_dir(tmp_path, "town")
    first.symlink_to(tmp_path / "gone")
    assert new_run_dir(tmp_path, "town") != first
