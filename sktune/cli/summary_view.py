"""The end of ``sktune run``: the summary as a table and lines (``print_summary``), from the
summary that ``--summary-json`` writes (``tuning/summary.py``)."""

from __future__ import annotations

from typing import Any

from rich.markup import escape

from sktune.space.search_space import FUSE_ALL


def _speedup(row: dict[str, Any]) -> str:
    """``1.23× [1.10, 1.31]``; a best that fuses nothing is 1.00× by construction, with no interval."""
    if row["speedup_ci"] is None:
        return f"{row['speedup']:.2f}× (unfused)"
    lo, hi = row["speedup_ci"]
    return f"{row['speedup']:.2f}× [{lo:.2f}, {hi:.2f}]"


def warm_start_lines(data: dict[str, Any]) -> list[str]:
    """A line per earlier plan that ``--warm-start`` mapped: how, and where it ran here."""
    out = []
    for warm in data.get("warm_start") or []:
        head = f"warm start: trial #{warm['trial']} of study {warm['study']!r}"
        if warm.get("same_as"):
            out.append(f"{head} is the same plan here as {warm['same_as']}")
            continue
        extra = f", with {', '.join(f'{k}={v}' for k, v in warm['overrides'].items())}" if warm.get("overrides") else ""
        where = (f"ran as trial #{warm['ran_as']}" if warm.get("ran_as") is not None
                 else "not run yet: the trials ended first; run the same command again to go on")
        out.append(f"{head} ({warm['mapping']}{extra}) {where}")
    return out


def starting_points_line(data: dict[str, Any]) -> str | None:
    """``best vs the starting points: fuse-all 1.05×; …``: the summary's ``anchors`` (each
    starting point once, never the best itself, the unfused plan or a refinement trial)."""
    if data.get("best_trial") is None:
        return None
    beaten = [a for a in data.get("anchors") or [] if a["best_speedup_over"]]
    if not beaten:
        return None
    emulated = " (emulated)" if data.get("emulated") else ""

    def caveats(a: dict[str, Any]) -> str:
        # Below 1 against a figure the round never re-timed: the search's own minimum, biased low.
        noisy = a["best_speedup_over"] < 1 and a.get("timing_source") == "search"
        said = (["not bitwise"] if not a["bitwise"] else []) + (["its search figure, not re-timed"] if noisy else [])
        return f" ({'; '.join(said)})" if said else ""

    return f"best vs the starting points{emulated}: " + "; ".join(
        f"{a['anchor']} {a['best_speedup_over']:.2f}×{caveats(a)}" for a in beaten)


