"""The guide's host-to-device transfer arithmetic, and what it leaves out. Pure functions.

The guide's example: GTX 1080s with 8 GB each share one PCIe 4.0 x16 link at 31.5 GB/s.
Refreshing one device's memory takes 8/31.5 = 0.253968 s; four devices 1.015873 s; three
0.7619 s. With 0.5 s of computation per iteration "the GPU idles 0.2619 s", an effective
compute share of 65.62%. Those two figures imply this reading (``guide_iteration``):
while one device computes, the shared link refreshes the other n-1 devices, (n-1) x t;
the device then waits for the link for max(0, (n-1) t - c) and computes c of every
c + idle seconds: 0.7619 - 0.5 = 0.2619 s idle, 0.5 / 0.7619 = 65.62%.

What it leaves out, each computed here too: the device's own refresh (a round of the
shared link is n x t), prefetching (copying the next data while computing hides a
transfer shorter than the computation), and that a link runs at its slower end (a
GTX 1080 is a PCIe 3.0 card, so its refresh takes twice as long as the guide says).
GB are 1e9 bytes, as the guide's 8/31.5 = 0.253968 implies.
"""

from __future__ import annotations

from dataclasses import dataclass


def transfer_time(nbytes: float, gbps: float) -> float:
    """Seconds to move ``nbytes`` at ``gbps`` GB/s (1e9 bytes/s)."""
    return nbytes / (gbps * 1e9)


@dataclass(frozen=True)
class Refresh:
    """Refreshing every device's memory over one shared link."""

    one_s: float  # one device
    devices: int

    @property
    def all_s(self) -> float:
        """A full round of the shared link: every device once."""
        return self.devices * self.one_s

    @property
    def others_s(self) -> float:
        """The other devices, refreshed while one computes."""
        return (self.devices - 1) * self.one_s


def refresh(memory_bytes: float, gbps: float, devices: int) -> Refresh:
    return Refresh(one_s=transfer_time(memory_bytes, gbps), devices=devices)


@dataclass(frozen=True)
class Iteration:
    """One device's iteration: how long it computes, how long it waits."""

    compute_s: float
    idle_s: float

    @property
    def time_s(self) -> float:
        return self.compute_s + self.idle_s

    @property
    def compute_share(self) -> float:
        return self.compute_s / self.time_s if self.time_s else 1.0


def guide_iteration(r: Refresh, compute_s: float) -> Iteration:
    """The guide's reading: the device idles while the link refreshes the others beyond
    its computation, max(0, (n-1) t - c)."""
    return Iteration(compute_s, max(0.0, r.others_s - compute_s))


def round_robin_iteration(r: Refresh, compute_s: float) -> Iteration:
    """With the device's own refresh, no overlap: it waits for its data (t) then
    computes, and cannot start again before the link has served everyone (n t):
    an iteration lasts max(c + t, n t)."""
    return Iteration(compute_s, max(compute_s + r.one_s, r.all_s) - compute_s)


def prefetched_iteration(compute_s: float, transfer_s: float) -> Iteration:
    """Prefetching (double buffering): the next data moves while this iteration computes,
    so an iteration lasts max(c, transfer): hidden when the computation is longer."""
    return Iteration(compute_s, max(0.0, transfer_s - compute_s))


def storage_read_time(nbytes: float, read_gbps: float) -> float:
    """Seconds to read ``nbytes`` sequentially at ``read_gbps`` GB/s."""
    return transfer_time(nbytes, read_gbps)
