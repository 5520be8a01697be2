"""``dlperf parallel``: run strategies on several workers under torchrun, store, summarise.

    dlperf parallel --network fcn5 --size tiny --strategy sync,async --workers 1,2
    dlperf parallel -n fcn5 --size tiny -s mixed --workers 4 --groups 2
    dlperf parallel -n fcn5 --size tiny -s sync --workers 2 --data digits \\
        --target-accuracy 0.8 --lr 2
    # two machines: the same command on both
    dlperf parallel -n fcn5 -s sync --workers 4 --nnodes 2 --rdzv-endpoint HOST:29400

Parsing and printing only: the specs are made in ``dlperf.kinds.parallel.make``, run through
``dlperf.api.run_specs``, summarised by ``dlperf.kinds.parallel.section``.
"""

from __future__ import annotations

import argparse
import itertools
import json

from rich.markup import escape

from dlperf.cli import args
from dlperf.cli.progress import ProgressListener, console, out, print_plan
from dlperf.core import units
from dlperf.core.errors import UsageError
from dlperf.core.spec import RunSpec
from dlperf.kinds.parallel.make import STRATEGIES, default_threads, describe, make_spec


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "parallel", help="train on several workers under torchrun: sync, async, mixed, "
        "pipeline, hybrid",
        description="Data parallelism (sync: all-reduce; async: parameter server, optionally "
        "exchanging every k steps and on dedicated sharded servers; mixed: synchronous "
        "groups, asynchronous between them), model parallelism (pipeline) and both (hybrid: "
        "a pipeline in each group, data parallel across groups), each run for real on "
        "torch.distributed, measured and stored.")
    args.add_run_flags(
        p, network=args.REQUIRED, size=True, param=True,
        batch_size=args.Take(help="global mini-batch (default: the network's DLBench "
                             "default)"),
        threads=args.Take(default=None, help="threads per worker (default: physical cores / "
                          "the largest --workers on a machine, so that workers do not share "
                          "cores)"),
        device=True, seed=True, repeat=args.Take(help="runs of each configuration"))
    p.add_argument("--strategy", "-s", required=True,
                   help=f"{'|'.join(STRATEGIES)}, or several comma-separated")
    p.add_argument("--workers", "-w", type=args.counts, default="2", help="worker counts, "
                   "comma-separated (default 2); 1 is the baseline for speed-up")
    p.add_argument("--groups", type=args.positive_int, help="mixed, hybrid: groups of workers "
                   "(default: pairs)")
    p.add_argument("--micro-batches", type=args.positive_int, help="pipeline, hybrid: micro-batches "
                   "per step (default 4 per stage, at most the batch)")
    p.add_argument("--push-every", type=args.counts, default="1", help="async: local steps "
                   "between exchanges with the parameter server; comma-separated to compare "
                   "(e.g. 1,4,16)")
    p.add_argument("--servers", type=args.number_list(int), default="0", help="async: "
                   "dedicated parameter-server processes, the weights sharded over them by "
                   "size (0: the server beside rank 0); comma-separated to compare (e.g. 1,2)")
    p.add_argument("--hybrid-within", default="model", choices=["model", "data"],
                   help="hybrid: what a group's consecutive ranks share: the pipeline's "
                   "stages (model, default) or replicas of one stage (data)")
    p.add_argument("--straggler-delay", type=args.number_list(float), default="0",
                   help="seconds added to the last worker's compute every step; "
                   "comma-separated to compare (e.g. 0,0.05)")
    g = p.add_argument_group("time to target (real data)")
    g.add_argument("--data", help="digits or mnist1d: train on real data to a target")
    g.add_argument("--target-accuracy", type=args.positive_float, help="held-out accuracy to reach")
    g.add_argument("--target-loss", type=args.positive_float, help="held-out loss to reach")
    g.add_argument("--lr", type=args.positive_float, help="SGD learning rate (default 0.01)")
    g.add_argument("--max-steps", type=args.positive_int, help="budget in global mini-batches (default 2000)")
    g.add_argument("--max-time", type=args.positive_float, help="budget in seconds of training")
    g.add_argument("--eval-every", type=args.positive_int, help="mini-batches between evaluations (default 10)")
    g = p.add_argument_group("timing")
    g.add_argument("--steps", type=args.positive_int, help="timed steps (default: calibrated by --min-time)")
    g.add_argument("--warmup-steps", type=args.nonneg_int, help="warm-up steps (default: until settled)")
    args.add_timing(g)
    g = p.add_argument_group("torchrun (several machines)")
    g.add_argument("--nnodes", type=args.positive_int, default=1, help="machines (default 1)")
    g.add_argument("--nproc-per-node", type=args.positive_int, help="workers per machine (default: "
                   "workers / nnodes)")
    g.add_argument("--rdzv-endpoint", help="HOST:PORT of the rendezvous (default: 127.0.0.1 "
                   "and a free port, one machine)")
    g.add_argument("--rdzv-id", help="rendezvous id (default: the configuration's run id, the "
                   "same on every machine)")
    g.add_argument("--rdzv-backend", default="c10d", help="torchrun rendezvous backend")
    g.add_argument("--rdzv-timeout", type=args.positive_float, default=120.0, help="seconds to wait for "
                   "every machine to join (default 120)")
    g.add_argument("--node-rank", type=args.nonneg_int, help="this machine's rank (static rendezvous)")
    g.add_argument("--local-addr", help="this machine's address for the other machines")
    g.add_argument("--nodes", type=args.positive_int, help="with --executor slurm: nodes one "
                   "run spans; Slurm allocates them, srun starts the run's part on each and "
                   "the rendezvous is on the first (docs/cluster.md)")
    g = p.add_argument_group("limits")
    args.add_timeout(g, help="seconds for a whole run (default 1800)")
    g.add_argument("--stall-timeout", type=args.positive_float, help="seconds without any worker making "
                   "progress before the run counts as hung (default 300)")
    g.add_argument("--comm-timeout", type=args.positive_float, help="seconds a collective or RPC may block "
                   "(default: min(300, --timeout))")
    args.add_memory_limit(g, help="resident memory of all workers together, e.g. 8GiB")
    args.add_sweep_flags(p)
    args.add_executor(p)
    args.add_json(p)
    args.add_db(p)
    p.set_defaults(func=cmd_parallel)


