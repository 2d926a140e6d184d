"""One agent's state from a checkpoint without unpickling the others (format 3): the index
of slices and group ids, and reading format 2 files still."""

from __future__ import annotations

import hashlib
import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from populace.results import (
    CheckpointError,
    _checkpoint,
    latest_checkpoint,
    read_agent_state,
    read_checkpoint,
    write_checkpoint,
)


@pytest.fixture(autouse=True)
def small_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_checkpoint, "SLICE", 7)


def states(label: str, n: int) -> list[dict[str, Any]]:
    return [{"memory": [(i, f"{label} says {i}", "assistant", None)], "lean": i / n}
            for i in range(n)]


class Bomb:
    """Unpickles only as an error: a slice holding one cannot be read."""

    def __reduce__(self) -> Any:
        return int, ("this slice was read",)


# Three groups: ids out of order, a range, one small group of scattered ids.
IDS = {"voters": np.array([40, 41, 42, 10, 11, 12, 13, 14, 90, 91, 92, 93, 94, 95, 96, 97,
                           98, 99, 2, 3, 5, 8, 60]),
       "pundits": np.arange(200, 219),
       "judges": np.array([7, 70, 700])}


def state_with(groups: dict[str, list[Any]]) -> dict[str, Any]:
    return {"scenario": {"round": 3, "history": list(range(30))}, "agents": groups,
            "envs": [{"k": 1}], "parts": {"votes": "abc"}}


def test_each_agent_comes_from_one_slice_equal_to_the_full_load(tmp_path: Path) -> None:
    groups = {label: states(label, len(ids)) for label, ids in IDS.items()}
    state = state_with(groups)
    path = write_checkpoint(tmp_path, 3, state, ids=IDS)
    assert read_checkpoint(path) == (3, state)  # resume reads it whole, as before
    assert latest_checkpoint(tmp_path) == (3, state)
    full = read_checkpoint(path)[1]["agents"]
    for label, ids in IDS.items():
        for pos, agent_id in enumerate(ids.tolist()):
            assert read_agent_state(tmp_path, agent_id) == (3, label, full[label][pos])
    for absent in (0, 1, 15, 43, 219, 10**12, 2**70, -1):
        assert read_agent_state(tmp_path, absent) is None


def test_only_the_agents_slice_is_unpickled(tmp_path: Path) -> None:
    voters = [Bomb() if i // 7 != 1 else {"memory": [], "i": i} for i in range(23)]
    path = write_checkpoint(tmp_path, 1, state_with({"voters": voters}),
                            ids={"voters": IDS["voters"]})
    with pytest.raises(ValueError, match="this slice was read"):
        read_checkpoint(path)
    # positions 7..13 are the second slice: ids 14, 90, 91, …
    assert read_agent_state(tmp_path, 14) == (1, "voters", {"memory": [], "i": 7})
    assert read_agent_state(tmp_path, 95) == (1, "voters", {"memory": [], "i": 13})
    with pytest.raises(CheckpointError, match="cannot read the state of agent 40"):
        read_agent_state(tmp_path, 40)


def test_without_ids_the_launchers_numbering_is_assumed(tmp_path: Path) -> None:
    groups = {"a": states("a", 10), "b": states("b", 16)}
    write_checkpoint(tmp_path, 2, state_with(groups))
    assert read_agent_state(tmp_path, 3) == (2, "a", groups["a"][3])
    assert read_agent_state(tmp_path, 10) == (2, "b", groups["b"][0])
    assert read_agent_state(tmp_path, 25) == (2, "b", groups["b"][15])
    assert read_agent_state(tmp_path, 26) is None


def test_ids_must_fit_the_groups(tmp_path: Path) -> None:
    groups = {"a": states("a", 4)}
    with pytest.raises(ValueError, match="3 for the 4 agents 'a'"):
        write_checkpoint(tmp_path, 1, state_with(groups), ids={"a": [1, 2, 3]})
    with pytest.raises(ValueError, match="none given for the agents 'a'"):
        write_checkpoint(tmp_path, 1, state_with(groups), ids={})


def test_a_step_and_a_damaged_newest_checkpoint(tmp_path: Path) -> None:
    ids = {"a": np.arange(30)}
    one = {"a": states("one", 30)}
    two = {"a": states("two", 30)}
    write_checkpoint(tmp_path, 1, state_with(one), ids=ids)
    newest = write_checkpoint(tmp_path, 2, state_with(two), ids=ids)
    assert read_agent_state(tmp_path, 9, step=1) == (1, "a", one["a"][9])
    assert read_agent_state(tmp_path, 9) == (2, "a", two["a"][9])
    assert read_agent_state(tmp_path, 9, step=5) is None  # no such checkpoint
    # Damage the slice of agents 7..13 in the newest: those come from the one before.
    data = bytearray(newest.read_bytes())
    at = data.index(b"two says 9")
    data[at] ^= 0x20
    newest.write_bytes(bytes(data))
    assert read_agent_state(tmp_path, 9) == (1, "a", one["a"][9])
    assert read_agent_state(tmp_path, 9, step=2) is None
    assert read_agent_state(tmp_path, 20) == (2, "a", two["a"][20])  # another slice: intact
    newest.write_bytes(bytes(data[:len(data) // 2]))  # cut short: the header's length fails
    assert read_agent_state(tmp_path, 20) == (1, "a", one["a"][20])


def test_no_checkpoint_and_states_that_are_not_the_launchers(tmp_path: Path) -> None:
    assert read_agent_state(tmp_path, 0) is None
    write_checkpoint(tmp_path, 1, {"agents": list(range(20))})  # a plain list: no groups
    assert read_agent_state(tmp_path, 3) is None
    write_checkpoint(tmp_path, 2, "just text")
    assert read_checkpoint(tmp_path / "checkpoints" / "step-00002.ckpt") == (2, "just text")
    assert read_agent_state(tmp_path, 3) is None


def write_format_2(run_dir: Path, round_no: int, state: Any) -> Path:
    """A checkpoint as an older version wrote it: no index, one pickle, named by round."""
    body = pickle.dumps(({"": state}, {}), protocol=pickle.HIGHEST_PROTOCOL)
    header = json.dumps({"format": "populace-checkpoint/2", "round": round_no,
                         "bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()})
    path = run_dir / "checkpoints" / f"round-{round_no:05d}.ckpt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header.encode() + b"\n" + body)
    return path


def test_format_2_checkpoints_are_still_read(tmp_path: Path) -> None:
    groups = {"a": states("a", 5), "b": states("b", 3)}
    state = state_with(groups)
    path = write_format_2(tmp_path, 4, state)
    assert read_checkpoint(path) == (4, state)
    assert read_agent_state(tmp_path, 6) == (4, "b", groups["b"][1])
    assert read_agent_state(tmp_path, 8) is None
