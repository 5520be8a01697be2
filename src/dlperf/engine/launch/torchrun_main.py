"""torchrun, armed to die with its driver: ``python -m dlperf.engine.launch.torchrun_main ARGS``
is ``python -m torch.distributed.run ARGS`` after ``prctl(PR_SET_PDEATHSIG)`` (torchrun
is not dlperf's code, so it cannot arm itself)."""

from __future__ import annotations

import runpy
import sys

from dlperf.core.orphans import die_with_parent, parent_from_env

if __name__ == "__main__":
    die_with_parent(parent_from_env())
    sys.argv[0] = "torchrun"
    runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)
