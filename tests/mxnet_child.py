"""The MXNet side of tests/test_backend_mxnet.py, run in the MXNet environment's interpreter
(MXNet 1.9.1 needs numpy<1.24, so it cannot load in the test process).

    python tests/mxnet_child.py JOB.json

JOB: {"full_counts": [network, ...], "steps": [{"network", "image" (or null), "variant",
"batch_npz", "out_npz"}, ...]}. Each step case reads the weights ("w:NAME") and the batch
("x", "y") in the neutral layout from batch_npz, loads them into a freshly built tiny
network, runs one training step, and writes the weights as read back before the step
("before:NAME") and after it ("after:NAME") to out_npz. Prints one JSON line: the
full-size parameter counts, per step case the parameter count, the loss, the FLOPs and
the weight names the trainer exports, and the backend's software record.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import numpy as np

from dlperf import workloads
from dlperf.backends import mxnet_backend


def main() -> None:
    job = json.loads(open(sys.argv[1]).read())
    backend = mxnet_backend.MXNetBackend()
    counts = {}
    for name in job["full_counts"]:
        net, _ = mxnet_backend.build_model(workloads.get(name).config("full"), initialize=False)
        counts[name] = mxnet_backend.trainable_params(net)
    steps = []
    for case in job["steps"]:
        cfg = workloads.get(case["network"]).config("tiny")
        if case.get("image"):
            cfg = replace(cfg, image=case["image"])
        data = np.load(case["batch_npz"])
        weights = {k[2:]: data[k] for k in data.files if k.startswith("w:")}
        tr = backend.build(case["network"], cfg, len(data["y"]), case["variant"], "cpu", 1)
        names = sorted(tr.get_weights())
        tr.set_weights(weights)
        tr.set_batch(data["x"], data["y"])
        before = tr.get_weights()
        tr.step()
        tr.sync()
        after = tr.get_weights()
        np.savez(case["out_npz"], **{f"before:{k}": v for k, v in before.items()},
                 **{f"after:{k}": v for k, v in after.items()})
        steps.append({"param_count": tr.param_count, "loss": tr.loss(),
                      "flops": tr.flops_per_step(), "names": names})
    print(json.dumps({"full_counts": counts, "steps": steps, "software": backend.software()}))


if __name__ == "__main__":
    main()
