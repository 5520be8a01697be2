"""Errors a user can cause. The CLI prints each as one line and exits with status 2."""


class UsageError(Exception):
    """Bad input: unknown name, bad value, malformed file, unwritable path.

    The message is one line, says what was wrong and, where it helps, what is accepted.
    """


class MissingExtraError(UsageError):
    """A framework's optional dependencies are not installed."""

    def __init__(self, framework: str, extra: str, how: str | None = None):
        # 'how': the command that installs it, for a framework not installed as an extra
        how = how or f"pip install 'dlperf[{extra}]'"
        super().__init__(f"framework '{framework}' is not installed: {how}")
        self.framework = framework
        self.extra = extra
