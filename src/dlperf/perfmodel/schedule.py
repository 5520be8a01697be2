"""A pipeline's step, simulated: GPipe's schedule over stages of unequal time, whose
processes may share fewer cores than there are stages.

``formulas.pipeline_time`` prices every slot at the slowest stage's time, right for equal
stages on devices of their own. Stages cut by FLOPs are not equal in time (AlexNet's
fully connected layers put most of the memory traffic and the update on the last stage),
and on a CPU the stage processes share its cores: while the first stages wait for the
last one's gradients, the busy stage has the cores to itself. Both need the schedule
itself, which is what this module runs: every stage does, in order, each micro-batch's
forward pass (after receiving its input) and send, then each micro-batch's backward pass
in reverse (after receiving its output's gradient) and send, then its update, as
``dlperf parallel``'s pipeline does (Huang et al. 2019, "GPipe", sec. 2.2). Each stage
runs on a block of cores (its ``placement``); the stages of one block that are computing
at one moment share it equally, each at 1 / computing of its own speed: processor
sharing, the operating system's time slicing taken as fluid (Kleinrock 1967,
"Time-shared systems: a theoretical analysis", JACM 14(2)). A message takes its link time
and no core: the loopback link's rate is calibrated among as many processes as the run
has, contention included.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class _Task:
    kind: str  # "work" (shares the cores), "send" (the link's time), "recv" (waits)
    left: float = 0.0  # seconds still to run at full speed ("work", "send")
    key: tuple = ()  # the message sent or awaited


def _tasks(s: int, stages: int, m: int, fwd: float, bwd: float, send_fwd: float,
           send_bwd: float, update: float) -> list[_Task]:
    """Stage ``s``'s GPipe step: forwards in order, backwards in reverse, the update."""
    out: list[_Task] = []
    for i in range(m):
        if s > 0:
            out.append(_Task("recv", key=("f", i, s)))
        out.append(_Task("work", fwd))
        if s < stages - 1:
            out.append(_Task("send", send_fwd, ("f", i, s + 1)))
    for i in reversed(range(m)):
        if s < stages - 1:
            out.append(_Task("recv", key=("b", i, s)))
        out.append(_Task("work", bwd))
        if s > 0:
            out.append(_Task("send", send_bwd, ("b", i, s - 1)))
    out.append(_Task("work", update))
    return out


def gpipe_step_time(fwd: Sequence[float], bwd: Sequence[float], sends: Sequence[float],
                    updates: Sequence[float], micro_batches: int,
                    placement: Sequence[int] | None = None, cost: float = 1.0) -> float:
    """Seconds until every stage has applied its update. Per stage ``s``: ``fwd[s]`` and
    ``bwd[s]``, one micro-batch's forward and backward pass at the stage's own full speed;
    ``updates[s]``, its update and gradient accumulation; ``sends[s]``, one message
    across the boundary after stage ``s`` (activations forward, their gradient back; the
    last stage's entry is unused); ``placement[s]``, the block of cores it runs on, which
    the stages placed on it share (default: a device each); ``cost``: how much slower
    stages computing together on one block run than processor sharing gives
    (``sharing.CORE_SHARING_COST`` on this machine; 1: none)."""
    p = len(fwd)
    place = list(range(p)) if placement is None else list(placement)
    if not (len(bwd) == len(sends) == len(updates) == len(place) == p) or p < 1 \
            or micro_batches < 1:
        raise ValueError("one forward, backward, send, update time and place per stage, "
                         "and at least one micro-batch")
    queues = [_tasks(s, p, micro_batches, fwd[s], bwd[s], sends[s], sends[s - 1] if s else 0.0,
                     updates[s]) for s in range(p)]
    heads = [0] * p
    arrived: set[tuple] = set()
    now = 0.0
    while True:
        moved = True
        while moved:  # receives whose message is in, and empty tasks, end at once
            moved = False
            for s in range(p):
                q = queues[s]
                while heads[s] < len(q) and (
                        (q[heads[s]].kind == "recv" and q[heads[s]].key in arrived)
                        or (q[heads[s]].kind != "recv" and q[heads[s]].left <= 0.0)):
                    if q[heads[s]].kind == "send":
                        arrived.add(q[heads[s]].key)
                    heads[s] += 1
                    moved = True
        running = [s for s in range(p) if heads[s] < len(queues[s])
                   and queues[s][heads[s]].kind != "recv"]
        if not running:
            if all(heads[s] == len(queues[s]) for s in range(p)):
                return now
            raise RuntimeError("the pipeline schedule waits on a message never sent")
        computing = Counter(place[s] for s in running if queues[s][heads[s]].kind == "work")
        speed = {s: 1.0 / (computing[place[s]] * (cost if computing[place[s]] > 1 else 1.0))
                 if queues[s][heads[s]].kind == "work" else 1.0 for s in running}
        step = min(queues[s][heads[s]].left / speed[s] for s in running)
        now += step
        for s in running:
            task = queues[s][heads[s]]
            # the task that set the step ends exactly; others keep what they have left
            task.left = 0.0 if task.left / speed[s] <= step * (1 + 1e-12) else \
                task.left - step * speed[s]
