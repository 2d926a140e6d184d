"""Running a documentation page as written: its files are written, its commands exit as
the page says, its Python prints what its comments say, its error lines are what users see.

Blocks run in order in one directory:

- ``<!-- file: NAME -->`` before a fenced block writes the block to ``NAME``;
- a ``console`` block's lines ``$ command  # exit N`` run in a shell (exit 0 unless given);
- a ``python`` block runs; ``print(...)  # text`` says what must appear in its output;
- a ``text`` block lists lines that the console commands before it wrote to stderr
  (``{here}`` stands for the directory they ran in).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import forkserver

BLOCK = re.compile(r"(?:<!-- file: (?P<file>\S+) -->\n)?```(?P<lang>\w+)\n(?P<body>.*?)```",
                   re.S)


def run_page(doc: Path, directory: Path, *, ray_address: str | None = None) -> int:
    """Run every block of ``doc`` in ``directory``; how many commands and programs ran.

    With ``ray_address``, the page's Ray runs join that cluster (``RAY_ADDRESS``, as a user
    who set it) instead of each starting one of its own."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR")}
    env.update(NO_COLOR="1", PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}")
    env.pop("RAY_ADDRESS", None)
    if ray_address is not None:
        env["RAY_ADDRESS"] = ray_address
    stderr = ""
    ran = 0
    for block in BLOCK.finditer(doc.read_text()):
        lang, body, name = block["lang"], block["body"], block["file"]
        if name is not None:
            (directory / name).write_text(body)
        elif lang == "console":
            for line in body.splitlines():
                command, _, expect = line.removeprefix("$ ").partition("  # exit ")
                done = _shell(command, directory, env)
                assert done.returncode == int(expect or 0), (command, done.stderr)
                assert "Traceback" not in done.stderr, (command, done.stderr)
                stderr += done.stderr
                ran += 1
        elif lang == "python":
            done = forkserver.run([sys.executable, "-c", body], cwd=directory, env=env,
                                  text=True, capture_output=True, timeout=120)
            assert done.returncode == 0, done.stderr
            for m in re.finditer(r"print\(.*\)\s+#\s*(.+?)\s*$", body, re.M):
                assert m.group(1) in done.stdout, (m.group(1), done.stdout)
            ran += 1
        elif lang == "text":  # the error lines the page promises
            for line in body.strip().splitlines():
                line = line.replace("{here}", str(directory.resolve()))
                assert line in stderr.splitlines(), (line, stderr)
    return ran


#: What makes a command line more than a program and its arguments.
_SHELL = re.compile(r"[|&;<>()$`*?~{}\[\]!#\\]")


def _shell(command: str, directory: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``command`` run in a shell in ``directory``; a plain ``populace ...`` line is forked
    by tests/forkserver.py instead (the same process for the page, without the
    interpreter's start-up)."""
    words = None if _SHELL.search(command) else shlex.split(command)
    if words and words[0] == "populace" and shutil.which("populace", path=env["PATH"]) == \
            forkserver.SCRIPT:
        return forkserver.run([forkserver.SCRIPT, *words[1:]], cwd=directory, env=env,
                              text=True, capture_output=True, timeout=300)
    return subprocess.run(command, shell=True, cwd=directory, env=env, text=True,
                          capture_output=True, timeout=300)
