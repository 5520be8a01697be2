"""Kernel curves of one GPU scaled to catalogue GPUs (``perfmodel.scaled``): the ratios,
the precision each GPU runs at, and predict()'s use of them. Arithmetic only."""

from __future__ import annotations

import pytest

from dlperf.perfmodel import Efficiencies, predict, scaled
from dlperf.perfmodel import catalogue as cat
from dlperf.perfmodel.fit import Samples, fit_local
from dlperf.perfmodel.kernels import element_bytes, grid
from dlperf.perfmodel.scaled import ReferenceFits, scale, scaled_fit
from tests import calibration_fixtures as made_up


def _fit(precision: str = "fp32"):
    """The made-up machine's curves, as a GPU's at ``precision``."""
    elem = element_bytes(precision)
    samples = [made_up.sample(op, tuple(s), 1, elem) for op in
               ("gemm", "gemm_tn", "conv", "conv_bwd", "memory", "update", "xent", "bn",
                "dispatch", "dispatch_train") for s in grid(op)]
    return fit_local(Samples.of(samples), "torch", 1, "gpu", precision)


@pytest.fixture
def ref(monkeypatch) -> ReferenceFits:
    r = ReferenceFits(device="h100-sxm", source="made up", fits=(_fit("fp32"), _fit("tf32")))
    monkeypatch.setattr(scaled, "reference", lambda: r)
    return r


def test_scaling_divides_work_by_the_rates_and_keeps_fixed_costs():
    f = _fit()
    g = scale(f, flops=2.0, bandwidth=4.0)
    m, n, k_ = 4096, 4096, 4096
    assert g.gemm.t0 == f.gemm.t0 and g.gemm.residuals == f.gemm.residuals
    # the FLOP term halves, the operands' traffic term quarters, the fixed cost stays
    traffic = 4 * (m * k_ + k_ * n + m * n) / f.gemm.bandwidth
    flop_term = f.gemm.curve(m, n, k_) - f.gemm.t0 - traffic
    assert g.gemm.curve(m, n, k_) == pytest.approx(f.gemm.t0 + flop_term / 2 + traffic / 4)
    assert g.conv.rate == 2 * f.conv.rate and g.conv_bwd.t0 == f.conv_bwd.t0
    # a convolution's traffic moves at the scaled bandwidth, its factor unchanged
    assert f.conv.traffic_factor > 0 and g.conv.traffic_factor == f.conv.traffic_factor
    assert g.conv.memory.time(1e8) == pytest.approx(f.conv.memory.time(1e8) / 4)
    assert g.memory.time(1e8) == pytest.approx(f.memory.time(1e8) / 4)
    assert g.bn.time(1e8) == pytest.approx(f.bn.time(1e8) / 4)
    assert g.dispatch == f.dispatch and g.allreduce == {}


def test_a_memory_kernel_slower_than_the_dram_scales_its_excess_by_the_sms():
    """The part of a memory kernel's time its DRAM held (its bytes at the reference's
    memory pass rate) scales by the bandwidths, what it took beyond that by SMs x clock;
    a kernel in cache (faster than the DRAM) by the bandwidths, as before."""
    dram = 100.0  # B/s on the reference
    # at the DRAM's rate: the bandwidth alone, whatever the SMs
    assert scaled.held_time(2.0, 200.0, dram, bandwidth=0.5, sm=0.25) == pytest.approx(4.0)
    # a batch norm at a quarter of the DRAM's rate: 1 s of DRAM, 3 s beyond it
    assert scaled.held_time(4.0, 100.0, dram, bandwidth=0.5, sm=0.25) == pytest.approx(
        1.0 / 0.5 + 3.0 / 0.25)
    assert scaled.held_time(0.5, 100.0, dram, bandwidth=0.5, sm=0.25) == pytest.approx(1.0)
    assert scaled.held_time(4.0, 100.0, dram, bandwidth=0.5, sm=None) == pytest.approx(8.0)
    # on the curves: the made-up batch norm is slower than its memory pass, so a GPU with
    # twice the SMs and the same bandwidth runs it faster; the memory pass not
    f = _fit()
    g = scale(f, flops=1.0, bandwidth=1.0, sm=2.0)
    assert g.memory.time(1e8) == pytest.approx(f.memory.time(1e8))
    assert f.bn.time(1e8) > f.memory.time(1e8) and g.bn.time(1e8) < f.bn.time(1e8)


