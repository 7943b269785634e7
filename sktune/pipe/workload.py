"""The workload: what the worker found at start-up, as the tuner reads it.

``TrialRunner.describe`` builds it in the worker process: the captured graph's ops and legal
cuts, what the backend can tune, the kernel-less ops, the measured op profile, the
exactness probe's answers, the environment, where start-up time went, the model file's
hash, the graph's code and weights digests, and the input shapes (per served shape too).
JSON appears only at the pipe (``tuning/supervisor.py``), in benchmark tables
(``benchlib/exhaustive.py``) and in the study, where ``resume.prepare`` stores its parts
under ``StudyAttr`` keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from sktune.capabilities import Capabilities
from sktune.graph.opgraph import Op
from sktune.measure.op_profile import OpProfile
from sktune.space.exactness import Exactness

InputShapes = list[list[Any]]  # per user input: [shape, dtype], as studies and exports record them


@dataclass(frozen=True)
class ServedShape:
    """One input shape the model is served at, with its weight in the traffic mix."""

    weight: float
    input_shapes: InputShapes

    def to_json(self) -> dict[str, Any]:
        return {"weight": self.weight, "input_shapes": self.input_shapes}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ServedShape":
        return cls(data["weight"], data.get("input_shapes"))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Workload:
    """The model as the search sees it: one description per worker start-up."""

    ops: tuple[Op, ...]
    boundaries: tuple[int, ...]  # i in boundaries: a cut between op i and op i+1 is legal
    capabilities: Capabilities
    environment: dict[str, str]  # versions and device facts, with "threads" and "backend"
    model_sha256: str
    input_shapes: InputShapes  # the heaviest shape's (the only one's for a one-shape model)
    kernelless: tuple[bool, ...] = ()  # op i launches no kernel (a view, a no-op cast); (): not known
    op_profile: OpProfile | None = None  # None: not measured (the study's is used, or it has none)
    exactness: dict[str, dict[str, Any]] = field(default_factory=dict)  # the probe's answers by op type; {}: none
    startup_s: dict[str, float] | None = None  # where the worker's start-up time went
    # Static-kernel compiles of the start-up (the references), as a trial's static_compile;
    # None where they are inside startup_s's wall time already (a host) or there are none.
    startup_static: dict[str, Any] | None = None
    shapes: dict[str, ServedShape] = field(default_factory=dict)  # heaviest first; {}: no input_shapes()
    # The probe's answers at each named shape (``exactness`` merges them): a shape's own yardsticks
    # are built from its own answers (tuning/yardsticks.py); {}: no named shapes or no probe.
    exactness_by_shape: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    # What the captured graph computes (graph/digest.py): its code and its weights' digests;
    # {}: not known (a workload from an older sktune).
    digests: dict[str, str] = field(default_factory=dict)
    verify_shapes: tuple[str, ...] = ()  # verify_shapes() in the model file: checked at start-up, never tuned
    left_out_shapes: tuple[str, ...] = ()  # input_shapes() that --shapes left out: verify-only here, listed first

    @property
    def targets(self) -> list[str]:
        """Each op's type, by index."""
        return [op.target for op in self.ops]

    @property
    def modules(self) -> list[str]:
        """Each op's module path, by index."""
        return [op.module for op in self.ops]

    @property
    def backend(self) -> str | None:
        return self.environment.get("backend")

    @property
    def shape_weights(self) -> tuple[tuple[str, float], ...]:
        """(name, weight) of each served shape, heaviest first; (): a model without shapes."""
        return tuple((name, s.weight) for name, s in self.shapes.items())

    def exact(self) -> Exactness:
        """The probe's answers as the rule that makes plans hopeless (no answers: none is)."""
        return Exactness.from_probe(self.exactness)

    def exact_at(self, shape: str) -> Exactness:
        """The probe's answers at one shape only (none there: the merged ones)."""
        return Exactness.from_probe(self.exactness_by_shape.get(shape, self.exactness))

    def ops_json(self) -> list[dict[str, Any]]:
        return [op.to_json() for op in self.ops]

    def op_profile_json(self) -> dict[str, Any]:
        return {} if self.op_profile is None else self.op_profile.to_json()

    def shapes_json(self) -> dict[str, dict[str, Any]]:
        return {name: s.to_json() for name, s in self.shapes.items()}

    def with_space_inputs(self, op_profile: dict[str, Any] | None, exactness: dict[str, Any] | None,
                          exactness_by_shape: dict[str, Any] | None = None) -> "Workload":
        """This workload with another op profile and probe answers (as stored: ``{}`` for none;
        ``exactness_by_shape`` None: this workload's own)."""
        by_shape = self.exactness_by_shape if exactness_by_shape is None else dict(exactness_by_shape)
        return replace(self, op_profile=OpProfile.from_json(op_profile) if op_profile else None,
                       exactness=dict(exactness or {}), exactness_by_shape=by_shape)

    def to_json(self) -> dict[str, Any]:
        return {
            "ops": self.ops_json(), "boundaries": list(self.boundaries),
            "capabilities": self.capabilities.to_json(), "kernelless": list(self.kernelless),
            "environment": self.environment, "op_profile": self.op_profile_json(), "exactness": self.exactness,
            "startup_s": self.startup_s, "startup_static": self.startup_static,
            "model_sha256": self.model_sha256, "input_shapes": self.input_shapes,
            "shapes": self.shapes_json(), "exactness_by_shape": self.exactness_by_shape,
            "digests": self.digests, "verify_shapes": list(self.verify_shapes),
            "left_out_shapes": list(self.left_out_shapes),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Workload":
        profile = data.get("op_profile")
        return cls(
            ops=tuple(Op.from_json(o) for o in data["ops"]), boundaries=tuple(data["boundaries"]),
            capabilities=Capabilities.from_json(data["capabilities"]), environment=dict(data["environment"]),
            model_sha256=data["model_sha256"], input_shapes=data["input_shapes"],
            kernelless=tuple(data.get("kernelless") or ()),
            op_profile=OpProfile.from_json(profile) if profile else None,
            exactness=dict(data.get("exactness") or {}), startup_s=data.get("startup_s"),
            startup_static=data.get("startup_static"),
            shapes={name: ServedShape.from_json(s) for name, s in (data.get("shapes") or {}).items()},
            exactness_by_shape=dict(data.get("exactness_by_shape") or {}),
            digests=dict(data.get("digests") or {}),
            verify_shapes=tuple(data.get("verify_shapes") or ()),
            left_out_shapes=tuple(data.get("left_out_shapes") or ()),
        )


__all__ = ["InputShapes", "ServedShape", "Workload"]
