"""Launchers: one fresh worker process per RunSpec (``isolated``); torchrun for several."""

from dlperf.engine.launch.isolated import run_isolated

__all__ = ["run_isolated"]
