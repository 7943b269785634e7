"""The host CPU facts that compiled code and exactness verdicts depend on.

Inductor compiles its C++ with ``-march=native`` and picks its vector ISA from
``ATEN_CPU_CAPABILITY`` (torch/_inductor/cpp_builder.py, cpu_vec_isa.py), yet its FX-graph
cache key names neither the CPU nor the capability. A cache written on one CPU, or under
another capability, hands back kernels built for that one: measured, a fused silu that is
bitwise under ``ATEN_CPU_CAPABILITY=avx2`` with a fresh cache differed in 1,184 of 2,368
elements when an AVX-512 run had filled the cache first (docs/measured.md, "One Inductor
cache per CPU"); under ``default`` the cached kernel failed to compile. On a CPU without
AVX-512 such a kernel would stop on an illegal instruction. So sktune keeps one Inductor
cache per CPU and capability (``cache_tag``), and a study records where it ran
(``vector_facts``).
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
from pathlib import Path

_CPUINFO = Path("/proc/cpuinfo")


def _cpuinfo_field(*names: str) -> str | None:
    """The first value of one of ``names`` in /proc/cpuinfo (Linux), else None."""
    try:
        text = _CPUINFO.read_text(errors="replace")
    except OSError:
        return None
    for name in names:
        found = re.search(rf"^{name}\s*:\s*(.*)$", text, re.MULTILINE)
        if found:
            return found.group(1).strip()
    return None


def cpu_name() -> str:
    """The CPU's model name as the OS gives it, e.g. "Intel(R) Xeon(R) Processor"."""
    return _cpuinfo_field("model name", "Hardware", "cpu model") or platform.processor() or platform.machine()


def cache_tag() -> str:
    """A directory name for this CPU and ``ATEN_CPU_CAPABILITY``, without importing torch.

    The instruction-set flags stand for what ``-march=native`` compiles for: two hosts of one
    model share a tag, an AVX2 and an AVX-512 host do not.
    """
    flags = " ".join(sorted((_cpuinfo_field("flags", "Features") or cpu_name()).split()))
    digest = hashlib.sha256(flags.encode()).hexdigest()[:10]
    capability = os.environ.get("ATEN_CPU_CAPABILITY", "").strip().lower() or "native"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{platform.machine() or 'cpu'}-{capability}-{digest}")


def vector_facts() -> dict[str, str]:
    """ATen's CPU capability and Inductor's vector ISA with its width in floats."""
    import torch
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    isa = pick_vec_isa()
    return {"cpu_capability": torch.backends.cpu.get_cpu_capability(),  # e.g. AVX512, AVX2, DEFAULT
            "vec_isa": f"{isa} {isa.nelements(torch.float32)}" if isa else "none"}
