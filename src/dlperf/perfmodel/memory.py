"""The peak memory of one training step, term by term, per process or device.

    peak = weights + gradients + optimizer state + kept activations + the largest
           transient + the framework's runtime baseline

Each term is a short function of the network's neutral layers (``dlperf.workloads``), the
batch and the precision; the baseline (the framework's libraries and allocator, resident
before anything is built) is measured per framework by ``dlperf calibrate``, and is 0 for
a catalogue GPU (its device memory; the CUDA context is not counted). Framework-free.

The activations are counted two ways, by where the peak is read. A device's allocator (a
GPU's) holds the tensors the backward pass saves (``saved_activation_bytes``). A process's
resident memory on a CPU also holds what the C library's malloc keeps of the outputs the
step freed: those small enough for its heaps (``resident_activation_bytes``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pydantic import BaseModel, ConfigDict, computed_field

from dlperf.core.errors import UsageError
from dlperf.workloads.base import Layer

#: bytes a parameter's fp32 copy takes
FP32 = 4
#: optimizer state per parameter, in fp32 values: plain SGD keeps none (dlperf's backends
#: train with it); momentum one velocity; Adam its first and second moments (Kingma and
#: Ba, "Adam", 2015, Algorithm 1; Rajbhandari et al., "ZeRO", 2020, section 3.1)
OPTIMIZER_STATES = {"sgd": 0, "momentum": 1, "adam": 2}
#: precisions whose forward runs on half-precision copies of the fp32 weights
HALF = ("bf16", "fp16")
#: the frameworks whose training step dlperf compiles whole with its state donated (its
#: JAX backend: ``jax.jit(step, donate_argnums=0)``): XLA updates each weight as soon as
#: its gradient is made, so one layer's gradient is live at a time. Read from XLA's buffer
#: plan of the compiled step (``Compiled.memory_analysis()``,
#: ``benchmarks/trace_memory.py``): FCN-5's temporaries hold about one weight gradient
#: (227 MiB against 209 for its largest); AlexNet's, at batches 16 and 32, a part that
#: does not grow with the batch of 216 MiB, against 196 for its largest gradient and 290
#: for all.
FUSED_UPDATE = ("jax",)


class MemoryBreakdown(BaseModel):
    """Bytes of one training step's peak, per process or device, by what holds them."""

    model_config = ConfigDict(frozen=True)

    weights: float
    gradients: float
    optimizer: float
    activations: float
    transient: float
    baseline: float

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total(self) -> float:
        return (self.weights + self.gradients + self.optimizer + self.activations
                + self.transient + self.baseline)


def weight_bytes(layers: Sequence[Layer], precision: str) -> float:
    """The fp32 weights, kept in every precision (mixed precision keeps an fp32 master
    copy: Micikevicius et al., "Mixed Precision Training", 2018, section 3.1), and under
    bf16/fp16 the half-precision copies the forward multiplies with (PyTorch's autocast
    caches them for the step: ``torch.autocast(cache_enabled=True)``)."""
    params = sum(layer.params for layer in layers)
    return params * FP32 + (params * 2 if precision in HALF else 0)


def largest_layer_bytes(layers: Sequence[Layer]) -> float:
    """The fp32 weights of the layer with the most parameters: the size of its gradient,
    of its update's step, of its gathered shard."""
    return max((layer.params for layer in layers), default=0) * FP32


def gradient_bytes(layers: Sequence[Layer], fused_update: bool = False) -> float:
    """One gradient per parameter, in the parameters' fp32; under an update applied as
    each gradient is made (``FUSED_UPDATE``), the largest layer's alone."""
    if fused_update:
        return largest_layer_bytes(layers)
    return sum(layer.params for layer in layers) * FP32


def optimizer_bytes(layers: Sequence[Layer], optimizer: str = "sgd") -> float:
    """The optimizer's state (``OPTIMIZER_STATES`` fp32 values per parameter)."""
    if optimizer not in OPTIMIZER_STATES:
        raise UsageError(f"unknown optimizer '{optimizer}' (known: "
                         f"{', '.join(OPTIMIZER_STATES)})")
    return sum(layer.params for layer in layers) * FP32 * OPTIMIZER_STATES[optimizer]


