"""Per-call cost of one compiled region as sktune calls it, against the same op eager.

Why: a region boundary costs a call; this says how much, on this machine, at one thread.
Usage: python benchmarks/region_overhead.py   (prints figures; nothing is asserted)
"""

from __future__ import annotations

import statistics
import time

import torch

from sktune.backends.inductor import InductorBackend
from sktune.graph.capture import capture
from sktune.plan import Plan, Scope


class OneAdd(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1.0


def per_call_us(fn, args, calls: int = 2000, repeats: int = 7) -> float:
    for _ in range(200):
        fn(*args)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def main() -> None:
    torch.set_num_threads(1)
    torch.set_grad_enabled(False)
    x = torch.randn(8, 256)
    graph = capture(OneAdd(), (x,))
    args = graph.args_for((x,))
    region = InductorBackend().compile(graph, Plan.make([Scope(0, 0, "r")]))
    dynamo = torch.compile(OneAdd(), fullgraph=True)
    dynamo(x)
    rows = {
        "captured graph, eager (1 op)": per_call_us(graph.gm, args),
        "same graph, the op as one compile_fx region (sktune)": per_call_us(region, args),
        "torch.compile of the module (Dynamo guards per call)": per_call_us(dynamo, (x,)),
    }
    for name, us in rows.items():
        print(f"{name:58s} {us:7.2f} µs/call")


if __name__ == "__main__":
    main()
