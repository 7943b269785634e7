"""Plotly figures drawn from ``data``'s frames; every string that may come from user code
(op types, module paths, source files, kernel names) is HTML-escaped before plotly sees it.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative

from sktune.report.data import FusionMap

NEVER_COLOUR = "#3b3b3b"
UNFUSED_COLOUR = "#d4d4d4"
_PALETTE = [c for c in qualitative.Plotly + qualitative.D3 + qualitative.Set2 if c.lower() not in ("#7f7f7f",)]
_STATUS = {  # history: how each kind of trial is drawn
    "exact": {"symbol": "circle", "color": "#1f77b4", "name": "bitwise-exact"},
    "not exact": {"symbol": "x", "color": "#ff7f0e", "name": "not bitwise (infeasible)"},
    "yardstick": {"symbol": "star-open", "color": "#2ca02c", "name": "one shape's yardstick (never the best)"},
    "failed": {"symbol": "triangle-down", "color": "#d62728", "name": "failed (hang, crash, error)"},
    "interrupted": {"symbol": "triangle-down-open", "color": "#8c564b", "name": "interrupted (its run stopped)"},
    "pruned": {"symbol": "diamond-open", "color": "#7f7f7f", "name": "pruned (clearly slower; partly measured)"},
    "skipped": {"symbol": "line-ew-open", "color": "#9467bd", "name": "skipped (never compiled: probe or scope cap)"},
}
_AT_TOP = ("failed", "interrupted", "skipped")  # no ratio: drawn above the others, the reason on hover


def _layout(fig: go.Figure, title: str, height: int, **kwargs: Any) -> go.Figure:
    kwargs.setdefault("margin", {"l": 70, "r": 30, "t": 50, "b": 50})
    fig.update_layout(title={"text": escape(title), "x": 0}, height=height, template="plotly_white", **kwargs)
    return fig


def _short(text: str, limit: int = 48) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _axis_labels(names: list[str], limit: int = 48) -> list[str]:
    """One axis label per name, each distinct: a long name keeps its head and its tail (kernels
    differ in their last characters: ``…_clamp_min_div_round_0``, ``…_split_1``); labels that
    still meet get a number. A category axis draws two equal labels on one row."""
    def cut(name: str) -> str:
        return name if len(name) <= limit else name[: limit - 17] + "…" + name[-16:]

    labels: list[str] = []
    for name in names:
        label, k = cut(name), 1
        while label in labels:
            k += 1
            label = f"{cut(name)} ({k})"
        labels.append(label)
    return labels


# ---------------------------------------------------------------- 2. fusion map

def fusion_map_figure(fm: FusionMap) -> go.Figure:
    """One bar per op, left to right, coloured by fusion group; a second row for the actual fusion."""
    fig = go.Figure()
    ops = fm.ops
    rows = ["actual", "planned"] if fm.has_actual else ["planned"]  # plotly draws the first category lowest
    categories: list[tuple[str, str, str, pd.DataFrame]] = []
    for group, members in ops[ops["kind"] == "fused"].groupby("group", sort=True):
        planned = members[members["row"] == "planned"]["op"]
        span = f"ops {planned.min()}–{planned.max()}" if len(planned) else ""
        label = f"group {int(group)} ({span}, {len(planned)} ops)"
        categories.append((label, _PALETTE[(int(group) - 1) % len(_PALETTE)], "", members))
    categories.append(("never fuse (None scope)", NEVER_COLOUR, "x", ops[ops["kind"] == "never"]))
    categories.append(("unfused", UNFUSED_COLOUR, "", ops[ops["kind"] == "unfused"]))
    for label, colour, pattern, members in categories:
        if members.empty:
            continue
        hover = [
            f"<b>op {r.op}</b>: {escape(str(r.target))} ({escape(str(r.name))})<br>"
            f"module: {escape(str(r.module)) or '(root)'} [{escape(str(r.module_type))}]<br>"
            f"source: {escape(str(r.source)) or '(unknown)'}<br>{r.row}: {escape(label)}"
            + (f"<br>scopes: {escape(str(r.scopes))}" if r.scopes else "")
            + ("<br>runs as its ATen kernel inside the region (fallback)" if r.fallback else "")
            for r in members.itertuples()
        ]
        fig.add_trace(go.Bar(
            orientation="h", y=members["row"], x=[1] * len(members), base=members["op"] - 0.5,
            name=escape(label), marker={"color": colour, "line": {"color": "white", "width": 1}, "pattern": {
                "shape": ["." if fb else pattern for fb in members["fallback"]], "size": 6, "solidity": 0.4,
                "fgcolor": ["#111" if fb else "#888" for fb in members["fallback"]]}},
            text=[escape(str(t)) for t in members["target"]], textposition="inside", insidetextanchor="middle",
            textangle=-90 if len(ops) > 24 else 0, hovertext=hover, hoverinfo="text",
        ))
    n_ops = int(ops["op"].max()) + 1 if len(ops) else 0
    _layout(fig, f"Fusion map of the best exact plan (trial #{fm.trial})", 170 + 70 * len(rows),
            barmode="overlay", bargap=0.15,
            xaxis={"title": "op index (execution order)", "range": [-0.5, n_ops - 0.5], "dtick": 1 if n_ops <= 40 else 5},
            yaxis={"categoryorder": "array", "categoryarray": rows},
            legend={"orientation": "h", "y": -0.45 if fm.has_actual else -0.7})
    return fig


# ---------------------------------------------------------------- 3. where time goes

def busy_gap_figure(breakdown: pd.DataFrame, source: str = "torch.profiler",
                    axis: str = "µs per step (profiler-inflated; explains, does not time)") -> go.Figure:
    """Per-step busy time, gap and (partial profiles) time not recorded, baseline vs best, with
    the busy floor; ``source`` names the profiler (and "emulated"), ``axis`` what the µs are."""
    fig = go.Figure()
    labels = [escape(w) for w in breakdown["which"]]
    fig.add_trace(go.Bar(orientation="h", y=labels, x=breakdown["busy_us"], name="busy (some kernel running)",
                         marker_color="#1f77b4", hovertemplate="%{y}<br>busy %{x:.1f} µs<extra></extra>"))
    fig.add_trace(go.Bar(orientation="h", y=labels, x=breakdown["gap_us"], name="gap (between kernels)",
                         marker_color="#ff9896", hovertemplate="%{y}<br>gap %{x:.1f} µs<extra></extra>"))
    if (breakdown["unrecorded_us"] > 0).any():  # a partial profile: neither busy nor gap (html.py says why)
        fig.add_trace(go.Bar(orientation="h", y=labels, x=breakdown["unrecorded_us"],
                             name="not recorded (kernels the profiler did not see)", marker_color="#c7c7c7",
                             marker_pattern_shape="/",
                             hovertemplate="%{y}<br>not recorded %{x:.1f} µs<extra></extra>"))
    base = breakdown[breakdown["which"] == "unfused baseline"]
    if not base.empty:
        floor = float(base["busy_us"].iloc[0])
        fig.add_vline(x=floor, line_dash="dash", line_color="#333",
                      annotation_text=f"busy floor {floor:.1f} µs", annotation_position="top")
    return _layout(fig, f"Per step: busy time vs gap ({escape(source)}, µs)", 260, barmode="stack",
                   xaxis={"title": escape(axis)},
                   legend={"orientation": "h", "y": -0.35})


def kernels_figure(kernels: pd.DataFrame, emulated: bool = False) -> go.Figure:
    """Top kernels, each its median time per step, baseline and best side by side."""
    fig = go.Figure()
    order = (kernels.groupby("name")["total_us"].max().sort_values(ascending=True)).index.tolist()
    for which, colour in (("unfused baseline", "#7f7f7f"), ("best exact plan", "#2ca02c")):
        part = kernels[kernels["which"] == which].set_index("name").reindex(order)
        fig.add_trace(go.Bar(
            orientation="h", y=[escape(label) for label in _axis_labels(order)], x=part["total_us"],
            name=escape(which),
            marker_color=colour,
            hovertext=[f"{escape(n)}<br>{escape(which)}: " + ("—" if pd.isna(v) else f"{v:.1f} µs/step")
                       for n, v in zip(order, part["total_us"])], hoverinfo="text"))
    unit = " (emulated)" if emulated else ""
    return _layout(fig, f"Top kernels: median time per step (µs){unit}", 120 + 26 * max(len(order), 3),
                   barmode="group", xaxis={"title": f"µs per step{unit}"}, legend={"orientation": "h", "y": -0.15},
                   margin={"l": 260, "r": 30, "t": 50, "b": 50})


# ---------------------------------------------------------------- 4. history, importances, parallel coordinates

def history_figure(hist: pd.DataFrame, named_best: int | None = None, by_round: bool = True) -> go.Figure:
    """Each trial's time ratio by status, the best exact ratio so far, and the unfused line.
    Trials without a ratio (failed, skipped) sit in a row above the highest ratio. ``named_best``:
    the trial named best (by the finalists' round, or ``by_round`` False: provisionally, by its
    search figure; its search ratio need not be the line's lowest)."""
    fig = go.Figure()
    ratios = hist["ratio"].dropna()
    top = float(ratios.max()) * 1.05 if len(ratios) else 1.1
    for status, style in _STATUS.items():
        part = hist[hist["status"] == status]
        if part.empty:
            continue
        y = part["ratio"] if status not in _AT_TOP else [top] * len(part)
        hover = [f"trial #{r.number}" + (f" ({escape(r.anchor)})" if r.anchor else "") + "<br>"
                 + (f"ratio {r.ratio:.3f}" if status not in _AT_TOP else escape(_short(r.failure, 120)))
                 for r in part.itertuples()]
        fig.add_trace(go.Scatter(x=part["number"], y=y, mode="markers", name=style["name"],
                                 marker={"symbol": style["symbol"], "color": style["color"], "size": 10},
                                 hovertext=hover, hoverinfo="text"))
    fig.add_trace(go.Scatter(x=hist["number"], y=hist["best_so_far"], mode="lines", line_shape="hv",
                             name="best exact so far", line={"color": "#2ca02c", "width": 2}))
    named = hist[(hist["number"] == named_best) & hist["ratio"].notna()]
    if not named.empty:
        fig.add_trace(go.Scatter(x=named["number"], y=named["ratio"], mode="markers", hoverinfo="text",
                                 name=f"named best (#{named_best}, "
                                      + ("after the finalists' round)" if by_round else "provisional: no round)"),
                                 marker={"symbol": "star", "color": "#ffbf00", "size": 18,
                                         "line": {"color": "#333", "width": 1}},
                                 hovertext=[f"trial #{named_best}: the named best<br>search ratio "
                                            f"{float(named['ratio'].iloc[0]):.3f}"]))
    fig.add_hline(y=1.0, line_dash="dot", line_color="#555", annotation_text="unfused (ratio 1)")
    if hist["status"].isin(_AT_TOP).any():  # their row's height is no ratio: say so on the chart
        fig.add_hline(y=top, line_dash="dash", line_color="#bbb", annotation_position="top left",
                      annotation_text="no ratio (" + ", ".join(s for s in _AT_TOP if (hist["status"] == s).any())
                      + "): the row says nothing of speed")
    return _layout(fig, "Optimisation history: candidate / baseline time per trial (< 1 is faster)", 380,
                   xaxis={"title": "trial", "tickformat": "d"},  # trial numbers: never 0.5
                   yaxis={"title": "time ratio"}, legend={"orientation": "h", "y": -0.25})


def importance_figure(imp: pd.DataFrame, top: int = 15) -> go.Figure:
    part = imp.head(top).iloc[::-1]
    fig = go.Figure(go.Bar(orientation="h", y=[escape(p) for p in part["param"]], x=part["importance"],
                           marker_color="#9467bd", hovertemplate="%{y}: %{x:.3f}<extra></extra>"))
    return _layout(fig, "Parameter importances (PED-ANOVA, bitwise-exact trials)", 120 + 24 * max(len(part), 3),
                   xaxis={"title": "importance"}, margin={"l": 200, "r": 30, "t": 50, "b": 50})


def _dimension(label: str, values: pd.Series) -> dict[str, Any]:
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    if numeric:
        return {"label": escape(label), "values": [float(v) for v in values]}
    choices = sorted({repr(v) for v in values})
    texts = {repr(v): escape(str(v)) for v in values}
    return {"label": escape(label), "values": [choices.index(repr(v)) for v in values],
            "tickvals": list(range(len(choices))), "ticktext": [texts[c] for c in choices]}


def parallel_figure(frame: pd.DataFrame, params: list[str], limit: int = 12) -> go.Figure:
    """Parameters (at most ``limit``, most important first) against bitwise and time ratio."""
    shown = params[:limit]
    dims = [_dimension(p, frame[p]) for p in shown]
    dims.append(_dimension("bitwise", frame["bitwise"].map({True: "yes", False: "no"})))
    ratio = frame["ratio"].astype(float)
    dims.append({"label": "time ratio", "values": ratio.tolist(),
                 "range": [math.floor(ratio.min() * 20) / 20, math.ceil(ratio.max() * 20) / 20]})
    fig = go.Figure(go.Parcoords(
        line={"color": ratio.tolist(), "colorscale": "RdYlGn", "reversescale": True, "cmid": 1.0, "showscale": True,
              "colorbar": {"title": {"text": "ratio"}}},  # green: faster than unfused
        dimensions=dims, labelangle=-30))
    more = f" ({len(shown)} of {len(params)} varying parameters)" if len(params) > len(shown) else ""
    return _layout(fig, f"Parallel coordinates: parameters vs time ratio{more}", 460,
                   margin={"l": 70, "r": 70, "t": 120, "b": 40})
