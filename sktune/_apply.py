"""``sktune.apply``: a tuned plan back into ``torch.compile``, without editing the model.

The returned module is ``torch.compile(model, backend=<sktune>, fullgraph=True,
dynamic=False)``. On the first call Dynamo captures the forward; sktune builds the same
op list it tuned on (``graph.capture.opgraph_from``), checks that the plan fits it, and
hands the graph to the backend (``inductor``: the plan's regions compiled by Inductor;
``npu``: SuperKernel scope markers inserted, compiled by ``npugraph_ex``).

Call the result the way sktune tuned it: the model in eval mode, under
``torch.no_grad()``, at the thread count of the study. With autograd on, Dynamo may
capture a different graph, and the regions would be compiled for training, which was
never verified.
"""

from __future__ import annotations

import logging
import weakref
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import fx

from sktune.backends import Backend, CompiledModel, get_backend
from sktune.errors import PlanError
from sktune.graph.capture import opgraph_from
from sktune.graph.model_tensors import model_tensors, tensor_identity
from sktune.graph.opgraph import OpGraph
from sktune.plan import Plan, check_plan

log = logging.getLogger(__name__)

#: Dynamo's default recompile limit (``torch._dynamo.config.recompile_limit``, older releases'
#: ``cache_size_limit``, still its alias): with ``dynamic=False`` each input shape is a graph of
#: its own, and ``fullgraph=True`` fails at the limit's next shape.
DYNAMO_RECOMPILE_LIMIT = 8


def recompile_limit_for(shapes: int) -> int | None:
    """The recompile limit for ``shapes`` served shapes: the default's headroom on top (for
    other guards: a grad mode, a training flag); None where the default holds them."""
    return shapes + DYNAMO_RECOMPILE_LIMIT if shapes > DYNAMO_RECOMPILE_LIMIT else None


def raise_recompile_limit(shapes: int) -> None:
    """Let Dynamo capture ``shapes`` graphs of one forward (a serving stack's shapes)."""
    import torch._dynamo

    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"  # older: no alias
    limit = recompile_limit_for(shapes)
    if limit is not None and limit > getattr(config, name):
        log.info("sktune.apply: Dynamo's recompile limit raised from %d to %d (the plan's %d shapes)",
                 getattr(config, name), limit, shapes)
        setattr(config, name, limit)

EXPORT_VERSION_KEY = "sktune_export_version"


