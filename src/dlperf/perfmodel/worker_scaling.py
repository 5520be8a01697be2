"""Data-parallel speed-up and efficiency for 1..N devices, from predict()."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from dlperf.perfmodel import formulas as f
from dlperf.perfmodel.predict import predict
from dlperf.perfmodel.result import Prediction


class ScalingPoint(BaseModel):
    model_config = ConfigDict(frozen=True)

    devices: int
    time_s: float
    speedup: float
    efficiency: float
    prediction: Prediction


def data_parallel_scaling(network: str, max_devices: int, **kwargs: Any) -> list[ScalingPoint]:
    """Synchronous data parallelism on 1..``max_devices`` devices at the same global
    mini-batch (strong scaling): T(n), speed-up T(1)/T(n) and efficiency T(1)/(n T(n)).
    Device counts that do not divide the batch are left out, as ``dlperf parallel``
    refuses them. ``kwargs`` go to predict() (device, batch_size, link, ...)."""
    first = predict(network, strategy="single", devices=1, **kwargs)
    out = [ScalingPoint(devices=1, time_s=first.time_s, speedup=1.0, efficiency=1.0,
                        prediction=first)]
    for n in range(2, max_devices + 1):
        if first.batch_size % n:
            continue
        p = predict(network, strategy="sync", devices=n, **kwargs)
        out.append(ScalingPoint(devices=n, time_s=p.time_s,
                                speedup=f.speedup(first.time_s, p.time_s),
                                efficiency=f.efficiency(first.time_s, p.time_s, n),
                                prediction=p))
    return out