#: what a layer's backward pass reads of its forward: its input, its output (or both):
#: the operands autograd saves for it (PyTorch's tools/autograd/derivatives.yaml: ``mm``
#: and ``convolution`` save their input, ``native_batch_norm`` and ``native_layer_norm``
#: their input, ``threshold_backward`` (ReLU), ``sigmoid_backward``, ``_softmax`` and
#: ``_log_softmax`` their result, ``max_pool2d`` its input and indices (counted here as
#: its output, as TensorFlow's max-pool gradient reads it); an addition, a scaling by a
#: constant or a mask saves nothing). TensorFlow's registered gradients and JAX's VJPs
#: read the same operands. An op not listed keeps both.
SAVES_INPUT, SAVES_OUTPUT = 1, 2
SAVES = {"dense": SAVES_INPUT, "conv": SAVES_INPUT, "deconv": SAVES_INPUT,
         "attention": SAVES_INPUT, "bn": SAVES_INPUT, "ln": SAVES_INPUT,
         "pool": SAVES_INPUT | SAVES_OUTPUT, "softmax": SAVES_OUTPUT, "loss": SAVES_OUTPUT,
         "add": 0, "scale": 0, "mask": 0, "embedding": 0, "flatten": 0}
#: activations whose derivative is written with their input (GELU's, leaky ReLU's), read
#: from the layer's name as the networks name their activations; the others (ReLU,
#: sigmoid, tanh) are written with their output
ON_INPUT = ("gelu", "lrelu")
#: ops that run in fp32 under mixed precision (autocast's fp32 list: softmax, log-softmax,
#: layer norm; the embedding looks up fp32 weights), and keep their tensors at 4 bytes
FP32_UNDER_AUTOCAST = ("softmax", "ln", "loss", "embedding")
#: what a layer's backward reads of its own forward beyond its input and output, in
#: multiples of its output (an LSTM's: hidden units x time steps): an LSTM's four gates
#: and its cell state at every step, which the gates' and the cell's gradients are
#: written with (Hochreiter and Schmidhuber, "Long Short-Term Memory", 1997; Graves,
#: "Supervised Sequence Labelling with Recurrent Neural Networks", 2012, section 4.6.2).
#: PyTorch's oneDNN LSTM keeps them in its training workspace, TensorFlow's while loop in
#: its gradient accumulators, JAX's scan as its residuals.
INTERNAL = {"lstm": 5}
#: the frameworks whose softmax cross-entropy writes its gradient over its logits:
#: TensorFlow's SparseSoftmaxCrossEntropyWithLogits makes the loss and the logits'
#: gradient in one kernel, the gradient in the logits' own buffer when nothing else holds
#: them (``forward_input_or_allocate_output({0}, 1, ...)``, tensorflow/core/kernels/
#: sparse_xent_op.cc), and the backward's scaling of it by the loss's gradient, an
#: elementwise Mul, writes over it in turn (its binary ops forward an input the same way:
#: tensorflow/core/kernels/cwise_ops_common.cc). From the forward through the backward
#: the logits and their gradient are one tensor: the loss's output here, its input (the
#: projection's output) never a tensor of its own.
IN_PLACE_LOSS = ("tensorflow",)
#: the frameworks whose CPU compiler rewrites a max pool's backward (XLA's
#: select-and-scatter) into plain ops, each with a buffer of its own: XLA's
#: SelectAndScatterExpander (xla/service/select_and_scatter_expander.cc, in XLA:CPU's
#: pipeline, cpu_compiler.cc) makes one int32 iota per dimension of the pool's input,
#: reduces them with the input over each window into the window's maximum and its
#: position (a value and an int32 per dimension for each output element), and scatters
#: the output's gradient at those positions into a buffer of the input's shape. JAX hands
#: XLA the input padded, so each input-shaped buffer is the padded input's:
#: ``expanded_pool_bytes``. Not on a GPU: JAX's ResNet-50 on an H200 at batch 64 peaked
#: 6% below the model without these buffers (``reference.measured_gpu_memory``), 23%
#: below with them.
EXPANDED_POOL = ("jax",)
#: the frameworks whose SGD update makes each weight's step as a tensor of its own before
#: subtracting it: Keras 3's SGD (dlperf's TensorFlow backend trains with it) runs
#: ``assign_sub(variable, multiply(gradient, learning_rate))`` per weight
#: (keras/src/optimizers/sgd.py, ``update_step``), while the gradient is still held, so
#: the product is a fresh buffer of the weight's size. The weights are updated one after
#: another; the largest weight's step is the update's working set. Read here from
#: TensorFlow's own allocator (``get_memory_info('CPU:0')['peak']``, AlexNet at batches 8,
#: 16 and 32, one thread): its peak with Keras's update 199, 74 and 298 MiB above the
#: same step with a plain ``assign_sub(variable, gradient)``, against 196 MiB for AlexNet's
#: largest weight (TensorFlow's executor does not run the ops in one order every step,
#: and its peak moves by as much). PyTorch's SGD subtracts in place
#: (``torch._foreach_add_``); JAX's update is fused into the step (``FUSED_UPDATE``).
UPDATE_COPY = ("tensorflow",)
#: the frameworks whose networks pad a window's input as a tensor of its own: Keras'
#: 'same' pads asymmetrically where the stride is not 1, so dlperf's Keras networks pad
#: every max pool's input, and a convolution's that 'same' would pad otherwise than
#: PyTorch does, with a ZeroPadding2D layer (``backends.keras_models``); the padded copy
#: is the window's input, kept for its backward beside the unpadded output its ReLU keeps.
#: Read in TensorFlow's memory profile of AlexNet's step (``tf.profiler`` on the CPU
#: allocator, batch 16): its three pools' and its first convolution's padded inputs (23.7,
#: 14.1, 4.0 and 16.0 MiB) live at the step's peak beside the ReLUs' outputs. PyTorch's
#: and XLA's convolutions and pools pad inside the kernel.
PADS_APART = ("tensorflow",)
#: bytes of an int32 position, and the dimensions of a 2-D pool's input (batch, height,
#: width, channels)
INDEX, POOL_DIMS = 4, 4
#: the frameworks whose max pool's backward reads its forward's output (TensorFlow's
#: MaxPoolGrad takes the input, the output and the output's gradient) or recomputes the
#: positions from its input (XLA's select-and-scatter, ``EXPANDED_POOL``), keeping no
#: positions of its own. PyTorch's ``max_pool2d_with_indices`` saves its input and the
#: position of each window's maximum, an int64 tensor of its output's shape, for
#: ``max_pool2d_with_indices_backward`` (tools/autograd/derivatives.yaml): the
#: profiler's allocation events of ResNet-50's step at batch 16 show its stem pool's
#: output (12.8 MB) and beside it the positions (25.7 MB).
POOL_WITHOUT_POSITIONS = ("tensorflow", "jax")
#: bytes of an int64 position
POSITION = 8


