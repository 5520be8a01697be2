"""Without a GPU, every GPU path ends with one line and exit status 2, before any worker
starts (with one, tests/test_gpu.py and the GPU tests of each framework run instead)."""

from __future__ import annotations

import pytest

from dlperf.cli import main
from dlperf.core.environment import gpus

pytestmark = pytest.mark.skipif(bool(gpus()), reason="this machine has a GPU: the GPU paths "
                                "run in tests/test_gpu.py and the frameworks' GPU tests")


@pytest.mark.parametrize("argv", [
    ["run", "-n", "fcn5", "--size", "tiny", "-f", "torch", "--device", "gpu"],
    ["run", "-n", "fcn5", "--size", "tiny", "-f", "jax", "--device", "gpu"],
    ["run", "-n", "fcn5", "--size", "tiny", "-f", "tensorflow", "--device", "gpu"],
    ["run", "-n", "fcn5", "--size", "tiny", "-f", "keras", "--device", "gpu"],
    ["run", "-n", "fcn5", "--size", "tiny", "--device", "gpu", "--mode", "inference"],
    ["sweep", "--networks", "fcn5", "--size", "tiny", "--devices", "cpu,gpu"],
    ["calibrate", "--device", "gpu", "--frameworks", "jax"],
    ["explain", "-n", "fcn5", "--size", "tiny", "-f", "jax", "--device", "gpu"],
    ["dataflow", "h2d"],
])
def test_a_gpu_path_without_a_gpu_is_one_line_and_status_2(argv, db, capsys):
    assert main([*argv, "--db", str(db)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs a GPU" in err[0], err
