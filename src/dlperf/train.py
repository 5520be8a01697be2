"""Time to a quality target on real data: RunSpecs of kind "train".

The worker calls ``run_training`` in a fresh process with the thread count already in
force. It loads the family's real data set (fixed split), builds the trainer through the
backend, trains on shuffled mini-batches (order seeded by ``spec.seed``) and evaluates
on the held-out split every ``eval_every`` steps, until the quality target is reached,
or a step, epoch or time budget ends. A budget that ends first is a failure with reason
"budget" that still carries the whole curve.

Times: ``train_s`` is the time spent training (feeding batches, steps, DBN
pre-training), evaluation excluded; ``eval_s`` the evaluation time; the time budget
counts training time only, so how often one evaluates does not change when a run stops.

Quality measures (``QUALITY``), each on the held-out split:
- accuracy (classifiers): share of examples whose largest logit is the true class.
- reconstruction error (auto-encoder, deconvolutional net, RBM): mean squared error per
  pixel, intensities in [0, 1]; for the RBM the mean-field reconstruction
  p(v | p(h | v)).
- negative ELBO (VAE), nats per image, one reparameterised sample per example drawn from
  fixed noise, so the measure is deterministic.
- MMD^2 (GAN): the unbiased squared maximum mean discrepancy (Gretton et al., 2012,
  eq. 3) between as many generated digits (fixed latent noise) as there are held-out
  digits and the held-out digits, Gaussian kernels at 1/2, 1 and 2 times the median
  distance between held-out digits. 0 means indistinguishable by this test; the same
  statistic for real training digits against the held-out ones is recorded beside it
  as the floor a perfect generator would reach.

Nothing here imports a framework: the trainer supplies numpy outputs (``outputs(x)``,
``generate(n)`` for the GAN) and the measures are computed here, the same for every
backend.
"""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dlperf import data, workloads
from dlperf.errors import UsageError, is_out_of_memory
from dlperf.spec import Metrics, RunResult, RunSpec

DATA_SEED = 0  # the train/held-out split is fixed; spec.seed varies init and batch order
TREES_TRAIN, TREES_TEST = 4000, 1000


@dataclass(frozen=True)
class Quality:
    name: str
    higher_is_better: bool
    unit: str
    default_target: float
    description: str

    def reached(self, q: float, target: float) -> bool:
        return q >= target if self.higher_is_better else q <= target


_ACC = "held-out accuracy"
_MSE = "held-out reconstruction error (mean squared error per pixel)"

#: Quality measure and default target per family. The targets are round numbers that the
#: small size reaches within a minute on one CPU thread (docs/families.md).
QUALITY: dict[str, Quality] = {
    "ffn": Quality("accuracy", True, "", 0.95, _ACC),
    "dbn": Quality("accuracy", True, "", 0.9, _ACC),
    "cnn": Quality("accuracy", True, "", 0.95, _ACC),
    "rnn": Quality("accuracy", True, "", 0.9, _ACC),
    "lstm": Quality("accuracy", True, "", 0.9, _ACC),
    "recursive": Quality("accuracy", True, "", 0.9, _ACC),
    "autoencoder": Quality("recon_mse", False, "", 0.02, _MSE),
    "deconv": Quality("recon_mse", False, "", 0.02, _MSE),
    "rbm": Quality("recon_mse", False, "", 0.03, _MSE),
    "vae": Quality("neg_elbo", False, "nats", 27.0, "held-out negative ELBO per image"),
    "gan": Quality(
        "mmd2", False, "", 0.1, "MMD^2 between generated and held-out digits (Gaussian kernels)"
    ),
}

#: Options of a "train" RunSpec: name -> (type, description). Checked by ``check_options``.
OPTIONS: dict[str, tuple[type, str]] = {
    "target": (float, "quality to reach on held-out data ('none': train the whole budget)"),
    "max_steps": (int, "step budget (default 20000)"),
    "max_epochs": (float, "epoch budget (default none)"),
    "max_time_s": (float, "training-time budget in seconds (default 60)"),
    "eval_every": (int, "steps between evaluations (default: a quarter epoch; GAN: one)"),
    "lr": (float, "learning rate (default: the family's; for the DBN the fine-tuning rate)"),
    "stop_at_target": (bool, "stop when the target is reached (default true)"),
    "pretrain_epochs": (float, "DBN: pre-training epochs per RBM (default 10; 0 = random init)"),
    "pretrain_lr": (float, "DBN: CD-k learning rate of the pre-training (default 0.1)"),
    "experiment": (str, "tag: the experiment this run belongs to"),
    "arm": (str, "tag: the experiment's arm (a label in its table)"),
}
DEFAULTS: dict[str, Any] = {
    "max_steps": 20000,
    "max_time_s": 60.0,
    "max_epochs": None,
    "stop_at_target": True,
}
DBN_PRETRAIN_EPOCHS = 10.0