def build_specs(a: argparse.Namespace) -> list[RunSpec]:
    from dlperf.core.environment import physical_cores

    strategies = args.str_list(a.strategy) or []
    workers, delays, periods, servers = a.workers, a.straggler_delay, a.push_every, a.servers
    measurement = args.measurement_from(a)
    specs = []
    for repeat, strategy, n, delay, k, ps in itertools.product(
            range(a.repeat), strategies, workers, delays, periods, servers):
        if strategy != "async" and len(strategies) > 1:
            # a sweep of several strategies: the period and the servers are async's alone
            if (k, ps) != (periods[0], servers[0]):
                continue
            k, ps = 1, 0
        if a.nproc_per_node is not None and a.nproc_per_node * a.nnodes != n:
            raise UsageError(f"--nproc-per-node {a.nproc_per_node} x --nnodes {a.nnodes} != "
                             f"--workers {n}")
        # every worker count of the sweep gets the threads that fit its largest one, so
        # that one worker and N workers are N of the same processing unit
        per_node = (max(workers) + max(servers)) // a.nnodes
        threads = a.threads if a.threads is not None else default_threads(per_node,
                                                                            physical_cores())
        specs.append(make_spec(
            a.network, strategy=strategy, workers=n, size=a.size, batch_size=a.batch_size,
            threads=threads, groups=a.groups, micro_batches=a.micro_batches,
            straggler_delay_s=delay, nodes=a.nnodes, lr=a.lr, data=a.data,
            target_accuracy=a.target_accuracy, target_loss=a.target_loss,
            max_steps=a.max_steps, max_time_s=a.max_time, eval_every=a.eval_every,
            steps=a.steps, warmup_steps=a.warmup_steps, push_every=k, servers=ps,
            hybrid_within=a.hybrid_within, params=args.parse_params(a.param),
            device=a.device, seed=a.seed, repeat=repeat, measurement=measurement))
    return specs


