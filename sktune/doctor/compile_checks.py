"""Checks of what npugraph_ex accepts: sktune's scope markers after AOT, and the
SuperKernel option map of the detected key set (docs/npu_api.md, "Scope markers",
"Compiling with npugraph_ex")."""

from __future__ import annotations

from typing import Any

from sktune.backends.npu_option_schema import DEBUG, SCHEMA, KeySet
from sktune.doctor.records import CheckResult, confirmed, differs
from sktune.doctor.session import DoctorSession
from sktune.plan import Plan

#: Matches no kernel: lets a pattern key be sent without changing what it governs.
NO_KERNEL = ".*SktuneDoctorNoSuchKernel.*"
#: Pattern keys given a pattern that matters: the safe flush keeps the gather exact.
_PATTERNS = {"dcci_after_kernel_end": [".*"]}


def check_marker_pairing(session: DoctorSession) -> CheckResult:
    """Paired markers are accepted after AOT, and a graph whose last end was removed is refused."""
    name = "marker_pairing"
    try:
        session.main_run()
    except Exception as exc:
        return differs(name, f"a graph with paired sktune markers was refused: {type(exc).__name__}: {exc}")
    refused = _unpaired_refusal(session)
    return judge_marker_pairing(refused)


def judge_marker_pairing(refusal: str | None) -> CheckResult:
    name = "marker_pairing"
    if refusal is None:
        return differs(name, "a graph with an unpaired begin marker was accepted and ran",
                       "sktune relies on npugraph_ex refusing unpaired markers")
    return confirmed(name, f"paired markers compiled and ran; an unpaired begin was refused ({refusal})")


def _unpaired_refusal(session: DoctorSession) -> str | None:
    """Compile (and run once) the main plan with its last end marker removed; the error, if any."""
    from torch._dynamo import lookup_backend

    backend, tiny = session.backend, session.tiny
    plan = Plan.make(tiny.placement, session.main_options)
    options = backend.compile_options(plan)  # outside the try: a bad option is no refusal of the markers
    marked = backend.marked_graph(tiny.graph, plan)
    ends = [n for n in marked.graph.nodes if "super_kernel_scope_end" in str(n.target)]
    marked.graph.erase_node(ends[-1])
    marked.recompile()
    try:
        compiled = lookup_backend("npugraph_ex")(marked, list(tiny.graph.flat_args),
                                                 options=options)
        compiled(*tiny.args)  # the refusal may come at the first forward instead
    except Exception as exc:
        return " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
    return None


def full_option_params(key_set: KeySet) -> dict[str, Any]:
    """Every int, pattern-list and nested key of ``key_set`` as plan options: ints at their
    defaults, patterns matching no kernel except the safe flush. The two ``*_extend``
    strings are left out: their keys are CANN's and none is documented."""
    params: dict[str, Any] = {}
    debug: dict[str, Any] = {}
    for spec in SCHEMA:
        top = spec.name.split(".", 1)[0]
        if top not in key_set.keys(spec.section) or spec.kind in ("str", "dict"):
            continue
        value = spec.default if spec.kind == "int" else _PATTERNS.get(spec.name, [NO_KERNEL])
        if spec.section == DEBUG:
            debug[spec.name] = value
        else:
            params[spec.name] = value  # nested ones dotted, as the search writes them
    if debug:
        params[DEBUG] = debug
    return params


def check_options_accepted(session: DoctorSession) -> CheckResult:
    """The full option map compiles, runs its first forward and stays bitwise exact."""
    name = "options_accepted"
    params = full_option_params(session.backend.key_set)
    keys = sorted(k for k in params if k != DEBUG) + sorted(params.get(DEBUG, {}))
    try:
        run = session.run("full_options", session.tiny.placement, params)
    except Exception as exc:
        return differs(name, f"refused: {type(exc).__name__}: {exc}", f"keys sent: {', '.join(keys)}")
    if run.mismatches:
        return differs(name, f"accepted, but outputs differ from the reference: {run.mismatches[0].detail}")
    return confirmed(name, f"{len(keys)} keys of the {session.backend.key_set.name} key set accepted at compile "
                           f"and first forward, outputs bitwise equal: {', '.join(keys)}")
