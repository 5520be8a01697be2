"""``dlperf explain``: one network's step under the framework's profiler (``worker``), each
op group set beside the performance model's time for it from this machine's calibrated
kernel curves (``dlperf.perfmodel.ops``), and the diagnosis (``analysis``)."""
