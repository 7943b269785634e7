"""Measure every configuration of a small search space once, and save the measurements.

The space is sktune's own (same layout, anchors and seeds), narrowed until it has at most
``max_configs`` distinct plans: fewer candidate cuts, a few options. Every plan is
compiled, verified bitwise on all input sets and timed against the unfused graph in the
same run, exactly as a trial is. Strategies are then compared by replaying this table
(``benchlib/replay.py``): a replayed trial costs a lookup, not a compile.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sktune.errors import PlanError
from sktune.plan import Plan
from sktune.space.search_space import SearchSpace
from sktune.pipe.protocol import TrialRequest
from sktune.tuning.space_setup import space_from_workload
from sktune.pipe.workload import Workload

log = logging.getLogger(__name__)

DEFAULT_OPTIONS: tuple[str, ...] = ()  # backend options searched too (each multiplies the plans)


def distinct_plans(space: SearchSpace) -> dict[str, dict[str, Any]]:
    """Plan (as canonical JSON) → one parameter set that decodes to it."""
    domains = space.domains()
    names = list(domains)
    plans: dict[str, dict[str, Any]] = {}
    for values in itertools.product(*(domains[n] for n in names)):
        params = dict(zip(names, values))
        plans.setdefault(space.decode(params).dumps(), params)
    return plans


def space_for(workload: Workload, max_cuts: int, options: Sequence[str] = DEFAULT_OPTIONS) -> SearchSpace:
    """sktune's (flat) space for ``workload`` with at most ``max_cuts`` cuts and only ``options``."""
    return space_from_workload(workload, stamp=False, max_cuts=max_cuts, options=options)


def small_space(workload: Workload, max_configs: int = 256,
                options: Sequence[str] = DEFAULT_OPTIONS) -> tuple[SearchSpace, int]:
    """The space with the most candidate cuts that keeps ≤ ``max_configs`` plans, and that cut limit."""
    for max_cuts in range(8, -1, -1):
        space = space_for(workload, max_cuts, options)
        combinations = 1
        for choices in space.domains().values():
            combinations *= len(choices)
        if combinations <= 1 << 16 and len(distinct_plans(space)) <= max_configs:
            return space, max_cuts
    advice = "pass fewer options" if options else "raise the limit (--max-configs)"
    raise PlanError(f"even without cuts the space has more than {max_configs} plans: {advice}")


def measure_all(runner: Any, space: SearchSpace, n_batches: int,
                progress: Callable[[int, int], None] | None = None) -> dict[str, dict[str, Any]]:
    """Run every distinct plan through ``runner`` (a TrialRunner): plan JSON → measurement."""
    plans = distinct_plans(space)
    out: dict[str, dict[str, Any]] = {}
    for k, (key, params) in enumerate(plans.items()):
        started = time.perf_counter()
        try:
            result = runner.run(TrialRequest(Plan.from_json(json.loads(key)), n_batches))
            out[key] = {"ratio": result.timing.ratio, "ratio_ci": list(result.timing.ratio_ci),
                        # the medians behind the ratio: which side a noisy reading came from
                        "baseline_s": result.timing.baseline_s, "candidate_s": result.timing.candidate_s,
                        "bitwise": result.bitwise, "mismatches": len(result.mismatches), "compile_s": result.compile_s,
                        "wall_s": time.perf_counter() - started}
        except Exception as exc:  # a plan that does not compile is a failed trial, not the end
            log.warning("plan %d failed: %s", k, exc)
            out[key] = {"ratio": None, "bitwise": False, "error": f"{type(exc).__name__}: {exc}"}
        if progress:
            progress(k + 1, len(plans))
    return out


def remeasure_top(runner: Any, measurements: dict[str, dict[str, Any]], n_batches: int, top: int = 8,
                  rounds: int = 2, max_plans: int | None = None) -> list[str]:
    """Measure the ``top`` fastest exact plans ``rounds`` more times, in turn, and give each
    the median of its ratios (``ratios`` keeps them all; ``ratio_ci`` is the measurement's
    nearest the median); repeat while a plan not yet re-measured is among the ``top``
    fastest, up to ``max_plans`` plans (default ``3 * top``). The keys re-measured, fastest
    first.

    The fastest of a few hundred noisy ratios is biased low (winner's curse): split_stages
    and exact_sum_cut each had a lone best 10-13 % above a plateau whose plans measured in
    no stable order when timed again (docs/measured.md). A replay that counts trials to
    within 2 % of such a best counts the trials to one lucky measurement. Once the first
    ``top`` are re-measured their medians may rise above the next plan's single ratio: on a
    shared_gate table a plan never re-measured became the best at 0.279; timed again it ran
    at 0.5-0.8 of eager (docs/measured.md). Hence the repeat.
    """
    limit = 3 * top if max_plans is None else max_plans
    runs: dict[str, list[tuple[float, list[float]]]] = {}
    while len(runs) < limit:
        exact = sorted((k for k, m in measurements.items() if m.get("bitwise") and m.get("ratio") is not None),
                       key=lambda k: measurements[k]["ratio"])[:top]
        todo = [k for k in exact if k not in runs][:limit - len(runs)]
        if not todo:
            break
        for key in todo:
            runs[key] = [(measurements[key]["ratio"], measurements[key]["ratio_ci"])]
        for _ in range(rounds):
            for key in todo:
                result = runner.run(TrialRequest(Plan.from_json(json.loads(key)), n_batches))
                runs[key].append((result.timing.ratio, list(result.timing.ratio_ci)))
        for key in todo:
            ordered = sorted(runs[key], key=lambda r: r[0])
            ratio, ci = ordered[len(ordered) // 2]
            measurements[key].update(ratio=ratio, ratio_ci=ci, ratios=[r for r, _ in runs[key]])
    return sorted(runs, key=lambda k: measurements[k]["ratio"])


def save(path: Path, model: str, workload: Workload, max_cuts: int,
         measurements: dict[str, dict[str, Any]], options: Sequence[str], n_batches: int) -> None:
    path.write_text(json.dumps({
        "model": model, "description": workload.to_json(), "options": list(options), "max_cuts": max_cuts,
        "n_batches": n_batches, "n_configs": len(measurements), "measurements": measurements,
    }))
