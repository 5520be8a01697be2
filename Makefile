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
	@# fio measures storage bandwidth (dlperf dataflow storage); without it dlperf's own
	@# reader does, so a machine where it cannot be installed goes on (hence the '-')
	-command -v fio >/dev/null || { command -v apt-get >/dev/null && \
	    { apt-get install -y -q fio >/dev/null 2>&1 || \
	      { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q fio >/dev/null 2>&1; }; }; } || echo "fio not installed: dlperf's built-in reader measures storage"
	@# Slurm and munge: the test suite starts a two-node Slurm on this machine
	@# (tests/slurm_cluster.py) to run sweeps through --executor slurm; without them (no
	@# apt, not root) the Slurm tests skip, saying why
	-command -v slurmctld >/dev/null || { command -v apt-get >/dev/null && \
	    { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends slurm-wlm munge >/dev/null 2>&1 || \
	      { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends slurm-wlm munge >/dev/null 2>&1; }; }; } || echo "Slurm not installed: the Slurm tests will skip"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[all,dev]'
	touch $@

# The performance model calibrated here at the brief study's networks' layer shapes and,
# at the physical cores in PyTorch, where the advice predicts other networks, a skeleton
# of the kernel grid (3.5 to 5 minutes on 2 cores; kept in the store; a later
# 'dlperf predict' of another network adds its shapes), the brief DLBench study (fcn5,
# alexnet, lstm32 x PyTorch, TensorFlow, JAX x 1 and P threads, fcn5 at 2P too; about 5
# minutes with the machine's peak) with the model's prediction beside each cell, the advice for
# this machine, the report's path last. A calibration that cannot finish ('-') leaves the
# study to run without the predictions it lacks.
reproduce: install
	-$(BIN)/dlperf calibrate --frameworks torch,tensorflow,jax --no-allreduce --networks fcn5,alexnet,lstm32 --skeleton once
	$(BIN)/dlperf reproduce dlbench --brief --frameworks torch,tensorflow,jax --out results/dlbench
	$(BIN)/dlperf advise --task image-classification --samples 1.2M --epochs 90 --hardware this
	@echo "HTML report: $(CURDIR)/results/dlbench/report.html"

mxnet: install
	$(BIN)/dlperf setup mxnet

# The suite runs in two pytest workers (pytest-xdist): most of its time is worker processes
# starting (imports, spawning) and tests that run in-process, which overlap on two cores;
# the runs that measure still go one at a time (dlperf's machine lock, engine/cpulock.py),
# and the tests of one Slurm cluster or of one shared measurement share a worker
# (xdist_group). 16.5 minutes -> 11 on the 2-vCPU machine it was written on.
#
# MXNet's environment takes about half a minute to make. Where it can be made, a failed
# set-up fails the target, so that MXNet's tests never skip while the suite passes. It
# can be made where the interpreter dlperf makes it from (this venv's base) is Python
# 3.8-3.11 with the venv and ensurepip modules (numpy<1.24, which MXNet 1.9.1 needs, has
# no wheels past 3.11), and pip, in a dry run that installs nothing, finds wheels of
# mxnet and numpy for this platform among the requirements dlperf installs
# (core/separate_envs.py): PyPI reachable, and a platform MXNet has wheels for (x86-64).
# Elsewhere dlperf setup is not tried, the line below says which check failed, and the
# suite runs with the MXNet tests skipping, saying why.
MXNET_REQS = from dlperf.core.separate_envs import SEPARATE; \
	print(' '.join(SEPARATE['mxnet'].requirements))

test: install
	@why=; \
	$(BIN)/python -c "import sys, venv, ensurepip; \
	    sys.exit(not (3, 8) <= sys.version_info[:2] <= (3, 11))" 2>/dev/null || \
	    why="no Python 3.8-3.11 with venv and ensurepip to make it from"; \
	if [ -z "$$why" ]; then \
	    reqs=$$($(BIN)/python -c "$(MXNET_REQS)") || exit 1; \
	    $(BIN)/python -m pip install --dry-run --quiet --ignore-installed \
	        --disable-pip-version-check --retries 1 --timeout 20 \
	        --only-binary=mxnet,numpy $$reqs >/dev/null 2>&1 || \
	        why="pip finds no wheels of $$reqs for this platform"; \
	fi; \
	if [ -n "$$why" ]; then \
	    echo "MXNet's environment cannot be made here ($$why): its tests will skip"; \
	else \
	    echo "$(BIN)/dlperf setup mxnet" && $(BIN)/dlperf setup mxnet; \
	fi
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup

lint: install
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

bench: install
	$(BIN)/python benchmarks/bench_harness.py
