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


def test_probe_key_changes_with_inductors_vector_isa(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inductor's ISA can differ from ATen's capability (its simdlen setting): a cached
    answer from one does not answer for the other."""
    import torch._inductor.cpu_vec_isa as cpu_vec_isa

    class Isa:  # a vector ISA as pick_vec_isa returns it
        def __str__(self) -> str:
            return "avx512"

        def nelements(self, dtype: torch.dtype) -> int:
            return 16

    node = _sigmoid_node()
    monkeypatch.setattr(cpu_vec_isa, "pick_vec_isa", Isa)
    vectors = probe_key("inductor", "sigmoid", node)
    monkeypatch.setattr(cpu_vec_isa, "pick_vec_isa", lambda: None)  # scalar C++
    scalar = probe_key("inductor", "sigmoid", node)
    assert "isa avx512 16" in vectors and "isa none" in scalar and vectors != scalar


def test_probe_key_changes_with_the_instruction_sets(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """Two CPUs of one capability with other extensions (-march=native compiles for each)."""
    from sktune import host_cpu

    node = _sigmoid_node()
    keys = []
    for flags in ("fpu sse2 avx2 fma", "fpu sse2 avx2 fma avx512f avx512_fp16"):
        info = tmp_path / f"cpuinfo{len(keys)}"
        info.write_text(f"model name\t: Test CPU\nflags\t\t: {flags}\n")
        monkeypatch.setattr(host_cpu, "_CPUINFO", info)
        keys.append(probe_key("inductor", "sigmoid", node))
    assert keys[0] != keys[1]


def test_the_probe_judges_on_more_sets_than_the_study_verifies_on() -> None:
    """A fused tanh 1 ULP off at 0.6 % of its elements passed the probe on 3 input sets of 128
    values and was called exact (a walk's encoder: its 'bitwise' best differed on 6 seeds of
    30). The probe takes more seeds of example_inputs: the study's sets first, then others."""
    from pathlib import Path

    from sktune.load import draw_inputs
    from sktune.worker.probe import PROBE_INPUT_SETS, probe_sets
    from sktune.worker.runner import RunnerConfig, TrialRunner

    model = Path(__file__).resolve().parents[1] / "models" / "tiny_norm.py"
    runner = TrialRunner(RunnerConfig(model_path=str(model), input_sets=3, n_batches=2))
    at = runner.shape(None)
    sets = list(probe_sets(runner, at))
    assert len(sets) == PROBE_INPUT_SETS >= 8 and all(a is b for (a, _), b in zip(sets, at.args))
    extra_args, extra_references = sets[3]
    drawn = at.graph.args_for(draw_inputs(runner.source, 3))
    assert all(torch.equal(x, y) for x, y in zip(extra_args, drawn))  # seed 3, the next one
    assert all(torch.equal(x, y) for x, y in zip(extra_references(), at.reference_fn(*drawn)))
    assert f"|sets {PROBE_INPUT_SETS}" in probe_key("inductor", "sigmoid", _sigmoid_node())  # old answers: asked again
