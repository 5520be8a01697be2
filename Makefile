# Two entry points, each doing all set-up itself on a fresh machine:
#   make reproduce   create .venv, install dlperf with every framework, run the DLBench study (brief)
#   make test        create .venv the same way, and MXNet's environment, run the test suite
#   make mxnet       create MXNet's environment (dlperf setup mxnet; MXNet needs numpy<1.24)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: reproduce test lint bench install mxnet

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[all,dev]'
	touch $@

# The brief DLBench study (fcn5, alexnet, lstm32 x PyTorch, TensorFlow, JAX x 1, P, 2P
# threads; about 6 minutes on 2 cores), the advice for this machine, the report's path last
reproduce: install
	$(BIN)/dlperf reproduce dlbench --brief --frameworks torch,tensorflow,jax --out results/dlbench
	$(BIN)/dlperf advise --task image-classification --samples 1.2M --epochs 90 --hardware this
	@echo "HTML report: $(CURDIR)/results/dlbench/report.html"

mxnet: install
	$(BIN)/dlperf setup mxnet

# MXNet's environment takes about half a minute to make; if it cannot be made, the suite
# still runs and the MXNet tests skip, saying why (hence the '-').
test: install
	-$(BIN)/dlperf setup mxnet
	$(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

bench: install
	$(BIN)/python benchmarks/bench_harness.py