def print_summary(data: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    from sktune.report.export import interrupted_count
    from sktune.tuning.host_time import host_time_lines
    from sktune.tuning.through_compile import through_compile_line, through_compile_warns
    from sktune.tuning.verified import fuse_all_bitwise, round_rejected_line, verify_shapes_line
    from sktune.tuning.records import speedup_interval, speedup_of

    def us(seconds: float | None) -> str:
        return f"{seconds * 1e6:,.1f}" if seconds else "—"

    # Each row is timed against the unfused baseline in the same run (interleaved).
    emulated = " (emulated)" if data.get("emulated") else ""
    title = f"study {data['study']} (each row timed against unfused in the same run)"
    if emulated:
        title += "\nEMULATED Ascend: times come from the emulator's model, not from an NPU"
    table = Table("plan", f"step µs{emulated}", f"unfused µs{emulated}", "speedup [95% CI]", "bitwise", title=title)
    table.add_row("unfused", us(data["baseline_s"]), us(data["baseline_s"]), "1.00×", "reference")
    fuse_all = data.get("fuse_all")
    if fuse_all:
        lo, hi = speedup_interval(fuse_all["ratio_ci"])
        table.add_row(fuse_all.get("anchor") or FUSE_ALL, us(fuse_all["time_s"]), us(fuse_all["baseline_s"]),
                      f"{speedup_of(fuse_all['ratio']):.2f}× [{lo:.2f}, {hi:.2f}]", fuse_all_bitwise(fuse_all))
    if data["speedup"]:
        weighted = " (weighted)" if len(data.get("shapes") or {}) > 1 else ""
        table.add_row(f"best #{data['best_trial']}{weighted}", us(data["best_s"]), us(data["baseline_s"]),
                      _speedup(data), ("yes, before the change" if data.get("verified_before_change") else "yes")
                      if data["verified_bitwise"] else "NO")
    # --shapes left some of input_shapes() out: the shares are of the shapes tuned.
    traffic = "tuned traffic" if (data.get("verify_shapes") or {}).get("left_out") else "traffic"
    for name, shape in (data.get("shapes") or {}).items():  # the one plan at each served shape
        against = {"yardstick": " vs yardstick", "itself": " (it is this shape's best alone)"}.get(
            shape.get("regret_against") or "", "")  # else: best alone
        timed = (" (both re-measured)" if shape.get("regret_timing") == "re-measured"
                 else f" at its search {shape['search_speedup']:.2f}×")
        regret = "" if shape["regret"] is None else f", regret {shape['regret']:+.1%}{against}{timed}"
        table.add_row(f"  at {name} ({shape['share']:.0%} of the {traffic}{regret})", us(shape["best_s"]), us(shape["baseline_s"]),
                      _speedup(shape), "yes" if shape["verified_bitwise"] else "NO")
        if shape.get("yardstick_trial") is not None:  # that shape's own candidate, measured there only
            # Short cells (the full "exact where" is in the summary and the report): no wrapping.
            where = shape.get("yardstick_exact") or {}
            table.add_row(f"    yardstick #{shape['yardstick_trial']}", "", "", f"{shape['yardstick_speedup']:.2f}×",
                          f"at {', '.join(where.get('bitwise') or []) or 'no shape'} only")
    console = Console()
    console.print(table)
    if data["speedup"]:
        if data.get("best_fuses_nothing"):
            reason = data.get("keep_unfused_reason") or "the best is the unfused plan itself"
            verdict = f"keep the model unfused: {reason}"
        elif data["significant"]:
            verdict = "faster than unfused (interval excludes 1)"
        else:
            verdict = "not measurably faster than unfused (interval includes 1)"
        source = ("re-measured after the search" if data["timing_source"] == "re-measured"
                  else "from the search trial")
        console.print(f"best exact plan: {verdict}; times {source}")
        if data.get("provisional"):
            console.print(f"[yellow]provisional: {data['provisional']}[/]", highlight=False)
        if line := through_compile_line(through := data.get("through_compile")):
            # Failed, not bitwise or slower than eager: the exported call is not the table's.
            warn = through_compile_warns(through)
            console.print(f"[bold red]{escape(line)}[/]" if warn else escape(line), highlight=False)
    if passed_over := round_rejected_line(data):  # also where no plan is left to name
        console.print(f"[yellow]{escape(passed_over)}[/]", highlight=False)
    console.print(
        f"trials: {data['n_trials']} ({data['n_complete']} complete ({data['n_infeasible']} of them not bitwise), "
        f"{data['n_pruned']} pruned or skipped, {data['n_failed']} failed"
        + interrupted_count(data) + "; "
        f"{data.get('n_reused', 0)} reused an earlier trial of the same plan, not compiled); "
        f"verified on {data['input_sets']} input sets; {data['threads']} thread(s)"
        + (f" on {data['cpu']['name']} ({data['cpu']['capability']} vectors)" if data.get("cpu") else "")
    )
    if compared := starting_points_line(data):
        console.print(compared)
    if data.get("verify_shapes"):  # verify_shapes(): checked bitwise, never timed
        console.print(verify_shapes_line(data["verify_shapes"]), highlight=False, markup=False)
    if data.get("capture_limit_warning"):
        console.print(f"[yellow]warning:[/] {data['capture_limit_warning']}")
    for line in host_time_lines(data):  # static compile (emulated: the host time it stands for)
        console.print(line)
    for which in data.get("profile_partial") or []:  # the profile's unrecorded time is not gap
        prof = data[f"profile_{which}"]
        console.print(f"profile of the {which} is partial: {prof.get('unrecorded_us') or 0:,.1f} of "
                      f"{prof['step_us']:,.1f} µs per step not recorded ({prof.get('partial_reason')})",
                      highlight=False)
    if where := (data.get("profile_best") or {}).get("profile_dir"):  # a device profiler's own files
        console.print(f"the best's device profile: {where} (read it with sktune profile)", highlight=False,
                      markup=False, soft_wrap=True)
    for line in warm_start_lines(data):
        console.print(line, highlight=False, markup=False)
    if warning := (data.get("noise_floor") or {}).get("warning"):  # a "keep unfused" verdict too
        console.print(f"[yellow]{escape(warning)}[/]", highlight=False)
    if data.get("stopped_at_timeout"):
        stop = data["stopped_at_timeout"]
        console.print(f"stopped at --timeout {stop['timeout_s']:g} s after trial #{stop['after_trial']}: "
                      "run the same command again to go on")
    if data.get("stopped_early"):
        from sktune.tuning.workers import is_this_process

        stop = data["stopped_early"]
        worker = stop.get("worker") or {}
        mine = not worker or is_this_process(worker)
        who = "stopped" if mine else f"another worker (pid {worker.get('pid')} on {worker.get('host')}) stopped"
        console.print(f"{who} after trial #{stop['after_trial']}: {stop['patience']} trials in a row "
                      "without a significant gain (--patience, --no-stop)")
