"""The report's first section: the verdict and the tables that back it (the best against
unfused and fuse-everything, each served shape, each starting point), as ``html`` assembles it.
Every string from the study is escaped in ``html_table``."""

from __future__ import annotations

from typing import Any

import optuna
import pandas as pd

from sktune.report import data
from sktune.report.export import interrupted_count
from sktune.report.html_table import cell, esc, interval, num, table, us
from sktune.tuning.records import speedup_of


def summary_section(study: optuna.Study, summary: dict[str, Any]) -> str:
    """Section 1: the verdict, the comparison table, the shapes, the starting points, the environment."""
    env = table(None, ([f"<th>{esc(k)}</th>", cell(v)] for k, v in data.environment(study).items()))
    comp = data.comparison(summary)
    rows = []
    for r in comp.itertuples():
        cls = "ok" if r.verified == "yes" else "bad" if str(r.verified).startswith("no") else ""
        base = us(r.baseline_s)
        rows.append([cell(r.plan), cell(None if pd.isna(r.trial) else int(r.trial)),
                     cell(r.time_s * 1e6, num(r.time_s * 1e6, ".1f")), cell(base, num(base, ".1f")),
                     cell(r.ratio, num(r.ratio, ".3f")),
                     cell(None, interval(r.ratio_lo, r.ratio_hi)),
                     cell(None, num(speedup_of(r.ratio), ".2f") + "×"),
                     cell(r.verified, f'<span class="{cls}">{esc(r.verified)}</span>')])
    emulated = " (emulated)" if summary.get("emulated") else ""
    comp_html = table(["plan", "trial", f"step µs{emulated}", f"its unfused µs{emulated}", "time ratio",
                        "ratio 95 % interval", "speedup", "bitwise verified"], rows) \
        if rows else '<p class="note">No complete trial yet.</p>'
    counts = (f"{summary['n_trials']} trials: {summary['n_complete']} complete "
              f"({summary['n_infeasible']} not bitwise-exact), {summary['n_pruned']} pruned or skipped, "
              f"{summary['n_failed']} failed"
              + interrupted_count(summary) + ".")
    remeasured = "The best" + (" and fuse-everything" if summary.get("fuse_all") else "")
    source = {"re-measured": f"{remeasured} times were re-measured after the search "
                             "(the search's best time is the least of many noisy ones: an optimistic speedup)",
              "search": "Times are from the search trials themselves"}.get(summary.get("timing_source", ""), "")
    return (f'<h2 id="summary">1. Summary</h2><p class="verdict {data.verdict_kind(summary)}">{esc(data.verdict(summary))}</p>'
            f"<p>{esc(counts)} {esc(source + '.' if source else '')} Each ratio is candidate ÷ unfused baseline, timed interleaved in "
            "the same run (&lt; 1 is faster); a gain is real only when its interval excludes 1.</p>"
            f"{comp_html}{_noise(summary)}{_through_compile(summary)}{_host_time(summary)}{_shapes(summary)}{_verify_shapes(summary)}{_anchors(summary)}"
            f"<h3>Environment</h3>{env}")


def _noise(summary: dict[str, Any]) -> str:
    """The finalists' round's noise floor, where the unfused plan read other than itself."""
    warning = (summary.get("noise_floor") or {}).get("warning")
    return f'<p class="bad">{esc(warning[0].upper() + warning[1:])}.</p>' if warning else ""


def _through_compile(summary: dict[str, Any]) -> str:
    """The best as the export runs it (sktune.apply): its speedup, and what the call adds to each step."""
    from sktune.tuning.through_compile import through_compile_line, through_compile_warns

    line = through_compile_line(summary.get("through_compile"))
    warns = through_compile_warns(summary.get("through_compile"))
    return f'<p class="{"bad" if warns else "note"}">{esc(line[0].upper() + line[1:])}.</p>' if line else ""


