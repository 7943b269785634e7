"""Does an Inductor cache filled under one vector capability serve another? (host_cpu.py)

    python benchmarks/cache_per_cpu.py [--other avx2|default]

Compiles one small fused function (sigmoid, silu, sum, var over 37-wide rows) in a fresh
interpreter three times: natively into a new cache; under ``ATEN_CPU_CAPABILITY=OTHER``
into the same cache (what a study's one cache directory did before it was keyed by the
CPU); and under OTHER into its own cache (``TuneSettings.compile_cache`` now). Each run
compares its compiled outputs with eager under its own capability and prints the
mismatching elements per output: a verdict that changes between the last two runs is one
the shared cache got wrong (or the run fails: a kernel from the cache that does not build
or load under OTHER).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import json, torch
from sktune.verify import compare_outputs
torch.manual_seed(0)
torch.set_num_threads(1)
def f(x, w):
    h = torch.sigmoid(x @ w) * x
    return h.sum(-1), torch.nn.functional.silu(h), h.var(-1)
x, w = torch.randn(64, 37), torch.randn(37, 37)
eager = f(x, w)
compiled = torch.compile(f, dynamic=False)(x, w)
counts = [0] * len(eager)
for m in compare_outputs(list(eager), list(compiled)):
    counts[m.output_index] = m.count
print(json.dumps({"capability": torch.backends.cpu.get_cpu_capability(), "mismatches": counts}))
"""


def run(cache: Path, capability: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    env["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
    if capability:
        env["ATEN_CPU_CAPABILITY"] = capability
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True)
    if out.returncode != 0:  # e.g. a cached kernel that no longer compiles or loads here
        lines = out.stderr.splitlines()
        first = next((x for x in lines if " error: " in x), next((x for x in lines if "Error" in x), "?"))
        return {"capability": capability.upper() if capability else "native", "mismatches": f"failed (rc {out.returncode}): {first.strip()[:160]}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    import torch

    native = torch.backends.cpu.get_cpu_capability()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--other", default="avx2" if native == "AVX512" else "default",
                        choices=["avx2", "default"], help="the capability to compile under besides this CPU's")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        shared, own = Path(tmp) / "shared", Path(tmp) / "own"
        rows = [("native, new cache", run(shared, None)),
                (f"{args.other}, the same cache", run(shared, args.other)),
                (f"{args.other}, its own cache", run(own, args.other))]
    print("mismatching elements per output (sum of 64, silu of 64x37, var of 64), compiled vs eager:")
    for name, row in rows:
        print(f"  {name:<24} capability {row['capability']:<8} {row['mismatches']}")


if __name__ == "__main__":
    main()
