"""``dlperf train``: time to a quality target on real data. Parsing and printing only: the
work lives in ``dlperf.kinds.train.run`` (inside the worker)."""

from __future__ import annotations

import argparse

from rich.markup import escape

from dlperf import workloads
from dlperf.cli import args
from dlperf.cli.progress import ProgressListener, out
from dlperf.core import units
from dlperf.core.errors import UsageError
from dlperf.core.spec import RunResult, RunSpec
from dlperf.kinds import TrainOutcome


# ----------------------------------------------------------------------------- train
def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a guide network to a quality target on real data")
    args.add_run_flags(
        p, network=args.Take(required=True, help="ffn, autoencoder, rbm, dbn, vae, gan, rnn, "
                             "lstm, cnn, deconv, recursive"),
        size=args.Take(help="small (default), large or tiny"),
        batch_size=args.Take(help="default: the family's (32)"), threads=True,
        param=args.Take(help="network parameter: hidden, depth, init_scale, k, ..."),
        seed=True)
    p.add_argument("--target", help="quality to reach on held-out data (default: the "
                   "family's; 'none' trains the whole budget)")
    p.add_argument("--max-steps", type=args.positive_int, help="step budget (default 20000)")
    p.add_argument("--max-time", type=args.positive_float,
                   help="training-time budget in s (default 60)")
    p.add_argument("--max-epochs", type=args.positive_float, help="epoch budget")
    p.add_argument("--eval-every", type=args.positive_int, help="steps between evaluations")
    p.add_argument("--lr", type=args.positive_float, help="learning rate (default: the family's)")
    p.add_argument("--option", action="append", metavar="NAME=VALUE",
                   help="other training option, e.g. pretrain_epochs=0 (dbn)")
    args.add_timeout(p, help="seconds (above 0) before the worker is killed (default: twice "
                     "the time budget plus 300)")
    args.add_db(p)
    p.set_defaults(func=cmd_train)


def train_spec(a: argparse.Namespace) -> RunSpec:
    """Validate the flags (UsageError, one line) and build the RunSpec."""
    from dlperf.kinds.train.resolve import check_options, parse_options

    wl, size, _ = workloads.resolve(a.network, a.size, args.parse_params(a.param))
    if wl.group != "guide":
        raise UsageError(f"network '{a.network}' has no training target; train takes the "
                         "guide's families (see 'dlperf networks --group guide')")
    options = dict(args.parse_params(a.option, "--option"))
    for flag, key in (("target", "target"), ("max_steps", "max_steps"),
                      ("max_time", "max_time_s"), ("max_epochs", "max_epochs"),
                      ("eval_every", "eval_every"), ("lr", "lr")):
        v = getattr(a, flag)
        if v is not None:
            options[key] = args.scalar(v, f"--{flag.replace('_', '-')}") if isinstance(v, str) else v
    typed = parse_options(options)
    check_options(wl.name, typed)
    batch = wl.default_batch if a.batch_size is None else a.batch_size
    return RunSpec(kind="train", network=wl.name, size=size, threads=a.threads,
                   batch_size=batch, params=args.parse_params(a.param), seed=a.seed,
                   options=typed)


def cmd_train(a: argparse.Namespace) -> int:
    from dlperf import api
    from dlperf.kinds.train.resolve import check_options

    spec = train_spec(a)
    budget = check_options(spec.network, spec.options)["max_time_s"]
    timeout = a.timeout or 2 * budget + 300  # pre-training, evaluation and start-up on top
    with ProgressListener() as listener:
        [result] = api.run_specs([spec], db=a.db, force=True, timeout_s=timeout,
                                 listener=listener)
    print_training(result)
    out.print(f"  stored in {api.store_path(a.db)}", style="dim")
    return 0 if result.ok else 1


def print_training(r: RunResult) -> None:
    e, s = r.outcome, r.spec
    out.print(f"[bold]{escape(s.label())}[/]  train to target")
    if not isinstance(e, TrainOutcome):
        out.print(f"  [red]failed[/]: {r.failure.reason}: {escape(r.failure.message)}")
        return
    q = e.quality
    name = q.name + (f" ({q.unit})" if q.unit else "")
    if e.target_reached:
        out.print(f"  time to target       {units.seconds(e.time_to_target_s)} "
                  f"({e.steps_to_target} steps): {name} "
                  f"{'>=' if q.higher_is_better else '<='} {q.target:g}")
    elif q.target is None:
        out.print(f"  no target: trained the whole budget ({e.stopped_by})")
    else:
        out.print(f"  [red]target not reached[/]: {escape(r.failure.message)}")
    out.print(f"  final {name:14} {e.final_quality:.4g} (best {e.best_quality:.4g}) on "
              f"{e.n_test} held-out examples of {e.dataset}")
    if q.reference is not None:
        out.print(f"  real digits score    {q.reference:.4g} (the floor of this measure)")
    out.print(f"  trained              {e.steps} steps, {e.epochs:.1f} epochs, "
              f"{units.seconds(e.train_s)} (evaluation {units.seconds(e.eval_s)} more)")
    if e.time_per_epoch_s:
        out.print(f"  time per epoch       {units.seconds(e.time_per_epoch_s)}")
    if r.metrics:
        out.print(f"  time per mini-batch  {units.seconds(r.metrics.median_s)} median on real "
                  "data" + (" (1 D + 1 G update)" if s.network == "gan" else ""))
    if e.pretrain_s is not None:
        out.print(f"  DBN pre-training     {units.seconds(e.pretrain_s)} "
                  f"({e.pretrain_steps} CD-{s.params.get('k', 1)} steps); fine-tuning "
                  f"{units.seconds(e.finetune_s)}")
    curve = e.curve
    picks = sorted({round(i * (len(curve) - 1) / 5) for i in range(6)})
    out.print("  curve                " + "  ".join(
        f"{int(curve[i][0])}:{curve[i][2]:.3g}@{units.seconds(curve[i][1])}" for i in picks)
        + "  (step:quality@time)")
    if r.threads_in_force:
        out.print(f"  threads in force     {r.threads_in_force} on CPUs {r.cpus}")
