"""host_cpu.py: one Inductor cache per CPU and ATEN_CPU_CAPABILITY, and a study that says
where it ran. Inductor's own cache key names neither (a cache filled under AVX-512 handed
AVX-512 kernels to an AVX2 run: docs/measured.md, "One Inductor cache per CPU")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sktune import host_cpu
from sktune.backends.inductor import InductorBackend
from sktune.tuning.settings import TuneSettings


def test_the_cache_tag_changes_with_the_capability_and_is_one_directory_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    native = host_cpu.cache_tag()
    assert native == host_cpu.cache_tag() and "native" in native
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    avx2 = host_cpu.cache_tag()
    assert avx2 != native and "avx2" in avx2
    assert all(os.sep not in tag and tag.strip(".") for tag in (native, avx2))


def test_the_cache_tag_changes_with_the_instruction_sets(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def tag_for(flags: str) -> str:
        info = tmp_path / f"cpuinfo-{len(flags)}"
        info.write_text(f"processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: {flags}\n")
        monkeypatch.setattr(host_cpu, "_CPUINFO", info)
        return host_cpu.cache_tag()

    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    avx2 = tag_for("sse4_2 avx fma avx2")
    assert tag_for("avx2 fma avx sse4_2") == avx2  # the set, not the order
    assert tag_for("sse4_2 avx fma avx2 avx512f avx512bw") != avx2


def test_a_study_compiles_into_its_cache_for_this_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    settings = TuneSettings(Path("m.py"), backend="inductor", study_name="s", cache_root=Path("/c"))
    native = settings.compile_cache
    assert native == Path("/c/s") / host_cpu.cache_tag()
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    assert settings.compile_cache.parent == native.parent and settings.compile_cache != native


def test_the_inductor_backend_records_the_cpu_and_the_vector_isa_it_compiles_for() -> None:
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    env = InductorBackend().environment()
    assert env["cpu"] == host_cpu.cpu_name() and env["cpu"]
    assert env["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    isa = pick_vec_isa()
    assert env["vec_isa"] == (f"{isa} {isa.nelements(torch.float32)}" if isa else "none")


@pytest.mark.slow  # 5-13 s on a 2.8 GHz Xeon (a fresh interpreter checks the vector ISAs); CI runs it (.ci/run)
def test_under_the_scalar_capability_the_facts_say_scalar_code() -> None:
    # ATen's capability is fixed when torch loads: a fresh interpreter.
    code = "import json; from sktune.host_cpu import vector_facts; print(json.dumps(vector_facts()))"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "ATEN_CPU_CAPABILITY": "default"},
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"cpu_capability": "DEFAULT", "vec_isa": "none"}
