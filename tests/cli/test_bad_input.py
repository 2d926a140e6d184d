"""Bad input to the command: one line naming the file, flag or key and what was expected,
exit 2, no traceback, nothing created or lost. And the previews and help it prints."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from cli_helpers import run_in_process
from populace.launch import load_run_file
from populace.population import load_population_config, sample_population

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
VOTES = ROOT / "tests" / "launch" / "votes.py"

Cap = pytest.CaptureFixture[str]
Patch = pytest.MonkeyPatch


def write(path: Path, data: dict[str, object]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def tree(path: Path) -> dict[str, bytes]:
    """Every file under ``path`` with its bytes: what a refusal must leave as it was."""
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file()}


# -- A: population sample previews the population a run samples ---------------------------------
POPULATION = {"aspects": {"education": {"template": "education"},
                          "trust": {"weights": {"low": 0.3, "high": 0.7}}}}


def test_population_sample_of_a_run_file_is_the_population_the_run_uses(
    tmp_path: Path, capsys: Cap, monkeypatch: Patch,
) -> None:
    run_file = write(tmp_path / "run.yaml", {
        "scenario": f"{VOTES}:Votes", "seed": 13, "agents": 37, "steps": 1,
        "population": POPULATION})
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", run_file, "--out",
                                     tmp_path / "run")
    assert code == 0, stderr
    code, stdout, stderr = run_in_process(capsys, monkeypatch, "population", "sample",
                                          run_file, "--out", tmp_path / "preview.parquet")
    assert code == 0, stderr
    assert "37 agents sampled" in stdout
    assert pq.read_table(tmp_path / "preview.parquet").equals(
        pq.read_table(tmp_path / "run" / "profiles.parquet"))


@pytest.mark.parametrize("name", ["paper/education.yaml", "survey/survey.yaml"])
def test_population_sample_takes_every_shipped_run_file(
    name: str, tmp_path: Path, capsys: Cap, monkeypatch: Patch,
) -> None:
    path = EXAMPLES / name
    out = tmp_path / "p.parquet"
    code, _, stderr = run_in_process(capsys, monkeypatch, "population", "sample", path,
                                     "--out", out)
    assert code == 0, stderr
    options = load_run_file(path).options
    assert options.population is not None
    want = sample_population(options.population, seed=options.seed, size=options.agents)
    assert pq.read_table(out).equals(want)


def test_population_sample_of_a_run_file_takes_seed_and_size(
    tmp_path: Path, capsys: Cap, monkeypatch: Patch,
) -> None:
    path, out = EXAMPLES / "paper" / "education.yaml", tmp_path / "p.parquet"
    code, _, stderr = run_in_process(capsys, monkeypatch, "population", "sample", path,
                                     "--seed", "3", "--size", "10", "--out", out)
    assert code == 0, stderr
    options = load_run_file(path).options
    assert options.population is not None
    assert pq.read_table(out).equals(sample_population(options.population, seed=3, size=10))


def test_population_sample_of_a_population_file_still_works(
    tmp_path: Path, capsys: Cap, monkeypatch: Patch,
) -> None:
    path, out = EXAMPLES / "population" / "education_200x5.yaml", tmp_path / "p.parquet"
    code, stdout, stderr = run_in_process(capsys, monkeypatch, "population", "sample", path,
                                          "--out", out)
    assert code == 0, stderr
    assert "1,000 agents sampled" in stdout
    assert pq.read_table(out).equals(sample_population(load_population_config(path)))


# -- C: a failed preflight leaves nothing behind -------------------------------------------------
def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def unreachable(tmp_path: Path) -> Path:
    """A run file whose model's endpoint refuses connections."""
    return write(tmp_path / "unreachable.yaml", {
        "scenario": "guess_number", "name": "nowhere", "agents": 3, "rounds": 1,
        "models": {"m": {"provider": "openai", "model": "x",
                         "base_urls": [f"http://127.0.0.1:{closed_port()}/v1"]}}})


def test_a_failed_preflight_creates_no_directories(
    unreachable: Path, tmp_path: Path, capsys: Cap, monkeypatch: Patch,
) -> None:
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", unreachable, "--out",
                                     tmp_path / "new" / "deeper" / "run")
    assert code == 2
    assert one_line(stderr).startswith("error: models.m: cannot reach http://127.0.0.1:")
    assert not (tmp_path / "new").exists()


