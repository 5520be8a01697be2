"""Errors a user can cause. The CLI prints each as one line and exits with status 2."""


class UsageError(Exception):
    """Bad input: unknown name, bad value, malformed file, unwritable path.

    The message is one line, says what was wrong and, where it helps, what is accepted.
    """


class MissingExtraError(UsageError):
    """A framework's optional dependencies are not installed."""

    def __init__(self, framework: str, extra: str):
        super().__init__(
            f"framework '{framework}' is not installed: pip install 'dlperf[{extra}]'"
        )
        self.framework = framework
        self.extra = extra


class StoreWriteError(Exception):
    """A measured result could not be written to the store (disk full, store locked). The
    result is kept in a recovery file that the next command imports; the CLI prints one
    line and exits with status 1."""
