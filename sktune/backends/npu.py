"""The ``npu`` backend: Ascend SuperKernel through torch.compile's ``npugraph_ex``.

Written against the torch-npu API as documented in docs/npu_api.md (read from the
torch-npu wheels). No Ascend NPU is reachable from this project's machines: the whole path
is tested on CPU through an emulated Ascend (tests/npu_emulator, never installed); nothing
here has been timed on an NPU by this project.

A plan is applied without touching the user's source: the captured FX graph gets
``torch.ops.npu.super_kernel_scope_begin/end`` nodes at the scopes' edges and is handed to
the ``npugraph_ex`` backend with SuperKernel options. The reference is the same capture
with ``super_kernel_optimize=False``.

Two field facts shape every trial (README, "Running on Ascend"; ``for_trials`` only, not
``sktune.apply`` in production):
- torchair's static-kernel cache key leaves out the SuperKernel option map, so a sweep
  could time a kernel package built under other options: trials compile with
  ``disable_static_kernel_compile_cache=True``.
- CANN clamps an out-of-range option to its default and dumps the options it really used
  to ``sk_meta/sk_options.json`` under its work path: each compile gets its own work path
  (``ASCEND_WORK_PATH``), and a trial whose effective options differ fails with both shown.

One seam for machines without an NPU: ``SKTUNE_NPU_DEVICE`` (default ``npu``) is the
device the model and its inputs are placed on; the emulated Ascend of the tests sets it
to ``cpu``.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from sktune.backends._base import Backend, CompiledModel
from sktune.capabilities import OptionSpec
from sktune.backends.npu_option_check import MAX_DISTINCT_SCOPES, validate_compile_options, validate_scope_names
from sktune.backends.npu_option_schema import OPTIMIZE, KeySet, NpuOptionError, check_torch_npu_version
from sktune.backends.npu_option_space import optimize_options_from_params, search_options
from sktune.errors import SktuneError
from sktune.graph.markers import insert_scope_markers, scope_marker_ops
from sktune.graph.opgraph import OpGraph

from sktune.space.plan import Plan, check_plan

log = logging.getLogger(__name__)

DEBUG_OPTIONS = "super_kernel_debug_options"  # plan option passed through as that dict
PROFILE_WARMUP_STEPS = 2


def torch_npu_version() -> str:
    """``torch_npu.__version__``, or one clear message when torch-npu cannot be used here."""
    try:
        import torch_npu  # optional extra: Ascend hosts with the CANN toolkit only
    except Exception as exc:
        raise SktuneError(
            "the npu backend needs torch-npu on an Ascend host with the CANN toolkit "
            f"(pip install 'sktune[npu]'); importing torch_npu failed: {type(exc).__name__}: {exc}. "
            "On this machine use --backend inductor."
        ) from exc
    return str(torch_npu.__version__)


def _npugraph_ex() -> Callable[..., Any]:
    """The registered ``npugraph_ex`` torch.compile backend (registered by torch_npu)."""
    from torch._dynamo import lookup_backend

    try:
        return lookup_backend("npugraph_ex")
    except Exception as exc:
        raise SktuneError("torch.compile backend 'npugraph_ex' is not registered; is torch_npu imported?") from exc


DEVICE_ENV = "SKTUNE_NPU_DEVICE"  # where tensors go; "npu" unless an emulated Ascend says otherwise
EFFECTIVE_OPTIONS = Path("sk_meta") / "sk_options.json"  # under the work path (a guess: see README)
FAIL_REASONS = Path("sk_meta") / "sk_fusion_fail_reasons.log"


class NpuBackend(Backend):
    name = "npu"
    default_bisect_runs = 6  # no data dump under SuperKernel: bisection is how to find the culprit
    unmarked_plans = True  # no markers: CANN picks the fusible ops itself
    anchor_set = "superkernel"
    max_scopes: int = MAX_DISTINCT_SCOPES  # the search keeps under it (space/scope_cap.py)

    def __init__(self, profile_kernels: bool = False, torch_npu_version_: str | None = None,
                 for_trials: bool = False) -> None:
        super().__init__(profile_kernels, for_trials)
        self.torch_npu_version = torch_npu_version_ or torch_npu_version()
        self.key_set: KeySet = check_torch_npu_version(self.torch_npu_version)
        self.device = os.environ.get(DEVICE_ENV, "npu")
        self.kernel_types: tuple[str, ...] = ()  # Ascend op types seen in the baseline profile
        self.ran_ai_cpu = True  # until the baseline profile says otherwise
        self.profile_root = Path(".sktune/npu-profiles")  # relative to the run's working directory
        self.meta_root = Path(".sktune/npu-meta")  # one CANN work path per compile
        self.last_meta_dir: Path | None = None  # of the candidate that ran last for the first time

    @property
    def emulated(self) -> bool:
        """The device says it is an emulation (asked lazily: it opens a device context)."""
        return "emulat" in self._device_name().lower()

    # -- what can be tuned -------------------------------------------------------
    def option_space(self, graph: OpGraph) -> list[OptionSpec]:
        # dcci lists match kernel symbol names, i.e. Ascend op types, not PyTorch op names:
        # per-type strategies come from the baseline profile (observe).
        specs = search_options(self.kernel_types, self.key_set)
        # task_breaker_bypass only matters where an AI CPU op would end a SuperKernel.
        return [s for s in specs if self.ran_ai_cpu or not s.name.endswith("task_breaker_bypass")]

    def unsafe_op_types(self) -> frozenset[str]:
        # SuperKernel calls the same precompiled kernels; results change through options
        # (dcci, bypass bits), which the option space marks, not through op types.
        return frozenset()

    def fallback_candidates(self, graph: OpGraph) -> list[str]:
        return []  # every op in a SuperKernel already is its precompiled kernel

    # -- applying a plan -----------------------------------------------------------
    def compile_options(self, plan: Plan, fresh_static_kernels: bool = False) -> dict[str, Any]:
        """The exact ``options=`` for ``torch.compile(..., backend="npugraph_ex")``, validated.

        ``fresh_static_kernels``: rebuild the static kernels instead of reusing a package
        cached under other SuperKernel options (the cache key leaves the option map out).
        """
        params = {k: v for k, v in plan.option_dict.items() if k != DEBUG_OPTIONS}
        options: dict[str, Any] = {
            "super_kernel_optimize": True,
            "static_kernel_compile": True,  # SuperKernel needs static kernels
            "super_kernel_optimize_options": optimize_options_from_params(params),
        }
        if fresh_static_kernels:
            options["disable_static_kernel_compile_cache"] = True
        debug = plan.option_dict.get(DEBUG_OPTIONS)
        if debug:
            options[DEBUG_OPTIONS] = dict(debug)
        validate_compile_options(options, key_set=self.key_set)
        return options

    def marked_graph(self, graph: OpGraph, plan: Plan) -> torch.fx.GraphModule:
        """A copy of the captured graph with the plan's scope markers inserted."""
        check_plan(plan, len(graph.ops), graph.boundaries)
        validate_scope_names([s.name for s in plan.scopes], self.max_scopes)
        begin, end = scope_marker_ops()
        return insert_scope_markers(copy.deepcopy(graph.gm), plan.scopes, begin, end)

    def compile(self, graph: OpGraph, plan: Plan) -> CompiledModel:
        # Validate everything before a minutes-long compile.
        options = self.compile_options(plan, fresh_static_kernels=self.for_trials)
        marked = self.marked_graph(graph, plan)
        if not self.for_trials:
            return _npugraph_ex()(marked, list(graph.flat_args), options=options)
        meta_dir = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=_made(self.meta_root)))
        with cann_work_path(meta_dir):
            compiled = _npugraph_ex()(marked, list(graph.flat_args), options=options)
        return _CheckedFirstRun(compiled, options.get(OPTIMIZE) or {}, meta_dir, self)

    def reference(self, graph: OpGraph) -> CompiledModel:
        options = {"super_kernel_optimize": False, "static_kernel_compile": True}
        return _npugraph_ex()(copy.deepcopy(graph.gm), list(graph.flat_args), options=options)

    def diagnostic_plan(self, plan: Plan) -> Plan | None:
        """The plan rerun after a hang: per-core op progress lands in the device log
        (the old key set has no ``debug_op_exec_trace``: no rerun there)."""
        if "debug_op_exec_trace" not in self.key_set.keys(DEBUG_OPTIONS):
            return None
        options = {**plan.option_dict, DEBUG_OPTIONS: {"debug_op_exec_trace": 1}}
        return Plan.make(plan.scopes, options)

    # -- device and measurement ------------------------------------------------------
    def synchronize(self) -> None:
        torch.npu.synchronize()  # type: ignore[attr-defined]

    @staticmethod
    def _device_name() -> str:
        try:
            return str(torch.npu.get_device_name())  # type: ignore[attr-defined]
        except Exception:
            return ""

    def environment(self) -> dict[str, str]:
        return {"torch": torch.__version__, "torch_npu": self.torch_npu_version, "device": self._device_name(),
                "key_set": self.key_set.name, "emulated": str(self.emulated).lower()}

    def observe(self, reference: Callable[[], object]) -> None:
        """Profile the baseline once to learn the Ascend op types (for dcci strategies)."""
        summary = self._profile([reference] * 3, top=10**6)  # every kernel type, not the heaviest few
        self.kernel_types = tuple(sorted({k["type"] for k in summary["top_kernels"]}))
        self.ran_ai_cpu = any(core.upper().replace("_", "") == "AICPU" for core in summary["by_core"])

    def profile_step(self, fn: Callable[[], object]) -> dict[str, Any]:
        summary = self._profile([fn] * 5)
        steps = summary["steps"]
        median = sorted(s["span_us"] for s in steps)[len(steps) // 2] if steps else 0.0
        busy = sorted(s["busy_us"] for s in steps)[len(steps) // 2] if steps else 0.0
        return {"step_us": median, "busy_us": busy, "gap_us": median - busy, "steps": len(steps),
                "top_kernels": summary["top_kernels"], "superkernels": summary["superkernels"]}

    def time_batches(self, baseline: Callable[[], object], candidate: Callable[[], object], *,
                     n_batches: int, batch_target_s: float) -> tuple[list[float], list[float], dict[str, Any]]:
        """Device time per step from the profiler: baseline and candidate steps alternate
        in one profiling session; the candidate's SuperKernel rows say what really fused."""
        fns = [baseline, candidate] * n_batches
        summary, per_step = self._profile(fns, with_steps=True)
        base = [per_step[i] * 1e-6 for i in range(0, len(per_step), 2)]
        cand = [per_step[i] * 1e-6 for i in range(1, len(per_step), 2)]
        return base, cand, {"superkernels": summary["superkernels"],
                            "fusion_fail_reasons": summary["fusion_fail_reasons"] + self._fail_reasons(),
                            "profile_dir": summary["profile_dir"]}

    def _fail_reasons(self) -> list[dict[str, Any]]:
        """Why scopes of the last candidate did not fuse, from its CANN work path."""
        from sktune.measure.ascend_parsers import read_fusion_fail_reasons

        log_file = self.last_meta_dir / FAIL_REASONS if self.last_meta_dir is not None else None
        return read_fusion_fail_reasons(log_file) if log_file is not None and log_file.is_file() else []

    def _profile(self, fns: list[Callable[[], object]], with_steps: bool = False, top: int = 15) -> Any:
        """Run ``fns`` one per profiler step (after warm-up) and parse the Ascend output."""
        import torch_npu

        from sktune.measure.ascend_files import find_profile_files
        from sktune.measure.ascend_summary import step_spans, summarize

        prof_mod = torch_npu.profiler
        # Kept: one fresh directory per measurement, never an earlier one's files.
        out = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=_made(self.profile_root)))
        with prof_mod.profile(
            activities=[prof_mod.ProfilerActivity.CPU, prof_mod.ProfilerActivity.NPU],
            # keyword arguments: the order differs from torch.profiler.schedule
            schedule=prof_mod.schedule(wait=0, warmup=PROFILE_WARMUP_STEPS, active=len(fns), repeat=1,
                                       skip_first=0),
            on_trace_ready=prof_mod.tensorboard_trace_handler(str(out)),
            experimental_config=prof_mod._ExperimentalConfig(
                profiler_level=prof_mod.ProfilerLevel.Level0, data_simplification=True),
        ) as prof:
            for fn in fns[:PROFILE_WARMUP_STEPS] + fns:
                fn()
                self.synchronize()
                prof.step()
        # The profiler swallows its own errors: find_profile_files raises if nothing was written.
        summary = summarize(find_profile_files(out), top=top).to_json()
        summary["profile_dir"] = str(out)
        if not with_steps:
            return summary
        return summary, step_spans(summary, len(fns))  # a ProfileError names the fix