def test_a_failed_preflight_creates_no_default_runs_directory(
    unreachable: Path, tmp_path: Path, capsys: Cap, monkeypatch: Patch,
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", unreachable)
    assert code == 2
    assert "cannot reach" in one_line(stderr)
    assert not (tmp_path / "runs").exists()


def test_a_failed_preflight_keeps_an_empty_directory_it_did_not_make(
    unreachable: Path, tmp_path: Path, capsys: Cap, monkeypatch: Patch,
) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    code, _, _ = run_in_process(capsys, monkeypatch, "run", unreachable, "--out", mine)
    assert code == 2
    assert mine.is_dir()


# -- D: help text --------------------------------------------------------------------------------
def help_of(capsys: Cap, monkeypatch: Patch, *command: str) -> str:
    monkeypatch.setenv("NO_COLOR", "1")
    code, stdout, stderr = run_in_process(capsys, monkeypatch, *command, "--help")
    assert code == 0, stderr
    return stdout


def test_brackets_in_help_are_shown_as_written(capsys: Cap, monkeypatch: Patch) -> None:
    text = help_of(capsys, monkeypatch, "serve-llm")
    assert "uniform time in [latency, latency-max]" in " ".join(text.split())


@pytest.mark.parametrize(("command", "flag"), [
    (("run",), "--studio"), (("bench",), "--json"), (("report",), "--points")])
def test_boolean_flags_are_flags_without_a_metavar(
    command: tuple[str, ...], flag: str, capsys: Cap, monkeypatch: Patch,
) -> None:
    text = help_of(capsys, monkeypatch, *command)
    row = next(line for line in text.splitlines() if f" {flag} " in line)
    assert f"--no-{flag[2:]}" in row and "<bool>" not in row, row


# -- E: --out that cannot be a run directory -----------------------------------------------------
@pytest.fixture
def quick(tmp_path: Path) -> Path:
    return write(tmp_path / "quick.yaml", {
        "scenario": "guess_number", "name": "quick", "agents": 3, "rounds": 1,
        "models": {"dummy": {"provider": "dummy", "latency": 0.0}}})


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    """A directory nobody may create entries in (immutable for root, 0555 for others)."""
    path = tmp_path / "locked"
    path.mkdir()
    if os.geteuid() != 0:
        path.chmod(0o555)
        yield path
        path.chmod(0o755)
        return
    locked = subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode == 0
    if not locked:
        pytest.skip("cannot make a directory read-only for root here (no chattr +i)")
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def run_out(capsys: Cap, monkeypatch: Patch, quick: Path, out: Path) -> str:
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", quick, "--out", out)
    assert code == 2, stderr
    return one_line(stderr)


def test_out_under_a_regular_file(quick: Path, tmp_path: Path, capsys: Cap,
                                  monkeypatch: Patch) -> None:
    (tmp_path / "somefile").write_text("mine")
    out = tmp_path / "somefile" / "run"
    assert run_out(capsys, monkeypatch, quick, out) == (
        f"error: --out {out}: cannot create the run directory: {tmp_path / 'somefile'} is a "
        "file, not a directory")
    assert (tmp_path / "somefile").read_text() == "mine"


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_out_in_proc(quick: Path, capsys: Cap, monkeypatch: Patch) -> None:
    line = run_out(capsys, monkeypatch, quick, Path("/proc/x"))
    assert line.startswith("error: --out /proc/x: cannot create the run directory: ")


def test_out_under_a_read_only_directory(quick: Path, read_only: Path, capsys: Cap,
                                         monkeypatch: Patch) -> None:
    out = read_only / "run"
    line = run_out(capsys, monkeypatch, quick, out)
    assert line.startswith(f"error: --out {out}: cannot create the run directory: ")
    assert line.endswith(("Permission denied", "Operation not permitted",
                          "Read-only file system"))
    assert list(read_only.iterdir()) == []


def test_out_with_a_name_longer_than_the_system_allows(quick: Path, tmp_path: Path,
                                                       capsys: Cap, monkeypatch: Patch) -> None:
    out = tmp_path / ("a" * 300) / "run"
    assert run_out(capsys, monkeypatch, quick, out) == (
        f"error: --out {out}: cannot create the run directory: File name too long")


def test_default_out_when_runs_is_a_file(quick: Path, tmp_path: Path, capsys: Cap,
                                         monkeypatch: Patch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").write_text("mine")
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", quick)
    assert code == 2
    line = one_line(stderr)
    assert line.startswith("error: runs/quick-")
    assert line.endswith(": cannot create the run directory: runs is a file, not a "
                         "directory; choose one with --out")
    assert (tmp_path / "runs").read_text() == "mine"


@pytest.mark.parametrize("flag", ["--resume", "--replay"])
def test_resume_or_replay_with_a_name_longer_than_the_system_allows(
    flag: str, quick: Path, tmp_path: Path, capsys: Cap, monkeypatch: Patch,
) -> None:
    long = tmp_path / ("b" * 300)
    args = ["--resume", long] if flag == "--resume" else [quick, "--replay", long, "--out",
                                                          tmp_path / "o"]
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", *args)
    assert code == 2
    line = one_line(stderr)
    assert line.startswith(f"error: {flag} {long}/") and line.endswith(": File name too long")
    assert not (tmp_path / "o").exists()


def test_any_path_the_system_refuses_is_one_line(tmp_path: Path, capsys: Cap,
                                                 monkeypatch: Patch) -> None:
    long = tmp_path / ("c" * 300)
    code, _, stderr = run_in_process(capsys, monkeypatch, "report", long)
    assert code == 1
    assert one_line(stderr).endswith(": File name too long")


# -- H: did you mean, in every block -------------------------------------------------------------
DUMMY = {"dummy": {"provider": "dummy", "latency": 0.0}}


@pytest.mark.parametrize(("keys", "message"), [
    pytest.param({"models": {"m": {"provider": "openai", "model": "x",
                                   "base_url": "http://localhost:8000/v1"}}},
                 "models.m.base_url: unknown key (did you mean base_urls?) (expected one of: "
                 "provider, model, base_urls,", id="models"),
    pytest.param({"population": {"aspects": {"a": {"values": ["x"]}}, "grups": {"count": 2}}},
                 "population.grups: unknown key (did you mean groups?) (expected one of: size, "
                 "seed, aspects, groups, backgrounds)", id="population"),
    pytest.param({"population": {"aspects": {"a": {"valuez": ["x"]}}}},
                 "population.aspects.a.valuez: unknown key (did you mean values?)",
                 id="aspect"),
    pytest.param({"game": {"ratoi": "1/2"}},
                 "game.ratoi: unknown key (did you mean ratio?) (expected one of: ratio, ",
                 id="game"),
    pytest.param({"agnets": 3}, "agnets: unknown key (did you mean agents?)", id="top"),
    pytest.param({"models": {"m": {"provider": "dumy"}}},
                 "models.m.provider: unknown value 'dumy' (did you mean dummy?) (expected one "
                 "of: dummy, openai, scripted, python)", id="provider"),
])
def test_a_misspelt_key_gets_did_you_mean(
    keys: dict[str, object], message: str, tmp_path: Path, capsys: Cap, monkeypatch: Patch,
) -> None:
    path = write(tmp_path / "typo.yaml", {"scenario": "guess_number", "name": "typo",
                                          "models": DUMMY, **keys})
    code, _, stderr = run_in_process(capsys, monkeypatch, "run", path, "--out", tmp_path / "o")
    assert code == 2
    line = one_line(stderr)
    assert line.startswith(f"error: {path}: {message}")
    assert "more problem" not in line  # base_urls is missing because base_url is misspelt
    assert not (tmp_path / "o").exists()


def test_a_misspelt_key_of_a_population_file_gets_did_you_mean(
    tmp_path: Path, capsys: Cap, monkeypatch: Patch,
) -> None:
    path = write(tmp_path / "pop.yaml", {"size": 5, "aspects": {"a": {"values": ["x"]}},
                                         "grups": {"count": 2}})
    code, _, stderr = run_in_process(capsys, monkeypatch, "population", "sample", path,
                                     "--out", tmp_path / "p.parquet")
    assert code == 2
    assert one_line(stderr) == (f"error: {path}: grups: unknown key (did you mean groups?) "
                                "(expected one of: size, seed, aspects, groups, backgrounds)")
