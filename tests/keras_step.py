"""Helper of test_backend_keras.py: the Keras side of its checks, in a process of its own,
since Keras reads KERAS_BACKEND once, at import, and the tests cover three backends.

    python tests/keras_step.py VARIANT DIR

Reads DIR/cases.pkl ({case: (network, config, weights, x, y)}, weights and batch in the
neutral layout), and for each case builds the Keras trainer, records its parameter count
and FLOPs, then takes one step from those weights on that batch. Writes DIR/VARIANT.pkl.
Only reports numbers: every assertion is in the test module.
"""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path

from dlperf import workloads
from dlperf.core import framework_table
from dlperf.engine.presets import DLBENCH_NETWORKS

SEED = 1  # another seed than the PyTorch reference's: set_weights must do the work


def main(variant: str, d: Path) -> None:
    os.environ.update(framework_table.info("keras").thread_env(1, variant))  # before Keras loads
    from dlperf.backends.keras_backend import KerasBackend

    backend = KerasBackend()
    out: dict = {"threads": backend.set_threads(1), "software": backend.software(), "cases": {}}
    cases = pickle.loads((d / "cases.pkl").read_bytes())
    for key, (network, cfg, w0, x, y) in cases.items():
        tr = backend.build(network, cfg, len(x), variant, "cpu", SEED)
        fresh = tr.get_weights()
        flops = tr.flops_per_step()
        tr.set_weights(w0)
        tr.set_batch(x, y)
        tr.step()
        tr.sync()
        out["cases"][key] = {"param_count": tr.param_count, "flops": flops, "loss": tr.loss(),
                             "fresh": fresh, "weights": tr.get_weights()}

    # the initial weights follow the seed
    tiny = workloads.get("fcn5").config("tiny")
    out["seeded"] = [backend.build("fcn5", tiny, 2, variant, "cpu", s).get_weights()
                     for s in (SEED, SEED, SEED + 1)]
    other = next(v for v in framework_table.info("keras").variants if v != variant)
    try:
        backend.build("fcn5", tiny, 2, other, "cpu", SEED)
        out["other_variant"] = None
    except Exception as e:
        out["other_variant"] = f"{type(e).__name__}: {e}"

    if variant == "torch":
        # every network at every size, counted on PyTorch's meta device: shapes only
        import keras

        from dlperf.backends.keras_models import build_model, trainable_params

        out["params"] = {}
        for name in DLBENCH_NETWORKS:
            for size in ("tiny", "full"):
                with keras.device("meta"):
                    model, _ = build_model(workloads.get(name).config(size))
                out["params"][name, size] = trainable_params(model)
    (d / f"{variant}.pkl").write_bytes(pickle.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