def test_the_catalogues_sm_figures_agree_with_its_peaks():
    """Every GPU entry has its SMs and FP32 units; the clock they imply with its fp32 peak
    (peak = units x 2 x clock) is a plausible boost clock and its units per SM one of the
    architectures' (Kepler 192, Maxwell to Ada 64 or 128). An entry without them (a
    user's) scales by the peaks."""
    gpus = [d for d in cat.devices().values() if d.kind == "gpu"]
    assert len(gpus) >= 12
    for d in gpus:
        assert d.sms and d.fp32_cores and d.fp32_cores / d.sms in (64, 128, 192), d.name
        clock = d.sm_rate() / d.sms
        assert 0.8e9 < clock < 2.6e9, d.name
    mine = cat.device("v100").model_copy(update={"sms": None})
    assert mine.sm_rate() is None
    fit, note = scaled_fit(mine, "fp32", ReferenceFits(device="h200", source="s",
                                                        fits=(_fit("fp32"),)))
    assert "peak FLOP/s" in note and "held by the SMs" not in note


def test_no_scaled_product_or_convolution_beats_the_peak():
    """The fitted saturation can pass the datasheet peak far beyond the shapes timed: a
    scaled curve is floored at the target's peak (the backward's at half: it times both
    gradients)."""
    f = _fit()
    peak = 1e9  # far below the made-up machine's rates
    g = scale(f, flops=1.0, bandwidth=1.0, peak=peak)
    assert g.gemm.time(4096, 4096, 4096) == pytest.approx(2 * 4096**3 / peak)
    m, n, k_ = 1e6, 256, 256 * 9
    assert g.conv.time(m, n, k_, 3) == pytest.approx(2 * m * n * k_ / peak)
    assert g.conv_bwd.time(m, n, k_, 3) == pytest.approx(4 * m * n * k_ / peak)
    assert f.gemm.time(4096, 4096, 4096) < g.gemm.time(4096, 4096, 4096)


def test_a_catalogue_gpu_takes_the_reference_curves_at_its_peaks_ratio(ref):
    """Tensor-core products by the ratio of peaks at the precision; products on the FP32
    units by SMs x clock (Habitat's); the largest memory pass, at the DRAM's rate, by the
    bandwidths."""
    a100 = cat.device("a100-80gb")
    fit, note = scaled_fit(a100, "tf32")
    h100 = cat.device("h100-sxm")
    flops = a100.peak_flops("tf32") / h100.peak_flops("tf32")
    assert fit.gemm.rate == pytest.approx(ref.at("tf32").gemm.rate * flops)
    assert fit.memory.seconds[-1] == pytest.approx(
        ref.at("tf32").memory.seconds[-1] * h100.memory_gbps / a100.memory_gbps)
    assert "h100-sxm" in note and "tf32" in note and "peak FLOP/s" in note
    # a GPU without TF32 runs tf32 as fp32: the fp32 curves, by SMs x clock: a V100 has
    # 80 SMs at 1.53 GHz to the H100's 132 at 1.98, and half its FP32 units per SM
    v100 = cat.device("v100")
    fit, note = scaled_fit(v100, "tf32")
    sm = (80 * 1.53) / (132 * 1.98)
    assert fit.precision == "fp32" and fit.gemm.rate == pytest.approx(
        ref.at("fp32").gemm.rate * sm, rel=0.01)
    assert sm == pytest.approx(2 * v100.fp32_tflops / h100.fp32_tflops, rel=0.01)
    assert "SMs x clock" in note
    assert scaled_fit(a100, "bf16") is None  # no bf16 curves in this reference
    assert scaled_fit(cat.device("xeon-8380"), "fp32") is None  # CPUs: never


def test_predict_times_a_catalogue_gpu_from_the_scaled_curves(ref):
    """The reference GPU itself is predicted from its own curves (ratio 1); another from
    the scaled ones, with a note; ``Efficiencies(scaled=False)`` keeps the datasheet
    roofline with efficiency factors; a device's own curves win."""
    own = predict("resnet50", device="h100-sxm", batch_size=32, precision="tf32")
    direct = predict("resnet50", device="h100-sxm", batch_size=32, precision="tf32",
                     efficiencies=Efficiencies(kernels={"h100-sxm": ref.at("tf32")}))
    assert own.time_s == pytest.approx(direct.time_s)
    assert any("scaled" in n for n in own.notes)
    other = predict("resnet50", device="a100-80gb", batch_size=32, precision="tf32")
    factors = predict("resnet50", device="a100-80gb", batch_size=32, precision="tf32",
                      efficiencies=Efficiencies(scaled=False))
    assert other.time_s != pytest.approx(factors.time_s)
    assert not any("scaled" in n for n in factors.notes)
    assert other.time_s > own.time_s  # a slower GPU, a longer step
    cpu = predict("resnet50", device="xeon-8380", batch_size=32)
    assert not any("scaled" in n for n in cpu.notes)


def test_the_shipped_reference_names_a_catalogue_gpu_and_its_source():
    r = scaled.reference()
    assert r is not None and cat.device(r.device).kind == "gpu"
    assert {f.precision for f in r.fits} == {"fp32", "tf32", "bf16", "fp16"}
    assert all(f.framework == "torch" and f.device == "gpu" for f in r.fits)
    assert "dlperf calibrate" in r.source and "H200" in r.source


def test_advice_says_its_gpu_numbers_stand_on_scaled_curves(ref):
    from dlperf.advice.predicted import BASIS, SCALED_BASIS, basis

    assert basis(predict("alexnet", device="a100-80gb", batch_size=32)) == SCALED_BASIS
    assert basis(predict("alexnet", device="xeon-8380", batch_size=32)) == BASIS


def test_dlperf_devices_says_what_gpu_predictions_stand_on(capsys):
    import json

    from dlperf.cli import main

    assert main(["devices"]) == 0
    assert "GPU predictions: the h200's calibrated kernel curves" in capsys.readouterr().out
    assert main(["devices", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["gpu_kernels"]["reference"] == "h200" and "H200" in doc["gpu_kernels"]["source"]


def test_a_users_own_gpu_can_be_the_reference(tmp_path, monkeypatch, capsys):
    """``$DLPERF_REFERENCE_FITS`` names a file written by ``python -m
    dlperf.kinds.calibrate.shipped_fits`` for the user's own GPU: the catalogue's GPUs are scaled
    from it. A missing or broken file: one line, exit 2."""
    from dlperf.cli import main

    mine = ReferenceFits(device="a100-80gb", source="my A100", fits=(_fit("fp32"),))
    path = tmp_path / "mine.json"
    path.write_text(mine.model_dump_json())
    monkeypatch.setenv("DLPERF_REFERENCE_FITS", str(path))
    p = predict("resnet50", device="h100-sxm", batch_size=32)
    assert any("a100-80gb's calibrated torch fp32 curves" in n for n in p.notes)
    assert scaled.reference().source == "my A100"
    # an H100 of their own: the shipped H100 steps then check its curves, not a scaling
    h100 = tmp_path / "h100.json"
    h100.write_text(mine.model_copy(update={"device": "h100-sxm"}).model_dump_json())
    monkeypatch.setenv("DLPERF_REFERENCE_FITS", str(h100))
    assert main(["validate", "--published"]) == 0
    assert "measured on a lent GPU (the reference curves' own GPU)" in capsys.readouterr().out
    for bad, message in ((tmp_path / "missing.json", "cannot read"),
                         (tmp_path / "broken.json", "not a reference file")):
        if bad.name == "broken.json":
            bad.write_text('{"device": "h200"}')
        monkeypatch.setenv("DLPERF_REFERENCE_FITS", str(bad))
        assert main(["predict", "-n", "resnet50", "-d", "h100-sxm"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0]
