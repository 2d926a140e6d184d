"""Sweeps: a grid of runs from one run file, each point in its own directory, one index."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli_helpers import run_in_process as cli
from populace.core import ConfigError, ModelError
from populace.results import read_summary
from populace.sweep import SweepIndex, SweepPoint, expand, point_dirname, run_sweep

BASE: dict[str, Any] = {
    "scenario": "guess_number", "name": "sw", "agents": 20, "rounds": 2, "workers": 1,
    "models": {"dummy": {"provider": "dummy", "latency": 0.0}},
    "game": {"ratio": "2/3"},
}


def test_the_grid_is_row_major_with_safe_directory_names() -> None:
    data = {**BASE, "sweep": {"game.ratio": ["2/3", "1/2"], "game.famous_note": [False, True]}}
    points = expand(data, "run.yaml", {"agents": 50, "seed": None})
    assert [p.values for p in points] == [
        {"game.ratio": "2/3", "game.famous_note": False},
        {"game.ratio": "2/3", "game.famous_note": True},
        {"game.ratio": "1/2", "game.famous_note": False},
        {"game.ratio": "1/2", "game.famous_note": True},
    ]
    assert points[0].dirname == "game.ratio=2_3,game.famous_note=false"
    for p in points:
        assert "sweep" not in p.data and p.data["agents"] == 50 and "seed" not in p.data
        assert p.data["game"]["ratio"] == p.values["game.ratio"]
        assert p.data["game"]["famous_note"] is p.values["game.famous_note"]
    assert BASE["game"] == {"ratio": "2/3"}  # points are copies
    assert point_dirname({"game.temperature": 0.05, "x": "a b"}) == "game.temperature=0.05,x=a_b"


@pytest.mark.parametrize(("sweep", "message"), [
    ([1, 2], "sweep: expected a mapping of dotted keys"),
    ({}, "sweep: expected a mapping of dotted keys"),
    ({"game.level": []}, "sweep.game.level: expected a non-empty list"),
    ({"game.level": "P1"}, "sweep.game.level: expected a non-empty list"),
    ({"game": [{"ratio": 1}]}, "sweep.game: values must be plain"),
    ({"seed": [1, 1]}, "sweep.seed: a value is listed twice"),
])
def test_a_bad_sweep_is_one_clear_line(sweep: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")) as caught:
        expand({**BASE, "sweep": sweep}, "run.yaml")
    assert str(caught.value).startswith("run.yaml: ")


def test_run_sweep_records_failures_and_goes_on(tmp_path: Path) -> None:
    points = expand({**BASE, "sweep": {"seed": [1, 2, 3]}}, "run.yaml")
    index = SweepIndex.create(tmp_path / "s", "sw", "run.yaml", BASE, points)

    def run_point(point: SweepPoint, directory: Path) -> dict[str, Any]:
        if point.values["seed"] == 2:
            raise ModelError("server gone")
        return {"status": "completed", "wall_s": 1.5, "rounds": [
            {"round": 1, "n": 10, "n_valid": 9, "mean": 40.0, "std": 3.0, "target": 26.7,
             "winner_number": 27.0, "usage": {"m": {"calls": 20, "prompt_tokens": 100,
                                                    "completion_tokens": 30}}}]}

    result = run_sweep(index, points, run_point)
    saved = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert saved == result
    assert [p["status"] for p in saved["points"]] == ["completed", "failed", "completed"]
    assert saved["status"] == "failed"
    assert saved["points"][1]["error"] == "ModelError: server gone"
    final = saved["points"][0]["final"]
    assert (final["mean"], final["calls"], final["tokens"], final["steps_done"]) == \
        (40.0, 20, 130, 1)
    assert yaml.safe_load((tmp_path / "s" / "sweep.yaml").read_text()) == BASE
    with pytest.raises(FileExistsError):
        SweepIndex.create(tmp_path / "s", "sw", "run.yaml", BASE, points)

    def interrupted(point: SweepPoint, directory: Path) -> dict[str, Any]:
        raise KeyboardInterrupt

    index = SweepIndex.create(tmp_path / "t", "sw", "run.yaml", BASE, points)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(index, points, interrupted)
    saved = json.loads((tmp_path / "t" / "sweep.json").read_text())
    assert saved["status"] == "interrupted"
    assert [p["status"] for p in saved["points"]] == ["interrupted", "pending", "pending"]


def test_populace_run_executes_the_grid(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    run_file = tmp_path / "run.yaml"
    run_file.write_text(yaml.safe_dump({**BASE, "sweep": {"game.temperature": [0.05, 1.0]}}))
    out = tmp_path / "out"
    code, stdout, stderr = cli(capsys, monkeypatch, "run", run_file, "--rounds", "1",
                               "--out", out)
    assert (code, stderr) == (0, "")
    index = json.loads((out / "sweep.json").read_text())
    assert index["keys"] == ["game.temperature"] and index["status"] == "completed"
    assert [p["dir"] for p in index["points"]] == ["game.temperature=0.05",
                                                   "game.temperature=1"]
    for p in index["points"]:
        summary = read_summary(out / p["dir"])
        assert summary["status"] == p["status"] == "completed"
        assert len(summary["steps"]) == 1  # --rounds reached every point
        assert p["final"]["mean"] == summary["steps"][-1]["mean"]
        config = yaml.safe_load((out / p["dir"] / "config.yaml").read_text())
        assert config["game"]["temperature"] == p["values"]["game.temperature"]
    assert "sweep sw: 2 points, completed" in stdout and "sweep.json" in stdout

    code, _, stderr = cli(capsys, monkeypatch, "run", run_file, "--out", out)
    assert code == 2 and "already holds a run" in stderr


def test_every_point_is_checked_before_any_runs(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    run_file = tmp_path / "run.yaml"
    run_file.write_text(yaml.safe_dump({**BASE, "sweep": {"game.level": ["P1", "P9"]}}))
    code, stdout, stderr = cli(capsys, monkeypatch, "run", run_file, "--out", tmp_path / "o")
    assert code == 2 and stdout == ""
    assert stderr.startswith(f"error: {run_file} [game.level=P9]: game.level: ")
    assert not (tmp_path / "o").exists()
