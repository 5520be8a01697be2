"""A train run's options in force: the spec's ``TrainOptions`` checked (bad input is one
line naming the option) and every default filled in from the family."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from dlperf.core.errors import UsageError, validation_message
from dlperf.core.target_rules import Budget
from dlperf.kinds.train.options import DESCRIPTIONS, TrainOptions
from dlperf.kinds.train.quality import QUALITY, quality_of

DEFAULT_MAX_STEPS = 20000
DEFAULT_MAX_TIME_S = 60.0
DBN_PRETRAIN_EPOCHS = 10.0


def parse_options(raw: Mapping[str, Any]) -> TrainOptions:
    """A train run's options from a mapping (command line, experiment arms), checked: bad
    input is a UsageError naming the option."""
    unknown = [k for k in raw if k not in DESCRIPTIONS]
    if unknown:
        raise UsageError(f"unknown training option '{unknown[0]}' (known: {', '.join(DESCRIPTIONS)})")
    try:
        return TrainOptions.model_validate(dict(raw))
    except ValidationError as e:
        raise UsageError(validation_message(e)) from None


def check_options(network: str, options: TrainOptions | Mapping[str, Any]) -> dict[str, Any]:
    """The options in force for ``network``: every default filled in (the family's target,
    the budget, the DBN's pre-training). Raises UsageError for a network with no target or
    an option that does not apply to it."""
    o = options if isinstance(options, TrainOptions) else parse_options(options)
    if network not in QUALITY:
        raise UsageError(f"network '{network}' has no training target (train: {', '.join(QUALITY)})")
    if network != "dbn" and (o.pretrain_epochs is not None or o.pretrain_lr is not None):
        raise UsageError("pretrain_epochs and pretrain_lr apply to the dbn only")
    try:
        quality = quality_of(network, o.measure)
    except ValueError as e:
        raise UsageError(str(e)) from None
    given = o.model_dump(exclude_defaults=True)
    opts: dict[str, Any] = {
        "target": quality.default_target, "max_steps": DEFAULT_MAX_STEPS,
        "max_time_s": DEFAULT_MAX_TIME_S, "max_epochs": None, "stop_at_target": True,
        **({"pretrain_epochs": DBN_PRETRAIN_EPOCHS} if network == "dbn" else {}),
        **given,
    }
    for key in ("target", "max_epochs"):
        if opts.get(key) == "none":
            opts[key] = None
    return opts


def budget_of(opts: Mapping[str, Any]) -> Budget:
    """The budget of a train run's options in force (``check_options``)."""
    return Budget(max_steps=opts["max_steps"], max_epochs=opts["max_epochs"],
                  max_time_s=opts["max_time_s"])
