"""The layers below the scenarios know no scenario (issue 30): no module under ``llm/``,
``core/``, ``environment/`` or ``results/`` imports or names ``populace.scenarios``, and
importing all of them loads none. Scenario code that a lower layer runs (the scripted
model's rules) joins through an entry point instead (``populace.scripted_rules``)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "populace"
BELOW = ("llm", "core", "environment", "results")
#: ``populace.scenarios``, ``populace/scenarios``, in code, strings and docstrings alike.
NAMED = re.compile(r"populace\s*[./]\s*scenarios\b")


def modules_below() -> list[Path]:
    return sorted(p for layer in BELOW for p in (SRC / layer).rglob("*.py"))


def scenario_imports(path: Path, src: Path = SRC) -> list[str]:
    """The imports of ``path`` (a module under ``src``) that reach the scenarios package,
    absolute or relative."""
    found = []
    package = path.relative_to(src.parent).with_suffix("").parts[:-1]  # ("populace", "llm")
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = list(package[:len(package) - node.level + 1]) if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names = [module, *(f"{module}.{a.name}" for a in node.names)]
        else:
            continue
        found += [f"line {node.lineno}: {n}" for n in names
                  if n == "populace.scenarios" or n.startswith("populace.scenarios.")]
    return found


def test_the_check_sees_every_layer_below() -> None:
    counts = {layer: sum(1 for _ in (SRC / layer).rglob("*.py")) for layer in BELOW}
    assert all(n > 2 for n in counts.values()), counts


def test_no_module_below_the_scenarios_imports_or_names_one() -> None:
    offenders = []
    for path in modules_below():
        where = path.relative_to(SRC)
        offenders += [f"{where}: imports {i}" for i in scenario_imports(path)]
        text = path.read_text()
        offenders += [f"{where}:{text.count(chr(10), 0, m.start()) + 1}: names {m.group(0)!r}"
                      for m in NAMED.finditer(text)]
    assert offenders == []


def test_the_check_would_catch_one(tmp_path: Path) -> None:
    layer = tmp_path / "populace" / "llm"
    layer.mkdir(parents=True)
    bad = layer / "_bad.py"
    bad.write_text("from ..scenarios import survey\nimport populace.scenarios.social as s\n"
                   "from . import _scripted\n")
    assert scenario_imports(bad, tmp_path / "populace") == [
        "line 1: populace.scenarios", "line 1: populace.scenarios.survey",
        "line 2: populace.scenarios.social"]
    assert NAMED.search('importlib.import_module("populace.scenarios.survey")')


def test_importing_every_module_below_loads_no_scenario() -> None:
    names = [".".join(p.relative_to(SRC.parent).with_suffix("").parts).removesuffix(".__init__")
             for p in modules_below()]
    code = ("import importlib, sys\n"
            f"for name in {names!r}:\n"
            "    importlib.import_module(name)\n"
            "print(sorted(m for m in sys.modules if m.startswith('populace.scenarios')))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


#: The built-in scenarios' names, as a lower layer would branch on them.
SCENARIO_NAMES = frozenset({"guess_number", "guess-number", "survey", "social"})


def scenario_literals(path: Path) -> list[str]:
    """The string constants of ``path`` (docstrings aside) that are a scenario's name, or
    mention the game's (``if config.scenario == "survey"`` would be one)."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef
                                | ast.AsyncFunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [f"line {node.lineno}: {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings
            and (node.value.strip().lower() in SCENARIO_NAMES or "guess_number" in node.value)]


def test_no_module_below_the_scenarios_branches_on_a_scenario_name() -> None:
    offenders = [f"{path.relative_to(SRC)}: {found}" for path in modules_below()
                 for found in scenario_literals(path)]
    assert offenders == []


def test_the_name_check_would_catch_one(tmp_path: Path) -> None:
    bad = tmp_path / "_bad.py"
    bad.write_text('"""A module about the survey."""\n'
                   'def f(scenario):\n    """For guess_number too."""\n'
                   '    return scenario == "survey" or "guess_number:GuessNumber"\n')
    assert sorted(scenario_literals(bad)) == ["line 4: 'guess_number:GuessNumber'",
                                              "line 4: 'survey'"]