@dataclass(frozen=True)
class TunedPlan:
    """A plan and what is known about the graph it was tuned on (op count, op types)."""

    plan: Plan
    n_ops: int | None = None
    op_types: tuple[str, ...] | None = None
    # The user inputs' [shape, dtype] at each shape the plan was verified on, by shape name
    # (an export document says; None: unknown, nothing is checked).
    verified_shapes: dict[str, list[list[Any]]] | None = None
    verify_only: tuple[str, ...] = ()  # the export's verify_only_shapes: served, verified or not
    backend: str | None = None  # the backend an export document's study was tuned with

    @property
    def served_shapes(self) -> int:
        """How many shapes the plan is served at, as far as the export says."""
        return len(set(self.verified_shapes or ()) | set(self.verify_only))

    @classmethod
    def parse(cls, plan: Plan | dict[str, Any]) -> "TunedPlan":
        """A ``Plan``, a plan's JSON (optionally with ``n_ops``), or a ``sktune export`` document."""
        if isinstance(plan, Plan):
            return cls(plan)
        if not isinstance(plan, dict):
            raise PlanError(f"expected a Plan or a plan dict, got {type(plan).__name__}")
        n_ops, op_types, verified, verify_only, backend = plan.get("n_ops"), None, None, (), None
        if EXPORT_VERSION_KEY in plan:  # the whole `sktune export --format json` document
            provenance = plan.get("provenance") or {}
            n_ops, op_types, backend = provenance.get("n_ops"), provenance.get("op_types"), provenance.get("backend")
            verified = provenance.get("verified_shapes")
            verify_only = tuple(provenance.get("verify_only_shapes") or ())
            plan = plan.get("plan") or {}
        try:
            parsed = Plan.from_json(plan)
        except (KeyError, TypeError, ValueError) as exc:
            raise PlanError(f"not a valid sktune plan: {type(exc).__name__}: {exc}") from exc
        return cls(parsed, None if n_ops is None else int(n_ops), None if op_types is None else tuple(op_types),
                   verified, verify_only, backend if isinstance(backend, str) else None)

    def warn_if_unverified(self, inputs: Sequence[Any]) -> None:
        """Warn when the user's inputs match none of the verified shapes' inputs.

        Dynamo may order its arguments otherwise than the forward's, so a verified shape
        matches when its inputs' [shape, dtype] are the inputs' (as multisets).
        """
        if not self.verified_shapes:
            return
        have = Counter(_shape_key(list(a.shape), str(a.dtype)) for a in inputs if isinstance(a, torch.Tensor))
        for verified in self.verified_shapes.values():
            if Counter(_shape_key(shape, dtype) for shape, dtype in verified) == have:
                return
        log.warning("sktune.apply: the model is called at input shapes the plan was not verified on (verified: %s); "
                    "bitwise equality and speed are unknown here: tune with input_shapes() including this shape",
                    ", ".join(f"{name} {[s for s, _ in shapes]}" for name, shapes in self.verified_shapes.items()))

    def check_fits(self, graph: OpGraph) -> None:
        """Refuse a graph other than the tuned one: op count, op types, then the plan's cuts."""
        have = len(graph.ops)
        differs = "the model's graph differs from the tuned one"
        hint = ("apply the plan to the model it was tuned on, in eval mode, called under torch.no_grad() "
                "with inputs of the tuned shapes")
        if self.n_ops is not None and have != self.n_ops:
            raise PlanError(f"{differs}: it has {have} ops, the plan was tuned on a graph of {self.n_ops} ops; {hint}")
        if self.op_types is not None:
            for op, tuned in zip(graph.ops, self.op_types):
                if op.target != tuned:
                    raise PlanError(f"{differs}: op {op.index} is {op.target!r} here but {tuned!r} in the tuned "
                                    f"graph ({have} ops in both); {hint}")
        reach = max((s.last_op + 1 for s in self.plan.scopes), default=0)
        if reach > have:
            raise PlanError(f"{differs}: it has {have} ops, the plan's scopes reach op {reach - 1} "
                            f"(the tuned graph had at least {reach} ops); {hint}")
        check_plan(self.plan, have, graph.boundaries)


@dataclass
class AppliedPlan:
    """The ``torch.compile`` backend that ``apply`` installs; keeps what it compiled.

    Each graph Dynamo captures (one per recompile) is checked and compiled on its first
    call, so that a plan that does not fit raises its ``PlanError`` at the call, not
    wrapped in Dynamo's ``BackendCompilerFailed``.
    """

    tuned: TunedPlan
    backend: Backend
    # The model apply compiled, to tell the user's inputs among Dynamo's arguments (its own
    # tensors are the rest).
    model: "weakref.ReferenceType[torch.nn.Module]"
    graphs: list[OpGraph] = field(default_factory=list)  # as captured (ops, cuts; no arguments), in compile order
    compiled: list[CompiledModel] = field(default_factory=list)  # what the backend returned for each

    def __call__(self, gm: fx.GraphModule, example_inputs: Sequence[Any]) -> CompiledModel:
        # Dynamo's sources of the arguments are in the graph now, and gone by its first call.
        return _CompileOnFirstCall(self, gm, _passed_by_caller(gm))

    def user_inputs(self, args: Sequence[Any], passed: list[bool] | None) -> list[Any]:
        """The arguments that the user's call passed, among Dynamo's (``passed``, from their
        sources): not a parameter, a global or a tensor held in the module's list (a parameter
        with an input's shape made a call at an unverified shape look verified). Without
        sources (another torch), the arguments less the module's own tensors."""
        if passed is not None and len(passed) == len(args):
            return [a for a, by_caller in zip(args, passed) if by_caller]
        model = self.model()
        held = {} if model is None else model_tensors(model)
        return [a for a in args if not (isinstance(a, torch.Tensor) and tensor_identity(a) in held)]

    def compile_graph(self, gm: fx.GraphModule, args: Sequence[torch.Tensor],
                      passed: list[bool] | None = None) -> CompiledModel:
        if torch.is_grad_enabled():
            log.warning("sktune.apply: the model is called with autograd on; sktune tuned and verified it under "
                        "torch.no_grad(), and the fused regions are compiled for inference: their outputs do not "
                        "require grad (call the model under torch.no_grad())")
        self.tuned.warn_if_unverified(self.user_inputs(args, passed))
        graph = opgraph_from(gm, list(args))
        self.tuned.check_fits(graph)
        # A plan tuned for another backend (its options) is refused here, with the reason.
        self.backend.check_plan_options(graph, self.tuned.plan.option_dict)
        compiled = self.backend.compile(graph, self.tuned.plan)
        self.graphs.append(replace(graph, flat_args=(), input_positions=()))  # keep no tensors alive
        self.compiled.append(compiled)
        return compiled


