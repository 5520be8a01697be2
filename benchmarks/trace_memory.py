"""Where a CPU step's resident memory goes: its peak resident memory beyond the framework's
runtime, split into the tensors the framework's own allocator held at the step's peak and
the rest (what the allocator kept resident after freeing, and what building the step
took), beside the memory model's tensors (``perfmodel.memory``).

    python benchmarks/trace_memory.py [--networks fcn5,alexnet,resnet50,lstm32]
        [--frameworks torch,tensorflow,jax] [--batch default|N]

The tensors' peak is each framework's own account, read in the step's process:

- PyTorch: the profiler's allocation events (``profile_memory=True``) over one step begun
  with its gradients freed (``zero_grad(set_to_none=True)``, as every step begins), plus
  what is held when it starts (weights and the batch);
- TensorFlow: ``tf.config.experimental.get_memory_info('CPU:0')['peak']``;
- JAX: XLA's buffer plan of the compiled step (``Compiled.memory_analysis()``: its
  arguments and temporaries; a plan, not a measurement).

Each configuration runs in a fresh process, on one thread, after two warm-up steps.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(SRC))

MIB = 2**20


def trace(network: str, framework: str, batch: int) -> dict[str, float]:
    """In this process: the resident peak beyond the runtime and the tensors' peak."""
    from dlperf import backends, workloads
    from dlperf.core import environment

    backend = backends.load(framework)
    backend.set_threads(1)
    _, _, cfg = workloads.resolve(network, None, {})
    runtime = environment.resident_bytes()
    trainer = backend.build(network, cfg, batch, backends.resolve_variant(framework, ""),
                            "cpu", 0)
    for _ in range(2):
        trainer.step()
        trainer.sync()
    tensors = TRACERS[framework](trainer)
    return {"resident": environment.peak_resident_bytes() - runtime, "tensors": tensors}


def _torch(trainer) -> float:
    from torch.profiler import ProfilerActivity, profile

    trainer.opt.zero_grad(set_to_none=True)
    held = sum(t.numel() * t.element_size()
               for t in (*trainer.model.parameters(), *trainer.model.buffers(),
                         trainer.x, trainer.y))
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as p:
        trainer.step()
    live = peak = 0
    events = [e for e in p.profiler.kineto_results.events() if e.name() == "[memory]"]
    for e in sorted(events, key=lambda e: e.start_ns()):
        live += e.nbytes()
        peak = max(peak, live)
    return held + peak


def _tensorflow(trainer) -> float:
    import tensorflow as tf

    return tf.config.experimental.get_memory_info("CPU:0")["peak"]


def _jax(trainer) -> float:
    plan = trainer._step.lower(trainer.state, trainer.x, trainer.y).compile().memory_analysis()
    return plan.argument_size_in_bytes + plan.temp_size_in_bytes


#: each framework's own account of the tensors at the step's peak
TRACERS = {"torch": _torch, "tensorflow": _tensorflow, "jax": _jax}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--networks", default="fcn5,alexnet,resnet50,lstm32")
    ap.add_argument("--frameworks", default="torch,tensorflow,jax")
    ap.add_argument("--batch", default="default")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # network,framework,batch: in-process
    a = ap.parse_args()
    if a.one:
        net, fw, b = a.one.split(",")
        print(json.dumps(trace(net, fw, int(b))))
        return 0
    from dlperf import workloads
    from dlperf.perfmodel.memory import step_memory

    bad = ([n for n in a.networks.split(",") if n not in workloads.WORKLOADS]
           + [f for f in a.frameworks.split(",") if f not in TRACERS])
    if bad or not (a.batch == "default" or a.batch.isdigit() and int(a.batch) > 0):
        print(f"trace_memory: unknown {', '.join(bad) or 'batch ' + a.batch} (networks: "
              f"the DLBench ones; frameworks: {', '.join(TRACERS)}; --batch default or N)",
              file=sys.stderr)
        return 2
    print(f"{'configuration':22s} {'resident':>9s} {'tensors':>8s} {'rest':>6s} "
          f"{'model':>6s} {'model/tensors':>13s}   (MiB beyond the runtime)")
    for net in a.networks.split(","):
        w = workloads.get(net)
        batch = w.default_batch if a.batch == "default" else int(a.batch)
        m = step_memory(w.layers(), batch, "fp32")
        model = m.total - m.baseline
        for fw in a.frameworks.split(","):
            out = subprocess.run([sys.executable, __file__, "--one", f"{net},{fw},{batch}"],
                                 capture_output=True, text=True, check=False)
            if out.returncode:
                print(f"{net}@{batch} {fw}: failed: {out.stderr.strip().splitlines()[-1:]}")
                continue
            t = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{f'{net}@{batch} {fw}':22s} {t['resident'] / MIB:9.0f} "
                  f"{t['tensors'] / MIB:8.0f} {(t['resident'] - t['tensors']) / MIB:6.0f} "
                  f"{model / MIB:6.0f} {model / t['tensors'] - 1:+13.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
