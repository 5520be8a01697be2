"""The workers' side of the parameter server: pushes and pulls to every shard (a direct
call for a shard in this process, RPC otherwise, the shards in parallel), and what the
async and mixed strategies share around it (evaluation of the server's weights in a
time-to-target run, the stop flag, the final report)."""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed.rpc as rpc

from dlperf.backends.base import UnsupportedError
from dlperf.core.target_rules import reached
from dlperf.kinds.parallel import ps_server as ps
from dlperf.kinds.parallel.common import Context, budget, evaluate, goals, load_flat, trainable
from dlperf.perfmodel.partition import shard_layout

SERVER_RANK = 0  # the co-located server's rank, and the evaluator of a time-to-target run


def layout_for(ctx: Context, params: list[torch.nn.Parameter]) -> list[tuple[int, int]]:
    try:
        return shard_layout([p.numel() for p in params], ctx.opts.servers)
    except ValueError as e:
        raise UnsupportedError(f"{ctx.spec.network}: {e}") from None


class Client:
    """Pushes and pulls over every shard; the shard versions of the last pull are the
    versions the next push was computed from."""

    def __init__(self, ctx: Context, layout: list[tuple[int, int]]):
        self.ctx, self.layout = ctx, layout
        self.ranks = ctx.opts.server_ranks
        self.versions = [0] * len(layout)
        self.timeout = ctx.comm_timeout_s

    def _all(self, fn: Callable[..., Any], args: Callable[[int], tuple]) -> list[Any]:
        """Call ``fn`` on every shard, the remote ones in parallel, and wait for all."""
        futs: list[tuple[bool, Any]] = []
        for k, rank in enumerate(self.ranks):
            if rank == self.ctx.rank:  # this process's own shard: a plain call
                futs.append((False, fn(*args(k))))
            else:
                futs.append((True, rpc.rpc_async(f"w{rank}", fn, args=args(k),
                                                 timeout=self.timeout)))
        return [f.wait() if remote else f for remote, f in futs]

    def _slice(self, vec: torch.Tensor, k: int) -> torch.Tensor:
        off, n = self.layout[k]
        # a slice is sent with its whole storage: copy it out when there are several shards
        return vec if len(self.layout) == 1 else vec[off:off + n].clone()

    def push(self, worker: int, seq: int, grad: torch.Tensor, samples: int,
             phase: str) -> dict[str, Any]:
        g = grad.cpu()
        infos = self._all(ps.rpc_push, lambda k: (worker, seq, self.versions[k],
                                                   self._slice(g, k), samples, phase))
        out = _combine(infos)
        out["staleness"] = infos[0]["staleness"]
        out["version"], out["samples"] = infos[0]["version"], infos[0]["samples"]
        d2 = [i["drift2"] for i in infos]
        n2 = [i["norm2"] for i in infos]
        out["drift"] = math.sqrt(sum(d2)) if None not in d2 else None
        out["weights_norm"] = math.sqrt(sum(n2)) if None not in n2 else None
        return out

    def pull(self, worker: int) -> tuple[torch.Tensor, int, dict[str, Any]]:
        got = self._all(ps.rpc_pull, lambda k: (worker,))
        self.versions = [v for _, v, _ in got]
        w = got[0][0] if len(got) == 1 else torch.cat([w for w, _, _ in got])
        return w.to(self.ctx.device), self.versions[0], _combine([i for _, _, i in got])

    def snapshot(self) -> tuple[torch.Tensor, int, int, float]:
        got = self._all(ps.rpc_snapshot, lambda k: ())
        w = got[0][0] if len(got) == 1 else torch.cat([g[0] for g in got])
        return w, got[0][1], got[0][2], max(g[3] for g in got)

    def halt(self) -> None:
        self._all(ps.rpc_halt, lambda k: ())


def _combine(infos: list[dict[str, Any]]) -> dict[str, Any]:
    """The shards answer in parallel: the exchange waited and worked as long as the
    slowest shard; any shard's stop flag stops."""
    return {"wait": max(i["wait"] for i in infos), "server": max(i["server"] for i in infos),
            "stop": any(i["stop"] for i in infos)}


class ServerTraining:
    """What async and mixed share: the server (its shard on rank 0, or the dedicated
    server ranks), evaluation of its weights during a time-to-target run, and the report
    of every push."""

    ctx: Context
    net: Any

    def _init_server(self, params: list[torch.nn.Parameter]) -> None:
        ctx = self.ctx
        layout = layout_for(ctx, params)
        self.server = None
        if not ctx.opts.servers and ctx.rank == SERVER_RANK:
            w = torch.cat([p.detach().reshape(-1) for p in params])
            self.server = ps.start_server(w, ctx.opts.lr, ctx.dump_dir is not None,
                                          (0, w.numel()))
        ps.start_rpc(ctx)
        self.client = Client(ctx, layout)
        self._eval_model: torch.nn.Module | None = None
        self._next_eval = ctx.opts.eval_every * ctx.spec.batch_size
        self._eval_s = 0.0
        self._server_samples = 0  # the servers' count, as the last push answered it

    def after_step(self, train_start: float) -> None:
        """Rank 0 in a time-to-target run: evaluate the server's weights when another
        ``eval_every`` mini-batches have been applied; at the target or the budget, raise
        the servers' stop flag. The other workers keep training meanwhile (they do not
        wait for the evaluation).

        Rank 0 does not stop here: like every worker (every group's leader in mixed), it
        reads the flag from its next push or pull, the one point in a step where a worker
        learns to stop (a mixed leader then broadcasts it to its group with the weights).
        Leaving here would strand rank 0's group-mates in their next all-reduce: the
        broadcast that ended this step told them to go on.
        """
        o, b = self.ctx.opts, self.ctx.spec.batch_size
        elapsed = time.time() - train_start
        seen = self._server_samples
        over = budget(o).spent(steps=seen // b, train_s=elapsed) is not None
        if seen < self._next_eval and not over:
            return
        e0 = time.time()
        w, version, samples, t_snap = self.client.snapshot()
        if self._eval_model is None:
            self._eval_model = copy.deepcopy(self.net.model)
        load_flat(trainable(self._eval_model), w.to(self.ctx.device))
        loss, acc = evaluate(self._eval_model, self.net, self.ctx.device)
        self._eval_s += time.time() - e0
        stop = (reached(goals(o), {"accuracy": acc, "loss": loss})
                or budget(o).spent(steps=samples // b, train_s=t_snap - train_start) is not None)
        self.ctx.log.eval({"t": t_snap - train_start, "samples": samples, "version": version,
                           "loss": loss, "accuracy": acc, "eval_s": self._eval_s,
                           "train_s": t_snap - train_start})
        self._next_eval = (samples // (o.eval_every * b) + 1) * o.eval_every * b
        if stop:
            self.client.halt()

    def _finish_server(self, pushes: int, pushed_sum: torch.Tensor | None) -> dict[str, Any]:
        self.ctx.status.set("communication", "RPC shutdown (waiting for every worker to finish)")
        rpc.shutdown()  # graceful: returns once every worker is done with the server
        rep: dict[str, Any] = {"pushes": pushes}
        if self.server is not None:
            rep["server"] = self.server.report()
            self.ctx.dump("server", {"w0": self.server.w0, "w": self.server.w,
                                     "lr": self.server.lr, "log": self.server.log,
                                     "duplicates": self.server.duplicates,
                                     "shard": self.server.shard})
        if pushed_sum is not None:
            self.ctx.dump("pushed", {"sum": pushed_sum, "pushes": pushes})
        return rep


__all__ = ["SERVER_RANK", "Client", "ServerTraining", "layout_for"]