def check_options(network: str, options: dict[str, Any]) -> dict[str, Any]:
    """Validate a train RunSpec's options; return them with every default filled in."""
    if network not in QUALITY:
        known = ", ".join(QUALITY)
        raise UsageError(f"network '{network}' has no training target (train: {known})")
    opts = {"target": QUALITY[network].default_target, **DEFAULTS}
    if network == "dbn":
        opts["pretrain_epochs"] = DBN_PRETRAIN_EPOCHS
    for key, value in options.items():
        if key not in OPTIONS:
            raise UsageError(f"unknown training option '{key}' (known: {', '.join(OPTIONS)})")
        opts[key] = _typed(key, value)
    if network != "dbn" and any(k in options for k in ("pretrain_epochs", "pretrain_lr")):
        raise UsageError("pretrain_epochs and pretrain_lr apply to the dbn only")
    return opts


def _typed(key: str, value: Any) -> Any:
    kind = OPTIONS[key][0]
    if value is None or (key in ("target", "max_epochs") and str(value).lower() == "none"):
        if key in ("target", "max_epochs"):
            return None
        raise UsageError(f"option {key} needs a value")
    if kind is str:
        return str(value)
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise UsageError(f"option {key} must be true or false, got {value!r}")
    try:
        if isinstance(value, bool):
            raise ValueError
        v = kind(value)
        if kind is int and v != value:
            raise ValueError
    except (TypeError, ValueError):
        raise UsageError(f"option {key} must be a number, got {value!r}") from None
    if not math.isfinite(v) or v < 0 or (v == 0 and key not in ("pretrain_epochs", "target")):
        raise UsageError(f"option {key} must be positive, got {value!r}")
    return v


# ----------------------------------------------------------------------------- data
def load_data(cfg: Any) -> data.Dataset:
    """The family's real data set, split once with a fixed seed."""
    if cfg.dataset == "trees":
        from dlperf.workloads.families import expression_trees

        xs, ys = expression_trees(TREES_TRAIN, cfg.leaves, cfg.ops, seed=DATA_SEED)
        xt, yt = expression_trees(TREES_TEST, cfg.leaves, cfg.ops, seed=DATA_SEED + 1)
        return data.Dataset("trees", xs, ys, xt, yt, classes=10)
    return data.load(cfg.dataset, DATA_SEED)


# ----------------------------------------------------------------------------- measures
def accuracy(logits: np.ndarray, y: np.ndarray) -> float:
    return float((logits.argmax(1) == y).mean())


def recon_mse(recon: np.ndarray, x: np.ndarray) -> float:
    return float(np.mean((recon.reshape(x.shape) - x) ** 2))


def neg_elbo(logits: np.ndarray, x: np.ndarray, mu: np.ndarray, logvar: np.ndarray) -> float:
    """Mean over examples of -ELBO = BCE(logits, x) summed over pixels + KL(q || N(0, I)),
    KL = -1/2 sum(1 + log sigma^2 - mu^2 - sigma^2) (Kingma & Welling, 2014, app. B)."""
    x = x.reshape(len(x), -1)
    # stable BCE with logits: max(l, 0) - l x + log(1 + exp(-|l|))
    bce = np.maximum(logits, 0) - logits * x + np.log1p(np.exp(-np.abs(logits)))
    kl = -0.5 * (1 + logvar - mu**2 - np.exp(logvar)).sum(1)
    return float(np.mean(bce.sum(1) + kl))


