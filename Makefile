# Two entry points, each doing all set-up itself on a fresh machine:
#   make reproduce   create .venv, install dlperf with every framework, run the DLBench study (quick)
#   make test        create .venv the same way, run the test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: reproduce test lint bench install

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[all,dev]'
	touch $@

reproduce: install
	$(BIN)/dlperf reproduce dlbench --quick

test: install
	$(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

bench: install
	$(BIN)/python benchmarks/bench_harness.py
