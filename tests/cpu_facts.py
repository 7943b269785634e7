"""The numerical facts of this CPU that tests of exactness rely on, read at run time, so that
a test asserts what holds on the CPU it runs on (docs/measured.md, "Which CPU facts the
tests rely on"). Each fact is read from the ATen and Inductor sources; where they leave it
open (ARM's pointwise vectors, an ATen and an Inductor ISA that differ) it is None, and a
test that needs it skips rather than guess.

``ATEN_CPU_CAPABILITY`` moves both sides on x86: ATen dispatches to that build, and
Inductor's ``pick_vec_isa`` (torch/_inductor/cpu_vec_isa.py) maps ``avx2`` / ``avx512`` to
its ISA of that name and ``default`` to no vectors (scalar C++).
"""

from __future__ import annotations

import platform

import pytest
import torch
from torch._inductor.cpu_vec_isa import pick_vec_isa

X86 = platform.machine() in ("x86_64", "AMD64")
AARCH64 = platform.machine() in ("aarch64", "arm64")
# Floats in one Vectorized<float> of ATen's build for its CPU capability (vec_base.h's
# VECTOR_WIDTH): on x86 every build but AVX-512 has 32-byte vectors (the DEFAULT build's
# are plain arrays, computed element by element); on aarch64 the DEFAULT build is NEON
# (vec128, 16 bytes) and SVE256 has 32 bytes.
_ATEN_FLOATS = {"AVX512": 16, "AVX2": 8, "DEFAULT": 8} if X86 else {"DEFAULT": 4, "SVE256": 8} if AARCH64 else {}


def aten_capability() -> str:
    capability = torch.backends.cpu.get_cpu_capability()
    return "DEFAULT" if capability == "NO AVX" else capability  # "NO AVX": an older name of DEFAULT


def inductor_floats() -> int:
    """Floats in one vector of Inductor's generated C++ here; 0 where it writes scalar code."""
    isa = pick_vec_isa()
    return isa.nelements(torch.float32) if isa else 0


def sum_lanes() -> int | None:
    """Lanes of ATen's float sum (SumKernel.cpp's cascade adds ``Vectorized<float>``s).
    It is registered with ``REGISTER_DISPATCH``, which an AVX-512 build registers as
    nullptr (ATen/native/DispatchStub.h), so AVX-512 CPUs run the AVX2 kernel: 8 lanes on
    every x86 build; SVE256 registers its own (8), NEON has 4. ``eager_order.LANES`` must
    equal it for the eager-order sum to be ATen's."""
    return 8 if X86 and aten_capability() in _ATEN_FLOATS else _ATEN_FLOATS.get(aten_capability())


def _eager_order_lanes() -> int:
    from sktune.backends.eager_order import LANES

    return LANES


def eager_order_sum_is_atens() -> bool:
    return sum_lanes() == _eager_order_lanes()


# eager_order reads its lanes at run time (eager_order.aten_sum_lanes); should the two ever
# differ (a CPU neither has read), the probe finds the rewrite inexact and the search does
# not use it, and a test that asserts the rewrite is bitwise is expected to fail.
needs_eager_order_sum = pytest.mark.xfail(
    not eager_order_sum_is_atens(),
    reason=f"eager_order.LANES = {_eager_order_lanes()}, ATen's sum here adds {sum_lanes()} lanes "
           f"({aten_capability()} on {platform.machine()})",
    strict=False)


def pointwise_tail_exact(width: int) -> bool | None:
    """Whether a fused sigmoid/silu over rows of ``width`` floats is bitwise against ATen.

    ATen's ``vectorized_loop`` (ATen/native/cpu/Loops.h) steps two vectors and computes the
    last ``width % (2·lanes)`` elements with the scalar formula (``std::exp``); Inductor
    computes them as a masked vector (Sleef), which matches ATen's vectors, not its scalar
    formula. Without vectors on either side (x86's DEFAULT build, Inductor's scalar code)
    both use the scalar formula. None where that was not read or measured: ARM (is ATen's
    NEON/SVE ``exp`` Sleef, as Inductor's is? It depends on the build), or an ATen and an
    Inductor vector width that differ.
    """
    aten, inductor = _ATEN_FLOATS.get(aten_capability()), inductor_floats()
    if not X86 or aten is None:
        return None
    if inductor == 0:
        return True if aten_capability() == "DEFAULT" else None
    if aten_capability() == "DEFAULT" or inductor != aten:
        return None
    return width % (2 * aten) == 0


def describe() -> str:
    return f"ATen {aten_capability()}, Inductor {pick_vec_isa() or 'scalar code'} on {platform.machine()}"
