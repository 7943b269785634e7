"""Checks of what npugraph_ex accepts: sktune's scope markers after AOT, and the
SuperKernel option map of the detected key set (docs/npu_api.md, "Scope markers",
"Compiling with npugraph_ex")."""

from __future__ import annotations

from typing import Any

from sktune.backends.npu_option_schema import DEBUG, SCHEMA, KeySet
from sktune.doctor.records import CheckResult, confirmed, could_not, differs
from sktune.doctor.session import DoctorSession
from sktune.plan import Plan

#: Matches no kernel: lets a pattern key be sent without changing what it governs.
NO_KERNEL = ".*SktuneDoctorNoSuchKernel.*"
#: Pattern keys given a pattern that matters: the safe flush keeps the gather exact.
_PATTERNS = {"dcci_after_kernel_end": [".*"]}


#: What torch-npu's refusal of unpaired markers names (2.14.0, npu_fx_compiler._valid_graph).
MARKER_WORD = "super_kernel_scope"


def check_marker_pairing(session: DoctorSession) -> CheckResult:
    """Paired markers are accepted after AOT and the main run is bitwise equal to the unfused
    reference (this row always runs: a wrong result must not hide behind a cache row that
    bails out), and a graph whose last end was removed is refused."""
    name = "marker_pairing"
    try:
        main = session.main_run()
    except Exception as exc:
        return differs(name, f"a graph with paired sktune markers was refused: {type(exc).__name__}: {exc}")
    refused = _unpaired_refusal(session)
    mismatch = main.mismatches[0].detail if main.mismatches else None
    return judge_marker_pairing(refused, mismatch)


def judge_marker_pairing(refusal: str | None, mismatch: str | None = None) -> CheckResult:
    """``refusal``: the unpaired graph's error, None when it ran; ``mismatch``: the main run's
    first difference from the unfused reference, None when bitwise equal."""
    name = "marker_pairing"
    if refusal is None:
        pairing = "an unpaired begin was accepted and ran (sktune relies on npugraph_ex refusing unpaired markers)"
    elif MARKER_WORD not in refusal:
        pairing = f"an unpaired begin failed, but not with a refusal naming {MARKER_WORD}: {refusal}"
    else:
        pairing = f"an unpaired begin was refused ({refusal})"
    if mismatch is not None:  # the finding that matters most: it leads the row
        return differs(name, f"paired markers compiled and ran, but the outputs are not bitwise equal to the "
                             f"unfused reference: {mismatch}", pairing)
    if refusal is None:
        return differs(name, "a graph with an unpaired begin marker was accepted and ran",
                       "sktune relies on npugraph_ex refusing unpaired markers")
    if MARKER_WORD not in refusal:  # some other failure (device, memory): not the refusal relied on
        return could_not(name, pairing, "paired markers compiled, ran and were bitwise equal")
    return confirmed(name, f"paired markers compiled and ran, outputs bitwise equal to the unfused reference; "
                           f"{pairing}")


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
        return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
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
    from sktune.doctor.meta_checks import dump_differences

    return judge_options_accepted(len(keys), session.backend.key_set.name, ", ".join(keys),
                                  run.mismatches[0].detail if run.mismatches else None,
                                  dump_differences(session, run))


def judge_options_accepted(n_keys: int, key_set: str, keys: str, mismatch: str | None,
                           dump_differs: str | None) -> CheckResult:
    """``dump_differs``: how CANN's options dump of this compile differs from the request
    (None: it matches, or there is none to read). Accepted all the same: said in the row."""
    name = "options_accepted"
    if mismatch is not None:
        return differs(name, f"accepted, but outputs differ from the reference: {mismatch}")
    dump = "" if dump_differs is None else (
        f"; but CANN's options dump of this compile shows other options ({dump_differs})")
    return confirmed(name, f"{n_keys} keys of the {key_set} key set accepted at compile and first forward, "
                           f"outputs bitwise equal{dump}: {keys}")
