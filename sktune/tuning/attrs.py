"""Every study and trial attribute key sktune writes, and what the study's own keys say
(``is_prepared``). Keys are written and read only through these names; JSON stays at the
storage edge (records.py reads them back, trial_writer.py writes a trial's).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

BITWISE_CONSTRAINT = "bitwise"  # the trial's constraint: its mismatch count (≤ 0: exact)


class TrialAttr:
    """User-attribute keys of one trial."""

    PLAN = "plan"  # the plan as JSON
    ANCHOR = "anchor"  # name of the enqueued starting point (anchor or seed); absent: sampled
    OPTION_OVERRIDES = "option_overrides"  # options set outside the sampled domain (costly choices)
    REFINED_FROM = "refined_from"  # a refinement's (best+…) trial: the search's best it adds an option to
    WORKER = "worker"  # host and pid of the process running it (orphan detection)
    SKIPPED = "skipped"  # why it was not compiled (exactness probe, scope cap)
    PRUNED = "pruned"  # why its measurement was stopped early
    FAILURE = "failure"  # why the worker gave no result
    FAILURE_TRACE = "failure_trace"
    DIAGNOSIS = "diagnosis"  # the rerun of a hung plan with the backend's debug options
    MISMATCHES = "mismatches"
    GROUPS = "groups"
    REGIONS = "regions"
    COMPILE_S = "compile_s"
    VERIFY_S = "verify_s"
    MEASURE_S = "measure_s"
    OVERHEAD_S = "overhead_s"  # wall time of the trial minus its timing
    OBSERVED = "observed"  # backend facts about the run (what really fused)
    TIMING = "timing"  # PairedTiming as JSON
    SMALLEST_FAILING_RANGE = "smallest_failing_range"
    SEEDED_FROM = "seeded_from"  # why it was queued: the bisected trial, range, culprit types (dcci_seed.py)
    DCCI_REPAIR = "dcci_repair"  # of a bisected trial: the repair queued from its culprit, or why none (dcci_seed.py)
    SHAPES = "shapes"  # per served shape: weight, timing, mismatches (heaviest first); TIMING is their weighted mean
    STATIC_COMPILE = "static_compile"  # npu: static-kernel compile seconds, uncached_s, emulated (all shapes)
    COMPILED = "compiled"  # whether its plan went to the worker (False: skipped or reused: no device cost)
    REUSED_FROM = "reused_from"  # the earlier trial of the same plan whose outcome it took (tuning/reuse.py)
    WAITED_FOR = "waited_for"  # another worker's trial of the same plan, measured while this one waited (reuse.py)
    PROPOSED = "proposed"  # how the sampler chose a sampled trial: "local: <move>", "tpe", "random" (sampler.py)
    YARDSTICK = "yardstick"  # the one shape a yardstick was measured at (tuning/yardsticks.py): never the best
    PROBE_EXACT_AT = "probe_exact_at"  # a yardstick's shapes whose probe answers do not call its plan hopeless
    PAST_BUDGET = "past_budget"  # the unfused plan, run after the budget ended for the finalists' round (loop.py)


class StudyAttr:
    """User-attribute keys of the study."""

    FINGERPRINT = "fingerprint"
    SPACE = "space"  # the search space's signature; written last (the study is prepared)
    CREATOR = "creator"  # the worker that created the study ({host, pid, at}): it prepares the study
    CREATOR_BEAT = "creator_beat"  # a count the creator raises while it prepares the study (its heartbeat)
    WAITER = "waiter"  # the last worker that loaded the study before it was prepared ({host, pid, at})
    THREADS = "threads"
    INPUT_SETS = "input_sets"
    BACKEND = "backend"
    MODEL = "model"
    OPS = "ops"
    OP_PROFILE = "op_profile"
    EXACTNESS = "exactness"
    EXACTNESS_BY_SHAPE = "exactness_by_shape"  # a multi-shape study's probe answers at each shape (yardsticks)
    BOUNDARIES = "boundaries"
    ENVIRONMENT = "environment"
    STARTUP_S = "startup_s"
    MODEL_SHA256 = "model_sha256"
    # Each resume across a changed fingerprint (--allow-changed): [{at, model, model_sha256, changed}]
    RESUMED_ACROSS = "resumed_across"
    INPUT_SHAPES = "input_shapes"
    SHAPES = "shapes"  # {name: {weight, input_shapes}} of a multi-shape study, heaviest first; absent: one shape
    WARM_START = "warm_start"  # the earlier studies whose best plans were enqueued, and how they were mapped
    STOPPED_EARLY = "stopped_early"
    STOPPED_AT_TIMEOUT = "stopped_at_timeout"  # the last run's search ended at --timeout ({timeout_s, after_trial}); else None
    FINALISTS = "finalists"
    FINALISTS_FAILED = "finalists_failed"  # why the last finalists' round gave no timings (None once one did)
    CONFIRM_BEST = "confirm_best"
    # Finalists not bitwise as a round compiled them: [{"trial", "mismatches", "at"}], every round's (finalists.py)
    ROUND_REJECTED = "round_rejected"
    CONFIRM_FUSE_ALL = "confirm_fuse_all"
    CONFIRM_UNFUSED = "confirm_unfused"  # the unfused plan timed as a finalist: the round's noise floor
    PROFILE_BASELINE = "profile_baseline"
    PROFILE_BEST = "profile_best"
    PROFILE_BEST_TRIAL = "profile_best_trial"
    # The best plan timed through sktune.apply (torch.compile) against the eager model and against
    # the plan called directly: {trial, shape, applied, over_direct, mismatches, compile_s} or {trial, failed}
    THROUGH_COMPILE = "through_compile"
    PHASES_S = "phases_s"  # seconds of the last run's search, refinement, yardsticks, finalists, through_compile, profiles
    RUN = "run:"  # + host:pid:a random tag: one record per finished run (tuning/host_time.py)
    WHOLE_REGION_SKIPPED = "whole_region_skipped"  # why the whole-region refinement was not tried (refine.py)
    EFFECTIVE_OPTIONS_UNCHECKED = "effective_options_unchecked"  # the study's one warning: no dump compared
    VERIFY_SHAPES = "verify_shapes"  # the model's verify-only shapes (verify_shapes()), in order; absent: none
    LEFT_OUT_SHAPES = "left_out_shapes"  # input_shapes() that --shapes left out: first among VERIFY_SHAPES
    VERIFIED = "verified"  # per finalist verified there: [{trial, shapes: {name: outcome}}] (tuning/verified.py)


def is_prepared(attrs: Mapping[str, Any]) -> bool:
    """Whether a study with these user attributes is prepared: its space is written last."""
    return StudyAttr.SPACE in attrs


def last_change_at(attrs: Mapping[str, Any]) -> str | None:
    """When the study was last resumed across a change (``--allow-changed``), as ISO seconds:
    what was verified before it was verified on the model or machine as it was. None: never."""
    changes = attrs.get(StudyAttr.RESUMED_ACROSS) or []
    return changes[-1].get("at") if changes else None


def is_emulated(attrs: Mapping[str, Any]) -> bool:
    """Whether a study's figures come from the emulated Ascend (its environment says so)."""
    return (attrs.get(StudyAttr.ENVIRONMENT) or {}).get("emulated") == "true"
