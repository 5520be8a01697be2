"""The catalogue's predictions against published measurements (``reference.published_gpu``):
each row predicted from its catalogue entry alone, never adjusted to these rows, three
ways: as ``dlperf predict`` does (the reference GPU's calibrated kernel curves scaled to
the entry's peaks, ``perfmodel.scaled``), by the datasheet roofline with the public
efficiency factors of ``perfmodel.efficiency``, and by a plain roofline (the same peaks,
no efficiency factors, no launch cost), the baseline a model must beat."""

from __future__ import annotations

from dataclasses import dataclass

from dlperf.perfmodel import Efficiencies, Efficiency, predict
from dlperf.reference import Published, PublishedStep, published_gpu

#: the datasheet roofline with the public efficiency factors, no scaled curves
FACTORS = Efficiencies(scaled=False)
#: a plain roofline: every kernel at the datasheet's peak FLOP/s or bandwidth
ROOFLINE = Efficiencies(gpu=Efficiency(matmul=1.0, memory=1.0, overhead_s=0.0,
                                      source="a plain roofline: the datasheet's peaks"),
                       scaled=False)


@dataclass(frozen=True)
class PublishedCase:
    row: PublishedStep
    model_s: float  # as dlperf predict: the scaled reference curves
    factors_s: float  # the datasheet roofline with efficiency factors
    roofline_s: float

    def _error(self, predicted_s: float) -> float:
        return predicted_s / self.row.time_s - 1

    @property
    def error(self) -> float:
        return self._error(self.model_s)

    @property
    def factors_error(self) -> float:
        return self._error(self.factors_s)

    @property
    def roofline_error(self) -> float:
        return self._error(self.roofline_s)


def published_cases(steps: Published | None = None) -> list[PublishedCase]:
    """Every row of ``steps`` (the published ones by default), predicted the three ways."""
    out = []
    for r in (steps or published_gpu()).rows:
        kw: dict = dict(device=r.device, batch_size=r.batch_size, precision=r.precision,
                        size=r.size)
        if r.gpus > 1:
            kw.update(strategy="sync", devices=r.gpus)
        out.append(PublishedCase(r, *(predict(r.network, efficiencies=c, **kw).time_s
                                      for c in (None, FACTORS, ROOFLINE))))
    return out
