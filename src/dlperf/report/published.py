"""The catalogue's predictions against published measurements (``reference.published_gpu``):
each row predicted from its catalogue entry alone (datasheet peaks and the public
efficiency factors of ``perfmodel.calibration``, never adjusted to these rows), and by a
plain roofline (the same peaks, no efficiency factors, no launch cost), the baseline a
model must beat."""

from __future__ import annotations

from dataclasses import dataclass

from dlperf.perfmodel import Calibration, Efficiency, predict
from dlperf.reference import PublishedStep, published_gpu

#: a plain roofline: every kernel at the datasheet's peak FLOP/s or bandwidth
ROOFLINE = Calibration(gpu=Efficiency(matmul=1.0, memory=1.0, overhead_s=0.0,
                                      source="a plain roofline: the datasheet's peaks"))


@dataclass(frozen=True)
class PublishedCase:
    row: PublishedStep
    model_s: float
    roofline_s: float

    @property
    def error(self) -> float:
        return self.model_s / self.row.time_s - 1

    @property
    def roofline_error(self) -> float:
        return self.roofline_s / self.row.time_s - 1


def published_cases() -> list[PublishedCase]:
    """Every published row, predicted by the catalogue model and by a plain roofline."""
    out = []
    for r in published_gpu().rows:
        kw: dict = dict(device=r.device, batch_size=r.batch_size, precision=r.precision)
        if r.gpus > 1:
            kw.update(strategy="sync", devices=r.gpus)
        out.append(PublishedCase(r, predict(r.network, **kw).time_s,
                                 predict(r.network, calibration=ROOFLINE, **kw).time_s))
    return out