def cmd_parallel(a: argparse.Namespace) -> int:
    from dlperf import api
    from dlperf.engine.config import parse_bytes

    slurm = _slurm(a)
    memory = (parse_bytes(a.memory_limit) if a.memory_limit else None) or None
    # a run under a limit is a configuration of its own (``RunSpec.memory_limit``)
    specs = [s.model_copy(update={"memory_limit": memory}) for s in build_specs(a)]
    if a.nnodes > 1 and not a.rdzv_endpoint and slurm is None:
        raise UsageError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT, the same on every "
                         "machine")
    planned = api.plan_runs(specs, db=a.db, force=a.force, retry_failed=a.retry_failed,
                            slurm=slurm)
    print_plan("parallel", planned, describe=(
        (lambda s: f"{describe(s)}  (repeat {s.repeat})") if a.dry_run else None),
        to=console(a.json))
    if a.dry_run:
        if a.json:  # the runs still to do, as the specs a run stores
            print(json.dumps([s.model_dump() for s in planned.todo], default=str))
        return 0
    torchrun = dict(
        stall_timeout_s=a.stall_timeout or 300.0, nnodes=a.nnodes,
        nproc_per_node=a.nproc_per_node, rdzv_endpoint=a.rdzv_endpoint, rdzv_id=a.rdzv_id,
        rdzv_backend=a.rdzv_backend, rdzv_timeout_s=a.rdzv_timeout, node_rank=a.node_rank,
        local_addr=a.local_addr, comm_timeout_s=a.comm_timeout)
    if slurm is not None:  # each node's job sets the nodes, its rank and the rendezvous
        torchrun = {k: v for k, v in torchrun.items() if k in (
            "stall_timeout_s", "rdzv_backend", "rdzv_timeout_s", "comm_timeout_s")}
    with ProgressListener(to_stderr=a.json) as listener:
        results = api.run_specs(specs, db=a.db, force=a.force, retry_failed=a.retry_failed,
                                timeout_s=a.timeout or 1800.0, memory_limit=memory,
                                torchrun=torchrun, listener=listener, slurm=slurm)
    stored = api.stored_results(specs, db=a.db, any_machine=slurm is not None)
    everything = api.stored_rows(db=a.db, kind="parallel")
    if a.json:
        print(json.dumps([r.model_dump() for r in stored], default=str))
    else:
        print_summary(stored, everything)
    return 0 if all(r.ok for r in results) else 1


def _slurm(a: argparse.Namespace):
    """The Slurm settings of ``--executor slurm`` with ``--nodes`` (which sets the run's
    node count, ``--nnodes``), checked against the cluster; None to run here."""
    slurm = args.slurm_from(a)
    if slurm is None:
        if a.nodes is not None:
            raise UsageError("--nodes needs --executor slurm (on machines you start yourself: "
                             "--nnodes with --rdzv-endpoint)")
        return None
    if a.nnodes > 1 or a.rdzv_endpoint or a.node_rank is not None:
        raise UsageError("with --executor slurm, give --nodes N: Slurm allocates the nodes "
                         "and the rendezvous is on the first (no --nnodes, --rdzv-endpoint "
                         "or --node-rank)")
    a.nnodes = a.nodes or 1
    slurm = slurm.model_copy(update={"nodes": a.nnodes})
    from dlperf import api

    api.check_slurm(slurm)
    return slurm


def print_summary(results: list, all_rows: list) -> None:
    from dlperf.kinds.parallel import section as report
    from dlperf.report.exporters import print_table

    rows = report.rows_from(results)
    synthetic = [r for r in rows if not report.opts(r).data]
    real = [r for r in rows if report.opts(r).data]
    if synthetic:
        print_table(report.comparison_table(synthetic, all_rows), out)
    if real:
        print_table(report.target_table(real), out)
    if report.straggler_pairs(all_rows) and any(r.spec.options.straggler_delay_s
                                                for r in results):
        print_table(report.straggler_table(all_rows), out)
    from dlperf.kinds.parallel.factors import factor_tables, factor_text

    for t in factor_tables(rows):
        print_table(t, out)
    if found := factor_text(rows):
        out.print(escape(f"Found: {found}"))
    for r in results:
        for w in r.warnings:
            out.print(f"  [yellow]warning[/]: {escape(describe(r.spec))}: {escape(w)}")
        if r.ok and r.metrics:
            e, m = r.outcome, r.metrics
            share = (f"; {units.flops(m.achieved_flops, '/s')}, {units.percent(m.peak_share)} of "
                     "this machine's peak" if m.peak_share is not None else "")
            out.print(f"  {escape(describe(r.spec))}: {units.seconds(m.median_s)} per "
                      f"mini-batch; threads {e.total_threads} on {e.physical_cores} physical "
                      f"cores{share}", style="dim")

