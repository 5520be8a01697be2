"""Free-running workers whose processes, and the parameter server's work, share cores.

``dlperf parallel`` pins rank r to the r-th block of its threads, wrapping round the
cores (``kinds.parallel.run.rank_cpus``), and by default keeps the parameter server in
rank 0's process (``kinds.parallel.param_server``): every push is applied, and every pull
copied out, by a thread of rank 0's process, on rank 0's cores, beside rank 0 and
whichever rank is pinned to the same block. Asynchronous workers never wait for each
other, so a worker on a quiet block runs ahead of one on the server's block, and the
lockstep formulas (every worker slowed by the whole machine's share) do not describe
them.

This module gives each unit's rate (a unit: an asynchronous worker, or a group of
``mixed``, which moves in lockstep) by mean-value analysis of processor sharing: a
process that computes while others on its block are busy runs at 1 / (1 + the others'
busy shares), each busy share being the fraction of wall time that process spends
computing (Kleinrock 1967, "Time-shared systems: a theoretical analysis", JACM 14(2), for
processor sharing; Reiser & Lavenberg 1980, "Mean-value analysis of closed multichain
queuing networks", JACM 27(2), for taking each other process's mean load in place of its
state). A unit's cycle is its members' compute (the slowest member, the group waits for
it), its messages (the link's time and no core, as ``schedule`` takes them) and the
server's work for its push and pull, done on the server's block at that block's speed;
the server does one push at a time (its lock), so the pushes of all units together can
keep it busy at most all the time. Two processes busy on one core together also lose a
calibrated cost beyond processor sharing, which falls as their steps grow longer
(``cost_at``; ``CORE_SHARING_COST`` below stands in without a calibration).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: How much slower two busy processes on one core run than processor sharing gives (each
#: at 1/2 of its speed alone): the operating system's time slices each begin by refilling
#: the caches and TLB the other process evicted (Li, Ding & Shen 2007, "Quantifying the
#: cost of context switch", ExpCS: the indirect cost grows with the working set).
#: ``dlperf calibrate`` measures each machine's (the 'share' op beside the 2-process
#: all-reduce: ``LocalFit.sharing_cost``); this figure stands in, said so in a note, for a
#: calibration made before it did. Measured, not fitted to any parallel run: ``benchmarks/bench_core_sharing.py``'s
#: ``step`` kernel (one thread's forward and backward pass of a small MLP, in two
#: processes pinned to one CPU against one alone), the median of 8 rounds in two runs
#: (1.25..1.36) on the 2-core Intel Xeon (KVM) this model was validated on (2026-11; in
#: the first run a product streaming a 64 MB weight cost 1.13, a memory pass 1.08, a
#: product in cache 1.03; a first probe of the same step, one round, an hour earlier:
#: 1.14). Only this machine's calibrated CPUs pay it.
CORE_SHARING_COST = 1.33


def cost_at(points: Sequence[tuple[float, float]], step_s: float) -> float:
    """The cost of sharing a core for a worker that computes ``step_s`` at a stretch, from
    the calibration's (step seconds alone, cost) of a short and a long step (``points``,
    shortest first): interpolated in log time between them, held beyond either end. The
    cost falls as a step outlasts the scheduler's time slices: on the 2-core Xeon dlperf
    was validated on, its small MLP's step cost x1.28-1.33 at 9 ms (batch 16) and
    x1.01-1.03 at 110 ms (batch 512); steps of the DLBench networks at 0.25-1.2 s,
    x0.95-1.09 (``benchmarks/bench_core_sharing.py``)."""
    (t0, c0), (t1, c1) = points[0], points[-1]
    if step_s <= t0 or t1 <= t0:
        return c0
    if step_s >= t1:
        return c1
    w = math.log(step_s / t0) / math.log(t1 / t0)
    return c0 + w * (c1 - c0)


#: the fixed point's tolerance on every busy share, and the most iterations
_TOL, _MAX_ITER = 1e-10, 10_000


@dataclass(frozen=True)
class Unit:
    """One free-running unit: ``blocks[i]`` is member i's block of cores and ``work[i]``
    its seconds of computing per cycle at full speed; ``wait`` the seconds per cycle on
    no core (a straggler's sleep, messages priced with their contention); ``serve`` the
    server's seconds of work per cycle at full speed (its push applied and its pull
    copied out); ``transfer`` the seconds of its leader's (member 0's) messages to and
    from the server at full speed, which on loopback are copies by the cores of both
    ends: the leader's block and the server's (twice the work where they are one)."""

    blocks: tuple[int, ...]
    work: tuple[float, ...]
    wait: float = 0.0
    serve: float = 0.0
    transfer: float = 0.0


def _slow(block: int, busy: dict, where: dict, skip: Callable[[tuple], bool],
          cost: float = 1.0) -> float:
    """Processor sharing's stretch on ``block``: 1 + the busy shares of the processes
    there that ``skip`` does not leave out (the process itself; for the server's work on
    a unit's push, that unit's members, which wait for its reply), times ``cost`` for as
    much of the time as it has company."""
    others = sum(u for k, u in busy.items() if where[k] == block and not skip(k))
    return (1.0 + others) * (1.0 + (cost - 1.0) * min(1.0, others))


def _paced(cycles: Sequence[float], served: Sequence[float]) -> list[float]:
    """Each unit's cycles per second from its cycle's seconds, all slowed alike where the
    server, one push at a time, cannot keep up with the pushes they make (``served``:
    the server's seconds per cycle of each): then the units wait for it."""
    rates = [1.0 / c if c > 0 else 0.0 for c in cycles]
    load = sum(r * t for r, t in zip(rates, served, strict=True))
    return [r / load for r in rates] if load > 1 else rates


def _damped(busy: dict[tuple, float], new: dict[tuple, float]
            ) -> tuple[dict[tuple, float], bool]:
    """Half-way from ``busy`` to ``new`` (the plain map may cycle), and whether the busy
    shares have settled (``_TOL``)."""
    change = max(abs(new[k] - busy[k]) for k in busy)
    return {k: (busy[k] + new[k]) / 2 for k in busy}, change < _TOL


def unit_rates(units: Sequence[Unit], server_block: int | None = None,
               cost: float = 1.0) -> list[float]:
    """Cycles per second of each unit at the fixed point (see the module's docstring).
    ``server_block``: the block the server's work runs on (None: no server); ``cost``:
    what two busy processes on one block lose beyond processor sharing
    (``CORE_SHARING_COST`` on this machine; 1: none)."""
    where: dict[tuple, int] = {}
    for u, unit in enumerate(units):
        if len(unit.blocks) != len(unit.work) or not unit.blocks:
            raise ValueError("one block and one work time per member")
        for m, b in enumerate(unit.blocks):
            where[("m", u, m)] = b
    if server_block is not None:  # the server's work and messages for each unit
        where.update({("s", u): server_block for u in range(len(units))})
        where.update({("t", u): server_block for u in range(len(units))})
    busy = dict.fromkeys(where, 0.0)
    rates = [0.0] * len(units)

    def own(u: int) -> Callable[[tuple], bool]:  # a unit never competes with itself
        return lambda k: k[1] == u and k[0] in "mst"

    for _ in range(_MAX_ITER):
        # a member never competes with the server's work for its own unit (it waits for
        # it); the server does one push at a time, and the unit it serves is waiting
        member = [[w * _slow(b, busy, where, own(u), cost)
                   for b, w in zip(unit.blocks, unit.work, strict=True)]
                  for u, unit in enumerate(units)]
        served, moved = [], []
        for u, unit in enumerate(units):
            if server_block is None:
                served.append(unit.serve)
                moved.append(unit.transfer)
                continue
            served.append(unit.serve * _slow(server_block, busy, where,
                                             lambda k, u=u: k[0] == "s" or own(u)(k), cost))
            ends = _slow(server_block, busy, where, own(u), cost)
            if unit.blocks[0] == server_block:  # both ends' copies on one block
                moved.append(unit.transfer * 2 * ends)
            else:
                moved.append(unit.transfer * max(
                    ends, _slow(unit.blocks[0], busy, where, own(u), cost)))
        cycles = [max(member[u]) + unit.wait + served[u] + moved[u]
                  for u, unit in enumerate(units)]
        rates = _paced(cycles, served)
        new = {}
        for u, unit in enumerate(units):
            if server_block is not None:
                new[("s", u)] = min(1.0, rates[u] * served[u])
                new[("t", u)] = min(1.0, rates[u] * moved[u])
            for m in range(len(unit.blocks)):
                extra = moved[u] if m == 0 and server_block is not None else 0.0
                new[("m", u, m)] = min(1.0, rates[u] * (member[u][m] + extra))
        busy, settled = _damped(busy, new)
        if settled:
            break
    return rates


def polling_unit_rates(units: Sequence[Unit], server_block: int,
                       cost: float = 1.0) -> list[float]:
    """Cycles per second of each unit where every process stays runnable, as the
    processes of a TensorPipe RPC group do (``torch.distributed.rpc``, dlperf parallel's
    async and mixed): TensorPipe's shared-memory reactor polls without sleeping, giving
    way to the other threads of its process but never leaving the core to another
    process, and torchrun starts each rank in a session of its own, which the kernel
    schedules as a group (autogroup, sched(7)): each of the n processes pinned to a block
    gets 1/n of it all the time (times ``cost`` where n > 1), and its own busy threads
    share that (processor sharing inside the process, as ``unit_rates`` among
    processes). Measured on dlperf's 2-vCPU EPYC, FCN-5 async on 4 workers: each rank's
    process used half a core over the window, its reactor thread taking whatever its
    other threads left (7-10 s of 25).

    The server lives in unit 0's leader's process (rank 0) on ``server_block``: its
    compute, the server's work for every push and pull (one at a time: its lock) and
    its side of the other units' messages are threads of that one process. A message
    is copied once, by its receiver (TensorPipe's cross-memory-attach channel,
    process_vm_readv): the push by the server's process, the pull by the leader's;
    ``Unit.transfer`` is the two together, half each."""
    if not units or units[0].blocks[0] != server_block:
        raise ValueError("unit 0's leader runs the server, on the server's block")
    procs = Counter(b for unit in units for b in unit.blocks)

    def stretch(block: int, company: float = 0.0) -> float:
        n = procs[block]  # every process there is runnable: a share of 1/n
        return n * (cost if n > 1 else 1.0) * (1.0 + company)

    # the server's process: rank 0's compute ("m"), the work for unit u's push and pull
    # ("s", u) and the copy of its push ("t", u); busy: each one's share of wall time
    busy: dict[tuple, float] = {("m", 0): 0.0}
    busy.update({(k, u): 0.0 for u in range(len(units)) for k in "st"})

    def company(skip: Callable[[tuple], bool]) -> float:
        return sum(v for k, v in busy.items() if not skip(k))

    rates = [0.0] * len(units)
    for _ in range(_MAX_ITER):
        times: dict[tuple, float] = {}
        cycles = []
        for u, unit in enumerate(units):
            half = unit.transfer / 2
            own = lambda k, u=u: k[1] == u  # noqa: E731 - a unit waits on its own
            served = unit.serve * stretch(server_block, company(
                lambda k, own=own: k[0] == "s" or own(k)))
            pushed = half * stretch(server_block, company(own))
            pulled = half * stretch(unit.blocks[0])
            members = [w * (stretch(b, company(own)) if (u, m) == (0, 0) else stretch(b))
                       for m, (b, w) in enumerate(zip(unit.blocks, unit.work, strict=True))]
            times[("s", u)], times[("t", u)] = served, pushed
            if u == 0:
                times[("m", 0)] = members[0]
            cycles.append(max(members) + unit.wait + served + pushed + pulled)
        rates = _paced(cycles, [times[("s", u)] for u in range(len(units))])
        busy, settled = _damped(busy, {k: min(1.0, rates[k[1]] * times[k]) for k in busy})
        if settled:
            break
    return rates


def blocks_of(ranks: int, blocks: int) -> list[int]:
    """The block of cores each rank is pinned to: rank r on block r mod ``blocks``, as
    ``kinds.parallel.run.rank_cpus`` places consecutive blocks of threads, wrapping
    round the cores."""
    return [r % max(1, blocks) for r in range(ranks)]
