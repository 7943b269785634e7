"""Errors a user can fix. The CLI prints them as one message (exit 1), no traceback."""


class SktuneError(Exception):
    """A problem with the user's input or environment, explained in its message."""


class ModelFileError(SktuneError):
    """The model file is missing, broken, or does not follow the contract."""


class CaptureError(SktuneError):
    """The forward could not be captured as one FX graph."""


class NondeterministicModelError(SktuneError):
    """The unfused reference does not reproduce itself, so bitwise checks are meaningless."""


class PlanError(SktuneError):
    """A plan does not fit the captured graph or the backend's rules."""


class ExportError(SktuneError):
    """A tuned result cannot be exported in the requested form (the message says why)."""


class TorchNpuMissing(SktuneError):
    """torch-npu cannot be imported here (``reason``: why): no Ascend host, or no CANN."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason
