"""TensorFlow's own profiler over a few training steps (``dlperf explain``): the time of
every graph op the executor ran, from the trace ``tf.profiler.experimental`` writes (an
XSpace read with TensorFlow's own ``xplane_pb2``), each op's operand shapes from the
step's traced graph, grouped by op and shapes, per step.

The trace names an op 'node:OpType' after grappler's rewrites: oneDNN's fused kernels
keep the name of the node they end in (a MatMul fused with its BiasAdd and Sigmoid is
named after the Sigmoid), so a fused product is found by walking the traced graph from
that node back to its MatMul or Conv2D. Products are given as ``tf:matmul`` with operands
(m x k) and (k x n) (transposes applied; ``tf:matmul_tn`` with its first operand stored
transposed, ``tf:matmul_nt`` with its second), convolutions and their two gradients as
``tf:conv2d`` with their FLOPs (input NCHW, kernel OIHW), everything else as
``tf:<OpType>`` with its operands' and output's shapes (none where the graph has no node
of that name: unmodelled).

After a few hundred steps (a timed step's warm-up) TensorFlow's executor stops tracing
the ops its cost model has found cheap, at every tracer level: in a tiny network most of
the backward pass is then not in the trace, and its time shows as time outside the ops.
The products and convolutions of the DLBench networks stay traced. Ops inside a while
loop's body (Keras' LSTM) belong to the body's own graph: their shapes are not read, so
they are listed without a model time.
"""

from __future__ import annotations

import math
import tempfile

import tensorflow as tf
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from dlperf.backends.base import Trainer
from dlperf.backends.trace_times import mean_step_s, op_groups, xplane_file

MATMUL = ("MatMul", "BatchMatMul")
CONV = ("Conv2D",)  # Conv2D, its Backprop{Input,Filter} and oneDNN's fused forms
#: how far back from a fused kernel's named node its product may lie (BiasAdd, activation)
FUSED_DEPTH = 3


def _dims(t: tf.Tensor) -> tuple[int, ...] | None:
    shape = t.shape
    if shape.rank is None or any(d is None for d in shape.as_list()):
        return None
    return tuple(int(d) for d in shape.as_list())


def _product(op: tf.Operation, family: tuple[str, ...]) -> tf.Operation | None:
    """``op`` or the op of ``family`` it was fused with (its inputs, a few steps back)."""
    frontier = [op]
    for _ in range(FUSED_DEPTH + 1):
        for o in frontier:
            if any(f in o.type for f in family):
                return o
        frontier = [i.op for o in frontier for i in o.inputs]
    return None


def _flag(op: tf.Operation, *names: str) -> bool:
    """The first of ``names`` the op has as an attribute (MatMul's transpose_a,
    BatchMatMul's adj_x); False when it has none."""
    return next((bool(op.get_attr(n)) for n in names if n in op.node_def.attr), False)


def matmul_operands(op: tf.Operation) -> tuple[tuple[int, ...], ...] | None:
    """(m x k), (k x n) of a MatMul (transposes applied); (b, m, k), (b, k, n) of a
    batched one with one batch dimension."""
    a, b = (_dims(t) for t in op.inputs[:2])
    if a is None or b is None or len(a) != len(b) or len(a) not in (2, 3):
        return None
    ta, tb = _flag(op, "transpose_a", "adj_x"), _flag(op, "transpose_b", "adj_y")
    *batch, m, k = a if not ta else (*a[:-2], a[-1], a[-2])
    *_, k2, n = b if not tb else (*b[:-2], b[-1], b[-2])
    if k != k2:
        return None
    return ((*batch, m, k), (*batch, k, n))


def matmul_layout(op: tf.Operation) -> str:
    """'_tn' for a product of its first operand transposed (a weight gradient, X^T dY),
    '_nt' of its second (Keras' input gradient, dY W^T), '' otherwise: the layouts the
    calibration times apart (``kernels``' gemm_tn and gemm_nt)."""
    ta, tb = _flag(op, "transpose_a", "adj_x"), _flag(op, "transpose_b", "adj_y")
    return "_tn" if ta and not tb else "_nt" if tb and not ta else ""


def conv_operands(op: tf.Operation) -> tuple[tuple[tuple[int, ...], ...], float] | None:
    """((input NCHW, kernel OIHW), FLOPs) of a Conv2D or either of its gradients (NHWC):
    2 x output-gradient (or output) elements x the window x the input channels."""
    if op.type.endswith("BackpropInput"):
        x, w, y = _dims(op.outputs[0]), _dims(op.inputs[1]), _dims(op.inputs[2])
    elif op.type.endswith("BackpropFilter"):
        x, w, y = _dims(op.inputs[0]), _dims(op.outputs[0]), _dims(op.inputs[2])
    else:
        x, w, y = _dims(op.inputs[0]), _dims(op.inputs[1]), _dims(op.outputs[0])
    if x is None or w is None or y is None or len(x) != 4 or len(w) != 4:
        return None
    kh, kw, c_in, c_out = w
    flops = 2.0 * math.prod(y) * kh * kw * c_in
    return ((x[0], x[3], x[1], x[2]), (c_out, c_in, kh, kw)), flops


def describe(node: str, op_type: str, graph_ops: dict[str, tf.Operation]
             ) -> tuple[str, tuple[tuple[int, ...], ...], float | None]:
    """(op name, operand shapes, FLOPs per call) of one traced op as ``ProfiledOp``
    carries them."""
    op = graph_ops.get(node)
    if op is None:
        return f"tf:{op_type}", (), None
    if any(f in op_type for f in MATMUL) and (p := _product(op, MATMUL)) is not None \
            and (shapes := matmul_operands(p)):
        return f"tf:matmul{matmul_layout(p)}", shapes, None
    if any(f in op_type for f in CONV) and (p := _product(op, CONV)) is not None \
            and (found := conv_operands(p)):
        return "tf:conv2d", found[0], found[1]
    shapes = [d for t in (*op.inputs, *op.outputs[:1]) if (d := _dims(t)) is not None]
    return f"tf:{op_type}", tuple(shapes), None


def traced_events(path: str) -> list[list[tuple[str, int, int]]]:
    """Per trace line (thread), its events 'node:OpType' as (name, start ns, end ns)."""
    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    out = []
    for plane in space.planes:
        names = {k: v.name for k, v in plane.event_metadata.items()}
        for line in plane.lines:
            events = []
            for e in line.events:
                name = names.get(e.metadata_id, "")
                if ":" in name and "::" not in name and " " not in name:  # 'node:OpType'
                    start = (line.timestamp_ns * 1000 + e.offset_ps) // 1000
                    events.append((name, start, start + e.duration_ps // 1000))
            if events:
                out.append(events)
    return out


def profile(trainer: Trainer, steps: int, device: str) -> tuple[list[dict], float]:
    graph = trainer._step.get_concrete_function(trainer.x, trainer.y).graph
    graph_ops = {op.name: op for op in graph.get_operations()}
    with tempfile.TemporaryDirectory(prefix="dlperf-tf-trace-") as folder:
        # ops, not Python calls (level 3 does not bring the cheap ops back: see above)
        tf.profiler.experimental.start(folder, options=tf.profiler.experimental.ProfilerOptions(
            host_tracer_level=2, python_tracer_level=0, device_tracer_level=1))
        try:
            wall = mean_step_s(trainer, steps)
        finally:
            tf.profiler.experimental.stop()
        lines = traced_events(xplane_file(folder))

    def described(name: str):  # 'node:OpType'
        node, _, op_type = name.rpartition(":")
        return describe(node, op_type, graph_ops)

    return op_groups(lines, described, steps), wall
