"""What crosses the worker pipe, typed: the worker's start-up config, a trial request, its result, the side commands
after and beside the search (the finalists' re-measurement, a mismatch's bisection, a
step's profile) with their answers, and the failure that replaces an answer when the
worker hangs, crashes or raises.

``TrialWorker`` is what the objective needs from a worker: the supervised process
(``tuning/supervisor.py``) and the search benchmark's table replay both implement it.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import Any, Protocol

from sktune.measure.stats import PairedTiming
from sktune.plan import Plan


@dataclass(frozen=True)
class RunnerConfig:
    """How the worker starts: sent once, as a dict, when its process is spawned."""

    model_path: str
    backend: str = "inductor"
    threads: int = 1
    input_sets: int = 3
    n_batches: int = 30  # interleaved pairs; ~0.3 s per side: cheap next to a compile
    batch_target_s: float = 0.005
    probe_cache: str | None = None  # JSON file of exactness-probe answers; None: do not probe
    shapes: tuple[str, ...] | None = None  # the model's shapes to tune for (--shapes); None: all
    capture_cache: str | None = None  # folder of saved captured graphs; None: always capture
    compile_helper: bool = False  # a second process compiles half of each plan's new regions
    # The helper compiles the fuse-all yardstick while the worker probes (the study has no
    # fuse-all trial yet): on a deep model its whole-graph compile is the costliest of all.
    prefetch_fuse_all: bool = False
    # Measure the op profile and probe answers that shape the space; False where the study
    # holds them already or its creator records them (``creator.measures_space_inputs``).
    space_inputs: bool = True


@dataclass(frozen=True)
class WorkerFailure:
    """Why a request got no answer: ``hang``, ``crash``, ``error`` or ``interrupted`` (the
    worker was stopped from outside)."""

    kind: str
    message: str
    trace: str = ""  # the worker's traceback, for --debug and the study

    @property
    def reason(self) -> str:
        return f"{self.kind}: {self.message}"


class MalformedResult(ValueError):
    """A worker answered something that is not the result asked for."""


@dataclass(frozen=True)
class TrialRequest:
    """Apply ``plan`` at ``shape``, verify it on every input set of that shape, then time
    ``n_batches`` pairs against that shape's baseline (None: the runner's configured
    number; shape None: the model's heaviest shape, or its only one)."""

    plan: Plan
    n_batches: int | None = None
    shape: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"plan": self.plan.to_json(), "n_batches": self.n_batches, "shape": self.shape}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "TrialRequest":
        n = data.get("n_batches")
        return cls(Plan.from_json(data["plan"]), None if n is None else int(n), data.get("shape"))


@dataclass(frozen=True)
class StaticCompile:
    """A trial's static-kernel compile (npu): on a host the wall seconds of compile + first
    forward; on an emulated device the seconds it states, with ``emulated`` set."""

    seconds: float  # with the static-kernel caches as they were
    uncached_s: float | None = None  # every kernel compiled, no cache (emulated only)
    emulated: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "uncached_s": self.uncached_s, "emulated": self.emulated}

    @classmethod
    def from_json(cls, data: Any) -> "StaticCompile | None":
        if not isinstance(data, dict):
            return None
        uncached = data.get("uncached_s")
        return cls(float(data["seconds"]), None if uncached is None else float(uncached), bool(data.get("emulated")))


@dataclass(frozen=True)
class TrialResult:
    """One plan applied, verified and timed against the unfused baseline in the same run."""

    bitwise: bool
    mismatches: tuple[dict[str, Any], ...]  # the first 20 differing outputs, over all input sets
    timing: PairedTiming
    groups: tuple[tuple[int, ...], ...]
    regions: tuple[tuple[int, int], ...]
    compile_s: float
    verify_s: float
    measure_s: float
    observed: dict[str, Any]  # backend facts about the run (e.g. which scopes really fused)
    static_compile: StaticCompile | None = None  # None: the backend has no static-kernel compile

    def to_json(self) -> dict[str, Any]:
        return {"bitwise": self.bitwise, "mismatches": list(self.mismatches), "timing": self.timing.to_json(),
                "groups": [list(g) for g in self.groups], "regions": [list(r) for r in self.regions],
                "compile_s": self.compile_s, "verify_s": self.verify_s, "measure_s": self.measure_s,
                "observed": self.observed,
                "static_compile": None if self.static_compile is None else self.static_compile.to_json()}

    @classmethod
    def from_json(cls, data: Any) -> "TrialResult":
        expected = [f.name for f in fields(cls) if f.default is MISSING]
        missing = [k for k in expected if not isinstance(data, dict) or k not in data]
        if missing:
            raise MalformedResult(f"malformed result from the worker (missing {', '.join(missing)})")
        return cls(bool(data["bitwise"]), tuple(data["mismatches"]), PairedTiming.from_json(data["timing"]),
                   tuple(tuple(g) for g in data["groups"]), tuple((r[0], r[1]) for r in data["regions"]),
                   float(data["compile_s"]), float(data["verify_s"]), float(data["measure_s"]),
                   dict(data["observed"]), StaticCompile.from_json(data.get("static_compile")))


