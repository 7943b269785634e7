"""Checks of the static-kernel cache (README, "Static kernels and their cache, by
release"): a compile repeating an option set reuses its kernels, another option set
compiles afresh, and a package built under one scope placement serves another (scopes
are in no key) with outputs still bitwise equal to the unfused reference.

A hit is told from a miss by the backend's static-compile record of each first forward:
on a host the wall time of compile + first forward (a hit takes seconds, a miss minutes),
on an emulated Ascend the emulated seconds it states. Doctor runs in a fresh working
directory, so the on-disk cache (``static_kernel_compile_outputs/``) starts empty.
"""

from __future__ import annotations

from dataclasses import dataclass

from sktune.doctor.records import CheckResult, confirmed, could_not, differs
from sktune.doctor.session import CompiledRun, DoctorSession

#: A hit costs under this share of the first (uncached) compile.
HIT_SHARE = 0.2


@dataclass(frozen=True)
class Compile:
    """One compile as the cache checks judge it."""

    label: str
    seconds: float
    expect_hit: bool
    bitwise: bool


def _compile(run: CompiledRun, expect_hit: bool) -> Compile:
    seconds = float(run.static["seconds"]) if run.static else float("nan")
    return Compile(run.label, seconds, expect_hit, not run.mismatches)


def _emulated(run: CompiledRun) -> str:
    return " (emulated)" if run.static and run.static.get("emulated") else ""


def _cache_off(session: DoctorSession) -> str | None:
    """Why trials here never reuse a static kernel, if they do not (``npu_static_cache``)."""
    rule = session.backend.static_cache
    if rule.disable_per_trial:
        return f"trials on torch-npu {rule.version} turn the static-kernel cache off: {rule.describe()}"
    return None


def _built_before(session: DoctorSession, first: Compile) -> str | None:
    """Why no compile here can miss, where the release's key is the op hash alone
    (2.10.0.post2): doctor's unfused reference built every op first, whatever the options.
    Whatever the seconds: on a host every compile takes real time (graph capture, the
    SuperKernel build), so a first compile's seconds above zero do not make it a miss."""
    rule = session.backend.static_cache
    if rule.disk_cache:
        return None
    keyed = "keys" if rule.read else "is taken to key (as 2.10.0.post2, read from its wheel, does)"
    return (f"torch-npu {rule.version} {keyed} its in-process static-kernel cache by the op hash alone, so "
            f"the first compile ({first.label}) reused the kernels doctor's unfused reference had built "
            "and no compile here could miss. On this release a worker builds each op once, under the "
            "first options it meets, and reuses that kernel under every other option set")


def check_cache_option_sets(session: DoctorSession) -> CheckResult:
    name = "static_cache_option_sets"
    off = _cache_off(session)
    if off:
        return could_not(name, off)
    first = session.main_run()
    other = session.run("other_options", session.tiny.placement, session.other_options)
    again = session.run("main_again", session.tiny.placement, session.main_options)
    # Releases whose key leaves the option map out reuse (stale) kernels for other options.
    keyed = session.backend.static_cache.options_in_key
    return judge_cache(name, _compile(first, False), [_compile(other, not keyed), _compile(again, True)],
                       _emulated(first), _built_before(session, _compile(first, False)))


def check_cache_scope_placements(session: DoctorSession) -> CheckResult:
    name = "static_cache_scope_placements"
    off = _cache_off(session)
    if off:
        return could_not(name, off)
    first = session.main_run()
    moved = session.run("other_placement", session.tiny.other_placement, session.main_options)
    return judge_cache(name, _compile(first, False), [_compile(moved, True)], _emulated(first),
                       _built_before(session, _compile(first, False)))


def judge_cache(name: str, first: Compile, later: list[Compile], unit_note: str = "",
                why_no_miss: str | None = None) -> CheckResult:
    """Each later compile is a hit (under ``HIT_SHARE`` of the first one's seconds) exactly
    where expected, and every compile's outputs are bitwise equal to the reference.
    ``why_no_miss``: what made the first compile free, where that is known."""
    timings = "static compile: " + ", ".join(f"{c.label} {c.seconds:.1f} s" for c in (first, *later)) + unit_note
    inexact = [c.label for c in (first, *later) if not c.bitwise]
    if inexact:  # a stale kernel reused, whatever the timing can tell: the finding that matters
        cause = f"; {why_no_miss}" if why_no_miss else ""
        return differs(name, f"outputs not bitwise equal to the unfused reference: {', '.join(inexact)}",
                       timings + cause)
    if why_no_miss:  # no miss to time a hit against, real seconds or not
        return could_not(name, why_no_miss, timings)
    if not first.seconds > 0:
        return could_not(name, f"the first compile ({first.label}) took {first.seconds} s: cannot tell a hit",
                         timings)
    wrong = [c for c in later if (c.seconds < HIT_SHARE * first.seconds) != c.expect_hit]
    if wrong:
        said = "; ".join(f"{c.label} was {'a miss' if c.expect_hit else 'a hit'}, expected "
                         f"{'a hit' if c.expect_hit else 'a miss'}" for c in wrong)
        return differs(name, said, timings)
    hits = ", ".join(f"{c.label} {'hit' if c.expect_hit else 'miss'}" for c in later)
    return confirmed(name, f"{hits} as expected, outputs bitwise equal to the unfused reference: {timings}")
