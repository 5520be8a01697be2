#!/bin/bash
# The prepared script for a lent GPU (its budget is minutes): on the device machine, from
# dlperf's source tree, with the wheels benchmarks/gpu_wheels.sh fetched carried along
# (carry=[".gpu-wheels"]), everything written under $OUT (store: $OUT/gpu.db):
#   1. the memory model on the GPU (benchmarks/bench_memory.py --device gpu: GPT-2 small
#      and medium at bf16, ResNet-50 at fp32 and bf16, two batches each, timed too; the
#      fits-or-not call under device-memory limits), about 8 s a PyTorch run;
#   2. dlperf validate --memory, and the step times against the catalogue's entry of the
#      GPU (the reference curves scaled to it);
#   3. the GPU tests (tests/test_gpu.py, tests/test_dataflow_gpu.py);
#   4. the DLBench cells of PyTorch and JAX on the GPU (fcn5, alexnet, lstm32; 64, 256);
#   5. with JAX_STARTUP=1: a JAX step's start at 1 thread, at every core, and without
#      XLA's autotuning (each run's time in its step log);
#   6. with CALIBRATE=1: the GPU calibration of PyTorch and JAX at fp32 and the reference
#      curves of every framework calibrated ($OUT/reference_fits.json).
# Each step has a time limit of its own so that one slow step leaves the others their
# time; a step that fails is reported and the next goes on.
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
if [ -d .gpu-wheels ] && ! "$PY" -c "import pydantic, mnist1d" 2>/dev/null; then
    # only what the image lacks, beside it (its own pytest and plugins stay in force)
    "$PY" -m pip install --quiet --no-index --no-deps --no-compile --target /tmp/site \
        .gpu-wheels/pydantic*.whl .gpu-wheels/annotated_types*.whl \
        .gpu-wheels/typing_inspection*.whl .gpu-wheels/typing_extensions*.whl \
        .gpu-wheels/mnist1d*.whl 2>&1 | tail -n 2
    export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
step 240 memory "$PY" benchmarks/bench_memory.py --device gpu --frameworks torch \
    --boundary 10 --db "$DB"
ENTRY=$("$PY" -c "from dlperf.perfmodel.catalogue import gpu_entry; import subprocess; \
print(gpu_entry(subprocess.run(['nvidia-smi', '--query-gpu=name', '--format=csv,noheader'], \
capture_output=True, text=True).stdout.splitlines()[0]) or '')")
step 30 validate-memory "$PY" -m dlperf validate --memory --db "$DB"
[ -n "$ENTRY" ] && step 30 validate-time "$PY" -m dlperf validate --catalogue "$ENTRY" --db "$DB"
step 90 tests "$PY" -m pytest -q -rfE -p no:cacheprovider tests/test_gpu.py tests/test_dataflow_gpu.py
# last: a JAX run on a GPU took 85-90 s each (its compile on the one core it is pinned to)
step 200 dlbench "$PY" -m dlperf sweep --networks fcn5,alexnet,lstm32 --frameworks torch,jax \
    --devices gpu --batch-size 64,256 --min-time 0.3 --db "$DB"
step 20 validate-cells "$PY" -m dlperf validate --memory --networks fcn5,alexnet,lstm32 --db "$DB"
if [ "${JAX_STARTUP:-0}" = 1 ]; then  # why a JAX run took 85-90 s to start on an H200
    for how in "--threads 1" "--threads $(nproc)"; do
        step 150 "jax-start-${how##* }" "$PY" -m dlperf run -n fcn5 -f jax -d gpu -b 64 \
            $how --min-time 0.3 --db "$OUT/jax-start.db"
    done
    XLA_FLAGS=--xla_gpu_autotune_level=0 step 150 jax-start-noautotune "$PY" -m dlperf run \
        -n fcn5 -f jax -d gpu -b 64 --threads 1 --min-time 0.3 --db "$OUT/jax-start.db"
fi
if [ "${CALIBRATE:-0}" = 1 ]; then
    step 240 calibrate "$PY" -m dlperf calibrate --device gpu --frameworks torch,jax --db "$DB"
    [ -n "$ENTRY" ] && step 30 reference "$PY" -m dlperf.kinds.calibrate.shipped_fits \
        --db "$DB" --entry "$ENTRY" --out "$OUT/reference_fits.json"
fi
echo "done in $(( $(date +%s) - START )) s; results in $OUT"
