#!/bin/sh
# Fetch, on a machine with PyPI, the wheels a lent GPU machine lacks for dlperf's source
# tree (seen there: Python 3.12 with PyTorch and JAX, no pydantic, rich or mnist1d), into
# .gpu-wheels/ (git-ignored), which the device call carries: run("...", carry=[".gpu-wheels"]).
#   sh benchmarks/gpu_wheels.sh            # about 5 MB
set -e
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
rm -rf .gpu-wheels && mkdir .gpu-wheels
"$PY" -m pip download --quiet --only-binary=:all: --python-version 3.12 \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 --no-deps -d .gpu-wheels \
    pydantic pydantic-core annotated-types typing-inspection typing-extensions \
    psutil rich markdown-it-py mdurl pygments mnist1d pytest pluggy iniconfig packaging \
    pytest-timeout
ls .gpu-wheels | wc -l
du -sh .gpu-wheels
