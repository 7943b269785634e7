"""The exactness probe's cache key holds the CPU's vector capability: an op exact with
AVX-512 can be inexact with AVX2 (vector tails), so a probe cache read on another CPU, or
under another ``ATEN_CPU_CAPABILITY``, must not answer for it."""

from __future__ import annotations

import pytest
import torch
from torch import fx

from sktune.worker.probe import probe_key


def _sigmoid_node() -> fx.Node:
    gm = fx.symbolic_trace(torch.nn.Sigmoid())
    node = next(n for n in gm.graph.nodes if n.op == "call_module" or n.op == "call_function")
    node.meta["example_value"] = torch.zeros(4, 15)
    return node


def test_probe_key_changes_with_the_cpu_capability(monkeypatch: pytest.MonkeyPatch) -> None:
    node = _sigmoid_node()
    here = probe_key("inductor", "sigmoid", node)
    assert f"cpu {torch.backends.cpu.get_cpu_capability()}" in here
    other = "AVX2" if torch.backends.cpu.get_cpu_capability() != "AVX2" else "AVX512"
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: other)
    assert probe_key("inductor", "sigmoid", node) != here