def _sq_dists(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    d = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2 * a @ b.T
    return np.maximum(d, 0)


def median_distance(y: np.ndarray) -> float:
    d = _sq_dists(y, y)
    return float(np.sqrt(np.median(d[np.triu_indices(len(y), 1)])))


def mmd2(x: np.ndarray, y: np.ndarray, scale: float) -> float:
    """Unbiased MMD^2 (Gretton et al., 2012, eq. 3) with the sum of Gaussian kernels of
    widths scale/2, scale, 2 scale: mean k(x, x') + mean k(y, y') (i != j) - 2 mean k(x, y)."""
    x, y = x.reshape(len(x), -1).astype(np.float64), y.reshape(len(y), -1).astype(np.float64)

    def k(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        d = _sq_dists(a, b)
        return sum(np.exp(-d / (2 * (f * scale) ** 2)) for f in (0.5, 1.0, 2.0))

    m, n = len(x), len(y)
    kxx, kyy = k(x, x), k(y, y)
    xx = (kxx.sum() - np.trace(kxx)) / (m * (m - 1))
    yy = (kyy.sum() - np.trace(kyy)) / (n * (n - 1))
    return float(xx + yy - 2 * k(x, y).mean())


class Evaluator:
    """The family's quality on the held-out split, from the trainer's numpy outputs."""

    def __init__(self, family: str, ds: data.Dataset):
        self.family, self.ds = family, ds
        self.quality = QUALITY[family]
        self.reference: float | None = None
        if family == "gan":
            self.scale = median_distance(ds.x_test.reshape(len(ds.x_test), -1))
            # the floor: real training digits, as many as generated ones
            self.reference = mmd2(ds.x_train[: len(ds.x_test)], ds.x_test, self.scale)

    def __call__(self, trainer: Any) -> float:
        ds, name = self.ds, self.quality.name
        if self.family == "gan":
            return mmd2(trainer.generate(len(ds.x_test)), ds.x_test, self.scale)
        out = trainer.outputs(ds.x_test)
        if name == "accuracy":
            return accuracy(out["logits"], ds.y_test)
        if name == "recon_mse":
            return recon_mse(out["recon"], ds.x_test)
        return neg_elbo(out["logits"], ds.x_test, out["mu"], out["logvar"])


# ----------------------------------------------------------------------------- the loop
@dataclass
class _Clock:
    """Training and evaluation time, kept apart."""

    train_s: float = 0.0
    eval_s: float = 0.0

    def timed(self, fn: Callable[[], Any], into: str = "train_s") -> Any:
        t0 = time.perf_counter()
        out = fn()
        setattr(self, into, getattr(self, into) + time.perf_counter() - t0)
        return out


def run_training(
    spec: RunSpec, backend: Any, emit: Callable[[dict], None], base: dict[str, Any]
) -> RunResult:
    """Train ``spec`` to its target in this process; never raises for a failure."""
    from dlperf.backends.base import UnsupportedError

    try:
        opts = check_options(spec.network, spec.options)
        wl, _, cfg = workloads.resolve(spec.network, spec.size, spec.params)
        ds = load_data(cfg)
        trainer = backend.build(
            spec.network, cfg, spec.batch_size, spec.variant, spec.device, spec.seed
        )
        if not hasattr(trainer, "outputs"):
            raise UnsupportedError(f"{spec.framework} cannot train '{spec.network}' to a target")
        return _train(spec, trainer, ds, opts, emit, base)
    except UnsupportedError as e:
        return RunResult.failed(spec, "unsupported", str(e), finished_at=time.time(), **base)
    except UsageError as e:
        return RunResult.failed(spec, "error", str(e), finished_at=time.time(), **base)
    except Exception as e:
        tb = traceback.format_exc(limit=3).strip().splitlines()[-1]
        msg = f"{type(e).__name__}: {e}".strip()[:500] or tb
        return RunResult.failed(
            spec, "oom" if is_out_of_memory(e) else "error", msg, finished_at=time.time(), **base
        )


def _train(
    spec: RunSpec,
    trainer: Any,
    ds: data.Dataset,
    opts: dict[str, Any],
    emit: Callable[[dict], None],
    base: dict[str, Any],
) -> RunResult:
    quality, target = QUALITY[spec.network], opts["target"]
    evaluate = Evaluator(spec.network, ds)
    n_train, bs = len(ds.x_train), spec.batch_size
    if bs > n_train:
        raise UsageError(f"batch size {bs} exceeds the {n_train} training examples")
    steps_per_epoch = n_train // bs
    # a quarter epoch; an epoch for the GAN, whose measure costs 100 times a step
    per_epoch = 1 if spec.network == "gan" else 4
    eval_every = opts.get("eval_every") or max(1, steps_per_epoch // per_epoch)
    if "lr" in opts:
        trainer.set_lr(opts["lr"])
    opts.setdefault("lr", trainer.default_lr)
    batches = ds.batches(bs, np.random.default_rng(spec.seed))
    clock = _Clock()
    curve: list[list[float]] = []  # [step, training time, quality]
    losses: list[list[float]] = []  # [step, loss of the last step]
    step_times: list[float] = []
    extra: dict[str, Any] = {}

    def feed() -> None:
        x, y = next(batches)
        trainer.set_batch(x, y)

    def out_of_budget(steps: int) -> str | None:
        if steps >= opts["max_steps"]:
            return f"{opts['max_steps']} steps"
        if opts["max_epochs"] is not None and steps * bs >= opts["max_epochs"] * n_train:
            return f"{opts['max_epochs']:g} epochs"
        if clock.train_s >= opts["max_time_s"]:
            return f"{opts['max_time_s']:g} s of training"
        return None

    # DBN: greedy layer-wise pre-training, timed on its own
    pretrain_steps = 0
    if hasattr(trainer, "pretrain_step"):
        opts.setdefault("pretrain_lr", trainer.pretrain_lr)
        trainer.set_pretrain_lr(opts["pretrain_lr"])
        per_layer = round(opts["pretrain_epochs"] * steps_per_epoch)
        for layer in range(trainer.pretrain_layers):
            emit({"phase": "train", "text": f"pre-training RBM {layer + 1}"})
            for _ in range(per_layer):
                clock.timed(feed)
                clock.timed(lambda layer=layer: (trainer.pretrain_step(layer), trainer.sync()))
                pretrain_steps += 1
        if per_layer:  # with no pre-training the classifier keeps its own initialisation
            clock.timed(trainer.end_pretraining)
        extra.update(
            pretrain_s=clock.train_s,
            pretrain_steps=pretrain_steps,
            pretrain_epochs_per_layer=opts["pretrain_epochs"],
        )

    def record(steps: int) -> float:
        q = clock.timed(lambda: evaluate(trainer), "eval_s")
        curve.append([steps, clock.train_s, q])
        if steps:
            losses.append([steps, trainer.loss()])
        emit({"phase": "train", "text": f"step {steps} {quality.name} {q:.4g}"})
        return q

    q = record(0)
    steps, reached_at, stop, diverged = 0, None, None, False
    while True:
        if target is not None and quality.reached(q, target) and reached_at is None:
            reached_at = (steps, clock.train_s)
            if opts["stop_at_target"]:
                break
        stop = out_of_budget(steps)
        if stop:
            break
        clock.timed(feed)
        t0 = time.perf_counter()
        trainer.step()
        trainer.sync()
        dt = time.perf_counter() - t0
        clock.train_s += dt
        step_times.append(dt)
        steps += 1
        if steps % eval_every == 0 or out_of_budget(steps):
            q = record(steps)
            if not math.isfinite(trainer.loss()):
                diverged = True
                break

    epochs = steps * bs / n_train
    finetune_s = clock.train_s - extra.get("pretrain_s", 0.0)
    extra.update(
        quality={
            "name": quality.name,
            "higher_is_better": quality.higher_is_better,
            "unit": quality.unit,
            "description": quality.description,
            "target": target,
            "reference": evaluate.reference,
        },
        target_reached=reached_at is not None,
        time_to_target_s=reached_at[1] if reached_at else None,
        steps_to_target=reached_at[0] if reached_at else None,
        train_s=clock.train_s,
        eval_s=clock.eval_s,
        steps=steps,
        epochs=epochs,
        time_per_epoch_s=finetune_s / epochs if epochs else None,
        final_quality=curve[-1][2],
        best_quality=(max if quality.higher_is_better else min)(c[2] for c in curve),
        curve=curve,
        loss_curve=losses,
        dataset=ds.name,
        n_train=n_train,
        n_test=len(ds.x_test),
        options=opts,
        stopped_by=stop,
    )
    if "pretrain_s" in extra:
        extra["finetune_s"] = finetune_s
    if spec.network == "gan":
        extra["note"] = "one GAN mini-batch = one discriminator update + one generator update"
    metrics = _metrics(step_times, bs)
    common = dict(
        metrics=metrics,
        param_count=trainer.param_count,
        extra=extra,
        finished_at=time.time(),
        **base,
    )
    if diverged:
        return RunResult.failed(
            spec, "error", f"training diverged: loss {trainer.loss()} at step {steps}", **common
        )
    if target is not None and reached_at is None:
        return RunResult.failed(
            spec,
            "budget",
            f"{quality.name} {_fmt(q)} after {stop}, target {_fmt(target)} not reached",
            **common,
        )
    return RunResult(spec=spec, status="ok", **common)


def _fmt(q: float) -> str:
    return f"{q:.4g}"


def _metrics(step_times: list[float], batch: int) -> Metrics | None:
    """Time per training step on real data (excluding batch feeding and evaluation)."""
    if not step_times:
        return None
    from dlperf.measure.stats import summarize

    s = summarize(step_times)
    return Metrics(
        steps=s.n,
        median_s=s.median,
        mean_s=s.mean,
        std_s=s.std,
        min_s=s.min,
        max_s=s.max,
        mad_s=s.mad,
        iqr_s=s.iqr,
        cv=s.cv,
        samples_per_s=batch / s.median if s.median > 0 else 0.0,
        warmup_steps=0,
    )
