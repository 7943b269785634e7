"""The HTML report's tables: escaped cells that carry their sort key, tables, and the
script that sorts a ``sortable`` table when its header is clicked (report/html.py)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

import pandas as pd

# Click a header to sort by it; click again to reverse. Numbers sort numerically, blanks last.
SORT_JS = """
document.querySelectorAll('table.sortable th').forEach(function (th) {
  th.addEventListener('click', function () {
    var table = th.closest('table'), body = table.tBodies[0], col = th.cellIndex;
    var asc = th.getAttribute('data-dir') !== 'asc';
    table.querySelectorAll('th').forEach(function (h) { h.removeAttribute('data-dir'); });
    th.setAttribute('data-dir', asc ? 'asc' : 'desc');
    var key = function (row) { return row.cells[col].getAttribute('data-v') || ''; };
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = key(a), y = key(b);
      if (x === '' || y === '') { return (x === '') - (y === ''); }
      var nx = Number(x), ny = Number(y), c;
      c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
      return asc ? c : -c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  });
});
"""


def esc(value: Any) -> str:
    """Any value as text safe inside the page."""
    return escape(str(value))


def num(value: Any, fmt: str) -> str:
    """A number formatted, or a dash for none (None or NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return format(value, fmt)


def cell(value: Any, display: str | None = None) -> str:
    """A table cell: ``display`` is pre-escaped markup; ``value`` (escaped) is what sorts."""
    blank = value is None or (isinstance(value, float) and math.isnan(value))
    key = "" if blank else esc(value)
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    cls = ' class="num"' if numeric else ""
    return f'<td{cls} data-v="{key}">{display if display is not None else ("" if blank else esc(value))}</td>'


def table(headers: Sequence[str] | None, rows: Iterable[Sequence[str]], sortable: bool = False) -> str:
    head = "<thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr></thead>" if headers else ""
    body = "".join("<tr>" + "".join(r) + "</tr>" for r in rows)
    cls = ' class="sortable"' if sortable else ""
    return f"<table{cls}>{head}<tbody>{body}</tbody></table>"


def interval(lo: Any, hi: Any, fmt: str = ".3f") -> str:
    """A 95 % interval as ``[lo, hi]`` (``fmt``: as the figure it bounds), or a dash when there is none."""
    return "—" if lo is None or pd.isna(lo) else f"[{lo:{fmt}}, {hi:{fmt}}]"


def us(seconds: Any) -> float | None:
    """Seconds as µs for a table cell; None for a missing figure."""
    return None if seconds is None or pd.isna(seconds) else seconds * 1e6
