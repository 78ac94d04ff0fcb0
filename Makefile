# The two commands of the README:
#   make demo   set everything up and run the demo EOS job on a local Kafka cluster
#   make test   set everything up, check lint/types/layers, and run the default test suite (its drivers and
#               brokers start from the class-data archives that set-up makes: ~4 and ~2 CPU-s less each)
# Set-up is idempotent: a virtualenv in .venv (re-installed when pyproject.toml changes), the Apache
# Kafka jars resolved by Maven into ~/.cache/eos/kafka (nothing is downloaded twice), the class-data archive of
# the local brokers' JVM beside them (made once per Java and Kafka) and that of the Spark driver's JVM in
# ~/.cache/eos/class-data (made once per Java and Spark).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PACKAGES := eos transactions recovery chaos localkafka benchmarks
PYTEST_ARGS ?=
# Test processes (pytest-xdist; each file's tests stay in one process; each process has its own broker and Spark). The kill
# tests wait more than they compute (a test alone keeps a core ~40 % busy), so four processes on two cores: the
# suite took 654 s of pytest against 705 with three, both with the files handed out in collection order (the
# broker-and-Spark files first, the conftest's order) rather than xdist's default of the files with the most
# tests first, which left the single-test kill files for last (725-803 s with three; docs/measurements.md).
TEST_WORKERS ?= 4

.PHONY: setup jars demo test check chaos-full bench clean help
.DEFAULT_GOAL := help

help:
	@echo "make demo   - set up and run the demo exactly-once job on a local Kafka cluster"
	@echo "make test   - set up and run the default test suite (unit, integration, chaos smoke)"
	@echo "make check  - lint (ruff), types (mypy) and the layering contract (import-linter)"
	@echo "make setup  - only the set-up (virtualenv, Python packages, Kafka jars, class-data archives of the JVMs)"

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required (set PYTHON=/path/to/python3.11)")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $@

# Kafka jars: what the tests need besides the packages
jars: $(STAMP)
	$(BIN)/eos kafka fetch

# ... and the class-data archives of the Spark driver's JVM (~20 s once; drivers start ~2-3 s faster) and of the
# local brokers' (~15 s once, made beside it; brokers start ~1.5 s faster on ~2 CPU-s less), and the
# framework's modules compiled, as pip compiles a package it installs (an editable install is not): a machine
# that sets PYTHONDONTWRITEBYTECODE otherwise compiles them from source at every start (~0.3 CPU-s a driver)
setup: jars
	$(BIN)/eos kafka archive & kafka=$$!; $(BIN)/eos spark archive; spark=$$?; wait $$kafka && exit $$spark
	$(BIN)/python -m compileall -q -j 0 $(PACKAGES)

demo: setup
	$(BIN)/eos demo

check: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

test: setup check
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

chaos-full: setup
	$(BIN)/python -m pytest integration_tests/chaos --chaos-full $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .eos
