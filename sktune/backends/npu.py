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
- Static kernels: where a release's static-kernel cache key might leave out the
  SuperKernel option map, trials compile with ``disable_static_kernel_compile_cache=True``
  (``npu_static_cache``: not on 2.10.0.post4, 2.13.0, 2.14.0, whose keys hold the map).
  Each trial records its static-compile seconds: the wall time of compile + first forward
  (where npugraph_ex runs op_compiler), or the emulated figure an emulated Ascend states.
- CANN clamps an out-of-range option to its default. Each compile gets its own work path
  (``ASCEND_WORK_PATH``); an options dump found there in a recognised form is compared and
  a difference fails the trial (``npu_meta``); no dump, or another form, is reported, never fatal.

One seam for machines without an NPU: ``SKTUNE_NPU_DEVICE`` (default ``npu``) is the
device the model and its inputs are placed on; the emulated Ascend of the tests sets it
to ``cpu``.
"""

from __future__ import annotations

import copy
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from sktune.backends._base import Backend, CompiledModel, ExportSnippet
from sktune.capabilities import OptionSpec
from sktune.backends.npu_option_check import MAX_DISTINCT_SCOPES, validate_compile_options, validate_scope_names
from sktune.backends.npu_option_schema import OPTIMIZE, TOP_LEVEL_SCHEMA, KeySet, NpuOptionError, check_torch_npu_version
from sktune.backends.npu_option_space import (DCCI_STRATEGY, dcci_options_for, optimize_options_from_params,
                                              search_options)
from sktune.backends.npu_first_run import CheckedFirstRun, ReferenceFirstRun, cann_work_path, made
from sktune.backends.npu_fusion import planned_vs_actual
from sktune.backends.npu_meta import FAIL_REASONS, RECOGNISED_FORMS, meta_files
from sktune.backends.npu_profiling import profile_runs
from sktune.backends.npu_static_cache import static_cache_rule
from sktune.errors import SOURCE_CANN, PlanError, SktuneError, TorchNpuMissing, torch_npu_installed
from sktune.graph.markers import insert_scope_markers, scope_marker_ops
from sktune.graph.opgraph import OpGraph
from sktune.plan import Plan, check_plan

DEFAULT_TORCH_NPU = "2.14.0"  # key set assumed for an export when the study recorded no torch_npu version
DEBUG_OPTIONS = "super_kernel_debug_options"  # plan option passed through as that dict


def torch_npu_version() -> str:
    """``torch_npu.__version__``, or one clear message when torch-npu cannot be used here."""
    try:
        import torch_npu  # optional extra: Ascend hosts with the CANN toolkit only
    except Exception as exc:
        reason = f"importing torch_npu failed: {type(exc).__name__}: {exc}"
        fix = SOURCE_CANN if torch_npu_installed() else "pip install 'sktune[npu]'"
        raise TorchNpuMissing(
            f"the npu backend needs torch-npu on an Ascend host with the CANN toolkit; {reason}. To use it, "
            f"{fix}; on a machine without an Ascend NPU use --backend inductor.", reason
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


class NpuBackend(Backend):
    name = "npu"
    default_bisect_runs = 6  # no data dump under SuperKernel: bisection is how to find the culprit
    unmarked_plans = True  # no markers: CANN picks the fusible ops itself
    anchor_set = "superkernel"
    max_scopes: int = MAX_DISTINCT_SCOPES  # the search keeps under it (space/scope_cap.py)
    capture_limit = next(k.default for k in TOP_LEVEL_SCHEMA if k.name == "capture_limit")  # npugraph_ex's default
    checks_effective_options = True  # CANN's sk_meta (npu_meta.py)
    scope_markers_under = 'torch.compile(backend="npugraph_ex")'
    has_doctor = True
    device_profiler = "torch_npu.profiler"  # device time per step from kernel_details.csv (time_batches)

    def __init__(self, profile_kernels: bool = False, torch_npu_version_: str | None = None,
                 for_trials: bool = False) -> None:
        super().__init__(profile_kernels, for_trials)
        self.torch_npu_version = torch_npu_version_ or torch_npu_version()
        self.key_set: KeySet = check_torch_npu_version(self.torch_npu_version)
        self.device = os.environ.get(DEVICE_ENV, "npu")
        self.kernel_types: tuple[str, ...] = ()  # Ascend op types seen in the baseline profile
        self.kernel_sequence: tuple[str, ...] = ()  # their order in one baseline step (op range -> types)
        self.ran_ai_cpu = True  # until the baseline profile says otherwise
        self.profile_root = Path(".sktune/npu-profiles")  # relative to the run's working directory
        # A study's timing profiles are read once and never again (hundreds of directories in a
        # study): only the profiles of the baseline and the best (profile_step) stay for the user.
        self.keep_profiles = not for_trials
        self.meta_root = Path(".sktune/npu-meta")  # one CANN work path per compile
        self.last_meta_dir: Path | None = None  # of the candidate that ran last for the first time
        self.static_cache = static_cache_rule(self.torch_npu_version)
        self.last_static: dict[str, Any] | None = None  # static compile of the last candidate's first run
        self.last_effective: str | None = None  # what its work path said about the options used
        self.reference_static: list[dict[str, Any]] = []  # emulated static compiles of the references

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

    def check_plan_options(self, graph: OpGraph, options: dict[str, Any]) -> None:
        """A per-type dcci strategy names the Ascend op types that the tuning run profiled;
        ``sktune.apply`` has not profiled the baseline, so it checks that one by its form."""
        strategy = options.get(DCCI_STRATEGY)
        if strategy is None or strategy in ("safe", "none"):
            return super().check_plan_options(graph, options)
        try:
            dcci_options_for(strategy)
        except NpuOptionError as exc:
            raise PlanError(str(exc)) from exc
        super().check_plan_options(graph, {k: v for k, v in options.items() if k != DCCI_STRATEGY})

    def unsafe_op_types(self) -> frozenset[str]:
        # SuperKernel calls the same precompiled kernels; results change through options
        # (dcci, bypass bits), which the option space marks, not through op types.
        return frozenset()

    def fallback_candidates(self, graph: OpGraph) -> list[str]:
        return []  # every op in a SuperKernel already is its precompiled kernel

    # -- applying a plan -----------------------------------------------------------
    @classmethod
    def export_snippet(cls, plan: Plan, environment: dict[str, Any], threads: int,
                       shapes: int = 1) -> ExportSnippet:
        """The tuned SuperKernel options as an ``OPTIONS`` literal for ``torch.compile``; the
        scopes go into the user's source (``sktune export --format patch``) or via ``sktune.apply``.
        ``shapes``: how many the model declares (tuned and verify-only); past npugraph_ex's
        ``capture_limit`` the options raise it, or a graph past the limit runs eager."""
        import pprint

        version = environment.get("torch_npu") or DEFAULT_TORCH_NPU
        options = cls(torch_npu_version_=version).compile_options(plan)
        if cls.capture_limit is not None and shapes > cls.capture_limit:
            options = {"capture_limit": shapes, **options}
        literal = "OPTIONS = " + pprint.pformat(options, sort_dicts=False, width=90).replace("\n", "\n" + " " * 10)
        return ExportSnippet(
            f", torch_npu {environment.get('torch_npu', '?')}", ".",
            ("import torch", "import torch_npu  # noqa: F401  (registers the npugraph_ex backend)", "",
             f"# SuperKernel options for torch_npu {version}:", literal),
            'model = torch.compile(model, backend="npugraph_ex", options=OPTIONS, dynamic=False, fullgraph=True)')

    def compile_options(self, plan: Plan, fresh_static_kernels: bool = False) -> dict[str, Any]:
        """The exact ``options=`` for ``torch.compile(..., backend="npugraph_ex")``, validated.

        ``fresh_static_kernels``: never reuse a static-kernel package cached under other
        SuperKernel options; sets the cache switch only where the release's key leaves
        the option map out (``npu_static_cache``).
        """
        params = {k: v for k, v in plan.option_dict.items() if k != DEBUG_OPTIONS}
        options: dict[str, Any] = {
            "super_kernel_optimize": True,
            "static_kernel_compile": True,  # SuperKernel needs static kernels
            "super_kernel_optimize_options": optimize_options_from_params(params),
        }
        if fresh_static_kernels and self.static_cache.disable_per_trial:
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
        meta_dir = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=made(self.meta_root)))
        # A new candidate: nothing of the last one's first run may be reported as its own.
        self.last_static, self.last_effective, self.last_meta_dir = None, None, None
        started = time.perf_counter()
        with cann_work_path(meta_dir):
            compiled = _npugraph_ex()(marked, list(graph.flat_args), options=options)
        return CheckedFirstRun(compiled, options.get(OPTIMIZE) or {}, meta_dir, self,
                                time.perf_counter() - started)

    def reference(self, graph: OpGraph) -> CompiledModel:
        options = {"super_kernel_optimize": False, "static_kernel_compile": True}
        compiled = _npugraph_ex()(copy.deepcopy(graph.gm), list(graph.flat_args), options=options)
        return ReferenceFirstRun(compiled, self.reference_static) if self.emulated else compiled

    def startup_static_compile(self) -> dict[str, Any] | None:
        """The emulated static compiles of the references (on a host they are in the start-up's
        wall time): they fill the static-kernel cache that the trials then hit."""
        if not self.reference_static:
            return None
        return {"seconds": sum(r["seconds"] for r in self.reference_static),
                "uncached_s": sum(r["uncached_s"] for r in self.reference_static), "emulated": True,
                "references": len(self.reference_static)}

    def diagnostic_plan(self, plan: Plan) -> Plan | None:
        """The plan rerun after a hang: per-core op progress lands in the device log
        (the old key set has no ``debug_op_exec_trace``: no rerun there)."""
        if "debug_op_exec_trace" not in self.key_set.keys(DEBUG_OPTIONS):
            return None
        options = {**plan.option_dict, DEBUG_OPTIONS: {"debug_op_exec_trace": 1}}
        return Plan.make(plan.scopes, options)

    # -- device and measurement ------------------------------------------------------
    def fusion_facts(self, plan: Plan, observed: dict[str, Any]) -> dict[str, Any]:
        """Which of the plan's scopes the profile shows as SuperKernels (``npu_fusion``)."""
        return {"fusion": planned_vs_actual(plan, observed["superkernels"])} if "superkernels" in observed else {}

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
        from sktune.measure.ascend_summary import kernel_type_sequence

        run = profile_runs(self, [reference] * 3, top=10**6, keep=self.keep_profiles)  # every type, not the top few
        summary = run.summary
        self.kernel_types = tuple(sorted({k["type"] for k in summary["top_kernels"]}))
        self.kernel_sequence = kernel_type_sequence(run.kernels)
        self.ran_ai_cpu = any(core.upper().replace("_", "") == "AICPU" for core in summary["by_core"])

    def kernel_types_by_op(self, kernelless: Sequence[bool]) -> list[str | None] | None:
        """Unfused, each op that launches a kernel launches one, in graph order: the baseline
        step's kernels zipped with those ops. None where the counts differ (an op with two
        kernels, or none that the graph did not foresee): then no op's type is guessed."""
        launching = [i for i, none in enumerate(kernelless) if not none]
        if not launching or len(launching) != len(self.kernel_sequence):
            return None
        types: list[str | None] = [None] * len(kernelless)
        for i, op_type in zip(launching, self.kernel_sequence):
            types[i] = op_type
        return types

    def profile_step(self, fn: Callable[[], object]) -> dict[str, Any]:
        from sktune.measure.ascend_summary import kernels_per_step

        run = profile_runs(self, [fn] * 5)
        summary = run.summary
        steps = summary["steps"]
        median = sorted(s["span_us"] for s in steps)[len(steps) // 2] if steps else 0.0
        busy = sorted(s["busy_us"] for s in steps)[len(steps) // 2] if steps else 0.0
        n = max(len(steps), 1)  # per step, as top_kernels: the summary's rows total the profiled steps
        superkernels = [{**sk, "total_us": round(sk["total_us"] / n, 3), "count": sk["count"] / n}
                        for sk in summary["superkernels"]]
        return {"step_us": median, "busy_us": busy, "gap_us": median - busy, "steps": len(steps),
                "top_kernels": kernels_per_step(run.kernels), "kernels_per_step": True,
                "superkernels": superkernels, "profile_dir": str(Path(summary["profile_dir"]).resolve())}

    def time_batches(self, baseline: Callable[[], object], candidate: Callable[[], object], *,
                     n_batches: int, batch_target_s: float) -> tuple[list[float], list[float], dict[str, Any]]:
        """Device time per step from the profiler: baseline and candidate steps alternate
        in one profiling session; the candidate's SuperKernel rows say what really fused."""
        fns = [baseline, candidate] * n_batches
        run = profile_runs(self, fns, with_steps=True, keep=self.keep_profiles)
        summary, per_step = run.summary, run.step_spans or []
        base = [per_step[i] * 1e-6 for i in range(0, len(per_step), 2)]
        cand = [per_step[i] * 1e-6 for i in range(1, len(per_step), 2)]
        return base, cand, {"superkernels": summary["superkernels"],
                            "fusion_fail_reasons": summary["fusion_fail_reasons"] + self._fail_reasons(),
                            **({"profile_dir": summary["profile_dir"]} if self.keep_profiles else {}),
                            "effective_options": self.last_effective,
                            # what an unchecked dump should have been (the study's one warning)
                            **({} if self.last_effective == "checked" else {"effective_options_forms": RECOGNISED_FORMS})}

    def static_compile_seconds(self) -> dict[str, Any] | None:
        return self.last_static

    def _fail_reasons(self) -> list[dict[str, Any]]:
        """Why scopes of the last candidate did not fuse, from its CANN work path."""
        from sktune.measure.ascend_parsers import read_fusion_fail_reasons

        if self.last_meta_dir is None:
            return []
        return [r for log_file in meta_files(self.last_meta_dir, FAIL_REASONS)
                for r in read_fusion_fail_reasons(log_file)]