def padded_copy_elems(layer: Layer) -> int:
    """Elements per sample of the padded copy of ``layer``'s input that a framework which
    pads apart (``PADS_APART``) keeps: every padded pool's; a padded convolution's unless
    Keras' 'same' pads it as PyTorch does (stride 1, (window - 1) / 2 on every side)."""
    if not layer.padded_in_elems:
        return 0
    if layer.op == "conv":
        g = layer.gemms[0]
        if g.stride == 1 and 2 * layer.pad == g.window - 1:
            return 0
    return layer.padded_in_elems


def saves(layer: Layer) -> int:
    """What ``layer``'s backward reads of its forward (``SAVES``)."""
    if layer.op == "act":
        return SAVES_INPUT if any(a in layer.name for a in ON_INPUT) else SAVES_OUTPUT
    return SAVES.get(layer.op, SAVES_INPUT | SAVES_OUTPUT)


def saved_elem(layer: Layer, precision: str) -> int:
    """Bytes per element of the tensors ``layer`` saves (under mixed precision a half op
    saves a half copy of an fp32 input, and an fp32 op an fp32 copy of a half one)."""
    if precision in HALF:
        return FP32 if layer.op in FP32_UNDER_AUTOCAST else 2
    return FP32


def _reader(layers: Sequence[Layer], i: int) -> Layer | None:
    """The layer that takes layer ``i``'s output as its input: the next one, past a
    block's shortcut (``Layer.shortcut``: it reads the block's input) where layer ``i``
    is not on it."""
    j = i + 1
    while j < len(layers) and layers[j].shortcut and not layers[i].shortcut:
        j += 1
    return layers[j] if j < len(layers) else None


