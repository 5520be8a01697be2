"""JAX's own profiler over a few training steps (``dlperf explain``): the time of every
XLA instruction of the compiled step, from the trace ``jax.profiler.trace`` writes
(read back with ``jax.profiler.ProfileData``), each instruction's operand shapes from the
compiled module's HLO text, grouped by op and shapes, per step.

XLA names its ops by instruction: a dot, a convolution, a fusion of elementwise ops (a
fusion that wraps a dot or a convolution counts as that product), a while loop. An event
nested in another on the same thread (a loop body's ops inside the loop) is taken off its
parent, so that each instruction has its own time and nothing is counted twice.
Products are given as ``xla:dot`` with operands (m x k) and (k x n) (a leading batch
dimension where the dot has one), named by how they are laid out (``dot_operands``: a
weight gradient reads its first operand transposed, ``xla:dot_tn``), convolutions as
``xla:convolution`` with their FLOPs (a layer's weight gradient, which XLA runs as a
convolution, as ``xla:convolution_wgrad``: ``conv_flops``), other fusions by the kind XLA names them after (``xla:transpose_copy_fusion``: a copy
into another layout with the elementwise ops fused into it), everything else as
``xla:<opcode>``, each with its operands' and result's shapes.
"""

from __future__ import annotations

import math
import re
import tempfile
from collections import defaultdict
from dataclasses import dataclass

import jax
from jax.profiler import ProfileData

from dlperf.backends.base import Trainer
from dlperf.backends.trace_times import mean_step_s, op_groups, xplane_file

#: '%name = f32[8,16]{1,0} opcode(%a, %b), attrs' (a tuple-shaped result has no dims)
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%(?P<name>[\w.\-]+) = (?P<type>\(.*?\)|\w+\[(?P<dims>[\d,]*)\]"
                    r"(?:\{[^}]*\})?) (?P<op>[\w\-]+)\((?P<args>[^)]*)\)(?P<attrs>.*)$")
_COMPUTATION = re.compile(r"^(?:ENTRY )?%(?P<name>[\w.\-]+) ")


@dataclass
class Instr:
    name: str
    op: str
    dims: tuple[int, ...] | None  # the result's shape (None: a tuple)
    args: tuple[str, ...]  # operand instruction names
    attrs: str
    computation: str
    #: a fusion around one dot or convolution: that product's name (set by parse_hlo)
    product: str | None = None


def parse_hlo(text: str) -> dict[str, Instr]:
    """Every instruction of an HLO module's text, by name (names are unique in a module),
    a fusion around one dot or convolution knowing that product's name."""
    out: dict[str, Instr] = {}
    comp = ""
    for line in text.splitlines():
        if not line.startswith(" ") and (m := _COMPUTATION.match(line)):
            comp = m.group("name")
            continue
        m = _INSTR.match(line)
        if m is None:
            continue
        dims = m.group("dims")
        shape = None if dims is None else tuple(int(d) for d in dims.split(",") if d)
        args = tuple(a.strip().lstrip("%") for a in m.group("args").split(",")
                     if a.strip().startswith("%"))
        out[m.group("name")] = Instr(m.group("name"), m.group("op"), shape, args,
                                     m.group("attrs"), comp)
    products = defaultdict(list)  # computation -> its dots and convolutions
    for ins in out.values():
        if ins.op in ("dot", "convolution"):
            products[ins.computation].append(ins.name)
    for ins in out.values():
        if ins.op == "fusion" and (m := re.search(r"calls=%([\w.\-]+)", ins.attrs)) \
                and len(found := products[m.group(1)]) == 1:
            ins.product = found[0]
    return out


def _dims_attr(attrs: str, key: str) -> tuple[int, ...]:
    m = re.search(key + r"=\{([\d,]*)\}", attrs)
    return tuple(int(d) for d in m.group(1).split(",") if d) if m else ()


def dot_operands(ins: Instr, table: dict[str, Instr]) -> tuple[tuple[tuple[int, ...], ...], str] | None:
    """A dot's operands as (m x k) and (k x n), with (b, m, k) and (b, k, n) for one batch
    dimension, and how they are laid out: '' for a plain (m x k) @ (k x n); '_tn' where
    the first operand is stored k-major (contracted over its leading dimensions: a weight
    gradient's activations), '_nt' where the second is stored n-major (contracted over its
    trailing ones), '_tt' both: the calibration times the forms it has kernels for apart
    (``gemm``, ``gemm_tn``, and JAX's ``gemm_tn_seq``, read off the compiled LSTM step).
    None for another layout."""
    if len(ins.args) < 2:
        return None
    a, b = (table.get(n) for n in ins.args[:2])
    if a is None or b is None or a.dims is None or b.dims is None:
        return None
    ca, cb = _dims_attr(ins.attrs, "lhs_contracting_dims"), _dims_attr(ins.attrs, "rhs_contracting_dims")
    ba, bb = _dims_attr(ins.attrs, "lhs_batch_dims"), _dims_attr(ins.attrs, "rhs_batch_dims")
    free_a = [i for i in range(len(a.dims)) if i not in ca and i not in ba]
    free_b = [i for i in range(len(b.dims)) if i not in cb and i not in bb]
    k = math.prod(a.dims[i] for i in ca)
    batch = math.prod(a.dims[i] for i in ba)
    m = math.prod(a.dims[i] for i in free_a)
    n = math.prod(b.dims[i] for i in free_b)
    t_a = bool(ca and free_a) and max(ca) < min(free_a)
    t_b = bool(cb and free_b) and min(cb) > max(free_b)
    layout = {(False, False): "", (True, False): "_tn", (False, True): "_nt",
              (True, True): "_tt"}[t_a, t_b]
    return (((batch, m, k), (batch, k, n)) if ba else ((m, k), (k, n))), layout


