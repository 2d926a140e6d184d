"""docs/scenarios.md works as written: its files are written, its commands exit as the
page says, its Python prints what its comments say, its error lines are what users see."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "scenarios.md"
BLOCK = re.compile(r"(?:<!-- file: (?P<file>\S+) -->\n)?```(?P<lang>\w+)\n(?P<body>.*?)```",
                   re.S)


def test_every_block_of_the_scenarios_page(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR")}
    env.update(NO_COLOR="1", PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}")
    env.pop("RAY_ADDRESS", None)
    stderr = ""
    ran = 0
    for block in BLOCK.finditer(DOC.read_text()):
        lang, body, name = block["lang"], block["body"], block["file"]
        if name is not None:
            (tmp_path / name).write_text(body)
        elif lang == "console":
            for line in body.splitlines():
                command, _, expect = line.removeprefix("$ ").partition("  # exit ")
                done = subprocess.run(command, shell=True, cwd=tmp_path, env=env, text=True,
                                      capture_output=True, timeout=300)
                assert done.returncode == int(expect or 0), (command, done.stderr)
                assert "Traceback" not in done.stderr, (command, done.stderr)
                stderr += done.stderr
                ran += 1
        elif lang == "python":
            done = subprocess.run([sys.executable, "-c", body], cwd=tmp_path, env=env,
                                  text=True, capture_output=True, timeout=120)
            assert done.returncode == 0, done.stderr
            for m in re.finditer(r"print\(.*\)\s+#\s*(.+?)\s*$", body, re.M):
                assert m.group(1) in done.stdout, (m.group(1), done.stdout)
            ran += 1
        elif lang == "text":  # the error lines the page promises
            for line in body.strip().splitlines():
                assert line in stderr.splitlines(), (line, stderr)
    assert ran >= 9
    assert (tmp_path / "runs" / "rumour" / "report.html").exists()
    figures = {p.stem for p in (tmp_path / "runs" / "rumour" / "figures").glob("*.png")}
    assert {"metric_told", "metric_believers", "distribution_times_heard"} <= figures
    assert (tmp_path / "runs" / "sweep" / "sweep.json").exists()
