"""Data flow: input pipelines, how long training waits for its data, storage bandwidth,
host-to-device transfer, memory limits. Framework-free (the pipelines themselves live in
backends/<framework>_input.py)."""