def _kept_per_elem(layers: Sequence[Layer], i: int, precision: str) -> int:
    """Bytes per element of layer ``i``'s output that the backward reads: one copy a layer
    saves of its own, or its reader (``_reader``) saves as input, counted once, or twice
    where the two keep it at different precisions (a cast copy); 0 where neither reads
    it. A layer's own internals (``INTERNAL``) count as that many more copies of its
    output."""
    layer = layers[i]
    nxt = _reader(layers, i)
    own = saved_elem(layer, precision) if saves(layer) & SAVES_OUTPUT or layer.segment else 0
    by_next = saved_elem(nxt, precision) if nxt and saves(nxt) & SAVES_INPUT else 0
    kept = own + by_next if own and by_next and own != by_next else max(own, by_next)
    return kept + INTERNAL.get(layer.op, 0) * saved_elem(layer, precision)


def _logits_in_place(layers: Sequence[Layer], i: int, in_place_loss: bool) -> bool:
    """Whether layer ``i``'s output is a loss's input that the loss overwrites with its
    gradient (``IN_PLACE_LOSS``): no tensor of its own, the loss's output standing for it."""
    return (in_place_loss and i + 1 < len(layers) and layers[i + 1].op == "loss")


def _a_tensor_of_its_own(layers: Sequence[Layer], i: int, in_place_loss: bool) -> bool:
    """Whether layer ``i``'s output is a tensor the step holds apart from the others: not
    a recomputed segment's inner output (``_ends_segment``), not logits the loss
    overwrites (``_logits_in_place``)."""
    return ((not layers[i].segment or _ends_segment(layers, i))
            and not _logits_in_place(layers, i, in_place_loss))


def saved_activation_bytes(layers: Sequence[Layer], batch: float, precision: str,
                           in_place_loss: bool = False) -> float:
    """The outputs the backward pass reads, kept from the forward (each layer's input is
    its predecessor's output; ``_kept_per_elem``). Under activation checkpointing a
    recomputed segment keeps its last output alone, whoever reads it (the next segment's
    input). A block's shortcut reads the block's input (``_reader``), which the block's
    first layer reads too.
    ``in_place_loss``: the loss writes its gradient over its input (``IN_PLACE_LOSS``)."""
    return sum(layer.out_elems * batch * _kept_per_elem(layers, i, precision)
               for i, layer in enumerate(layers)
               if _a_tensor_of_its_own(layers, i, in_place_loss))


#: the largest block glibc's malloc serves from its heaps once its mmap threshold has
#: risen (mallopt(3), M_MMAP_THRESHOLD: the threshold follows the largest block freed, up
#: to DEFAULT_MMAP_THRESHOLD_MAX, 32 MiB on 64-bit systems); a larger block is mapped on
#: its own and unmapped when freed. PyTorch, TensorFlow and XLA allocate CPU tensors
#: with the C library's aligned malloc.
HEAP_MAX_BLOCK = 32 * 2**20


