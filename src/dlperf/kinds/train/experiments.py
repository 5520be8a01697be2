"""The guide's network-choice experiments: their runs.

Each experiment is a list of RunSpecs (``specs``) that ``dlperf experiment NAME`` runs
(skipping what the store has); its report section (``dlperf.kinds.train.experiments_section``) reads
the store alone. Train runs carry their experiment and arm in their options
(``TrainOptions.experiment``, ``.arm``) so the report finds them;
for every arm the newest stored result is shown.

1. shallow-vs-deep: a one-hidden-layer net against deeper ones and a CNN on digits.
2. hidden-nodes: quality and time against the hidden-node count, feed-forward net and
   auto-encoder (64 inputs).
3. init-scale: weights ~ N(0, s^2) for several s against PyTorch's default.
4. dbn-pretraining: a 3-layer DBN, pre-trained then fine-tuned gently, against the same
   network from random initialisation.
5. families: time per mini-batch of every family at both sizes, 1 and 2 threads.
6. input-size: time per mini-batch and memory of the feed-forward and convolutional nets
   with synthetic inputs from 8x8 to 512x512 (step runs under a memory limit).
7. layout: shrinking, constant and growing hidden widths at one parameter budget, trained
   to a target on digits.
8. task: for each task the guide names, its candidate families trained to one target.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dlperf import workloads
from dlperf.core.errors import UsageError
from dlperf.core.spec import Measurement, RunResult, RunSpec
from dlperf.core.store import Store
from dlperf.kinds.train.options import TrainOptions
from dlperf.workloads.families import FAMILIES
from dlperf.workloads.families.layouts import equal_budget, params_of

GAN_NOTE = (
    "One GAN mini-batch is one discriminator update (on a real and a generated "
    "batch) followed by one generator update."
)
#: Measurement of the families table: short, since the small sizes take milliseconds.
FAMILIES_MEASUREMENT = Measurement(min_time_s=1.0, min_steps=5, warmup_max_time_s=10.0)
QUICK_FAMILIES_MEASUREMENT = Measurement(
    min_time_s=0.3, min_steps=3, warmup_max_steps=10, warmup_max_time_s=5.0
)


@dataclass(frozen=True)
class Settings:
    """What the command line may change about an experiment."""

    quick: bool = False
    threads: int = 1
    max_time_s: float | None = None  # per training run
    seed: int = 0

    def budget(self, epochs: float, time_s: float) -> dict[str, Any]:
        scale = 0.4 if self.quick else 1.0
        return {
            "max_epochs": round(epochs * scale),
            "max_steps": 10**6,
            "max_time_s": self.max_time_s or time_s * scale,
        }


@dataclass(frozen=True)
class Arm:
    label: str
    network: str
    params: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Experiment:
    name: str
    title: str
    claim: str  # what the experiment tests (the guide's advice where it gives one)
    arms: Callable[[Settings], list[Arm]]
    epochs: float = 30
    time_s: float = 90.0

    def specs(self, s: Settings) -> list[RunSpec]:
        out = []
        for arm in self.arms(s):
            wl = workloads.get(arm.network)
            options = TrainOptions(**{
                "stop_at_target": False,
                **self.budget(s),
                **arm.options,
                "experiment": self.name,
                "arm": arm.label,
            })
            out.append(
                RunSpec(
                    kind="train",
                    network=arm.network,
                    size="small",
                    threads=s.threads,
                    batch_size=wl.default_batch,
                    params=dict(arm.params),
                    seed=s.seed,
                    options=options,
                )
            )
        return out

    def budget(self, s: Settings) -> dict[str, Any]:
        return s.budget(self.epochs, self.time_s)


def _shallow_deep(s: Settings) -> list[Arm]:
    depths = (1, 2, 4) if s.quick else (1, 2, 4, 8)
    arms = [
        Arm(f"{'shallow' if d == 1 else 'deep'} ffn {d}x128", "ffn", {"depth": d}) for d in depths
    ]
    return arms + [Arm("deep cnn, 4 conv + 2 dense", "cnn")]


def _hidden(s: Settings) -> list[Arm]:
    ffn = (8, 32, 128, 512) if s.quick else (8, 16, 32, 64, 128, 256, 512)
    ae = (4, 16, 64) if s.quick else (4, 8, 16, 32, 64, 128)
    return [Arm(f"ffn hidden {h}", "ffn", {"hidden": h}) for h in ffn] + [
        Arm(f"autoencoder hidden {h}", "autoencoder", {"hidden": h}) for h in ae
    ]


def _init(s: Settings) -> list[Arm]:
    scales: tuple[float | str, ...] = (0.01, 0.1, 1.0, "default")
    nets = (("ffn", {"depth": 2}),) if s.quick else (("ffn", {"depth": 2}), ("autoencoder", {}))
    return [
        Arm(f"{net} init {sc}", net, {**p, "init_scale": sc}) for net, p in nets for sc in scales
    ]


def _dbn(s: Settings) -> list[Arm]:
    p = {"depth": 3}
    pre = {"pretrain_epochs": 5 if s.quick else 10}
    return [
        Arm("pre-trained, gentle lr 0.02", "dbn", p, {**pre, "lr": 0.02}),
        Arm("pre-trained, lr 0.1", "dbn", p, {**pre, "lr": 0.1}),
        Arm("random init, lr 0.1", "dbn", p, {"pretrain_epochs": 0, "lr": 0.1}),
        Arm("random init, lr 0.02", "dbn", p, {"pretrain_epochs": 0, "lr": 0.02}),
    ]


EXPERIMENTS: dict[str, Experiment] = {
    e.name: e
    for e in (
        Experiment(
            "shallow-vs-deep",
            "Shallow against deep networks (digits)",
            "depth costs time per epoch; whether it buys quality or a shorter time to target "
            "depends on the task",
            _shallow_deep,
        ),
        Experiment(
            "hidden-nodes",
            "Hidden nodes",
            "feed-forward nets profit from at least as many hidden nodes as inputs "
            "(64 here); auto-encoders use fewer",
            _hidden,
            epochs=20,
            time_s=60.0,
        ),
        Experiment(
            "init-scale",
            "Initial weight scale",
            "small initial weights (about 0.1) train well; large ones do not",
            _init,
            epochs=20,
            time_s=60.0,
        ),
        Experiment(
            "dbn-pretraining",
            "DBN pre-training against random initialisation",
            "greedy RBM pre-training followed by gentle backpropagation trains a deep "
            "sigmoid network that random initialisation leaves stuck",
            _dbn,
            epochs=40,
            time_s=120.0,
        ),
    )
}
#: the layout experiment's budget: three hidden layers of 128 on the 64 digit inputs
LAYOUT_BUDGET = params_of((128, 128, 128), FAMILIES["ffn"].config("small"))


def _layout(s: Settings) -> list[Arm]:
    return [Arm(f"{name} {'-'.join(map(str, w))}", "ffn", {"widths": "-".join(map(str, w))},
                {"target": 0.95})
            for name, w in equal_budget(LAYOUT_BUDGET, FAMILIES["ffn"].config("small")).items()]


#: task -> (data set, [(family, params, options)], the guide's advice). One target per
#: task, on one scale: accuracy for the classifiers, MMD^2 of generated digits for both
#: generators (the VAE measured as the GAN is). The tabular entry is dlperf's reading of
#: the guide (simple data: a shallow net).
TASKS: dict[str, tuple[str, list[tuple[str, dict[str, Any], dict[str, Any]]], tuple[str, ...]]] = {
    "image classification": ("digits", [
        ("cnn", {}, {}), ("dbn", {}, {}), ("ffn", {}, {})], ("cnn", "dbn")),
    "sequences": ("digits-seq", [
        ("lstm", {"dataset": "digits-seq"}, {}), ("rnn", {"dataset": "digits-seq"}, {}),
        ("ffn", {"dataset": "digits-seq"}, {})], ("lstm",)),
    "generation": ("digits", [
        ("gan", {}, {"measure": "mmd2"}), ("vae", {}, {"measure": "mmd2"})], ("gan", "vae")),
    "simple tabular data": ("cancer", [
        ("ffn", {"dataset": "cancer"}, {}), ("ffn", {"dataset": "cancer", "depth": 4}, {}),
        ("dbn", {"dataset": "cancer"}, {})], ("ffn",)),
}
TASK_TARGETS = {"image classification": 0.95, "sequences": 0.9, "generation": 0.1,
                "simple tabular data": 0.95}


def task_arm_label(task: str, network: str, params: dict[str, Any]) -> str:
    depth = f" depth {params['depth']}" if "depth" in params else ""
    return f"{task}: {network}{depth}"


def _task(s: Settings) -> list[Arm]:
    return [Arm(task_arm_label(task, net, p), net, p, {"target": TASK_TARGETS[task], **o})
            for task, (_, arms, _) in TASKS.items() for net, p, o in arms]


EXPERIMENTS.update({
    "layout": Experiment(
        "layout", "Layer layout at an equal parameter budget (digits)",
        "at one parameter budget, how the widths are laid out (shrinking like a "
        "convolutional funnel, constant, growing like a deconvolutional net) changes the "
        "time per mini-batch and the time to target", _layout, epochs=30, time_s=60.0),
    "task": Experiment(
        "task", "Task to network: the guide's candidates trained to one target per task",
        "CNN or DBN for vision, LSTM for sequences, GAN or VAE for generation",
        _task, epochs=40, time_s=60.0),
})
FAMILY_EXPERIMENT = "families"
INPUT_SIZE = "input-size"
NAMES = (*EXPERIMENTS, FAMILY_EXPERIMENT, INPUT_SIZE)
#: input sides of the input-size experiment (the guide: 512 x 512 = 262,144 inputs)
INPUT_SIDES = (8, 16, 32, 64, 128, 256, 512)
QUICK_INPUT_SIDES = (8, 32, 128, 512)
INPUT_SIZE_NETWORKS = ("ffn", "cnn")
INPUT_SIZE_BATCH = 32
#: the memory limit per worker of the input-size runs unless one is given: an input that
#: does not fit is a stored 'oom', never a machine driven into swap
INPUT_SIZE_MEMORY = 2 * 2**30


def family_specs(s: Settings, threads: tuple[int, ...] = (1, 2)) -> list[RunSpec]:
    """Experiment 5: every family, both sizes, at its default batch, as time per step."""
    m = QUICK_FAMILIES_MEASUREMENT if s.quick else FAMILIES_MEASUREMENT
    return [
        RunSpec(
            kind="step",
            network=name,
            size=size,
            threads=t,
            batch_size=wl.default_batch,
            seed=s.seed,
            measurement=m,
        )
        for t in threads
        for name, wl in FAMILIES.items()
        for size in ("small", "large")
    ]


def input_size_specs(s: Settings) -> list[RunSpec]:
    """Experiment 6: the small feed-forward and convolutional nets on synthetic side x side
    inputs, time per mini-batch and memory, one worker each."""
    m = QUICK_FAMILIES_MEASUREMENT if s.quick else FAMILIES_MEASUREMENT
    return [RunSpec(kind="step", network=net, size="small", threads=s.threads,
                    batch_size=INPUT_SIZE_BATCH, params={"side": side}, seed=s.seed,
                    measurement=m)
            for net in INPUT_SIZE_NETWORKS
            for side in (QUICK_INPUT_SIDES if s.quick else INPUT_SIDES)]


def specs(name: str, s: Settings) -> list[RunSpec]:
    if name == FAMILY_EXPERIMENT:
        return family_specs(s)
    if name == INPUT_SIZE:
        return input_size_specs(s)
    try:
        return EXPERIMENTS[name].specs(s)
    except KeyError:
        raise UsageError(f"unknown experiment '{name}' (known: {', '.join(NAMES)})") from None


# ----------------------------------------------------------------------------- reading
def arm_results(store: Store, name: str, machine_id: str | None = None) -> dict[str, RunResult]:
    """Newest stored result of every arm of a train experiment on this machine (or on
    ``machine_id``: arms of imported machines are never mixed in), in the arms' order."""
    from dlperf.core import environment

    found: dict[str, RunResult] = {}
    for r in store.results(kind="train", machine_id=machine_id or environment.machine_id()):
        o: TrainOptions = r.spec.options  # type: ignore[assignment]
        if o.experiment == name:
            found[o.arm or r.spec.network] = r  # later rows are newer
    order = {a.label: i for i, a in enumerate(EXPERIMENTS[name].arms(Settings()))}
    return dict(sorted(found.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))
