"""Data flow: what moving data costs (host-to-device transfer, storage bandwidth).
Framework-free: what moving data costs and how long training waits for it."""
