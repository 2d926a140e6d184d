"""Per-call cost of ``DummyModel.complete()``: this tree against a git revision's, side by side.

    python benchmarks/dummy_call.py [REV]   # default 57cdf37, before the Request record

The revision's ``llm/offline/_dummy.py`` (``llm/_dummy.py`` before the offline package) is
loaded from git next to this tree's ``populace.llm`` (its helpers are the same), so both run
in one process, interleaved, five times; the best of each is printed.
"""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from populace.llm.offline import DummyModel

N = 300_000


def old_dummy(rev: str) -> type:
    shown = subprocess.run(["git", "show", f"{rev}:src/populace/llm/offline/_dummy.py"],
                           capture_output=True, text=True)
    if shown.returncode != 0:  # a revision from before populace.llm.offline
        shown = subprocess.run(["git", "show", f"{rev}:src/populace/llm/_dummy.py"],
                               check=True, capture_output=True, text=True)
        shown.stdout = shown.stdout.replace("from ._base", "from .._base")
    source = shown.stdout.replace("from .._", "from populace.llm._")
    source = source.replace("from ._", "from populace.llm.offline._")
    path = Path(tempfile.mkdtemp()) / "old_dummy.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("old_dummy", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.DummyModel  # type: ignore[no-any-return]


async def per_call(model: DummyModel) -> float:
    t = time.perf_counter()
    for s in range(N):
        await model.complete((), temperature=1.0, seed=s, max_tokens=8, response_format=None)
    return (time.perf_counter() - t) / N * 1e6


async def main(rev: str) -> None:
    old = old_dummy(rev)
    best = {"old": float("inf"), "new": float("inf")}
    for _ in range(5):
        best["old"] = min(best["old"], await per_call(old(latency=0)))
        best["new"] = min(best["new"], await per_call(DummyModel(latency=0)))
    print(f"{rev}: {best['old']:.2f} µs/call; this tree: {best['new']:.2f} µs/call; "
          f"ratio {best['new'] / best['old']:.2f}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "57cdf37"))
