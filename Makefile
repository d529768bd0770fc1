# The two commands of the README: `make run` and `make test`.
# Both create .venv when it is missing and install the project into it.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test lint bench clean test-cluster docs

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-docs: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[docs]"
	touch $(VENV)/.installed $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $(VENV)/.installed $@

run: $(VENV)/.installed
	$(BIN)/distforest run pipelines/main.yaml --cluster cluster_configs/local.yaml

# Three pytest workers (pytest-xdist) on the 2-core machines: many tests wait on a
# subprocess, a LocalCluster start-up or the disk, so with two workers the cores were
# busy 90 % of the time, with three 97 % (benchmarks/results/test_suite.md).
# --dist loadfile keeps each test file on one worker, its tests in file order as in a
# serial run (module fixtures such as the S3 server start once); the longest files go
# first (tests/conftest.py).  The process-level tests (Ctrl-C, driver
# memory, killed workers and drivers) use their own temporary folders, ports and
# numba caches and wait long enough for a loaded machine.  TEST_WORKERS=0 runs
# serially; TEST_WORKERS=auto one worker per core.  The tests marked `slow` (long
# end-to-end cases that a faster test of `make test` covers; benchmarks/results/
# test_suite.md names which) run with `make test-cluster`.  --tb=native: Python's own
# tracebacks (pytest's parse the source of every frame: 0.3 s for each of scikit-learn's
# expected failures in the estimator checks).  Bytecode caches written as Python does by
# default, even where PYTHONDONTWRITEBYTECODE is set: otherwise every pytest worker
# rewrites the assertions of every test module (6 s of CPU each) and every process the
# tests start compiles distforest from its source again (0.2 s each).
TEST_WORKERS ?= 3

# The numba kernels compiled once per clone (and again when a kernel's source changes)
# before the suite starts: a fresh clone's cache is empty, and otherwise every process the
# suite starts (the pytest workers, their clusters' workers, the command-line runs) would
# compile what it reaches, several at once, in the first minute.  Measured in
# benchmarks/results/test_suite.md; the suite passes without it, only more slowly.
$(VENV)/.kernels: $(VENV)/.installed-test $(wildcard distforest/kernels/*.py)
	$(BIN)/python -m distforest.forests.warm
	touch $@

test: $(VENV)/.installed-test $(VENV)/.kernels
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not slow" --tb=native

lint: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy

# The documentation site (Sphinx, pydata-sphinx-theme) in docs/_build/html, warnings as
# errors; the gallery's examples run during the build (a few seconds each).
docs: $(VENV)/.installed-docs
	$(BIN)/python -m sphinx -W --keep-going -b html docs docs/_build/html
	@echo "open docs/_build/html/index.html"

clean:
	rm -rf results/ .pytest_cache docs/_build docs/generated docs/auto_examples

# One benchmark: `make bench` lists them, `make bench NAME=xforest ARGS="--parts stored"`
# runs one (the same as `python -m benchmarks NAME ARGS`; see benchmarks/README.md).
# By hand only: most take minutes to hours and want a quiet machine.
bench: $(VENV)/.installed-test
	$(BIN)/python -m benchmarks $(NAME) $(ARGS)

# The tests marked `slow` (long end-to-end cases a faster test of `make test` covers),
# then real engines on this machine (a standalone dask scheduler, SSH, single-node
# Slurm), started and stopped by the script; needs root for apt-get and the
# daemons.  Not part of `make test`.  Writes benchmarks/results/clusters.md.
test-cluster: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m slow
	$(BIN)/python .ci/test_cluster.py
