"""Reading a finished study: the HTML report (``html``), its data (``data``) and figures (``figures``)."""

from sktune.report.html import render, write_report

__all__ = ["render", "write_report"]