class _CompileOnFirstCall:
    """What Dynamo gets back: compiles with the first call's real arguments, then forwards."""

    def __init__(self, owner: AppliedPlan, gm: fx.GraphModule, passed: list[bool] | None) -> None:
        self.owner = owner
        self.gm: fx.GraphModule | None = gm
        self.passed = passed  # each argument: passed by the user's call (None: not known)
        self.fn: CompiledModel | None = None

    def __call__(self, *args: Any) -> Any:
        if self.fn is None:
            assert self.gm is not None
            self.fn = self.owner.compile_graph(self.gm, args, self.passed)
            self.gm = None
        return self.fn(*args)


def _passed_by_caller(gm: fx.GraphModule) -> list[bool] | None:
    """For each placeholder: whether Dynamo's source for it is an argument of the call, reached
    by indexing only (``L['x']``, ``L['args'][0]``, ``L['xs'][1]``), not through an attribute
    or a module (``L['self']._parameters['w']``, ``L['fn']._modules['0']…``, ``L['self'].cache[0]``)
    nor a global; None where a source is missing."""
    flags = []
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        source = getattr(node.meta.get("grapharg"), "source", None)
        if source is None:
            return None
        kinds = []
        while source is not None:
            kinds.append(type(source).__name__)
            source = getattr(source, "base", None)
        flags.append(kinds[-1] == "LocalSource" and not any(k == "AttrSource" or "Module" in k or "Param" in k
                                                             for k in kinds))
    return flags


def _shape_key(shape: Sequence[int], dtype: str) -> tuple[tuple[int, ...], str]:
    return tuple(int(d) for d in shape), dtype


_APPLIED: "weakref.WeakKeyDictionary[torch.nn.Module, AppliedPlan]" = weakref.WeakKeyDictionary()


def apply(model: torch.nn.Module, plan: Plan | dict[str, Any], backend: str | None = None) -> torch.nn.Module:
    """``model`` compiled with ``plan`` applied; use it in eval mode under ``torch.no_grad()``.

    ``plan`` is a ``Plan``, a plan's JSON (``best_plan`` of the summary; an ``n_ops`` key
    makes the op-count check exact) or the document ``sktune export --format json``
    writes. ``backend``: default, the one the export document's study was tuned with, else
    ``inductor``. A model whose captured graph is not the tuned one raises ``PlanError`` on
    the first call, with both op counts.
    """
    tuned = TunedPlan.parse(plan)
    backend = backend or tuned.backend or "inductor"
    if model.training:
        log.warning("sktune.apply: the model is in training mode; sktune tunes it in eval mode (call model.eval())")
    raise_recompile_limit(tuned.served_shapes)  # or the 9th shape fails (fullgraph=True)
    applied = AppliedPlan(tuned, get_backend(backend), weakref.ref(model))
    compiled = torch.compile(model, backend=applied, fullgraph=True, dynamic=False)
    _APPLIED[compiled] = applied
    return compiled


def applied_plan(module: torch.nn.Module) -> AppliedPlan:
    """The backend record of a module ``apply`` returned: its plan and compiled graphs."""
    try:
        return _APPLIED[module]
    except KeyError:
        raise ValueError("this module was not returned by sktune.apply") from None
