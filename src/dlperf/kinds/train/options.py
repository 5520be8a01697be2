"""Kind "train": time to a quality target on real data (``dlperf train``, the experiments).

In a spec, a field left at None takes the family's default when the run starts
(``dlperf.kinds.train.resolve.check_options``); ``target="none"`` trains the whole budget.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import field_validator

from dlperf.core.payload import Frozen, Payload

#: option -> what it means (``dlperf train --option NAME=VALUE`` lists these)
DESCRIPTIONS: dict[str, str] = {
    "target": "quality to reach on held-out data ('none': train the whole budget)",
    "max_steps": "step budget (default 20000)",
    "max_epochs": "epoch budget (default none)",
    "max_time_s": "training-time budget in seconds (default 60)",
    "eval_every": "steps between evaluations (default: a quarter epoch; GAN: one)",
    "lr": "learning rate (default: the family's; for the DBN the fine-tuning rate)",
    "stop_at_target": "stop when the target is reached (default true)",
    "pretrain_epochs": "DBN: pre-training epochs per RBM (default 10; 0 = random init)",
    "pretrain_lr": "DBN: CD-k learning rate of the pre-training (default 0.1)",
    "measure": "quality measure instead of the family's (mmd2: for the vae as for the gan)",
    "experiment": "tag: the experiment this run belongs to",
    "arm": "tag: the experiment's arm (a label in its table)",
}
_INTS = ("max_steps", "eval_every")
_ZERO_OK = ("pretrain_epochs", "target")


class TrainOptions(Frozen):
    target: float | Literal["none"] | None = None
    max_steps: int | None = None
    max_epochs: float | Literal["none"] | None = None
    max_time_s: float | None = None
    eval_every: int | None = None
    lr: float | None = None
    stop_at_target: bool = True
    pretrain_epochs: float | None = None
    pretrain_lr: float | None = None
    measure: str | None = None
    experiment: str | None = None
    arm: str | None = None

    @field_validator("*", mode="before")
    @classmethod
    def _checked(cls, value: Any, info: Any) -> Any:
        """One rule for every number: finite, positive (0 allowed for a target and for no
        pre-training), an integer where a count is meant; 'none' only where it means
        'no limit'. Messages name the option, as ``--option NAME=VALUE`` spells it."""
        key = info.field_name
        if value is None or key in ("experiment", "arm", "measure"):
            return value if value is None else str(value)
        if key in ("target", "max_epochs") and str(value).lower() == "none":
            return "none"
        if key == "stop_at_target":
            if isinstance(value, bool):
                return value
            raise ValueError(f"option {key} must be true or false, got {value!r}")
        try:
            if isinstance(value, bool):
                raise ValueError
            v = (int if key in _INTS else float)(value)
            if key in _INTS and v != value:
                raise ValueError
        except (TypeError, ValueError):
            raise ValueError(f"option {key} must be a number, got {value!r}") from None
        if not math.isfinite(v) or v < 0 or (v == 0 and key not in _ZERO_OK):
            raise ValueError(f"option {key} must be positive, got {value!r}")
        return v


class Quality(Payload):
    """The family's quality measure as recorded with a result."""

    name: str
    higher_is_better: bool
    unit: str = ""
    description: str = ""
    target: float | None = None
    reference: float | None = None  # the measure's floor (GAN: real digits' MMD^2)


class TrainOutcome(Payload):
    """The curve of a training run and what it reached. Times exclude evaluation;
    ``curve`` rows are [step, training time s, quality], ``loss_curve`` rows [step, loss]."""

    quality: Quality
    target_reached: bool
    time_to_target_s: float | None = None
    steps_to_target: int | None = None
    train_s: float
    eval_s: float = 0.0
    steps: int
    epochs: float
    time_per_epoch_s: float | None = None
    final_quality: float
    best_quality: float
    curve: list[list[float]] = []
    loss_curve: list[list[float]] = []
    dataset: str
    n_train: int
    n_test: int
    options: dict[str, Any] = {}  # the options in force, every default filled in
    stopped_by: str | None = None  # the budget that ended it, if one did
    pretrain_s: float | None = None  # DBN only
    pretrain_steps: int | None = None
    pretrain_epochs_per_layer: float | None = None
    finetune_s: float | None = None
    note: str | None = None
