"""The report in a real browser: Debian's headless Chromium, driven by Playwright.

The page must load from a file:// URL with no console errors and no network request,
every plotly figure must render with data, hostile user text must stay text, and a
screenshot is written (to ``reports/`` as well when ``SKTUNE_KEEP_SCREENSHOT`` is set).
Chromium missing is a failure, not a skip: CI installs it.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sktune.report.html import write_report
from tests.report_fixtures import EVIL, NPU_FUSION, ROOT, RealStudy, hostile_study, real_study  # noqa: F401

from tests.cli.test_cli import sktune

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
LOCAL = ("file:", "data:", "blob:", "about:")

_FIGURES_JS = """() => Array.from(document.querySelectorAll('.plotly-graph-div')).map(d => ({
  rendered: d.classList.contains('js-plotly-plot') && !!d._fullLayout && !!d.querySelector('.main-svg'),
  traces: (d.data || []).length,
  points: (d.calcdata || []).reduce((n, cd) => n + cd.length, 0),  // what plotly computed to draw
  type: d.data && d.data[0] ? d.data[0].type : null,
}))"""
_READY_JS = """() => { const d = Array.from(document.querySelectorAll('.plotly-graph-div'));
  return d.length > 0 && d.every(e => e.classList.contains('js-plotly-plot') && e._fullLayout); }"""


@dataclass
class PageRun:
    figures: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # console errors and uncaught exceptions
    dialogs: list[str] = field(default_factory=list)  # alert() & co: injected script ran
    blocked: list[str] = field(default_factory=list)  # requests that would leave the machine
    extra: dict[str, Any] = field(default_factory=dict)


def open_in_chromium(html: Path, screenshot: Path, actions: Any = None) -> PageRun:
    """Load ``html`` in headless Chromium, wait for every figure, run ``actions(page)``
    (its result goes to ``extra``) and save a full-page screenshot."""
    assert Path(CHROMIUM).is_file(), (
        f"{CHROMIUM} not found: install Debian's chromium package (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    run = PageRun()

    def route(r: Any) -> None:
        if r.request.url.startswith(LOCAL):
            r.continue_()
        else:
            run.blocked.append(r.request.url)
            r.abort()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.on("console", lambda m: run.errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: run.errors.append(f"uncaught: {e}"))
            page.on("dialog", lambda d: (run.dialogs.append(d.message), d.dismiss()))
            page.route("**/*", route)
            page.goto(html.resolve().as_uri(), wait_until="load")
            page.wait_for_function(_READY_JS, timeout=60_000)
            run.figures = page.evaluate(_FIGURES_JS)
            if actions is not None:
                run.extra = actions(page)
            page.screenshot(path=str(screenshot), full_page=True)
        finally:
            browser.close()
    return run


def _sort_by_ratio(page: Any) -> dict[str, Any]:
    # The trials table (the summary's starting-point table is sortable too, and comes first).
    trials = "h2#trials ~ table.sortable"
    page.click(f"{trials} th:has-text('time ratio')")
    column = page.eval_on_selector(trials, """table => {
        const at = [...table.tHead.rows[0].cells].findIndex(c => c.textContent.startsWith('time ratio'));
        return [...table.tBodies[0].rows].map(r => r.cells[at].getAttribute('data-v'));
    }""")  # the column found by its header: columns come and go
    return {"sorted": column}


@pytest.mark.slow  # ~9 s on a 2.8 GHz Xeon (the real study's report, rendered); CI runs it (.ci/run)
def test_real_study_report_renders_in_chromium(real_study: RealStudy, tmp_path: Path) -> None:  # noqa: F811
    html = tmp_path / "report.html"
    result = sktune("report", "--study", real_study.name, "--storage", real_study.storage, "-o", str(html),
                    cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    shot = tmp_path / "report.png"
    run = open_in_chromium(html, shot, _sort_by_ratio)
    assert run.errors == []
    assert run.blocked == [] and run.dialogs == []
    expected = html.read_text(encoding="utf-8").count('class="plotly-graph-div"')
    assert expected >= 5 and len(run.figures) == expected
    for fig in run.figures:
        assert fig["rendered"] and fig["traces"] > 0 and fig["points"] > 0, fig
    assert {"bar", "scatter", "parcoords"} <= {f["type"] for f in run.figures}
    ratios = [float(v) for v in run.extra["sorted"] if v]
    assert len(ratios) >= 6 and ratios == sorted(ratios)
    assert run.extra["sorted"][-1] == ""  # the failed trial (no ratio) sorts last
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000
    if os.environ.get("SKTUNE_KEEP_SCREENSHOT"):
        (ROOT / "reports").mkdir(exist_ok=True)
        shutil.copy(shot, ROOT / "reports" / "report_chromium.png")


def _hover_hostile_op(page: Any) -> dict[str, Any]:
    """Hover op 1 of the fusion map (hostile op type, module, source) and read the label;
    count the fusion map's rows (planned and actual)."""
    page.evaluate("""() => { const gd = document.querySelectorAll('.js-plotly-plot')[0];
                             Plotly.Fx.hover(gd, [{curveNumber: 0, pointNumber: 1}]); }""")
    page.wait_for_selector(".hoverlayer .hovertext", timeout=10_000)
    return {"hover": page.eval_on_selector(".hoverlayer", "e => e.textContent"),
            "scripts": page.evaluate("() => document.scripts.length"),
            "imgs": page.evaluate("() => document.images.length"),
            "rows": page.evaluate("() => document.querySelectorAll('.js-plotly-plot')[0]._fullLayout.yaxis._categories")}


def test_hostile_text_stays_text_in_chromium(tmp_path: Path) -> None:
    html = write_report(hostile_study(fusion=NPU_FUSION), tmp_path / "hostile.html")
    run = open_in_chromium(html, tmp_path / "hostile.png", _hover_hostile_op)
    assert run.dialogs == [] and run.errors == [] and run.blocked == []
    assert EVIL in run.extra["hover"]  # shown literally, as text
    assert run.extra["imgs"] == 0
    assert sorted(run.extra["rows"]) == ["actual", "planned"]
    assert run.extra["scripts"] == html.read_text(encoding="utf-8").count("<script")
