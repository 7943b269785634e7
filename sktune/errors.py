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


#: What fixes a torch-npu that is installed but does not load: CANN's libraries are not found.
SOURCE_CANN = ("source the CANN toolkit's environment first (its set_env.sh, by default "
               "source /usr/local/Ascend/ascend-toolkit/set_env.sh)")


def torch_npu_installed() -> bool:
    """Whether a torch_npu package is there to import (it may still fail to load)."""
    import importlib.util

    return importlib.util.find_spec("torch_npu") is not None


def torch_extension_failed(exc: BaseException) -> str | None:
    """The one-line message for ``import torch`` failing because an installed device extension
    (torch-npu) did not load, as torch reports it (``_import_device_backends``); else None."""
    import re

    found = re.match(r"Failed to load the backend extension: ([\w.]*\w)", str(exc))
    if not isinstance(exc, RuntimeError) or found is None:
        return None
    cause = exc.__cause__ or exc.__context__
    why = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
    return (f"import torch failed: its device extension {found.group(1)} did not load{why}. On an Ascend host, "
            f"{SOURCE_CANN}; to use sktune without it (--backend inductor), set TORCH_DEVICE_BACKEND_AUTOLOAD=0")


class TorchNpuMissing(SktuneError):
    """torch-npu cannot be imported here (``reason``: why): no Ascend host, or no CANN."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason
