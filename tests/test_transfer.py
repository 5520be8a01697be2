"""The guide's transfer arithmetic: every figure it prints, reproduced from its inputs, and
what it leaves out; `dlperf calc` end to end (stdout, exit codes)."""

from __future__ import annotations

import pytest

from dlperf.cli import main
from dlperf.kinds.dataflow import transfer as tr

GUIDE = ["calc", "transfer", "--link", "pcie4x16", "--device-memory", "8GB", "--devices", "4",
         "--compute", "0.5"]


def test_the_guides_figures_from_its_inputs():
    r = tr.refresh(8e9, 31.5, 4)
    assert f"{r.one_s:.6f}" == "0.253968"  # 8 / 31.5
    assert f"{r.all_s:.6f}" == "1.015873"  # four GPUs
    assert f"{r.others_s:.4f}" == "0.7619"  # three GPUs
    it = tr.guide_iteration(r, 0.5)
    assert f"{it.idle_s:.4f}" == "0.2619"  # 0.7619 - 0.5
    assert f"{it.compute_share:.2%}" == "65.62%"  # 0.5 / 0.7619


def test_what_the_guide_leaves_out():
    r = tr.refresh(8e9, 31.5, 4)
    # its own refresh: a round of the shared link serves all four, 1.015873 s
    assert tr.round_robin_iteration(r, 0.5).time_s == pytest.approx(r.all_s)
    # a slow link: the wait is the link's, whatever the overlap
    assert tr.round_robin_iteration(r, 2.0).time_s == pytest.approx(2.0 + r.one_s)
    # prefetching hides a transfer shorter than the computation, and only that
    assert tr.prefetched_iteration(0.5, r.one_s).compute_share == 1.0
    assert tr.prefetched_iteration(0.5, r.all_s).time_s == pytest.approx(r.all_s)
    # a GTX 1080 is a PCIe 3.0 card: 15.75 GB/s, about twice as long
    assert tr.transfer_time(8e9, 15.75) / r.one_s == pytest.approx(2.0, rel=0.001)


def test_one_device_never_waits_for_others():
    it = tr.guide_iteration(tr.refresh(8e9, 31.5, 1), 0.5)
    assert it.idle_s == 0 and it.compute_share == 1.0


def test_calc_transfer_prints_the_guides_figures(capsys):
    assert main(GUIDE) == 0
    out = capsys.readouterr().out
    for figure in ("0.253968 s", "1.015873 s", "0.7619", "0.2619", "65.62%"):
        assert figure in out, figure
    assert "PCI Express 3.0 x16" in out and "0.507937 s, 2.0x" in out  # the GTX 1080's link
    assert "49.22% compute" in out  # with each device's own refresh
    assert "100.00% compute" in out  # prefetching on links of their own


def test_calc_transfer_takes_a_catalogue_device(capsys):
    assert main(["calc", "transfer", "--device", "v100", "--link", "pcie4x16"]) == 0
    out = capsys.readouterr().out
    assert "Refreshing 32 GB" in out and f"{32 / 31.5:.6f} s" in out
    assert "slower end" in out  # a V100 is a PCIe 3.0 card too
    assert main(["calc", "transfer", "--device", "gtx1080", "--link", "pcie3x16"]) == 0
    assert "slower end" not in capsys.readouterr().out  # nothing slower than the link


def test_calc_storage_nvme_against_raid0(capsys):
    assert main(["calc", "storage", "--data", "32GB", "--storage", "nvme,raid0-nvme5"]) == 0
    out = capsys.readouterr().out
    assert f"{32 / 3.5:.6f} s" in out and f"{32 / 17:.6f} s" in out
    assert f"{17 / 3.5:.2f}x the speed of nvme" in out


@pytest.mark.parametrize("args, message", [
    (["--link", "usb"], "unknown link 'usb'"),
    (["--device-memory", "8 gallons"], "bad memory size '8 gallons'"),
    (["--device-memory=-8GB"], "bad memory size '-8GB'"),
    (["--device-memory", "0"], "memory size must be positive"),
    (["--device-memory", "8GB", "--devices", "0"], "--devices must be at least 1"),
    (["--device-memory", "8GB", "--compute=-0.5"], "--compute must be a non-negative"),
    (["--device-memory", "8GB", "--compute", "nan"], "--compute must be a non-negative"),
    (["--device-memory", "8GB", "--compute", "soon"], "invalid float value"),
    (["--device", "tpu"], "unknown device 'tpu'"),
    ([], "give --device-memory"),
])
def test_calc_transfer_bad_input_is_one_line_and_status_2(capsys, args, message):
    assert main(["calc", "transfer", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dlperf: error: ") and message in err and err.count("\n") == 1


@pytest.mark.parametrize("args, message", [
    (["calc"], "required"),
    (["calc", "storage", "--data", "32GB", "--storage", "tape"], "unknown storage 'tape'"),
    (["calc", "storage", "--data", "lots"], "bad memory size"),
])
def test_calc_bad_input(capsys, args, message):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