def _verify_shapes(summary: dict[str, Any]) -> str:
    """The verify-only shapes (``verify_shapes()``): checked bitwise, never timed; finalists the
    round found not bitwise where tuned; the capture-limit warning."""
    from sktune.tuning.verified import round_rejected_line, verify_shapes_line

    lines = [verify_shapes_line(summary["verify_shapes"])] if summary.get("verify_shapes") else []
    if passed_over := round_rejected_line(summary):
        lines.append(passed_over)
    if summary.get("capture_limit_warning"):
        lines.append(summary["capture_limit_warning"])
    return "".join(f"<p>{esc(line)}</p>" for line in lines)


def _host_time(summary: dict[str, Any]) -> str:
    """Static compile and, on an emulated Ascend, the host time it stands for (labelled emulated)."""
    from sktune.tuning.host_time import host_time_lines

    return "".join(f'<p class="note">{esc(line)}</p>' for line in host_time_lines(summary))


def _shapes(summary: dict[str, Any]) -> str:
    frame = data.shapes(summary)
    if frame.empty:
        return ""
    rows = [[cell(r.shape), cell(r.share, "—" if pd.isna(r.share) else f"{r.share:.0%} (weight {r.weight:g})"),
             cell(r.baseline_s * 1e6, num(r.baseline_s * 1e6, ".1f")), cell(r.best_s * 1e6, num(r.best_s * 1e6, ".1f")),
             cell(r.speedup, num(r.speedup, ".2f") + "× " + interval(r.speedup_lo, r.speedup_hi, ".2f")),
             cell(r.bitwise), cell(r.search_speedup, "—" if pd.isna(r.search_speedup) else f"{r.search_speedup:.2f}×"),
             cell(r.best_alone_speedup, "—" if pd.isna(r.best_alone_speedup) else
                                     f"{r.best_alone_speedup:.2f}× (trial {int(r.best_alone_trial)})"),
             cell(r.yardstick_speedup, "—" if pd.isna(r.yardstick_speedup) else
                  f"{r.yardstick_speedup:.2f}× (trial {int(r.yardstick_trial)}): {r.yardstick_exact}"),
             cell(r.regret, "—" if pd.isna(r.regret) else f"{r.regret:+.1%}"
                  + (" (the plan is this shape's best alone)" if r.regret_against == "itself" else
                     " (both re-measured)" if r.regret_timing == "re-measured" else ""))]
            for r in frame.itertuples()]
    return ("<h3>One plan for every served shape</h3><p>Each shape timed against its own unfused baseline. "
            "<i>Best alone</i> is the fastest plan found that is exact at that shape, whatever it does at the "
            "others; the <i>yardstick</i> is that shape's own best candidate, built from its own exactness "
            "answers and measured there only. The regret is what serving every shape with one plan costs "
            "there against the faster of the two: search timing against search timing, the plan's search "
            "figure beside it (its speedup before is the re-measured one, where the finalists' round ran), or "
            "the round's figures where it re-measured both (marked).</p>"
            + table(["shape", "share of tuned traffic" if (summary.get("verify_shapes") or {}).get("left_out")
                     else "share of traffic", "unfused µs", "plan µs", "speedup [95 %]", "bitwise", "plan (search)",
                      "best alone (search)", "yardstick: exact where", "regret"], rows))


def _anchors(summary: dict[str, Any]) -> str:
    frame = data.anchors(summary)
    if frame.empty:
        return ""
    rows = [[cell(r.anchor), cell(r.trial), cell(r.ratio, num(r.ratio, ".3f")), cell(r.timed),
             cell(r.bitwise, f'<span class="{"ok" if r.bitwise == "yes" else "bad"}">{esc(r.bitwise)}</span>'),
             cell(r.best_speedup_over, num(r.best_speedup_over, ".2f") + "×" if r.best_speedup_over else "—")]
            for r in frame.itertuples()]
    return ("<h3>The best plan against each starting point</h3><p>Anchors (the placements users write by hand), "
            "profile-guided seeds and warm-start plans, each timed against unfused in its own run: in the "
            "finalists' round where it was re-measured there, as the best was, else by its search trial. The "
            "last column is how many times faster the best exact plan is.</p>"
            + table(["starting point", "trial", "time ratio", "timed", "bitwise", "best is"], rows, sortable=True))


__all__ = ["summary_section"]
