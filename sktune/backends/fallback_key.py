"""The no-op Inductor pass that keys a compile by sktune's edits of Inductor's global tables.

Its own module, imported only where a region is compiled: importing ``torch._inductor``
costs about 1.5 s, which the commands that never compile or capture (export, report, and
the main process of a run) should not pay.
"""

from __future__ import annotations

from typing import Any

from torch import fx
from torch._inductor.custom_graph_pass import CustomGraphPass


class FallbackKey(CustomGraphPass):
    """A no-op pass whose uuid puts the fallback set and the eager-order rewrites (global
    tables Inductor's FX-graph cache key does not see) into that key."""

    def __init__(self, fallbacks: tuple[str, ...], eager_order: tuple[str, ...] = ()) -> None:
        self.fallbacks, self.eager_order = fallbacks, eager_order

    def __call__(self, graph: fx.Graph) -> None:
        return None

    def uuid(self) -> Any:
        return "sktune-plan-v4|fallbacks:" + ",".join(self.fallbacks) + "|eager-order:" + ",".join(self.eager_order)