def resident_activation_bytes(layers: Sequence[Layer], batch: float,
                              precision: str, in_place_loss: bool = False) -> float:
    """The activations a CPU process's resident memory holds at the step's peak: the
    outputs the backward reads (``saved_activation_bytes``), and each output it frees
    early that fits malloc's heaps (``HEAP_MAX_BLOCK``): freed into a heap, its memory
    stays resident for the next step's tensors rather than going back to the system
    (Chen et al., "Training Deep Nets with Sublinear Memory Cost", 2016, section 3: the
    memory of training grows with the sum of the layers' outputs). A larger output that
    nothing reads is unmapped when freed. Under activation checkpointing a recomputed
    segment's inner outputs are freed as the next are made (the transient counts the
    largest segment). ``in_place_loss`` as in ``saved_activation_bytes``."""
    elem = 2 if precision in HALF else FP32
    total = 0.0
    for i, layer in enumerate(layers):
        if not _a_tensor_of_its_own(layers, i, in_place_loss):
            continue
        kept = _kept_per_elem(layers, i, precision)
        freed = layer.out_elems * batch * elem
        total += layer.out_elems * batch * kept if kept else \
            freed if freed <= HEAP_MAX_BLOCK else 0.0
    return total


def padded_copies_bytes(layers: Sequence[Layer], batch: float, precision: str) -> float:
    """The padded inputs a framework that pads apart keeps for the backward
    (``PADS_APART``, ``padded_copy_elems``), at the element size the window saves."""
    return sum(padded_copy_elems(layer) * batch * saved_elem(layer, precision)
               for layer in layers)


def pool_positions_bytes(layers: Sequence[Layer], batch: float) -> float:
    """The positions of each window's maximum that a max pool keeps for its backward
    where the framework keeps them (every framework not in ``POOL_WITHOUT_POSITIONS``):
    an int64 per element of its output. A pool in a recomputed segment (activation
    checkpointing) makes them again in the backward: none kept through the step."""
    return sum(layer.out_elems * batch * POSITION for layer in layers
               if is_max_pool(layer) and not layer.segment)


def transient_bytes(layers: Sequence[Layer], batch: float, elem: int,
                    in_place_loss: bool = False, expanded_pool: bool = False) -> float:
    """The largest working set beyond what is kept: the backward of a layer holds the
    gradient of its output and the gradient of its input (its predecessor's output) at
    once, and a max pool's as XLA runs it (``expanded_pool``) its own buffers besides
    (``expanded_pool_bytes``); under checkpointing, the largest segment's outputs as
    well, recomputed for its backward (Chen et al., 2016, section 4). A loss that writes
    its gradient over its input (``in_place_loss``) makes that gradient in the one tensor
    already counted kept: neither its output's gradient nor its input's is another."""
    outs = [0 if in_place_loss and layer.op == "loss" or _logits_in_place(
        layers, i, in_place_loss) else layer.out_elems for i, layer in enumerate(layers)]
    pairs = [(outs[i - 1] + outs[i]) * batch * elem
             + (expanded_pool_bytes(layers[i], layers[i - 1].out_elems, batch, elem)
                if expanded_pool and is_max_pool(layers[i]) else 0.0)
             for i in range(1, len(outs))] or [o * batch * elem for o in outs] or [0.0]
    segments: dict[str, int] = {}
    for layer in layers:
        if layer.segment:
            segments[layer.segment] = segments.get(layer.segment, 0) + layer.out_elems
    return max(pairs) + max(segments.values(), default=0) * batch * elem


def is_max_pool(layer: Layer) -> bool:
    """A pooling layer that keeps each window's maximum: every pool but an average (the
    networks name theirs 'avgpool')."""
    return layer.op == "pool" and "avg" not in layer.name


def expanded_pool_bytes(layer: Layer, in_elems: int, batch: float, elem: int) -> float:
    """The working set of a max pool's backward as XLA runs it (``EXPANDED_POOL``), beyond
    the gradients of its output and its input: per element of the padded input, its value
    (the padded copy), a position per dimension (the iotas) and the scattered gradient;
    per output element, the window's maximum and its position per dimension. XLA's
    buffer plan of one such backward alone (``Compiled.memory_analysis()``, JAX 0.10.2 on
    a CPU) is that, and 40 bytes more (the reduce-window's tuple of addresses), at
    AlexNet's and ResNet-50's pools: 141.2 MiB for AlexNet's first at batch 16
    (``tests/test_memory.py`` checks it against XLA at small shapes)."""
    padded = (in_elems + layer.pad_elems) * batch
    return (padded * (2 * elem + POOL_DIMS * INDEX)
            + layer.out_elems * batch * (elem + POOL_DIMS * INDEX))


def update_copy_bytes(layers: Sequence[Layer]) -> float:
    """The update's working set where it makes each weight's step apart (``UPDATE_COPY``):
    the largest layer's weights, in fp32."""
    return largest_layer_bytes(layers)


def _ends_segment(layers: Sequence[Layer], i: int) -> bool:
    return i + 1 == len(layers) or layers[i + 1].segment != layers[i].segment


def step_memory(layers: Sequence[Layer], batch: float, precision: str, *,
                optimizer: str = "sgd", baseline: float = 0.0,
                on_device: bool = False, framework: str | None = None) -> MemoryBreakdown:
    """The breakdown of one step's peak for ``layers`` at ``batch`` samples per process
    or device; ``baseline``: the framework's runtime (``dlperf calibrate`` measures it);
    ``on_device``: the peak of a device's allocator (a GPU's), else a CPU process's
    resident memory (see the module's docstring); ``framework``: the one that trains it
    (``FUSED_UPDATE``, ``IN_PLACE_LOSS``, ``EXPANDED_POOL``, ``UPDATE_COPY``,
    ``PADS_APART``, ``POOL_WITHOUT_POSITIONS``; None: one that keeps every gradient until
    the update, makes the loss's gradient apart from its logits, runs a max pool's
    backward as one kernel from the positions its forward kept and updates in place, as
    PyTorch does). The transient is the larger of the backward's and the update's: the
    two run one after the other."""
    elem = 2 if precision in HALF else FP32
    in_place = framework in IN_PLACE_LOSS
    return MemoryBreakdown(
        weights=weight_bytes(layers, precision),
        gradients=gradient_bytes(layers, framework in FUSED_UPDATE),
        optimizer=optimizer_bytes(layers, optimizer),
        activations=(saved_activation_bytes(layers, batch, precision, in_place) if on_device
                     else resident_activation_bytes(layers, batch, precision, in_place))
        + (padded_copies_bytes(layers, batch, precision) if framework in PADS_APART else 0.0)
        + (0.0 if framework in POOL_WITHOUT_POSITIONS else pool_positions_bytes(layers, batch)),
        transient=max(transient_bytes(layers, batch, elem, in_place,
                                      framework in EXPANDED_POOL and not on_device),
                      update_copy_bytes(layers) if framework in UPDATE_COPY else 0.0),
        baseline=baseline)


def accumulated(m: MemoryBreakdown, layers: Sequence[Layer],
                micro_batches: int) -> MemoryBreakdown:
    """The peak of a step that adds ``micro_batches`` micro-batches' weight gradients into
    one (a GPipe pipeline stage's): from the second micro-batch on, autograd makes each
    weight's gradient as a tensor of its own and adds it into the one kept
    (``AccumulateGrad``: ``variable_grad += new_grad``, PyTorch's torch/csrc/autograd/
    functions/accumulate_grad.h), so the largest layer's gradient is live twice, a
    transient of at least its size. One micro-batch: ``m`` as it is."""
    if micro_batches <= 1:
        return m
    return m.model_copy(update={"transient": max(m.transient, largest_layer_bytes(layers))})


def with_ddp_buckets(m: MemoryBreakdown) -> MemoryBreakdown:
    """A DDP worker's peak: its all-reduce buckets hold a copy of every gradient beside the
    gradients themselves (PyTorch's DistributedDataParallel with its default
    ``gradient_as_bucket_view=False``, whose documentation puts the saving of the view at
    "the total gradients size")."""
    return m.model_copy(update={"gradients": 2 * m.gradients})


