"""Data flow: what moving data costs (host-to-device transfer, storage bandwidth).
Framework-free."""
