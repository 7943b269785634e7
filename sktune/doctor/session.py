"""One doctor run's shared state: the backend, the tiny model's capture, its unfused
reference, and every compile the checks asked for (each compiled once, by label).

Every compile goes through the npu backend as a trial does (``for_trials``: its own CANN
work path, the static compile timed or, on an emulated Ascend, its stated seconds), so
what doctor sees is what a study would see.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from sktune.doctor.tiny_model import TinyGraph, capture_tiny
from sktune.plan import Plan, Scope

if TYPE_CHECKING:
    from sktune.backends.npu import NpuBackend
    from sktune.verify import Mismatch

log = logging.getLogger(__name__)

#: The options of doctor's main compile: the safe dcci flush keeps the gather exact (on a
#: release with dcci keys; the old key set has none, so there the runtime's defaults).
MAIN_OPTIONS: dict[str, Any] = {"dcci_strategy": "safe"}
PROFILE_BATCHES = 2


@dataclass(frozen=True)
class CompiledRun:
    """One plan compiled and run once (its first forward: static compile and CANN's sk_meta)."""

    label: str
    plan: Plan
    mismatches: tuple[Mismatch, ...]  # against the unfused reference, raw bits
    static: dict[str, Any] | None  # the backend's static-compile record of the first forward
    meta_dir: Path | None  # the CANN work path of the compile and first forward
    effective: str  # checked / absent / unrecognised, or the backend's error when they differed
    call: Callable[[], object]


@dataclass(frozen=True)
class ProfileSeen:
    """What the backend's own profiling of reference and candidate steps produced."""

    profile_dir: Path
    kernel_details: Path
    step_trace: Path | None
    header: tuple[str, ...]
    steps: int
    superkernels: tuple[dict[str, Any], ...]


class DoctorSession:
    def __init__(self, backend: NpuBackend) -> None:
        self.backend = backend
        self._runs: dict[str, CompiledRun] = {}
        self._failed: dict[str, Exception] = {}  # label -> its error: a failed compile is not retried
        self._profile: ProfileSeen | None = None

    @cached_property
    def main_options(self) -> dict[str, Any]:
        """``MAIN_OPTIONS`` where the release accepts them, else no options (old key set)."""
        from sktune.backends.npu_option_schema import OPTIMIZE

        return dict(MAIN_OPTIONS) if "dcci_after_kernel_end" in self.backend.key_set.keys(OPTIMIZE) else {}

    @cached_property
    def other_options(self) -> dict[str, Any]:
        """One key more than the main options, so the SuperKernel option map differs:
        ``early_start`` where the release has it, else ``preload_code`` (old key set)."""
        from sktune.backends.npu_option_schema import OPTIMIZE

        extra = "early_start" if "early_start" in self.backend.key_set.keys(OPTIMIZE) else "preload_code"
        return {**self.main_options, extra: 1 if extra == "early_start" else 2}

    @cached_property
    def tiny(self) -> TinyGraph:
        return capture_tiny(self.backend.device)

    @cached_property
    def _reference(self) -> tuple[Callable[..., Any], list[torch.Tensor]]:
        from sktune.verify import flatten_outputs

        fn = self.backend.reference(self.tiny.graph)
        return fn, flatten_outputs(fn(*self.tiny.args))

    def reference_call(self) -> Callable[[], object]:
        fn, _ = self._reference
        return lambda: fn(*self.tiny.args)

    def run(self, label: str, scopes: tuple[Scope, ...], options: dict[str, Any]) -> CompiledRun:
        """Compile ``scopes`` with ``options`` (plan options, as the search writes them) and run it once."""
        if label in self._runs:
            return self._runs[label]
        if label in self._failed:  # minutes on a host: each check that needs it says why instead
            raise self._failed[label]
        try:
            run = self._compile_and_run(label, scopes, options)
        except Exception as exc:
            self._failed[label] = exc
            raise
        self._runs[label] = run
        return run

    def _compile_and_run(self, label: str, scopes: tuple[Scope, ...], options: dict[str, Any]) -> CompiledRun:
        from sktune.backends.npu_option_schema import NpuOptionError
        from sktune.verify import compare_outputs, flatten_outputs

        _, expected = self._reference
        plan = Plan.make(scopes, options)
        compiled = self.backend.compile(self.tiny.graph, plan)
        args = self.tiny.args
        try:
            out = compiled(*args)
            effective = self.backend.last_effective or "absent"
        except NpuOptionError as exc:  # CANN's dump shows other options: a finding, kept
            effective = str(exc)
            out = compiled(*args)
        run = CompiledRun(label, plan, tuple(compare_outputs(expected, flatten_outputs(out))),
                          self.backend.last_static, _absolute(self.backend.last_meta_dir), effective,
                          lambda: compiled(*args))
        log.info("doctor compiled %s: static %s", label, run.static)
        return run

    def main_run(self) -> CompiledRun:
        """The two-scope placement with the safe flush: what most checks look at."""
        return self.run("main", self.tiny.placement, self.main_options)

    def profile(self) -> ProfileSeen:
        """Reference and main candidate steps alternating, profiled at Level0 by the backend."""
        if self._profile is not None:
            return self._profile
        from sktune.measure.ascend_files import find_profile_files

        main = self.main_run()
        base, cand, info = self.backend.time_batches(self.reference_call(), main.call,
                                                     n_batches=PROFILE_BATCHES, batch_target_s=0.0)
        files = find_profile_files(info["profile_dir"])
        with files.kernel_details.open(newline="", encoding="utf-8-sig") as handle:
            header = tuple(next(csv.reader(handle), []))
        self._profile = ProfileSeen(Path(info["profile_dir"]).resolve(), files.kernel_details, files.step_trace,
                                    tuple(h.strip() for h in header), len(base) + len(cand),
                                    tuple(info["superkernels"]))
        return self._profile


def _absolute(path: Path | None) -> Path | None:
    """Paths in a report outlive the run's working directory: make them absolute."""
    return None if path is None else path.resolve()


__all__ = ["MAIN_OPTIONS", "CompiledRun", "DoctorSession", "ProfileSeen"]
