"""Efficiencies of the performance model on this machine: plan the kernel runs (``dlperf.api
.calibrate`` runs them through the normal runner: stored, claimed, resumable, under the
machine lock), and read the stored samples back for ``dlperf.perfmodel.fit``.

One run of kind 'kernel' per (framework, thread count) times every op's grid of shapes
in one worker: one framework start (seconds for TensorFlow) per thread count, not per
shape or op. The all-reduce is
timed once per process count (2 and 4 on loopback, PyTorch's gloo, the library
``dlperf parallel`` uses), its processes spawned inside the worker.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from dlperf.core import environment, framework_table, speed_probe
from dlperf.core.spec import RunResult, RunSpec
from dlperf.core.store import Store
from dlperf.kinds.calibrate import peaks
from dlperf.kinds.calibrate.options import (
    KernelOptions,
    KernelOutcome,
    KernelPart,
    KernelSample,
)
from dlperf.kinds.peak.rates import versions as library_versions
from dlperf.perfmodel import network_kernels, steadiness, thread_consistency
from dlperf.perfmodel.fit import Samples
from dlperf.perfmodel.kernels import COLLECTIVES, MACHINE_OPS, REVISION, grid
from dlperf.perfmodel.machine_fits import MachineFits
from dlperf.perfmodel.run_speed import disagreement

#: the ops timed per (framework, thread count); the all-reduce is separate
LOCAL_OPS = ("gemm", "gemm_tn", "gemm_nt", "gemm_tn_seq", "conv", "conv_bwd", "conv_wgrad",
             "memory", "update", "xent", "bn", "pool", "lstm", "dispatch", "dispatch_train")
#: what a calibration needs to be used (one of a version before 'gemm_tn' and 'update'
#: still is)
REQUIRED_OPS = ("gemm", "conv", "conv_bwd", "memory", "dispatch")
#: processes of the all-reduce calibration (the worker counts of the loopback runs)
WORLDS = (2, 4)
#: the network name of the collectives' kernel runs (the machine's ops, not a framework's)
COLLECTIVE_RUN = "allreduce"
#: the network name of a run that times again the shapes that took far longer at more
#: threads than at fewer, or every shape of an op its runs timed at other speeds
#: (``kinds.calibrate.retime``); each of its samples replaces the one it times again, not
#: merged with it (``load``)
RETIMED_RUN = "retimed"
#: the frameworks calibrated by default: those with kernels, when installed
FRAMEWORKS = ("torch", "tensorflow", "jax")
#: seconds each shape is timed for (after its warm-up): short by default
MIN_TIME_S, FINE_MIN_TIME_S = 0.05, 0.2
#: ... in a calibration scoped to networks (the main job's, where its minutes count): a
#: small shape's calls fill 30 ms (thousands of calls of a microsecond kernel, still at
#: least ``SCOPED_MIN_STEPS`` of any), which took about 16 s off the main job's 2.5
#: minutes of kernels, most of a small shape's wall time being the calls' own Python
#: between the timed ones
SCOPED_MIN_TIME_S = 0.03
#: ... and a shape whose calls fill it in two is timed on the first two after its cold
#: call that agree within a tenth (``calibrate.run``'s window) rather than three: on the
#: main job's 447 shapes timed on three (2-vCPU AMD EPYC, 2026-12-01), the mean of a
#: window's first two differed from the three's median by 0.6% at the median (p90 3.0%;
#: 0.4% above it on average, weighted by time), and the third call took 26 s of the
#: calibration
SCOPED_MIN_STEPS = 2
#: where a calibration scoped to networks times the skeleton of the grid: at every thread
#: count, only at the one the advice predicts other networks at (``skeleton_threads``), or
#: there in the first framework alone ('once', the main job's: ``dlperf advise`` predicts a
#: network outside the scope in each framework whose calibration can, and one framework's
#: answers it; TensorFlow's and JAX's skeletons took 16 and 32 s of a 307 s main-job
#: calibration on a 2-vCPU AMD EPYC, 2026-12-02, PyTorch's 13 s)
SKELETONS = ("all", "cores", "once")


def default_threads(device: str = "cpu") -> list[int]:
    """1, 2, 4, ... up to this machine's physical cores (and the core count itself); on a
    GPU, 1 (the host's threads only feed the device)."""
    if device == "gpu":
        return [1]
    cores = environment.physical_cores()
    out, t = [], 1
    while t < cores:
        out.append(t)
        t *= 2
    return [*out, cores]


def check_precision(precision: str, device: str, frameworks: Sequence[str],
                    hint: str = "") -> None:
    """One UsageError line for a precision the calibration kernels cannot run at here
    (TF32 on a CPU; mixed precision outside PyTorch), ``hint`` after the second: what
    ``dlperf calibrate`` would be told to run instead could not run either."""
    from dlperf.backends.base import MIXED, MIXED_KERNELS, NO_TF32_ON_CPU
    from dlperf.core.errors import UsageError

    if precision == "tf32" and device == "cpu":
        raise UsageError(f"--precision tf32: {NO_TF32_ON_CPU}")
    if precision in MIXED and set(frameworks) - {"torch"}:
        raise UsageError(f"--precision {precision}: {MIXED_KERNELS}{hint}")


def default_frameworks() -> list[str]:
    return [fw for fw in FRAMEWORKS if framework_table.installed(fw)]


def specs(frameworks: Sequence[str], threads: Sequence[int], *, device: str = "cpu",
          fine: bool = False, allreduce: bool = True, repeat: int = 1,
          precision: str = "fp32", scope: Sequence[tuple[str, int]] = (),
          skeleton: str = "all") -> list[RunSpec]:
    """The kernel runs of a calibration: every op's grid per framework and thread count
    at ``precision``, and the all-reduce at 2 and 4 processes (when PyTorch is among the
    frameworks; fp32 gradients, so at fp32 only), with the cost of two processes on one
    core beside the 2-process one; ``repeat`` times each, in turns (``load`` takes each
    kernel's median over them). ``scope``: (network, batch) pairs whose layers' shapes
    are timed instead of the whole grid, beside its skeleton (``scoped_parts``) at every
    thread count (``skeleton='all'``), at ``skeleton_threads``' alone ('cores'), or there
    in the first of ``frameworks`` alone ('once')."""
    if skeleton not in SKELETONS:
        raise ValueError(f"skeleton {skeleton!r}: one of {', '.join(SKELETONS)}")
    once = _specs_once(frameworks, threads, device=device, fine=fine,
                       allreduce=allreduce and precision == "fp32", precision=precision,
                       scope=scope, skeleton=skeleton)
    return [s.model_copy(update={"repeat": r}) for r in range(repeat) for s in once]


def halving_threads(cores: int) -> list[int]:
    """The physical cores, half as many, a quarter, ... down to one: the thread counts
    ``dlperf advise`` tries in turn for a network it predicts (``advice.local``; a
    calibration of fewer threads still predicts)."""
    out = []
    while cores >= 1:
        out.append(cores)
        cores //= 2
    return out


def skeleton_threads(threads: Sequence[int], cores: int) -> int:
    """The thread count among ``threads`` at which a calibration scoped to networks times
    the skeleton of the grid when asked to time it once ('cores'): the one ``dlperf
    advise`` predicts the networks outside the scope at (the first of ``halving_threads``
    calibrated), else the most threads."""
    return next((t for t in halving_threads(cores) if t in threads), max(threads))


def scoped_parts(scope: Sequence[tuple[str, int]], device: str = "cpu",
                 framework: str | None = None, with_skeleton: bool = True
                 ) -> tuple[tuple[KernelPart, ...], tuple[str, ...]]:
    """The parts of a calibration of ``framework`` scoped to ``scope``'s networks at their
    batches (``perfmodel.network_kernels``; None: the shapes any framework times), with
    the skeleton of the grid or only what the networks run (``scoped_grid``), and the
    scope's labels ('alexnet@16')."""
    from dlperf import workloads

    needed: dict[str, set[tuple[int, ...]]] = {}
    kinds: set[str] = set()
    cut: set[str] = set()
    for network, batch in scope:
        layers = workloads.get(network).layers()
        kinds |= {layer.op for layer in layers}
        shapes_of, cut_here = network_kernels.scoped_shapes(layers, batch, framework)
        cut |= cut_here
        for op, shapes in shapes_of.items():
            needed.setdefault(op, set()).update(shapes)
    parts = tuple(KernelPart(op=op, shapes=tuple(shapes)) for op in LOCAL_OPS
                  if (shapes := network_kernels.scoped_grid(
                      op, needed, layer_kinds=kinds, device=device,
                      with_skeleton=with_skeleton, cut=cut)))
    return parts, tuple(sorted({network_kernels.label(n, b) for n, b in scope}))


def _specs_once(frameworks: Sequence[str], threads: Sequence[int], *, device: str,
                fine: bool, allreduce: bool, precision: str,
                scope: Sequence[tuple[str, int]] = (), skeleton: str = "all") -> list[RunSpec]:
    packages = environment.packages()
    min_time = FINE_MIN_TIME_S if fine else SCOPED_MIN_TIME_S if scope else MIN_TIME_S
    # the whole grid, built once for every framework; a scoped run times its own shapes
    whole = () if scope else tuple(KernelPart(op=op, shapes=tuple(grid(op, fine, device)))
                                   for op in LOCAL_OPS)
    once_at = skeleton_threads(threads, environment.physical_cores()) \
        if skeleton != "all" else None
    out = []
    for fw in frameworks:
        skeleton_at = {t: once_at in (None, t) and (skeleton != "once" or fw == frameworks[0])
                       for t in threads}
        framework_table.require(fw)
        versions = library_versions(fw, packages)
        # a scope's parts with and without the skeleton, each made once per framework
        made = {ws: scoped_parts(scope, device, fw, with_skeleton=ws)
                for ws in set(skeleton_at.values())} if scope else {}
        for t in threads:
            parts, labels = made[skeleton_at[t]] if scope else (whole, ())
            o = KernelOptions(parts=parts, min_time_s=min_time, versions=versions,
                              revision=REVISION, scope=labels,
                              peaks=peaks.wanted(device, precision, t),
                              **({"min_steps": SCOPED_MIN_STEPS} if scope else {}))
            out.append(RunSpec(kind="kernel", network="kernels", framework=fw, device=device,
                               threads=t, batch_size=1, precision=precision, options=o))
    if allreduce and "torch" in frameworks and device == "cpu":
        versions = library_versions("torch", packages)
        cpus = len(environment.usable_cpus())
        for world in WORLDS:
            parts = tuple(KernelPart(op=op, shapes=tuple(grid(op, fine))) for op in COLLECTIVES)
            if world == 2:  # two processes sharing one core (perfmodel.sharing), once
                parts += (KernelPart(op="share", shapes=tuple(grid("share"))),)
            o = KernelOptions(parts=parts, world=world, versions=versions,
                              revision=REVISION)
            # the worker holds every CPU its ranks are spread over
            out.append(RunSpec(kind="kernel", network=COLLECTIVE_RUN, framework="torch",
                               device=device, threads=min(world, cpus), batch_size=1,
                               options=o))
    return out


def uncovered(todo: Sequence[RunSpec], store: Store) -> list[RunSpec]:
    """``todo`` without the scoped kernel runs that a stored run already timed: one of the
    same identity but for its shapes and networks (``RunSpec.identity``: framework, thread
    count, device, precision, library versions, kernel revision, timing settings, ...)
    and the same repetition, whose shapes include all of the run's, scoped to at least its
    networks. A calibration scoped with its skeleton ('cores') holds everything
    one without it ('once') would time, and the newer would replace it in ``load``
    (``_newest``: one run per scope), its skeleton lost for a run that adds nothing."""
    def scoped(s: RunSpec) -> bool:
        return isinstance(s.options, KernelOptions) and bool(s.options.scope)

    if not any(scoped(s) for s in todo):
        return list(todo)
    rows = [r for r in store.results(kind="kernel", status="ok",
                                     machine_id=environment.machine_id())
            if isinstance(r.spec.options, KernelOptions)]

    def settings(s: RunSpec) -> dict:
        """Its identity but for its shapes and networks, and its repetition."""
        ident = s.identity()
        options = {k: v for k, v in ident.get("options", {}).items()
                   if k not in ("parts", "scope")}
        return {**ident, "options": options, "repeat": s.repeat}

    def shapes(o: KernelOptions) -> set[tuple]:
        return {(p.op, tuple(shape)) for p in o.parts for shape in p.shapes}

    def covered(s: RunSpec) -> bool:
        mine = settings(s)
        return any(settings(r.spec) == mine
                   and set(s.options.scope) <= set(r.spec.options.scope)
                   and shapes(s.options) <= shapes(r.spec.options) for r in rows)

    return [s for s in todo if not (scoped(s) and covered(s))]


@dataclass(frozen=True)
class Stored:
    """The calibration samples of one framework, thread count, device and precision."""

    framework: str
    threads: int
    device: str
    samples: Samples
    precision: str = "fp32"
    #: the framework's runtime memory its kernel workers had before any kernel (the
    #: median over its runs; None: calibrated before dlperf recorded it)
    baseline_bytes: float | None = None
    #: per op, the share of the CPUs other processes took while it was timed (the median
    #: over its repetitions; ``KernelOutcome.other_cpu_share``)
    other_cpu_share: dict[str, float] = field(default_factory=dict)
    #: the networks whose shapes it timed ('alexnet@16'), when only scoped runs made it;
    #: None: the whole grid was timed
    scope: tuple[str, ...] | None = None
    #: the machine's speed while its kernels ran: the median of its runs' speed probes
    #: (``core.speed_probe``; empty: not measured)
    speed_probe: dict[str, float] = field(default_factory=dict)
    #: per network, the framework's runtime memory when it trains it (the median over
    #: its runs; ``kinds.calibrate.runtime``; empty: not measured)
    trained: dict[str, float] = field(default_factory=dict)
    #: every network and batch a scoped run timed the shapes of ('fcn5@8'), whether or
    #: not the whole grid was timed too (``LocalFit.timed_exactly``)
    timed_at: tuple[str, ...] = ()
    #: the newest revision of dlperf's kernels among its runs (``kernels.REVISION``)
    revision: int | None = None
    #: per op, the share of its samples timed while the machine's speed moved (the median
    #: over its runs; ``perfmodel.steadiness``)
    unsteady: dict[str, float] = field(default_factory=dict)
    #: samples its runs timed again for that, and of them those replaced by the second
    #: timing (``KernelOutcome.retimed``, ``steadier``)
    retimed: tuple[int, int] = (0, 0)
    #: the files' pages (the libraries') its workers held once they had trained the
    #: networks, else before any kernel (``KernelOutcome.baseline_file_rss_bytes``; the
    #: median over its runs; None: calibrated before dlperf recorded them)
    baseline_file_bytes: float | None = None
    #: per op, how much slower (above 1) or faster another of its runs timed the shapes
    #: it shares with the run of the most shapes, where they disagree
    #: (``perfmodel.run_speed``), a shape timed again after a run (``RETIMED_RUN``) taking
    #: that timing in it
    run_speeds: dict[str, float] = field(default_factory=dict)
    #: the shapes a run of ``RETIMED_RUN`` timed again after their runs, (op, shape) ->
    #: the median time of the sample its timing replaced
    timed_again: dict[tuple[str, tuple[int, ...]], float] = field(default_factory=dict)
    #: of those, the shapes timed again because its runs disagreed on their op
    #: (``KernelOptions.together``)
    timed_together: frozenset[tuple[str, tuple[int, ...]]] = frozenset()

    @property
    def key(self) -> tuple[str, int, str, str]:
        """(framework, threads, device, precision): what ``MachineFits`` keys it by."""
        return (self.framework, self.threads, self.device, self.precision)


def _current(r: RunResult, packages: dict[str, str | None]) -> bool:
    """A kernel row counts while its framework's versions are the installed ones."""
    o = r.spec.options
    return isinstance(o, KernelOptions) and o.versions == library_versions(r.spec.framework, packages)


#: the first kernel revision whose trained chain updates its weights (four kernels per
#: layer, ``kernels.TRAIN_KERNELS``); an older one's chain had three and no optimizer
TRAINED_CHAIN_REVISION = 5


def _newest(rows: Sequence[RunResult]) -> list[list[RunResult]]:
    """Per framework, thread count, device, precision, kind of kernel run (the kernels,
    or the all-reduce among a process count) and scope (the whole grid, or the networks
    it was scoped to): the newest run and its repetitions (the same configuration,
    ``calibrate --repeat``). A calibration measured again with another grid or revision
    replaces the earlier one of its scope instead of mixing with it."""
    newest: dict[tuple, RunResult] = {}
    for r in rows:
        o = r.spec.options
        key = (r.spec.framework, r.spec.threads, r.spec.device, r.spec.precision,
               r.spec.network, getattr(o, "world", 1), getattr(o, "scope", ()))
        if key not in newest or (r.finished_at or 0) > (newest[key].finished_at or 0):
            newest[key] = r
    return [[r for r in rows if r.spec.config_id == n.spec.config_id]
            for n in newest.values()]


def merge(runs: Sequence[Sequence[KernelSample]]) -> tuple[KernelSample, ...]:
    """The samples of repeated kernel runs as one: per op, shape and process count, the
    median of the runs' medians (a run disturbed at one shape does not move the curve),
    every timed call kept."""
    by: dict[tuple, list[KernelSample]] = {}
    for samples in runs:
        for x in samples:
            by.setdefault((x.op, x.shape, x.world), []).append(x)
    out = []
    for same in by.values():
        utils = [x.cpu_util for x in same if x.cpu_util is not None]
        out.append(same[0].model_copy(update={
            "median_s": statistics.median(x.median_s for x in same),
            "times_s": tuple(t for x in same for t in x.times_s),
            "cpu_util": statistics.median(utils) if utils else None}))
    return tuple(out)


def load(store: Store, *, device: str | None = "cpu", machine_id: str | None = None,
         any_version: bool = False) -> list[Stored]:
    """Every (framework, threads, device, precision) this machine has calibration samples
    for (on one device, or on every one with None): per kernel run and scope the newest
    and its repetitions, of the newest revision, merged (``merge``: the whole grid's and
    the scoped runs' samples of a shape both count), rows of other library versions left
    out (unless ``any_version``: another machine's calibration read for its curves). The
    all-reduce samples (keyed by process count) are added to every entry. A shape that a
    run of ``RETIMED_RUN`` timed again after the runs that timed it takes that timing
    (``Stored.timed_again`` keeps the time it replaced)."""
    packages = environment.packages()
    rows = [r for r in store.results(kind="kernel", status="ok", device=device,
                                     machine_id=machine_id or environment.machine_id())
            if any_version or _current(r, packages)]
    timed_again = [r for r in rows if r.spec.network == RETIMED_RUN]
    groups: list[tuple[tuple[str, int, str, str], list[RunResult]]] = []
    revision: dict[tuple[str, int, str, str], int] = {}
    for runs in _newest([r for r in rows if r.spec.network != RETIMED_RUN]):
        runs = [r for r in runs if isinstance(r.outcome, KernelOutcome)]
        if runs:
            s = runs[0].spec
            key = (s.framework, s.threads, s.device, s.precision)
            groups.append((key, runs))
            if s.network == "kernels":
                revision[key] = max(revision.get(key, 0), s.options.revision)
    by_key: dict[tuple[str, int, str, str], list[tuple[KernelSample, ...]]] = {}
    # when each run (with its repetitions) of by_key's finished, in by_key's order
    run_ends: dict[tuple[str, int, str, str], list[float]] = {}
    scopes: dict[tuple[str, int, str, str], set[str] | None] = {}
    timed_at: dict[tuple[str, int, str, str], set[str]] = {}
    baselines: dict[tuple[str, int, str, str], list[int]] = {}
    files: dict[tuple[str, int, str, str], list[int]] = {}
    others: dict[tuple[str, int, str, str], dict[str, list[float]]] = {}
    probes: dict[tuple[str, int, str, str], list[dict[str, float]]] = {}
    trained: dict[tuple[str, int, str, str], dict[str, list[int]]] = {}
    unsteady: dict[tuple[str, int, str, str], dict[str, list[float]]] = {}
    retimed: dict[tuple[str, int, str, str], tuple[int, int]] = {}
    # when each shape was last timed by its runs: a later run of RETIMED_RUN replaces it
    timed_when: dict[tuple[str, int, str, str], dict[tuple, float]] = {}
    collective = []
    for key, runs in groups:
        o = runs[0].spec.options
        if runs[0].spec.network == "kernels":
            if o.revision < revision[key]:  # an older revision's scoped run: not mixed in
                continue
            covered = scopes.get(key, set())
            scopes[key] = None if covered is None or not o.scope else covered | set(o.scope)
            timed_at.setdefault(key, set()).update(o.scope or ())
        samples = merge([x.outcome.samples for x in runs])  # type: ignore[union-attr]
        if o.revision < TRAINED_CHAIN_REVISION:  # no optimizer in its chain:
            samples = tuple(s for s in samples if s.op != "dispatch_train")  # plain stands in
        # the machine's, not a framework's at a thread count: every entry gets them
        collective.extend(s for s in samples if s.op in MACHINE_OPS)
        local = tuple(s for s in samples if s.op not in MACHINE_OPS)
        if local:
            by_key.setdefault(key, []).append(local)
            run_ends.setdefault(key, []).append(max(x.finished_at or 0.0 for x in runs))
        baselines.setdefault(key, []).extend(
            b for x in runs if (b := x.outcome.baseline_rss_bytes))  # type: ignore[union-attr]
        files.setdefault(key, []).extend(
            b for x in runs if (b := x.outcome.baseline_file_rss_bytes))  # type: ignore[union-attr]
        for x in runs:
            when = timed_when.setdefault(key, {})
            for smp in x.outcome.samples:  # type: ignore[union-attr]
                at = (smp.op, smp.shape, smp.world)
                when[at] = max(when.get(at, 0.0), x.finished_at or 0.0)
            for op, share in x.outcome.other_cpu_share.items():  # type: ignore[union-attr]
                others.setdefault(key, {}).setdefault(op, []).append(share)
            for op, share in steadiness.unsteady_share(
                    x.outcome.samples, key[1]).items():  # type: ignore[union-attr]
                unsteady.setdefault(key, {}).setdefault(op, []).append(share)
            again, kept = retimed.get(key, (0, 0))
            retimed[key] = (again + x.outcome.retimed,  # type: ignore[union-attr]
                            kept + x.outcome.steadier)  # type: ignore[union-attr]
            for net, b in x.outcome.train_runtime_bytes.items():  # type: ignore[union-attr]
                trained.setdefault(key, {}).setdefault(net, []).append(b)
            if x.outcome.speed_probe:  # type: ignore[union-attr]
                probes.setdefault(key, []).append(x.outcome.speed_probe)  # type: ignore[union-attr]
    replaced = {key: _timed_again(merge(s), timed_again, key, timed_when.get(key, {}),
                                  revision.get(key)) for key, s in by_key.items()}
    # the runs set against each other as each stands now: a shape a later run of
    # RETIMED_RUN timed again takes that timing in every run it replaces
    apart = {key: disagreement([
        _timed_again(run, timed_again, key, dict.fromkeys(_at(run), end), revision.get(key))[0]
        for run, end in zip(s, run_ends[key], strict=True)]) for key, s in by_key.items()}
    return [Stored(fw, t, dev, Samples.of([*replaced[key][0], *collective]), prec,
                   statistics.median(b) if (b := baselines.get(key)) else None,
                   {op: statistics.median(v) for op, v in others.get(key, {}).items()},
                   None if (sc := scopes.get(key)) is None else tuple(sorted(sc)),
                   speed_probe.typical(probes.get(key, ())),
                   {net: statistics.median(v) for net, v in trained.get(key, {}).items()},
                   tuple(sorted(timed_at.get(key, ()))), revision.get(key),
                   {op: statistics.median(v) for op, v in unsteady.get(key, {}).items()},
                   retimed.get(key, (0, 0)),
                   statistics.median(f) if (f := files.get(key)) else None,
                   apart[key], replaced[key][1], replaced[key][2])
            for key in sorted(by_key) for fw, t, dev, prec in [key]]


def _at(samples: Sequence[KernelSample]) -> list[tuple]:
    return [(x.op, x.shape, x.world) for x in samples]


def _timed_again(samples: Sequence[KernelSample], again: Sequence[RunResult],
                 key: tuple[str, int, str, str], timed_when: dict[tuple, float],
                 revision: int | None
                 ) -> tuple[tuple[KernelSample, ...], dict[tuple[str, tuple[int, ...]], float],
                            frozenset[tuple[str, tuple[int, ...]]]]:
    """``samples`` with each shape that a run of ``RETIMED_RUN`` of ``key`` (of the
    kernels' ``revision``) timed after ``timed_when`` replaced by that timing, the newest
    last; per shape replaced the median of the sample it replaced; the shapes replaced by a
    run that timed its ops again where the runs disagreed (``KernelOptions.together``)."""
    by = {(s.op, s.shape, s.world): s for s in samples}
    first: dict[tuple[str, tuple[int, ...]], float] = {}
    together: set[tuple[str, tuple[int, ...]]] = set()
    for r in sorted(again, key=lambda r: r.finished_at or 0.0):
        s = r.spec
        if (s.framework, s.threads, s.device, s.precision) != key \
                or not isinstance(r.outcome, KernelOutcome) \
                or (revision is not None and s.options.revision < revision):
            continue
        for x in r.outcome.samples:
            at = (x.op, x.shape, x.world)
            if at in by and (r.finished_at or 0.0) > timed_when.get(at, 0.0):
                first.setdefault((x.op, x.shape), by[at].median_s)
                by[at] = x
                if s.options.together:
                    together.add((x.op, x.shape))
    return tuple(by.values()), first, frozenset(together)


def without_network(stored: Stored, network: str) -> Stored:
    """``stored`` as a calibration scoped to the other networks of its scope would have
    timed it: only the shapes ``scoped_parts`` gives for them (the skeleton of the grid,
    their layers' shapes, the ops of their layer kinds), ``network``'s own left out; as it
    is where the whole grid was timed or ``network`` is not in its scope. What validation
    predicts a network with, to say how far to trust a prediction of a network whose
    layers the calibration never timed. One without the whole skeleton at its thread
    count (``calibrate --skeleton cores``) is left without samples: no network outside its
    scope is predicted from it, and its other networks' shapes alone would predict one
    worse than the advice does."""
    if stored.scope is None:
        return stored
    rest = [(name, int(batch)) for label in stored.scope
            for name, batch in [label.split("@")] if name != network]
    if len(rest) == len(stored.scope):
        return stored
    if not has_skeleton(stored):
        return replace(stored, samples=Samples.of([]))
    # a weight gradient's sides in either order: a store that timed PyTorch's in the
    # order of another framework's weights keeps those samples
    parts, labels = scoped_parts(rest, stored.device)
    timed = {(p.op, tuple(shape)) for p in parts for shape in p.shapes}
    kept = [x for x in stored.samples.items
            if x.op not in LOCAL_OPS or (x.op, tuple(x.shape)) in timed]
    return replace(stored, samples=Samples.of(kept), scope=labels,
                   timed_at=tuple(t for t in stored.timed_at if t.split("@")[0] != network))


def has_skeleton(stored: Stored) -> bool:
    """Whether ``stored`` holds the skeleton of the grid (``network_kernels.skeleton``) of
    every product and convolution, whichever runs timed it."""
    return all(set(network_kernels.skeleton(op, grid(op, device=stored.device)))
               <= {tuple(x.shape) for x in stored.samples.of_op(op)}
               for op in network_kernels.SCOPED_OPS if op not in network_kernels.LAYER_KIND_OPS)


def local_calibration(store: Store, *, device: str | None = "cpu",
                      hold_out: str | None = None) -> MachineFits:
    """This machine's fitted calibration from the store: every (framework, threads,
    precision) on ``device`` (every device with None) whose samples cover every op (an
    incomplete one is left out; ``find`` then says what to run). ``hold_out``: a network
    whose own shapes are left out of every calibration scoped to it (``without_network``)."""
    loaded = load(store, device=device)
    if hold_out is not None:
        loaded = [without_network(s, hold_out) for s in loaded]
    complete = [s for s in loaded if all(s.samples.of_op(op) for op in REQUIRED_OPS)]
    memory = float(environment.machine().get("memory_bytes") or 0) / 1e9 or 1.0
    # what a second timing did not explain of the shapes slower at more threads
    slower = thread_consistency.unexplained(
        {s.key: s.samples.items for s in complete}, {s.key: s.timed_again for s in complete},
        environment.physical_cores())
    return MachineFits.of([(s.framework, s.threads, s.device, s.samples, s.precision)
                           for s in complete], memory, environment.physical_cores(),
                          baselines=_baselines(complete),
                          measured={s.key: {
                              "other_cpu_share": dict(s.other_cpu_share), "scope": s.scope,
                              "skeleton": s.scope is None or has_skeleton(s),
                              "speed_probe": dict(s.speed_probe), "timed_at": s.timed_at,
                              "revision": s.revision, "unsteady": dict(s.unsteady),
                              "retimed": s.retimed, "run_speeds": dict(s.run_speeds),
                              "slower_threads": slower.get(s.key, {}),
                              "threads_retimed": len(s.timed_again.keys() - s.timed_together),
                              "runs_retimed": len(s.timed_together)}
                                    for s in complete},
                          workers=worker_runtimes(store))


def runtime_baselines(store: Store) -> dict[tuple[str, ...], float]:
    """The runtime memory the calibration measured here (``_baselines``), read without
    fitting any curve (the memory model needs no more)."""
    return _baselines(load(store, device=None))


def runtime_memory(store: Store) -> tuple[dict[tuple[str, ...], float],
                                          dict[tuple[str, str], float]]:
    """``runtime_baselines`` and ``runtime_file_pages`` from one read of the store."""
    loaded = load(store, device=None)
    return _baselines(loaded), _file_pages(loaded)


def runtime_file_pages(store: Store) -> dict[tuple[str, str], float]:
    """(framework, device) -> the files' pages its calibration's kernel workers held
    resident (``Stored.baseline_file_bytes``): the part of the runtime baseline that
    follows the page cache's state; the median over the workers that trained the networks
    (whose runtime the baseline is, their training's code mapped), over all where none
    did. A framework calibrated before dlperf recorded them is absent."""
    return _file_pages(load(store, device=None))


def _file_pages(stored: list[Stored]) -> dict[tuple[str, str], float]:
    by: dict[tuple[str, str], list[tuple[bool, float]]] = {}
    for s in stored:
        if s.baseline_file_bytes:
            by.setdefault((s.framework, s.device), []).append(
                (bool(s.trained), s.baseline_file_bytes))
    return {k: statistics.median(b for t, b in v if t or not any(t for t, _ in v))
            for k, v in by.items()}


def worker_runtimes(store: Store) -> dict[tuple[str, str, str], float]:
    """(framework, device, runtime) -> a parallel worker's runtime memory, as the newest
    calibration of the collectives measured it in their processes, of this machine and
    the installed versions: 'gloo', 'backward' and 'ddp' (``KernelOutcome.ddp_runtime_bytes``), and
    with the RPC agent up, per world (``machine_fits.at_world``: 'rpc@2', 'ddp+rpc@4')."""
    from dlperf.perfmodel.machine_fits import at_world

    packages = environment.packages()
    # the collectives' runs only (the grids' runs hold hundreds of samples each)
    rows = store.results(kind="kernel", status="ok", network=COLLECTIVE_RUN,
                         machine_id=environment.machine_id())
    out: dict[tuple[str, str, str], float] = {}
    for r in sorted((r for r in rows if _current(r, packages)),
                    key=lambda r: r.finished_at or 0):
        o = r.outcome
        world = getattr(r.spec.options, "world", 2)
        for name, (what, per_world) in KernelOutcome.RUNTIMES.items():
            if (got := getattr(o, f"{name}_runtime_bytes", None)) is not None:
                key = at_world(what, world) if per_world else what
                out[(r.spec.framework, r.spec.device, key)] = float(got)
    return out


def _baselines(stored: list[Stored]) -> dict[tuple[str, ...], float]:
    """(framework, device) -> the median of its calibrations' runtime baselines (a
    framework's libraries take about the same memory at any thread count); (framework,
    device, network) -> its runtime when it trains that network, where measured
    (``perfmodel.machine_fits.runtime_baseline`` reads the two)."""
    by: dict[tuple[str, ...], list[float]] = {}
    for s in stored:
        if s.baseline_bytes:
            by.setdefault((s.framework, s.device), []).append(s.baseline_bytes)
        for net, b in s.trained.items():
            by.setdefault((s.framework, s.device, net), []).append(b)
    return {k: statistics.median(v) for k, v in by.items()}