class _CheckedFirstRun:
    """The compiled model; its first call (where npugraph_ex builds the SuperKernels) runs
    with its own CANN work path, and then checks the options CANN says it really used."""

    def __init__(self, fn: CompiledModel, requested: dict[str, Any], meta_dir: Path, backend: NpuBackend) -> None:
        self.fn, self.requested, self.meta_dir, self.backend = fn, requested, meta_dir, backend
        self.checked = False

    def __call__(self, *args: Any) -> Any:
        if self.checked:
            return self.fn(*args)
        with cann_work_path(self.meta_dir):
            out = self.fn(*args)
        self.checked = True
        self.backend.last_meta_dir = self.meta_dir
        check_effective_options(self.requested, self.meta_dir / EFFECTIVE_OPTIONS)
        return out


def _made(directory: Path) -> Path:
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


def check_effective_options(requested: dict[str, Any], dumped: Path) -> None:
    """Fail when CANN used other SuperKernel options than requested (clamped to a default,
    or a stale static-kernel package); silent when CANN wrote no dump."""
    if not dumped.is_file():
        return
    try:
        used = json.loads(dumped.read_text()).get(OPTIMIZE) or {}
    except (OSError, ValueError, AttributeError) as exc:
        raise NpuOptionError(f"cannot read the options CANN used ({dumped}): {exc}") from exc
    differ = []
    for key, want in requested.items():
        if key not in used:  # a dump may leave out what it did not set: nothing to compare
            log.debug("CANN's option dump %s does not list %s", dumped, key)
            continue
        have = used.get(key)
        if isinstance(want, dict) and isinstance(have, dict):
            differ += [f"{key}.{k}: requested {v!r}, used {have.get(k)!r}" for k, v in want.items() if have.get(k) != v]
        elif have != want:
            differ.append(f"{key}: requested {want!r}, used {have!r}")
    if differ:
        raise NpuOptionError(
            "CANN ran other SuperKernel options than requested (" + "; ".join(differ) + f"; from {dumped}): "
            "an out-of-range value is clamped to its default, and a cached static-kernel package keeps "
            "the options it was built with")
