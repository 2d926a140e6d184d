"""Checkpoints: one checksummed file per step, written atomically, verified on load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from populace.core import PopulaceError
from populace.results import (
    CheckpointError,
    checkpoint_files,
    latest_checkpoint,
    read_agent_state,
    read_checkpoint,
    write_checkpoint,
)


def test_round_trip_and_file_layout(tmp_path: Path) -> None:
    state = {"agents": [{"memory": [(1, "42", "assistant", None)]}], "last": {"round": 3}}
    path = write_checkpoint(tmp_path, 3, state)
    assert path == tmp_path / "checkpoints" / "step-00003.ckpt"
    header = json.loads(path.read_bytes().split(b"\n", 1)[0])
    assert header["format"] == "populace-checkpoint/3" and header["step"] == 3
    assert len(header["sha256"]) == 64 and header["bytes"] > 0
    assert read_checkpoint(path) == (3, state)
    assert [p.name for p in path.parent.iterdir()] == ["step-00003.ckpt"]  # no temp file left


def test_only_the_two_newest_are_kept(tmp_path: Path) -> None:
    for r in range(1, 5):
        write_checkpoint(tmp_path, r, {"r": r})
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "step-00003.ckpt", "step-00004.ckpt"]


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


def test_latest_skips_damaged_and_later_steps(tmp_path: Path) -> None:
    assert latest_checkpoint(tmp_path) is None
    write_checkpoint(tmp_path, 1, "one")
    write_checkpoint(tmp_path, 2, "two")
    assert latest_checkpoint(tmp_path) == (2, "two")
    assert latest_checkpoint(tmp_path, up_to=1) == (1, "one")  # the summary lags behind
    newest = tmp_path / "checkpoints" / "step-00002.ckpt"
    newest.write_bytes(newest.read_bytes()[:-1])
    assert latest_checkpoint(tmp_path) == (1, "one")
    assert latest_checkpoint(tmp_path, up_to=0) is None


def older(path: Path) -> Path:
    """``path`` as an older version named and headed it: ``round-NNNNN.ckpt``, ``"round"``."""
    line, body = path.read_bytes().split(b"\n", 1)
    header = json.loads(line)
    header["round"] = header.pop("step")
    renamed = path.with_name(path.name.replace("step-", "round-"))
    renamed.write_bytes(json.dumps(header).encode() + b"\n" + body)
    path.unlink()
    return renamed


def test_an_older_versions_checkpoints_are_read_and_pruned(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    one = older(write_checkpoint(tmp_path, 1, {"agents": {"a": ["s0", "s1"]}}, keep=None))
    two = older(write_checkpoint(tmp_path, 2, {"agents": {"a": ["t0", "t1"]}}, keep=None))
    assert one.name == "round-00001.ckpt" and read_checkpoint(one)[0] == 1
    assert checkpoint_files(tmp_path) == {1: one, 2: two}
    assert latest_checkpoint(tmp_path) == (2, {"agents": {"a": ["t0", "t1"]}})
    assert read_agent_state(tmp_path, 1) == (2, "a", "t1")
    assert read_agent_state(tmp_path, 0, step=1) == (1, "a", "s0")
    # A resumed run writes the new names; keeping two counts the older ones too.
    three = write_checkpoint(tmp_path, 3, "three")
    assert sorted(p.name for p in folder.iterdir()) == ["round-00002.ckpt", "step-00003.ckpt"]
    assert checkpoint_files(tmp_path) == {2: two, 3: three}
    write_checkpoint(tmp_path, 4, "four")
    assert sorted(p.name for p in folder.iterdir()) == ["step-00003.ckpt", "step-00004.ckpt"]


def test_of_two_files_for_one_step_this_versions_is_read(tmp_path: Path) -> None:
    older(write_checkpoint(tmp_path, 2, "older", keep=None))
    newer = write_checkpoint(tmp_path, 2, "newer", keep=None)
    assert checkpoint_files(tmp_path) == {2: newer}
    assert latest_checkpoint(tmp_path) == (2, "newer")
    newer.write_bytes(newer.read_bytes()[:-1])  # damaged: the older file is next in line
    assert latest_checkpoint(tmp_path) == (2, "older")


def test_a_header_without_a_step_is_refused(tmp_path: Path) -> None:
    path = write_checkpoint(tmp_path, 1, "x")
    line, body = path.read_bytes().split(b"\n", 1)
    header = json.loads(line)
    del header["step"]
    path.write_bytes(json.dumps(header).encode() + b"\n" + body)
    with pytest.raises(CheckpointError, match="no step number"):
        read_checkpoint(path)


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
