#!/bin/bash
# The prepared script for a lent GPU (issue 34; its budget is minutes): on the device
# machine, from dlperf's source tree, with the wheels benchmarks/gpu_wheels.sh fetched
# carried along (carry=[".gpu-wheels"]), everything written under $OUT:
#   1. the GPU tests (tests/test_gpu.py, tests/test_dataflow_gpu.py);
#   2. the GPU calibration of PyTorch and JAX at fp32 (store: $OUT/gpu.db; resumable:
#      an interrupted kernel run keeps the shapes it timed);
#   3. DLBench cells per framework at two batch sizes (fcn5, alexnet, lstm32; 64, 256);
#   4. the reference curves of every framework calibrated ($OUT/reference_fits.json, for
#      src/dlperf/perfmodel/data/) and the report ($OUT/report/).
# Each step has a time limit of its own so that one slow step leaves the others their
# time; a step that fails is reported and the next goes on. Not yet run on a GPU.
#   bash benchmarks/gpu_session.sh [budget-seconds, default 540]
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
BUDGET=${1:-540}
START=$(date +%s)
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
PY=${PYTHON:-python3}
DB=$OUT/gpu.db
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
step() {  # step SECONDS NAME COMMAND...: run with a limit of its own, within the budget
    local limit=$1 name=$2; shift 2
    local l; l=$(left)
    (( limit > l )) && limit=$l
    if (( limit < 20 )); then echo "== $name: skipped (budget spent)"; return; fi
    echo "== $name (limit ${limit} s)"
    timeout -k 10 "$limit" "$@" > "$OUT/$name.log" 2>&1
    echo "   exit $? after $(( $(date +%s) - START )) s; last lines:"
    tail -n 15 "$OUT/$name.log" | sed 's/^/   /'
}
mkdir -p "$OUT"
if ! nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
        > "$OUT/gpu.txt" 2>&1; then
    echo "gpu_session: no GPU here (nvidia-smi: $(head -n 1 "$OUT/gpu.txt")); nothing to run" >&2
    exit 2
fi
cat "$OUT/gpu.txt"
"$PY" -c "import sys, torch, jax; print(sys.version.split()[0], 'torch', torch.__version__, \
'jax', jax.__version__, jax.devices())" 2>&1 | tee "$OUT/software.txt"
if [ -d .gpu-wheels ]; then
    "$PY" -m pip install --quiet --no-index --find-links .gpu-wheels pydantic rich psutil \
        mnist1d pytest pytest-timeout 2>&1 | tail -n 2
fi
step 120 tests "$PY" -m pytest -q -x -p no:cacheprovider tests/test_gpu.py tests/test_dataflow_gpu.py
step 240 calibrate "$PY" -m dlperf calibrate --device gpu --frameworks torch,jax --db "$DB"
step 150 dlbench "$PY" -m dlperf sweep --networks fcn5,alexnet,lstm32 --frameworks torch,jax \
    --devices gpu --batch-size 64,256 --min-time 0.5 --db "$DB"
ENTRY=$("$PY" -c "from dlperf.perfmodel.catalogue import gpu_entry; import subprocess; \
print(gpu_entry(subprocess.run(['nvidia-smi', '--query-gpu=name', '--format=csv,noheader'], \
capture_output=True, text=True).stdout.splitlines()[0]) or '')")
if [ -n "$ENTRY" ]; then
    step 30 reference "$PY" -m dlperf.kinds.calibrate.shipped_fits --db "$DB" --entry "$ENTRY" \
        --out "$OUT/reference_fits.json"
fi
step 60 report "$PY" -m dlperf report --db "$DB" --out "$OUT/report"
echo "done in $(( $(date +%s) - START )) s; results in $OUT"
