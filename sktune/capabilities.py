"""What a backend can tune, as one object: the search is built from it and plans are
checked against it.

A backend declares it for one captured graph (``Backend.capabilities``); it crosses the
worker pipe as JSON and comes back as the same object in the tuner's process.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sktune.errors import PlanError

ANCHOR_SETS = ("compiler", "superkernel")


@dataclass(frozen=True)
class OptionSpec:
    """One tunable backend option: its domain, default, and whether it may change numerics."""

    name: str
    choices: tuple[Any, ...]
    default: Any
    may_change_numerics: bool = False
    doc: str = ""
    exact_choice: Any = None  # the value known to keep eager numerics, when one is known
    # The value the fuse-all yardstick takes when it is not the default (None: the default):
    # fuse-all measures the compiler's own whole-graph fusion, not a cheaper form of it.
    fuse_all_choice: Any = None
    # Values that make a compile much slower (tens of seconds on a deep model). The sampler
    # never picks them; after the search the best plan is tried with each (tuning/refine.py).
    costly_choices: tuple[Any, ...] = ()
    # Choices that keep exact only the op types named and drop the safety elsewhere (npu:
    # ``only:T`` flushes the cache around T alone, ``none`` around nothing): after a mismatch
    # is bisected to some op types, the search tries the choice that guards them
    # (tuning/dcci_seed.py). (): the option has no such choices.
    guards: tuple[tuple[Any, tuple[str, ...]], ...] = ()

    @property
    def sampled_choices(self) -> tuple[Any, ...]:
        """The choices the search samples from: all but the costly ones."""
        return tuple(c for c in self.choices if c not in self.costly_choices)

    def guarded(self, choice: Any) -> frozenset[str] | None:
        """The op types ``choice`` alone keeps exact; None: it is not a guard choice."""
        return next((frozenset(types) for c, types in self.guards if c == choice), None)

    def guard_for(self, culprit_types: Sequence[str]) -> Any | None:
        """The sampled guard choice that covers every guardable type among ``culprit_types``,
        with the fewest types; None when the culprit holds none or no choice covers them."""
        guards = {c: frozenset(types) for c, types in self.guards if c in self.sampled_choices}
        wanted = frozenset(culprit_types) & frozenset().union(*guards.values())
        covering = [c for c, types in guards.items() if wanted and wanted <= types]
        return min(covering, key=lambda c: len(guards[c])) if covering else None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "choices": list(self.choices), "default": self.default,
                "may_change_numerics": self.may_change_numerics, "doc": self.doc,
                "exact_choice": self.exact_choice, "fuse_all_choice": self.fuse_all_choice,
                "costly_choices": list(self.costly_choices),
                **({"guards": [[c, list(types)] for c, types in self.guards]} if self.guards else {})}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "OptionSpec":
        return cls(data["name"], tuple(data["choices"]), data["default"], bool(data.get("may_change_numerics")),
                   data.get("doc", ""), data.get("exact_choice"), data.get("fuse_all_choice"),
                   tuple(data.get("costly_choices") or ()),
                   tuple((c, tuple(types)) for c, types in data.get("guards") or ()))


@dataclass(frozen=True)
class Capabilities:
    """Everything the search needs to know about a backend, for one graph."""

    options: tuple[OptionSpec, ...] = ()
    fallback_candidates: tuple[str, ...] = ()  # op types that can stay in a region as their own kernel
    unsafe_op_types: frozenset[str] = frozenset()  # known to break bitwise equality when fused
    unfusable_op_types: frozenset[str] = frozenset()  # always separate kernels: cheap places to cut
    probes_exactness: bool = False  # one op compiled alone is cheap enough to probe each op type
    fallback_option: str | None = None  # the plan option that lists fallbacks; None: no fallbacks
    unmarked_plans: bool = False  # a plan without scopes means "the compiler decides", not "fuse all"
    anchor_set: str = "compiler"  # "compiler" (fuse-all variants) or "superkernel" (hand-written scopes)
    # Options whose exact choice earns a fuse-everything anchor of its own ("fuse-all+<name>").
    fuse_all_variants: tuple[str, ...] = field(default=())
    # The most distinct scope names a plan may have (None: no limit). Past CANN's cap extra
    # scopes are silently not fused (docs/superkernel.md, "Marking scopes").
    max_scopes: int | None = None

    def __post_init__(self) -> None:
        # The space keeps under the cap by reusing names, which needs two to alternate
        # (space/scope_cap.py).
        if self.max_scopes is not None and self.max_scopes < 2:
            raise ValueError(f"max_scopes must be None or at least 2, got {self.max_scopes}")
        if self.anchor_set not in ANCHOR_SETS:
            raise ValueError(f"anchor_set {self.anchor_set!r} is not one of {ANCHOR_SETS}")
        unknown = set(self.fuse_all_variants) - {o.name for o in self.options}
        if unknown:
            raise ValueError(f"fuse-all variants {sorted(unknown)} are not options of the backend")

    def to_json(self) -> dict[str, Any]:
        return {
            "options": [o.to_json() for o in self.options],
            "fallback_candidates": list(self.fallback_candidates),
            "unsafe_op_types": sorted(self.unsafe_op_types),
            "unfusable_op_types": sorted(self.unfusable_op_types),
            "probes_exactness": self.probes_exactness,
            "fallback_option": self.fallback_option,
            "unmarked_plans": self.unmarked_plans,
            "anchor_set": self.anchor_set,
            "fuse_all_variants": list(self.fuse_all_variants),
            "max_scopes": self.max_scopes,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Capabilities":
        return cls(
            options=tuple(OptionSpec.from_json(o) for o in data["options"]),
            fallback_candidates=tuple(data["fallback_candidates"]),
            unsafe_op_types=frozenset(data["unsafe_op_types"]),
            unfusable_op_types=frozenset(data["unfusable_op_types"]),
            probes_exactness=bool(data["probes_exactness"]),
            fallback_option=data["fallback_option"],
            unmarked_plans=bool(data["unmarked_plans"]),
            anchor_set=data["anchor_set"],
            fuse_all_variants=tuple(data["fuse_all_variants"]),
            max_scopes=data.get("max_scopes"),
        )

    def check_options(self, options: Mapping[str, Any]) -> None:
        """Refuse plan options this backend did not declare: an unknown key, a value outside
        its domain, or a fallback that is not among the candidates (``PlanError``)."""
        domains = {o.name: o.choices for o in self.options}
        for key, value in options.items():
            if key == self.fallback_option and self.fallback_option is not None:
                unknown = sorted(set(value) - set(self.fallback_candidates))
                if unknown:
                    raise PlanError(f"plan falls back on {unknown}, not among the backend's fallbacks "
                                    f"{list(self.fallback_candidates)}")
            elif key not in domains:
                raise PlanError(f"plan option {key!r} is not in the backend's option space "
                                f"({', '.join(sorted(domains)) or 'no options'})")
            elif value not in domains[key]:
                raise PlanError(f"plan option {key}={value!r} is outside its domain {list(domains[key])}")

    @property
    def exact_options(self) -> dict[str, Any]:
        """Every option at the value known to keep eager numerics (e.g. no mm+add → addmm)."""
        return {o.name: o.exact_choice for o in self.options if o.exact_choice is not None}

    def narrowed(self, option_names: set[str] | None) -> "Capabilities":
        """The same with only the options in ``option_names`` (None: all), as the search
        benchmark narrows the space until every plan can be measured."""
        if option_names is None:
            return self
        if unknown := sorted(option_names - {o.name for o in self.options}):
            raise PlanError(f"option(s) {', '.join(unknown)} not in this graph's option space (a backend offers "
                            "some options only where they can act, e.g. layout_optimization where a convolution "
                            f"runs): {', '.join(o.name for o in self.options) or 'none'}")
        options = tuple(o for o in self.options if o.name in option_names)
        kept = {o.name for o in options}
        return replace(self, options=options, fuse_all_variants=tuple(v for v in self.fuse_all_variants if v in kept))
