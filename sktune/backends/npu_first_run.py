"""The first call of an npu candidate: where npugraph_ex compiles the static kernels and
builds the SuperKernels. It runs with its own CANN work path, is timed (the trial's
static-compile seconds), and then the options CANN says it really used are checked
(``npu_meta``). Its own module so that ``npu.py`` keeps to applying plans.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sktune.backends._base import CompiledModel
from sktune.backends.npu_meta import check_effective_options

if TYPE_CHECKING:
    from sktune.backends.npu import NpuBackend


class CheckedFirstRun:
    """The compiled model; its first call (where npugraph_ex compiles the static kernels and
    builds the SuperKernels) runs with its own CANN work path and is timed, and then the
    options CANN says it really used are checked."""

    def __init__(self, fn: CompiledModel, requested: dict[str, Any], meta_dir: Path, backend: "NpuBackend",
                 compile_s: float) -> None:
        self.fn, self.requested, self.meta_dir, self.backend = fn, requested, meta_dir, backend
        self.compile_s = compile_s
        self.checked = False

    def __call__(self, *args: Any) -> Any:
        if self.checked:
            return self.fn(*args)
        started = time.perf_counter()
        with cann_work_path(self.meta_dir):
            out = self.fn(*args)
        self.checked = True
        self.backend.last_meta_dir = self.meta_dir
        self.backend.last_static = self._static_compile(time.perf_counter() - started)
        self.backend.last_effective = check_effective_options(self.requested, self.meta_dir).status
        return out

    def _static_compile(self, first_run_s: float) -> dict[str, Any]:
        """Seconds of compile + first forward; an emulated Ascend states its own figure
        (``emulated_static_compile``, emulator only: wall time there is near zero)."""
        stated = getattr(self.fn, "emulated_static_compile", None)
        if isinstance(stated, dict) and self.backend.emulated:
            return {"seconds": float(stated["seconds"]), "uncached_s": float(stated["uncached_s"]),
                    "emulated": True}
        return {"seconds": self.compile_s + first_run_s, "uncached_s": None, "emulated": False}


class ReferenceFirstRun:
    """An emulated reference (SuperKernel off, static kernels on): its first call's emulated
    static compile is noted in ``records``. Its kernels fill the static-kernel cache that
    the trials then hit, so a study's estimated host time must count it (a host's start-up
    wall time holds it; the emulator's does not)."""

    def __init__(self, fn: CompiledModel, records: list[dict[str, Any]]) -> None:
        self.fn, self.records, self.called = fn, records, False

    def __getattr__(self, name: str) -> Any:  # the compiled model's own facts (its SuperKernels, ...)
        return getattr(self.fn, name)

    def __call__(self, *args: Any) -> Any:
        out = self.fn(*args)
        if not self.called:
            self.called = True
            stated = getattr(self.fn, "emulated_static_compile", None)
            if isinstance(stated, dict):
                self.records.append({"seconds": float(stated["seconds"]), "uncached_s": float(stated["uncached_s"])})
        return out


def made(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@contextmanager
def cann_work_path(directory: Path) -> Iterator[None]:
    """CANN's work path (where it writes ``sk_meta/``) and its kernel-meta switch, for the
    compile and the first forward of one trial; the previous values are restored after."""
    saved = {k: os.environ.get(k) for k in ("ASCEND_WORK_PATH", "ASCEND_OP_COMPILE_SAVE_KERNEL_META")}
    os.environ.update(ASCEND_WORK_PATH=str(directory.resolve()), ASCEND_OP_COMPILE_SAVE_KERNEL_META="1")
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
