"""Errors a user can cause (the CLI prints each as one line and exits with status 2), and
how a run's own exception is recognised as running out of memory."""


class UsageError(Exception):
    """Bad input: unknown name, bad value, malformed file, unwritable path.

    The message is one line, says what was wrong and, where it helps, what is accepted.
    """


def validation_message(e: Exception) -> str:
    """The first problem a pydantic ``ValidationError`` found, as the validator said it
    (without pydantic's 'Value error, ' prefix)."""
    return e.errors()[0]["msg"].removeprefix("Value error, ")  # type: ignore[attr-defined]


class MissingExtraError(UsageError):
    """A framework's optional dependencies are not installed."""

    def __init__(self, framework: str, extra: str, how: str | None = None):
        # 'how': the command that installs it, for a framework not installed as an extra
        how = how or f"pip install 'dlperf[{extra}]'"
        super().__init__(f"framework '{framework}' is not installed: {how}")
        self.framework = framework
        self.extra = extra


class StoreWriteError(Exception):
    """A measured result could not be written to the store (disk full, store locked). The
    result is kept in a recovery file that the next command imports; the CLI prints one
    line and exits with status 1."""


_OOM_TEXT = ("out of memory", "can't allocate memory", "resource exhausted",
             "resourceexhaustederror", "not enough memory", "bad_alloc")


def is_out_of_memory(exc: BaseException) -> bool:
    """True for the ways the frameworks say an allocation failed (MemoryError, CUDA's and
    oneDNN's 'out of memory', TensorFlow's ResourceExhaustedError, C++ bad_alloc)."""
    if isinstance(exc, MemoryError):
        return True
    text = f"{type(exc).__name__} {exc}".lower()
    return any(s in text for s in _OOM_TEXT)
