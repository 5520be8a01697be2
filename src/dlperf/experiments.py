"""The guide's network-choice experiments: their runs.

Each experiment is a list of RunSpecs (``specs``) that ``dlperf experiment NAME`` runs
(skipping what the store has); its report section (``dlperf.report.experiments``) reads
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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dlperf import workloads
from dlperf.errors import UsageError
from dlperf.kinds import TrainOptions
from dlperf.spec import Measurement, RunResult, RunSpec
from dlperf.store import Store
from dlperf.workloads.families import FAMILIES

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
FAMILY_EXPERIMENT = "families"
NAMES = (*EXPERIMENTS, FAMILY_EXPERIMENT)


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


def specs(name: str, s: Settings) -> list[RunSpec]:
    if name == FAMILY_EXPERIMENT:
        return family_specs(s)
    try:
        return EXPERIMENTS[name].specs(s)
    except KeyError:
        raise UsageError(f"unknown experiment '{name}' (known: {', '.join(NAMES)})") from None


# ----------------------------------------------------------------------------- reading
def arm_results(store: Store, name: str) -> dict[str, RunResult]:
    """Newest stored result of every arm of a train experiment, in the arms' order."""
    found: dict[str, RunResult] = {}
    for r in store.results(kind="train"):
        o: TrainOptions = r.spec.options  # type: ignore[assignment]
        if o.experiment == name:
            found[o.arm or r.spec.network] = r  # later rows are newer
    order = {a.label: i for i, a in enumerate(EXPERIMENTS[name].arms(Settings()))}
    return dict(sorted(found.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))
