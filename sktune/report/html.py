"""One self-contained HTML file per study: plotly.js embedded once, no network needed.

Every string that reaches the page from the study (op types, module paths, file names,
failure messages, kernel names) goes through ``html.escape`` here, in ``html_table`` or in ``figures``.
"""

from __future__ import annotations

import logging
from html import escape
from pathlib import Path
from typing import Any

import optuna
import pandas as pd

from sktune.backends import REGISTRY, backend_class
from sktune.backends._base import Backend
from sktune.report import data, figures, trials_data
from sktune.report.html_summary import summary_section
from sktune.report.html_table import SORT_JS, cell, esc, interval, num, table, us
from sktune.tuning.attrs import StudyAttr, TrialAttr

log = logging.getLogger(__name__)

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1280px;padding:0 24px 48px;color:#222}
h1{margin-top:24px}h2{border-bottom:2px solid #ddd;padding-bottom:4px;margin-top:40px}
table{border-collapse:collapse;margin:8px 0 16px;font-size:14px}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
table.sortable th{cursor:pointer;user-select:none}
table.sortable th[data-dir=asc]::after{content:" \\25B2"}table.sortable th[data-dir=desc]::after{content:" \\25BC"}
.verdict{font-size:18px;background:#eef6ee;border-left:5px solid #2ca02c;padding:10px 14px;margin:12px 0}
.verdict.caution{background:#fdf6e3;border-left-color:#d9a400}.verdict.none{background:#fbeeee;border-left-color:#b00}
.note{color:#666;font-style:italic}.bad{color:#b00}.ok{color:#070}
details{border:1px solid #ddd;border-radius:4px;padding:6px 10px;margin:6px 0}summary{cursor:pointer}
code{background:#f4f4f4;padding:1px 4px;border-radius:3px}
"""

class _Figures:
    """Embeds plotly.js with the first figure only; the others reuse it."""

    def __init__(self) -> None:
        self.count = 0

    def html(self, fig: Any) -> str:
        self.count += 1
        return fig.to_html(full_html=False, include_plotlyjs=self.count == 1,
                           config={"displaylogo": False, "responsive": True})


# ---------------------------------------------------------------- sections

def _fusion(study: optuna.Study, figs: _Figures) -> str:
    fm = data.fusion_map(study)
    head = '<h2 id="fusion">2. Fusion map of the best plan</h2>'
    if fm.trial is None:
        return head + '<p class="note">No bitwise-exact plan: nothing to map.</p>'
    option = _backend(study).fallback_option  # only a backend with fallbacks has that legend
    fallback = (f"; dotted: an op type the plan runs as its own kernel inside the region (<code>{esc(option)}"
                "</code>)" if option else "")
    text = (f"<p>Trial #{fm.trial}: {fm.n_groups} fusion group(s) over {fm.ops['op'].nunique()} ops. "
            "Each bar is one op in execution order; hover for its type, module path and source line. "
            f"Dark hatched: under a never-fuse (None) scope; light grey: not fused{fallback}.</p>")
    if fm.has_actual:
        text += "<p>Upper row: the plan; lower row: the fusion the backend reported (SuperKernels found in the profile).</p>"
    plan = study.trials[fm.trial].user_attrs.get(TrialAttr.PLAN)
    text += f"<p>Plan: <code>{esc(trials_data.plan_text(plan))}</code></p>"
    notes = "".join(f'<p class="note">{esc(n)}</p>' for n in fm.notes)
    return head + text + figs.html(figures.fusion_map_figure(fm)) + notes + _fail_reasons(study)


def _fail_reasons(study: optuna.Study) -> str:
    frame = data.fusion_fail_reasons(study)
    if frame.empty:
        return ""
    rows = [[cell(r.reason), cell(r.lines), cell(r.trials), cell(r.ops)] for r in frame.itertuples()]
    return ("<h3>Scopes that did not fuse, by reason</h3><p>From the backend's fusion-fail log, over all trials "
            "(a scope is a request, not a guarantee).</p>"
            + table(["reason", "log lines", "trials", "ops"], rows, sortable=True))


def _backend(study: optuna.Study) -> type[Backend]:
    """The study's backend class (what it knows without a device); the base class for an unknown one."""
    name = study.user_attrs.get(StudyAttr.BACKEND)
    return backend_class(name) if name in REGISTRY else Backend


def _time(study: optuna.Study, figs: _Figures, emulated: bool, fuses_nothing: bool = False) -> str:
    head = '<h2 id="time">3. Where time goes</h2>'
    breakdown, kernels = data.time_breakdown(study), data.top_kernels(study)
    if breakdown.empty:
        return head + '<p class="note">No profile recorded for this study.</p>'
    floor = ("The dashed busy floor is the baseline's busy time: what a step would take if every gap were "
             "removed but the same kernels ran; a plan below it also made the kernels themselves cheaper "
             "(fewer passes over memory).")
    if profiler := _backend(study).device_profiler:  # device time: the same source as the trials' timing
        source = profiler + (", emulated" if emulated else "")
        text = (f"<p>From <code>{esc(profiler)}</code> over the profiled steps (medians per step)"
                + (", <strong>on the emulated Ascend: its model of a device, not an NPU</strong>" if emulated
                   else "")
                + ". Busy: some kernel running on the device; gap: the device idle between kernels (launches, "
                f"host work), which fusion removes. {floor} The trials are timed from the same "
                "device times.</p>")
        axis = "device µs per step" + (" (emulated)" if emulated else "")
    else:
        source = "torch.profiler"
        text = ("<p>From <code>torch.profiler</code> over the profiled steps (medians per step). Busy: some op or "
                "kernel running; gap: everything between them (Python, dispatch, launch), which fusion removes. "
                f"{floor} The profiler inflates times; the summary's times come from the clock.</p>")
        axis = "µs per step (profiler-inflated; explains, does not time)"
    if shapes := sorted(set(breakdown["shape"].dropna())):
        text += (f"<p>Profiled at the input shape of the highest weight, <code>{esc(', '.join(shapes))}</code>; the other "
                 "shapes were timed, not profiled.</p>")
    for row in breakdown[breakdown["partial_reason"].notna()].itertuples():
        text += (f'<p class="note">The profile of the {escape(row.which)} is partial: {escape(row.partial_reason)}. '
                 f"{row.unrecorded_us:,.1f} µs per step are shown as not recorded; its busy time "
                 f"({row.busy_us:,.1f} µs) is a lower bound and its gap ({row.gap_us:,.1f} µs) holds no "
                 "unrecorded kernel.</p>")
    if fuses_nothing:
        text += ('<p class="note">The best exact plan fuses nothing: it is the unfused program profiled a second '
                 "time, so any difference between its bars and the baseline's is the profiler's noise.</p>")
    out = head + text + figs.html(figures.busy_gap_figure(breakdown, source, axis))
    if not kernels.empty:
        out += figs.html(figures.kernels_figure(kernels, emulated))
    return out


def _search(study: optuna.Study, figs: _Figures, named_best: int | None, by_round: bool) -> str:
    out = '<h2 id="search">4. The search</h2>'
    hist = trials_data.history(study)
    if hist.empty:
        return out + '<p class="note">No finished trial.</p>'
    out += figs.html(figures.history_figure(hist, named_best, by_round))
    note = trials_data.history_note(hist, named_best) if by_round else None
    out += f'<p class="note">{esc(note)}</p>' if note else ""
    imp, note = trials_data.importances(study)
    shown = f" (the top {min(len(imp), 15)} of {len(imp)})" if len(imp) > 15 else ""
    out += (f"<p>Parameter importances{esc(shown)}.</p>" + figs.html(figures.importance_figure(imp))
            if note is None else f'<p class="note">Importances: {esc(note)}.</p>')
    frame, params = trials_data.parallel(study)
    if frame.empty or not params:
        return out + '<p class="note">Parallel coordinates: no complete trials with varying parameters.</p>'
    ranked = [p for p in imp["param"] if p in params] + [p for p in params if p not in set(imp["param"])]
    return out + figs.html(figures.parallel_figure(frame, ranked))


def _trials(study: optuna.Study, emulated: bool = False) -> str:
    frame = trials_data.trials_table(study)
    rows = []
    for r in frame.itertuples():
        bit = "ok" if r.bitwise.startswith("yes") else "bad" if r.bitwise.startswith("no") else ""
        step, base = us(r.step_s), us(r.baseline_s)
        rows.append([cell(r.number), cell(r.state), cell(r.anchor), cell(step, num(step, ".1f")),
                     cell(base, num(base, ".1f")),
                     cell(r.ratio, num(r.ratio, ".3f")), cell(r.ratio_lo, interval(r.ratio_lo, r.ratio_hi)),
                     cell(r.bitwise, f'<span class="{bit}">{esc(r.bitwise)}</span>'), cell(r.reason)])
    unit = " (emulated)" if emulated else ""
    shapes = study.user_attrs.get(StudyAttr.SHAPES) or {}
    weighted = (f" With several served shapes ({esc(', '.join(shapes))}) each time and ratio is the weighted "
                "geometric mean over them; the summary's shapes table has each shape's." if len(shapes) > 1 else "")
    return ('<h2 id="trials">5. Trials</h2><p>Click a column header to sort. Each trial is timed against the '
            f"unfused baseline beside it, so trials rank by their time ratio, not by their step time.{weighted}</p>"
            + table(["#", "state", "anchor", f"step µs{unit}", f"its unfused µs{unit}", "time ratio",
                     "ratio 95 % interval", "bitwise", "failure / mismatch"], rows, sortable=True))


def _failure(item: dict[str, Any], ops: list[dict[str, Any]]) -> str:
    parts = [f"<p>plan: <code>{esc(trials_data.plan_text(item['plan']))}</code></p>"]
    found = item.get("smallest_failing_range")
    if found and found.get("range"):
        first, last = found["range"]
        listed = ops[first:last + 1]
        where = ", ".join(f"{o.get('target')} ({o.get('module') or 'root'})" for o in listed[:8])
        where += f", … ({len(listed) - 8} more)" if len(listed) > 8 else ""
        parts.append(f"<p>smallest failing range: ops {first}–{last} ({esc(', '.join(found.get('op_types', [])))}), "
                     f"found in {esc(found.get('runs'))} runs: {esc(where)}</p>")
    if item.get("dcci_repair"):  # npu: the trial flushed only around the culprit, or why none
        parts.append(f"<p>repair from the culprit: {esc(item['dcci_repair'])}</p>")
    if item.get("diagnosis"):
        diag = item["diagnosis"]
        parts.append(f"<p>diagnosis rerun: {esc(diag.get('outcome', ''))}; {esc(diag.get('where', ''))}</p>")
    mm: pd.DataFrame = item["mismatches"]
    if not mm.empty:
        shaped = "shape" in mm.columns  # a multi-shape study: where each mismatch was seen
        parts.append(table([*(["shape"] if shaped else []), "input set", "output", "elements differing",
                            "first index", "max ULP", "detail"], (
            [*([cell(m.shape)] if shaped else []), cell(m.input_set), cell(m.output_index), cell(m.count),
             cell(m.first_index), cell(m.max_ulp), cell(m.detail)] for m in mm.itertuples())))
    anchor = f" ({esc(item['anchor'])})" if item.get("anchor") else ""
    # A recorded reason often begins with its kind ("hang: no answer within 1 s"): said once.
    reason = str(item["reason"]).removeprefix(f"{item['kind']}:").strip()
    return (f"<details><summary>trial #{item['trial']}{anchor} — <b>{esc(item['kind'])}</b>: "
            f"{esc(reason)}</summary>{''.join(parts)}</details>")


def _failures(study: optuna.Study) -> str:
    items = trials_data.failures(study)
    ops = study.user_attrs.get(StudyAttr.OPS) or []
    head = '<h2 id="failures">6. Failures</h2>'
    if not items:
        return head + "<p>None: every trial completed with bitwise-exact outputs.</p>"
    failed = [i for i in items if i["kind"] not in ("mismatch", "verify-only", "interrupted")]
    mismatched = [i for i in items if i["kind"] in ("mismatch", "verify-only")]
    stopped = [i for i in items if i["kind"] == "interrupted"]
    out = head
    out += f"<h3>Hangs, crashes and errors ({len(failed)})</h3>" + (
        "".join(_failure(i, ops) for i in failed) or "<p>None.</p>")
    if stopped:  # not the plan's doing: listed apart, briefly
        out += (f"<h3>Interrupted ({len(stopped)})</h3><p>Trials whose run was stopped or killed: they say "
                "nothing of their plan, which runs again. "
                + esc(", ".join(f"#{i['trial']}" + (f" ({i['anchor']})" if i["anchor"] else "") for i in stopped))
                + "</p>")
    out += (f"<h3>Mismatches ({len(mismatched)})</h3><p>Outputs not bitwise equal to the unfused run: "
            "which output (at which shape, where several are tuned), how many elements differ, the largest "
            "distance in units in the last place; a finalist exact where tuned but not at a verify-only shape "
            "says which.</p>")
    return out + ("".join(_failure(i, ops) for i in mismatched) or "<p>None.</p>")


# ---------------------------------------------------------------- page

def render(study: optuna.Study) -> str:
    """The whole report as one HTML string."""
    from sktune.tuning.summary import summary as make_summary

    summary = make_summary(study)
    figs = _Figures()
    sections = [summary_section(study, summary), _fusion(study, figs),
                _time(study, figs, bool(summary.get("emulated")), bool(summary.get("best_fuses_nothing"))),
                _search(study, figs, summary.get("best_trial"), not summary.get("provisional")),
                _trials(study, bool(summary.get("emulated"))), _failures(study)]
    title = f"sktune report: {study.study_name}"
    nav = " · ".join(f'<a href="#{a}">{t}</a>' for a, t in (
        ("summary", "summary"), ("fusion", "fusion map"), ("time", "where time goes"), ("search", "search"),
        ("trials", "trials"), ("failures", "failures")))
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
            f"<style>{_CSS}</style></head><body><h1>{esc(title)}</h1>"
            f"<p>model <code>{esc(summary.get('model'))}</code>, backend <b>{esc(summary.get('backend'))}</b></p>"
            + ('<p class="bad"><b>EMULATED Ascend</b>: every time in this report comes from the test emulator\'s '
               "model of a device, not from an NPU.</p>" if summary.get("emulated") else "")
            + f"<nav>{nav}</nav>{''.join(sections)}<script>{SORT_JS}</script></body></html>")


def write_report(study: optuna.Study, path: str | Path) -> Path:
    """Write the report for ``study`` to ``path`` (parents created) and return the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(study), encoding="utf-8")
    log.info("report written to %s", out)
    return out
