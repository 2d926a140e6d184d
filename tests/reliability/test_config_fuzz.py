"""Config fuzzing: whatever the run file says, ``populace run`` answers in one line or runs.

Run files are generated from the real schema (its keys at every level, typos of them,
values of every type, nested garbage, broken YAML) and handed to ``populace.cli.main`` in
this process. An invalid file must give exit status 2 and exactly one line on stderr that
names the file, with nothing created; a valid one must run to the end. Never a traceback.
"""

from __future__ import annotations

import copy
import datetime
import os
import sys
import types
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from populace.cli import main
from populace.core import ConfigError
from populace.launch import RunFile, RunOptions, load_run_file
from populace.results import read_table
from populace.scenarios.guess_number import GuessNumber


def _load(path: Path) -> RunFile:
    """The launcher's reading of a run file, before anything runs: what the command must
    accept (and run to the end) or refuse (in one line)."""
    return load_run_file(path)


# -- the schema ---------------------------------------------------------------------------------
Path_ = tuple[str, ...]


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The config classes an annotation holds: ``M``, ``M | None``, ``dict[str, M]``, unions."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is dict:
        return _models_in(typing.get_args(annotation)[1])
    if origin in (typing.Union, types.UnionType, typing.Annotated):
        return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]
    return []


def _sections(model: type[BaseModel], path: Path_ = ()) -> dict[Path_, set[str]]:
    """Every level of the schema (``*`` stands for a name chosen by the user) → its keys."""
    out: dict[Path_, set[str]] = {path: set(model.model_fields)}
    for name, field in model.model_fields.items():
        annotation = field.annotation
        below = (*path, name, "*") if typing.get_origin(annotation) is dict else (*path, name)
        for sub in _models_in(annotation):
            for p, keys in _sections(sub, below).items():
                out.setdefault(p, set()).update(keys)
    return out


def _run_file_sections() -> dict[Path_, set[str]]:
    """The game's run file: the run options, and its settings at the top or under
    ``settings:``."""
    out = _sections(RunOptions)
    out[()].add("rounds")
    for path, keys in _sections(GuessNumber.Settings).items():
        for where in (path, ("settings", *path)):
            out.setdefault(where, set()).update(keys)
    return out


SECTIONS = _run_file_sections()
ALL_KEYS = sorted({k for keys in SECTIONS.values() for k in keys})
NAMES = {"models": ["dummy", "other"], "aspects": ["age", "gender", "trust"]}

# -- values ------------------------------------------------------------------------------------
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 12),
    st.floats(allow_nan=True, allow_infinity=True, width=32),
    st.text(max_size=10),
    st.sampled_from(["2/3", "1/0", "0.5", "local", "ray", "dummy", "openai", "scripted", "P3",
                     "two_call", "{n_players}", "{", "[/x]", "x.py", "guess_number", "age",
                     "http://127.0.0.1:9/v1", "auto", "-1", "1e400"]),
    st.dates(min_value=datetime.date(2000, 1, 1), max_value=datetime.date(2030, 1, 1)),
)


@st.composite
def typo(draw: st.DrawFn, key: str) -> str:
    i = draw(st.integers(0, max(len(key) - 1, 0)))
    kind = draw(st.sampled_from(["drop", "double", "swap", "upper", "space"]))
    if not key or kind == "upper":
        return key.upper() or "X"
    if kind == "drop":
        return key[:i] + key[i + 1:]
    if kind == "double":
        return key[:i] + key[i] + key[i:]
    if kind == "swap" and i + 1 < len(key):
        return key[:i] + key[i + 1] + key[i] + key[i + 2:]
    return key + " "


keys = st.one_of(st.sampled_from(ALL_KEYS), st.sampled_from(ALL_KEYS).flatmap(typo),
                 st.text(max_size=6), st.integers(-1, 3), st.none())
garbage = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(keys, inner, max_size=3), max_leaves=6)

GAME = "scenario: guess_number\n"

# -- run files ---------------------------------------------------------------------------------
FAST_DUMMY = {"provider": "dummy", "latency": 0.0}

base_runs = st.fixed_dictionaries(
    {"scenario": st.just("guess_number"), "agents": st.integers(1, 6),
     "rounds": st.integers(1, 2),
     "models": st.just({"dummy": FAST_DUMMY})},
    optional={
        "name": st.from_regex(r"[A-Za-z0-9._-]{1,8}", fullmatch=True),
        "seed": st.integers(0, 2**40), "workers": st.integers(1, 3),
        "backend": st.just("local"),
        "game": st.fixed_dictionaries({}, optional={
            "ratio": st.sampled_from(["2/3", "1/2", 0.5, "3/4"]),
            "offset": st.integers(0, 5), "level": st.sampled_from(["P1", "P2", "P3", "P4"]),
            "protocol": st.sampled_from(["auto", "direct", "two_call", "structured"]),
            "feedback": st.booleans(), "memory_rounds": st.integers(0, 3),
            "famous_note": st.booleans(), "groups": st.integers(1, 3),
            "prompt": st.sampled_from(["Pick from {low} to {high}.", "{n_players:,} play.",
                                       "Round {round} of {rounds}. {instruction}"]),
        }),
        "population": st.fixed_dictionaries(
            {"aspects": st.sampled_from([{"age": {"template": "age"}},
                                         {"trust": {"values": ["low", "high"]}}])},
            optional={"groups": st.sampled_from([{"count": 2}, {"by": "trust"}])}),
    },
)


