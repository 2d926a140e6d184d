# `make demo` and `make test` each create .venv on first use (Python >= 3.11 and git only).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint bench clean browser

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Populace needs Python >= 3.11 (set PYTHON=python3.11)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/populace run examples/guess_number.yaml

# Four pytest workers, whatever the machine: on 2 cores two left them half idle (the suite
# waits on subprocesses, Ray and browsers; CPU 92% of one core for 937 s with -n 2, 145% for
# 645 s with -n 4, same tests, same load). A test file runs on one worker, the slowest files
# first; all workers share one Ray cluster (tests/conftest.py). `pytest` alone: one process.
# Bytecode caches on, whatever the environment says (some sandboxes set
# PYTHONDONTWRITEBYTECODE=1): the suite starts ~450 Python processes that import populace
# (runs, reports, Ray workers), and without cached bytecode each compiles the package again
# (0.25 CPU-s each, 27% of an import).
test: $(STAMP) browser
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q -n 4 --dist loadfile --no-loadscope-reorder

# Browser tests drive Debian's chromium with Playwright (never a downloaded browser).
# Installing it needs root (as in CI); without it those tests skip and say why.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
		&& (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
		|| echo "note: chromium not installed; browser tests will be skipped"; }

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/populace bench --agents 100000 --latency 1.0 --rounds 1 --workers 2

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .ruff_cache .mypy_cache