@dataclass(frozen=True)
class TimingUpdate:
    """The last candidate timed for more pairs: the timing covers all its pairs so far."""

    timing: PairedTiming
    measure_s: float

    def to_json(self) -> dict[str, Any]:
        return {"timing": self.timing.to_json(), "measure_s": self.measure_s}

    @classmethod
    def from_json(cls, data: Any) -> "TimingUpdate":
        if not isinstance(data, dict) or "timing" not in data or "measure_s" not in data:
            raise MalformedResult("malformed timing update from the worker")
        return cls(PairedTiming.from_json(data["timing"]), float(data["measure_s"]))


CONFIRM_ROUNDS = 6  # rounds of a re-timing (finalists, through sktune.apply) unless the effort says more


def rounds_timeout(timeout: float, rounds: int) -> float:
    """A re-timing's time limit: ``timeout`` covers ``CONFIRM_ROUNDS`` rounds, and grows with more."""
    return timeout * max(1.0, rounds / CONFIRM_ROUNDS)


@dataclass(frozen=True)
class ConfirmRequest:
    """Re-time ``plans`` in one interleaved round at ``shape`` (None: the heaviest): ``rounds``
    rounds of ``n_batches`` pairs each, every plan against the baseline."""

    plans: tuple[Plan, ...]
    shape: str | None = None
    rounds: int = CONFIRM_ROUNDS
    n_batches: int = 5

    def to_json(self) -> dict[str, Any]:
        return {"plans": [p.to_json() for p in self.plans], "shape": self.shape, "rounds": self.rounds,
                "n_batches": self.n_batches}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ConfirmRequest":
        return cls(tuple(Plan.from_json(p) for p in data["plans"]), data.get("shape"), int(data.get("rounds", 6)),
                   int(data.get("n_batches", 5)))


@dataclass(frozen=True)
class ConfirmResult:
    """One timing per plan of the request, in its order, and each plan's output mismatches
    against the unfused run on every input set of the shape: a plan is named best as the
    round compiled it, not only as its trial did (a resume across a change of the model)."""

    timings: tuple[PairedTiming, ...]
    mismatches: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"timings": [t.to_json() for t in self.timings], "mismatches": list(self.mismatches)}

    @classmethod
    def from_json(cls, data: Any) -> "ConfirmResult":
        if (not isinstance(data, dict) or not isinstance(data.get("timings"), list)
                or not isinstance(data.get("mismatches"), list) or len(data["mismatches"]) != len(data["timings"])):
            raise MalformedResult("malformed re-measurement from the worker")
        return cls(tuple(PairedTiming.from_json(t) for t in data["timings"]), tuple(int(m) for m in data["mismatches"]))


@dataclass(frozen=True)
class ThroughCompileRequest:
    """Time ``plan`` as the export runs it, through ``sktune.apply`` (``torch.compile``: Dynamo
    runs on every call), against the eager model and against the plan called directly as the
    trials call it; interleaved, at the heaviest shape."""

    plan: Plan
    rounds: int = CONFIRM_ROUNDS
    n_batches: int = 5

    def to_json(self) -> dict[str, Any]:
        return {"plan": self.plan.to_json(), "rounds": self.rounds, "n_batches": self.n_batches}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ThroughCompileRequest":
        return cls(Plan.from_json(data["plan"]), int(data.get("rounds", 6)), int(data.get("n_batches", 5)))