@st.composite
def mutated(draw: st.DrawFn, run: dict[str, Any]) -> dict[str, Any]:
    """``run`` with a few keys set to anything, misspelt, or removed, at any level."""
    data = copy.deepcopy(run)
    for _ in range(draw(st.integers(0, 3))):
        section = draw(st.sampled_from(sorted(SECTIONS)))
        node: Any = data
        for part in section:
            name = draw(st.sampled_from(NAMES.get(section[section.index(part) - 1], ["x"])
                                        )) if part == "*" else part
            if not isinstance(node, dict):
                break
            node = node.setdefault(name, {}) if draw(st.booleans()) else node.get(name, {})
        if not isinstance(node, dict):
            continue
        key = draw(st.sampled_from(sorted(SECTIONS[section])))
        action = draw(st.sampled_from(["set", "typo", "delete"]))
        if action == "set":
            node[key] = draw(garbage)
        elif action == "typo" and key in node:
            node[draw(typo(key))] = node.pop(key)
        else:
            node.pop(key, None)
    return data


run_files = st.one_of(
    base_runs.flatmap(mutated).map(lambda d: yaml.safe_dump(d, sort_keys=False)),
    st.dictionaries(keys, garbage, max_size=5).map(  # the game's, unless it says otherwise
        lambda d: yaml.safe_dump({"scenario": "guess_number", **d})),
    st.dictionaries(keys, garbage, max_size=3).map(yaml.safe_dump),
    st.text(max_size=40),  # broken YAML, or YAML that is not a mapping
    st.sampled_from(["agents: 3\n  rounds: 2\n", "- agents\n", "? [a, b]\n: 1\n",
                     "scenario: guess_number\ngame: {prompt: '{n_players!x}'}\n",
                     "scenario: [guess_number]\n", "agents: 3\n"]),
)


def _cheap(config: RunFile) -> bool:
    """A valid game this test may run: small, local, and a model that answers at once."""
    o = config.options
    return (config.scenario is GuessNumber and o.agents * o.steps <= 40 and o.workers <= 3
            and o.backend == "local"
            and all(m.provider != "openai" and getattr(m, "latency", 0) <= 0.01
                    for m in o.models.values()))


@settings(max_examples=int(os.environ.get("POPULACE_FUZZ_EXAMPLES", "150")), deadline=None,
          database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.filter_too_much])
@given(text=run_files)
# found by this test: the dummy's default range (0-100) outside the game's (0-1)
@example(text="scenario: guess_number\nagents: 1\nrounds: 1\nmodels:\n  dummy:\n"
              "    provider: dummy\n    latency: 0.0\ngame:\n  high: 1\n")
def test_any_run_file_gives_one_line_or_a_run(
    text: str, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    where = tmp_path_factory.mktemp("fuzz")
    path = where / "run.yaml"
    path.write_text(text)
    out = where / "out"
    try:
        config: RunFile | None = _load(path)
    except ConfigError:
        config = None
    assume(config is None or _cheap(config))

    monkeypatch.chdir(where)  # anything a run caches stays here
    monkeypatch.setattr(sys, "argv", ["populace", "run", str(path), "--out", str(out)])
    capsys.readouterr()
    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code  # type: ignore[assignment]
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err

    if config is None:
        assert code == 2, captured.err
        lines = [line for line in captured.err.splitlines() if line.strip()]
        assert len(lines) == 1, captured.err
        assert lines[0].startswith(f"error: {path}"), lines[0]
        assert not out.exists()  # nothing is created before the config is valid
    else:
        assert code == 0, captured.err
        if _answers_in_range(config):
            assert captured.err == ""
        else:  # a dummy told to answer outside the game's range: said, never an error
            assert all(line.startswith("warning: ") for line in captured.err.splitlines())
        assert read_table(out).num_rows == config.options.agents * config.options.steps


def _answers_in_range(config: RunFile) -> bool:
    """Whether every dummy model answers within the game's range (``models.NAME.low/high``
    and ``game.low/high`` are separate settings: a game from 0 to 1 with the dummy's default
    0 to 100 gets unusable answers, and says so in warnings)."""
    game = config.settings.game  # type: ignore[attr-defined]
    return all(game.low <= m.low and m.high <= game.high  # type: ignore[union-attr]
               for m in config.options.models.values() if m.provider == "dummy")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(GAME + '"[/x]": 1\n', ": [/x]: unknown key", id="markup-in-a-key"),
        pytest.param(GAME + "name: '[/]'\n", "name: String should match pattern",
                     id="markup-in-a-value"),
        pytest.param(GAME + "seed: '[red]x'\n", "(got '[red]x')", id="markup-kept-as-written"),
        pytest.param(GAME + '"a\\nb": 1\n', ": 'a\\nb': unknown key", id="newline-in-a-key"),
        pytest.param("scenario: [guess_number]\n", "scenario: unknown scenario ['guess_number']",
                     id="scenario-not-a-name"),
        pytest.param(GAME + "game: {prompt: '{n_players!x}'}\n",
                     "game.prompt: cannot fill the template: Unknown conversion specifier x",
                     id="prompt-conversion"),
        pytest.param(GAME + "game: {prompt: '{low:d}'}\n",
                     "game.prompt: cannot fill the template: Unknown format code 'd'",
                     id="prompt-format-spec"),
    ],
)
def test_inputs_that_once_gave_tracebacks(
    text: str, expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    monkeypatch.setattr(sys, "argv", ["populace", "run", str(path), "--out",
                                      str(tmp_path / "out")])
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}"), lines
    assert expected in lines[0], lines[0]
