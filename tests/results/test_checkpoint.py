"""Checkpoints: one checksummed file per round, written atomically, verified on load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from populace.core import PopulaceError
from populace.results import (
    CheckpointError,
    latest_checkpoint,
    read_checkpoint,
    write_checkpoint,
)


def test_round_trip_and_file_layout(tmp_path: Path) -> None:
    state = {"agents": [{"memory": [(1, "42", "assistant", None)]}], "last": {"round": 3}}
    path = write_checkpoint(tmp_path, 3, state)
    assert path == tmp_path / "checkpoints" / "round-00003.ckpt"
    header = json.loads(path.read_bytes().split(b"\n", 1)[0])
    assert header["format"] == "populace-checkpoint/3" and header["round"] == 3
    assert len(header["sha256"]) == 64 and header["bytes"] > 0
    assert read_checkpoint(path) == (3, state)
    assert [p.name for p in path.parent.iterdir()] == ["round-00003.ckpt"]  # no temp file left


def test_only_the_two_newest_are_kept(tmp_path: Path) -> None:
    for r in range(1, 5):
        write_checkpoint(tmp_path, r, {"r": r})
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "round-00003.ckpt", "round-00004.ckpt"]


@pytest.mark.parametrize("damage", ["flip", "truncate", "header", "empty"])
def test_damage_is_detected(tmp_path: Path, damage: str) -> None:
    path = write_checkpoint(tmp_path, 1, {"agents": list(range(100))})
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[-1] ^= 1
    elif damage == "truncate":
        data = data[:-5]
    elif damage == "header":
        data = bytearray(b'{"format": "something else"}\n') + data.split(b"\n", 1)[1]
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=str(path)) as info:
        read_checkpoint(path)
    assert isinstance(info.value, PopulaceError)  # the CLI shows it as one line


def test_latest_skips_damaged_and_later_rounds(tmp_path: Path) -> None:
    assert latest_checkpoint(tmp_path) is None
    write_checkpoint(tmp_path, 1, "one")
    write_checkpoint(tmp_path, 2, "two")
    assert latest_checkpoint(tmp_path) == (2, "two")
    assert latest_checkpoint(tmp_path, up_to=1) == (1, "one")  # the summary lags behind
    newest = tmp_path / "checkpoints" / "round-00002.ckpt"
    newest.write_bytes(newest.read_bytes()[:-1])
    assert latest_checkpoint(tmp_path) == (1, "one")
    assert latest_checkpoint(tmp_path, up_to=0) is None


def test_large_lists_are_pickled_in_slices_and_come_back_whole(tmp_path: Path) -> None:
    from populace.results import _checkpoint

    agents = [{"memory": [(i, f"answer {i}", "assistant", None)]}
              for i in range(2 * _checkpoint.SLICE + 7)]
    state = {"agents": agents, "last": {"round": 4}}
    path = write_checkpoint(tmp_path, 4, state)
    assert read_checkpoint(path) == (4, state)
    # One pickle per slice plus the head: the writer never holds the GIL for all at once.
    body = path.read_bytes().split(b"\n", 1)[1]
    assert body.count(b"\x80\x05") >= 4
