"""A kind's rules hold wherever its spec is built (``Kind.check`` and the options' own
validators): a RunSpec made in Python is refused for what ``dlperf parallel`` and
``dlperf train`` refuse, with the same words."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dlperf.core.errors import UsageError
from dlperf.core.spec import RunSpec
from dlperf.kinds.parallel.make import make_spec


def _spec(batch: int = 64, **options) -> RunSpec:
    return RunSpec(kind="parallel", network="fcn5", size="tiny", batch_size=batch,
                   options=options)


@pytest.mark.parametrize(("batch", "options", "message"), [
    (64, {"strategy": "mixed", "workers": 4, "groups": 3}, "--groups 3 does not divide"),
    (64, {"strategy": "sync", "workers": 2, "groups": 2}, "--groups applies to the mixed"),
    (64, {"strategy": "sync", "workers": 2, "push_every": 4}, "--push-every applies"),
    (64, {"strategy": "async", "workers": 2, "servers": 1, "nodes": 2},
     "one machine only"),
    (64, {"strategy": "sync", "workers": 2, "target_accuracy": 0.9}, "needs real data"),
    (64, {"strategy": "sync", "workers": 2, "data": "digits", "target_accuracy": 1.5},
     "(0, 1]"),
    (63, {"strategy": "sync", "workers": 2}, "does not split evenly over 2 workers"),
    (64, {"strategy": "pipeline", "workers": 2, "micro_batches": 5},
     "--micro-batches 5 does not divide the batch size 64"),
    (66, {"strategy": "hybrid", "workers": 4, "groups": 4}, "over 4 groups"),
])
def test_a_spec_built_in_python_is_checked_as_the_command_line_checks_it(batch, options,
                                                                          message):
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[")):
        _spec(batch, **options)
    # the same rule, the same words, from the command line's maker
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_spec("fcn5", size="tiny", batch_size=batch, **options)


def test_a_consistent_spec_keeps_its_identity():
    # the maker fills the strategy's defaults; the options it sets at their defaults do
    # not enter the identity, so every stored id stays what it was
    made = make_spec("fcn5", size="tiny", strategy="pipeline", workers=2, batch_size=64)
    assert made.options.micro_batches == 8  # min(64 samples, 4 per stage x 2 stages)
    assert made.identity()["options"] == {"strategy": "pipeline", "workers": 2,
                                          "micro_batches": 8}
    assert _spec(64, strategy="pipeline", workers=2, micro_batches=8).config_id == \
        made.config_id


def test_a_train_spec_built_in_python_is_checked_as_dlperf_train_checks_it():
    # a network with no quality target, and an option that applies to the DBN only
    with pytest.raises(ValidationError, match="network 'fcn5' has no training target"):
        RunSpec(kind="train", network="fcn5")
    with pytest.raises(ValidationError, match="apply to the dbn only"):
        RunSpec(kind="train", network="rbm", options={"pretrain_epochs": 2})
    assert RunSpec(kind="train", network="dbn", options={"pretrain_epochs": 2}).options \
        .pretrain_epochs == 2