@dataclass(frozen=True)
class ThroughCompileResult:
    """``applied``: ``sktune.apply(model, plan)`` (candidate) against the eager model (baseline);
    ``over_direct``: the same applied model against the plan's compiled graph called directly,
    as the trials call it; ``mismatches``: output elements of the applied model that differ
    from the unfused references, over every input set; ``compile_s``: its first call."""

    applied: PairedTiming
    over_direct: PairedTiming
    mismatches: int
    compile_s: float

    def to_json(self) -> dict[str, Any]:
        return {"applied": self.applied.to_json(), "over_direct": self.over_direct.to_json(),
                "mismatches": self.mismatches, "compile_s": self.compile_s}

    @classmethod
    def from_json(cls, data: Any) -> "ThroughCompileResult":
        if not isinstance(data, dict) or not {"applied", "over_direct", "mismatches"} <= data.keys():
            raise MalformedResult("malformed timing through torch.compile from the worker")
        return cls(PairedTiming.from_json(data["applied"]), PairedTiming.from_json(data["over_direct"]),
                   int(data["mismatches"]), float(data.get("compile_s", 0.0)))


@dataclass(frozen=True)
class BisectRequest:
    """Find the smallest op range of ``plan`` that still breaks bitwise equality, within
    ``max_runs`` compile+verify runs."""

    plan: Plan
    max_runs: int

    def to_json(self) -> dict[str, Any]:
        return {"plan": self.plan.to_json(), "max_runs": self.max_runs}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "BisectRequest":
        return cls(Plan.from_json(data["plan"]), int(data["max_runs"]))


@dataclass(frozen=True)
class BisectResult:
    """The smallest failing op range found (None: no region failed alone within the runs),
    its op types, and, where the backend names them, its device op types (npu: the dcci
    patterns). Stored as the trial's ``TrialAttr.SMALLEST_FAILING_RANGE``."""

    range: tuple[int, int] | None
    runs: int
    op_types: tuple[str, ...] = ()
    kernel_types: tuple[str, ...] | None = None  # None: the backend does not name them

    def to_json(self) -> dict[str, Any]:
        if self.range is None:
            return {"range": None, "runs": self.runs}
        out: dict[str, Any] = {"range": list(self.range), "op_types": list(self.op_types), "runs": self.runs}
        if self.kernel_types is not None:
            out["kernel_types"] = list(self.kernel_types)
        return out

    @classmethod
    def from_json(cls, data: Any) -> "BisectResult":
        if not isinstance(data, dict) or "runs" not in data:
            raise MalformedResult("malformed bisection from the worker")
        found, kernel_types = data.get("range"), data.get("kernel_types")
        return cls(None if found is None else (int(found[0]), int(found[1])), int(data["runs"]),
                   tuple(data.get("op_types") or ()), None if kernel_types is None else tuple(kernel_types))


@dataclass(frozen=True)
class ProfileRequest:
    """Profile one step of ``plan`` (None: the unfused baseline), kernels named."""

    plan: Plan | None

    def to_json(self) -> dict[str, Any]:
        return {"plan": None if self.plan is None else self.plan.to_json()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ProfileRequest":
        plan = data.get("plan")
        return cls(None if plan is None else Plan.from_json(plan))


@dataclass(frozen=True)
class ProfileResult:
    """Busy time and gap of one step, as the backend's profile states them (``StepProfile``
    as JSON, or the backend's own form: npu adds its SuperKernel rows); the study stores
    ``profile`` as it is (``StudyAttr.PROFILE_BASELINE`` / ``PROFILE_BEST``)."""

    profile: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return self.profile

    @classmethod
    def from_json(cls, data: Any) -> "ProfileResult":
        if not isinstance(data, dict) or "step_us" not in data:
            raise MalformedResult("malformed profile from the worker")
        return cls(dict(data))


class TrialWorker(Protocol):
    """What the objective asks of a worker; each call answers or says why not."""

    def run(self, request: TrialRequest, timeout: float) -> TrialResult | WorkerFailure: ...

    def more(self, n_batches: int, timeout: float) -> TimingUpdate | WorkerFailure: ...

    def bisect(self, plan: Plan, max_runs: int, timeout: float) -> BisectResult | WorkerFailure: ...
