# fedxab: the two commands of the README, plus the benchmark.
#
#   make run    create .venv if missing, install fedxab, run the default job (results/results.json)
#   make test   create .venv if missing, install fedxab[dev,bench,opacus], ruff + mypy + pytest of
#               every test not marked `slow` (torch==2.13.0 in the same pip step: the CPU build,
#               never a CUDA one; chromium from apt-get where root, for the dashboard's browser
#               tests)
#   make test-slow  pytest of the tests marked `slow` (reproductions, soak, live fuzzing, faults;
#               each over about 15 s), in the .venv `make test` installed. CI (.ci/run) runs both.
#   make test-scale  pytest of the tests marked `scale` (1,000 clients on the dev broker, about
#               4 minutes each), in that .venv; not in CI, whose time they would take past 20 min.
#   make docs   install fedxab[docs], build the documentation site into site/ (mkdocs --strict)
#   make bench  install fedxab[dev,bench] (PyXAB), run the benchmarks (HCT vs PyXAB, federation, DP,
#               transports, signing)
#
# Every recipe line's exit status is kept: a lint error or a failed (or empty, exit code 5)
# pytest run fails the target.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip install --disable-pip-version-check --quiet
# pytest-xdist workers of `make test` (one per core; `make test TEST_WORKERS=0` runs in-process),
# each taking whole test files: a module's fixtures (recorded runs, bench scripts, the docs build)
# are then computed once. Files go out in collection order (--no-loadscope-reorder), which
# tests/conftest.py starts with the longest files (LONGEST_FILES), so none runs alone at the end.
TEST_WORKERS ?= auto
# `make test` installs without byte-compiling (pip --no-compile) and runs the checks with
# PYTHONDONTWRITEBYTECODE unset: pip would compile all ~12,700 modules of the environment (about
# 57 CPU-seconds, most of them for modules no test imports), while Python writes the .pyc of each
# module the first time a test imports it (about 12 CPU-seconds), so the several hundred
# processes the tests start (each `fedxab` one imports fedxab, numpy, scipy) read them instead of
# compiling their sources again.
WRITE_PYC := env -u PYTHONDONTWRITEBYTECODE

.PHONY: run test test-slow test-scale bench docs

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

run: $(BIN)/python
	$(PIP) -e .
	$(BIN)/fedxab run

test: $(BIN)/python
	$(PIP) --no-compile torch==2.13.0 -e '.[dev,bench,opacus]'
	bash tests/system_packages.sh
	$(BIN)/ruff check fedxab tests benchmarks
	$(BIN)/mypy
	$(WRITE_PYC) $(BIN)/pytest -m "not slow" -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

test-slow: $(BIN)/python
	$(WRITE_PYC) $(BIN)/pytest -m "slow and not scale" -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The acceptance-scale runs (about 4 minutes each: 1,000 clients on the dev broker), not in CI.
test-scale: $(BIN)/python
	$(WRITE_PYC) $(BIN)/pytest -m scale

docs: $(BIN)/python
	$(PIP) -e '.[docs]'
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: $(BIN)/python
	$(PIP) -e '.[dev,bench]'
	$(BIN)/python benchmarks/bench_hct_vs_pyxab.py
	$(BIN)/python benchmarks/bench_federation.py
	$(BIN)/python benchmarks/bench_dp_fedpne.py
	$(BIN)/python benchmarks/bench_transports.py
	$(BIN)/python benchmarks/bench_signing.py
