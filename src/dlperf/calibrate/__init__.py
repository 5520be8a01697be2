"""This machine's calibration of the performance model: the kernel runs (``plan``), what a
worker does with one (``worker``), and the prediction of a measured configuration from
the fitted curves (``prediction``). The model itself (``dlperf.perfmodel``) imports none
of this: it takes plain samples and fitted curves."""