def conv_flops(ins: Instr, table: dict[str, Instr]
               ) -> tuple[tuple[tuple[int, ...], ...], float, bool] | None:
    """((input NCHW, kernel OIHW), FLOPs, False) of a 2-D convolution: 2 x output elements x
    the kernel's window and input features; None for another layout.

    XLA runs a layer's weight gradient as a convolution too: the layer's input (its batch
    as the input features) convolved with its output gradient (the window as large as
    the output's pixels), giving a kernel-sized result, whose pixels are fewer than the
    window's. Such a one comes back as ((input N, C_in, H, W), (output gradient N, C_out,
    H_out, W_out), (kernel window)), its FLOPs, True: the layer's geometry, which the
    model times as a weight gradient (``perfmodel.ops``)."""
    m = re.search(r"dim_labels=(\w+)_(\w+)->(\w+)", ins.attrs)
    if m is None or len(ins.args) < 2 or ins.dims is None:
        return None
    lhs, rhs, out = m.groups()
    x, w = (table.get(n) for n in ins.args[:2])
    if x is None or w is None or x.dims is None or w.dims is None or len(rhs) != 4 \
            or len(lhs) != 4 or len(out) != 4:
        return None
    rd = dict(zip(rhs, w.dims, strict=True))
    xd = dict(zip(lhs, x.dims, strict=True))
    od = dict(zip(out, ins.dims, strict=True))
    window = [d for label, d in rd.items() if label not in "io"]
    pixels = [d for label, d in od.items() if label not in "bf"]
    flops = 2.0 * math.prod(ins.dims) * math.prod(window) * rd["i"]
    spatial = tuple(d for label, d in xd.items() if label not in "bf")
    if math.prod(pixels) < math.prod(window):  # a weight gradient (docstring)
        return ((xd["f"], xd["b"], *spatial), (rd["i"], rd["o"], *window),
                tuple(pixels)), flops, True
    return ((xd["b"], xd["f"], *spatial), (rd["o"], rd["i"], *window)), flops, False


def describe(ins: Instr, table: dict[str, Instr]) -> tuple[str, tuple[tuple[int, ...], ...], float | None]:
    """(op name, operand shapes, FLOPs per call) of one instruction as ``ProfiledOp``
    carries them; a fusion around a dot or a convolution counts as that product."""
    inner = table[ins.product] if ins.product else ins
    if inner.op == "dot" and (found := dot_operands(inner, table)):
        return f"xla:dot{found[1]}", found[0], None
    if inner.op == "convolution" and (found := conv_flops(inner, table)):
        return "xla:convolution" + ("_wgrad" if found[2] else ""), found[0], found[1]
    shapes = [table[a].dims for a in ins.args if a in table and table[a].dims is not None]
    if ins.dims is not None:
        shapes.append(ins.dims)
    # XLA names a fusion after what it does ('transpose_copy_fusion.61'); the number only
    # tells instances apart
    op = re.sub(r"\.\d+$", "", ins.name) if ins.op == "fusion" else ins.op
    return f"xla:{op}", tuple(shapes), None


def profile(trainer: Trainer, steps: int, device: str) -> tuple[list[dict], float]:
    compiled = trainer._step.lower(trainer.state, trainer.x, trainer.y).compile()
    table = parse_hlo(compiled.as_text())
    with tempfile.TemporaryDirectory(prefix="dlperf-jax-trace-") as folder:
        with jax.profiler.trace(folder):
            wall = mean_step_s(trainer, steps)
        with open(xplane_file(folder), "rb") as f:
            data = ProfileData.from_serialized_xspace(f.read())
    lines = []
    for plane in data.planes:
        for line in plane.lines:
            events = []
            for e in line.events:
                stats = dict(e.stats)
                op = stats.get("hlo_op")
                if op in table and str(stats.get("hlo_module", "")).endswith("train_step"):
                    events.append((op, e.start_ns, e.end_ns))
            lines.append(events)
    return op_groups(lines, lambda name: describe(table[name], table), steps), wall