def sharded_step_memory(layers: Sequence[Layer], batch: float, precision: str,
                        workers: int, *, optimizer: str = "sgd", baseline: float = 0.0,
                        on_device: bool = False, framework: str | None = None
                        ) -> MemoryBreakdown:
    """One worker's peak under fully sharded data parallelism (ZeRO stage 3: Rajbhandari
    et al., "ZeRO", 2020, section 5.3; PyTorch's FSDP: Zhao et al., "PyTorch FSDP", 2023,
    section 3), ``batch`` its own samples: a 1/``workers`` shard of the weights, gradients
    and optimizer state; beyond one worker's transient, a unit's whole weights gathered
    for its pass and the next unit's prefetched beside them (section 3.3's backward
    prefetch), and a unit's whole gradient until it is reduce-scattered. A unit is a layer
    with weights (``dlperf parallel -s fsdp`` shards each top-level module); the largest
    sets the peak."""
    one = step_memory(layers, batch, precision, optimizer=optimizer, baseline=baseline,
                      on_device=on_device, framework=framework)
    if workers <= 1:
        return one
    unit = largest_layer_bytes(layers)
    return one.model_copy(update={
        "weights": one.weights / workers, "gradients": one.gradients / workers,
        "optimizer": one.optimizer / workers, "transient": one.transient + 3 * unit})


def worker_step_memory(layers: Sequence[Layer], batch: float, precision: str,
                       strategy: str, workers: int, group: int | None = None, *,
                       baseline: float = 0.0, on_device: bool = False,
                       framework: str | None = None) -> MemoryBreakdown:
    """The peak of the fullest data-parallel worker at ``batch`` samples of its own under
    ``strategy`` over ``workers`` (``group``: the workers that all-reduce together, all by
    default): fsdp shards the state over all (``sharded_step_memory``); DDP's all-reduce,
    in sync and in a mixed strategy's groups, adds its buckets (``with_ddp_buckets``);
    under async and mixed on a CPU, the process that hosts the parameter server adds its
    share (``with_parameter_server``; on a GPU the server's vectors are host memory)."""
    shards = workers if strategy == "fsdp" else 1
    mem = sharded_step_memory(layers, batch, precision, shards, baseline=baseline,
                              on_device=on_device, framework=framework)
    ring = workers if group is None else group
    ddp = strategy in ("sync", "mixed") and ring > 1
    mem = with_ddp_buckets(mem) if ddp else mem
    if strategy in ("async", "mixed") and not on_device:  # the server: host memory
        mem = with_parameter_server(mem, layers, max(1, workers // ring) if
                                    strategy == "mixed" else workers, strategy == "mixed")
    return mem


def with_parameter_server(m: MemoryBreakdown, layers: Sequence[Layer], pushers: int,
                          broadcasts: bool) -> MemoryBreakdown:
    """The peak of the process that hosts the parameter server beside its worker (``dlperf
    parallel``'s async and mixed: the server on rank 0, ``kinds/parallel/ps_server.py``),
    ``pushers`` the workers (async) or groups' leaders (mixed) that push and pull. Each
    term a flat fp32 vector of every weight: the server's weights and, kept as the base
    of each pusher's drift, the copy it last sent each pusher (weights); the worker's own
    gradient, flattened afresh for its push (gradients); a mixed leader's buffer that
    broadcasts the pulled weights to its group (weights); while its worker computes,
    every other pusher's gradient, received and waiting for the server's lock, and the
    drift's difference vector made under it (transient)."""
    flat = sum(layer.params for layer in layers) * FP32
    return m.model_copy(update={
        "weights": m.weights + flat * (1 + pushers + (1 if broadcasts else 0)),
        "gradients": m.gradients + flat,
        "transient": m.transient + flat * pushers})


#: the largest batch ``largest_batch`` tries: a network that fits that many fits more
BATCH_SEARCH_LIMIT = 1 << 24


def largest_batch(total: Callable[[int], float], capacity: float,
                  limit: int = BATCH_SEARCH_LIMIT) -> int | None:
    """The largest batch whose ``total(batch)`` bytes fit in ``capacity`` (``total``
    grows with the batch), or None when not even one sample fits; ``limit`` where that
    many fit."""
    if total(1) > capacity:
        return None
    lo, hi = 1, 2
    while hi <= limit and total(hi) <= capacity:
        lo, hi = hi, hi * 2
    hi = min(hi, limit + 1)
    while hi - lo > 1:  # total(lo) fits, total(hi) does not (or hi is past the limit)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if total(mid) <= capacity else (lo, mid)
    return lo
