"""Studies the report tests read: one real small study (built once per test session) and a
hand-made in-memory one whose user text is hostile HTML.

Import the fixtures into a test module (``from tests.report_fixtures import real_study``);
the real study is built by the first module that asks for it and reused by the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import optuna
import pytest

ROOT = Path(__file__).resolve().parent.parent
EVIL = "<script>alert(1)</script>"
EVIL_IMG = "<img src=x onerror=alert(2)>"


@dataclass(frozen=True)
class RealStudy:
    storage: str
    name: str
    workdir: Path

    def load(self) -> optuna.Study:
        return optuna.load_study(study_name=self.name, storage=self.storage)


@pytest.fixture(scope="session")
def real_study(tmp_path_factory: pytest.TempPathFactory) -> RealStudy:
    """The session's one real study (tests/tuned_study.py): its first trial crashed on
    purpose (the test-only fault hook), so it also holds a failed trial."""
    from tests.tuned_study import tiny_study

    study = tiny_study(tmp_path_factory)
    return RealStudy(study.storage, study.name, study.root)


def _timing(ratio: float, baseline_s: float = 1e-3) -> dict:
    return {"baseline_s": baseline_s, "candidate_s": ratio * baseline_s, "ratio": ratio,
            "ratio_ci": [ratio * 0.95, ratio * 1.05], "n_batches": 30}


def _plan(scopes: list[tuple[str | None, int, int]]) -> dict:
    return {"schema_version": 1, "scopes": [{"name": n, "first_op": a, "last_op": b} for n, a, b in scopes],
            "options": {"fallback_ops": [], "max_fusion_size": 64}}


NPU_FUSION = {"planned": ["sk0"], "fused": [], "not_fused": ["sk0"], "unexpected": ["sk9"]}


def hostile_study(fusion: dict | None = None) -> optuna.Study:
    """Four ops, five trials (exact, mismatch, best, exact, crash); op names, module paths,
    source files, kernel names and failure messages carry HTML that must never reach the
    page raw. ``fusion``: the best trial's ``observed.fusion``, as the npu backend records it."""
    study = optuna.create_study(direction="minimize")
    ops = [
        {"index": 0, "name": "x", "target": "pow", "module": "norm", "module_type": "RMSNorm", "source": "m.py:3"},
        {"index": 1, "name": EVIL, "target": EVIL, "module": EVIL_IMG, "module_type": EVIL, "source": f"{EVIL}.py:7"},
        {"index": 2, "name": "y", "target": "mul", "module": "", "module_type": "Net", "source": ""},
        {"index": 3, "name": "z", "target": "add", "module": "out", "module_type": "Net", "source": "m.py:9"},
    ]
    profile = {"step_us": 100.0, "busy_us": 60.0, "gap_us": 40.0, "steps": 20,
               "top_kernels": [{"name": EVIL, "total_us": 30.0, "count": 1}, {"name": "aten::add", "total_us": 5.0, "count": 1}]}
    for key, value in {"model": f"{EVIL}.py", "backend": "inductor", "threads": 1, "input_sets": 3, "ops": ops,
                       "boundaries": [0, 1, 2], "environment": {"torch": EVIL, "backend": "inductor", "threads": "1"},
                       "profile_baseline": profile, "profile_best": {**profile, "busy_us": 50.0, "gap_us": 20.0,
                                                                     "step_us": 70.0}}.items():
        study.set_user_attr(key, value)
    dist = {"block:0": optuna.distributions.CategoricalDistribution(["eager", "fuse"]),
            "max_fusion_size": optuna.distributions.CategoricalDistribution([16, 64, 256])}
    mismatch = {"input_set": 0, "output_index": 0, "count": 5, "first_index": [0, 1], "max_ulp": 7,
                "reason": "values", "detail": EVIL}
    trials = [
        ("unfused", [(None, 0, 3)], 1.0, [], {"block:0": "eager", "max_fusion_size": 64}),
        ("fuse-all", [("sk0", 0, 3)], 0.6, [mismatch], {"block:0": "fuse", "max_fusion_size": 64}),
        (None, [("sk0", 0, 1), (None, 2, 2)], 0.8, [], {"block:0": "fuse", "max_fusion_size": 16}),
        (None, [("sk0", 1, 3)], 0.9, [], {"block:0": "eager", "max_fusion_size": 256}),
    ]
    for anchor, scopes, ratio, mismatches, params in trials:
        observed = {"fusion": fusion} if fusion and ratio == 0.8 else {}
        attrs = {"plan": _plan(scopes), "timing": _timing(ratio), "mismatches": mismatches, "observed": observed}
        if anchor:
            attrs["anchor"] = anchor
        if mismatches:
            attrs["smallest_failing_range"] = {"range": [1, 1], "op_types": [EVIL], "runs": 2}
        study.add_trial(optuna.trial.create_trial(value=ratio, params=params, distributions=dist, user_attrs=attrs,
                                                  constraints={"bitwise": float(len(mismatches))}))
    study.add_trial(optuna.trial.create_trial(
        state=optuna.trial.TrialState.FAIL, params={"block:0": "fuse", "max_fusion_size": 64}, distributions=dist,
        user_attrs={"plan": _plan([(EVIL, 0, 3)]), "failure": f"crash: {EVIL} {EVIL_IMG}"}))
    return study
