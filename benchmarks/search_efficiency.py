"""How well sktune's search spends its trials, and how it scales (issue 5's figures).

    python benchmarks/search_efficiency.py measure studies/decoder_block.py -o bench/decoder_block.json
    python benchmarks/search_efficiency.py replay bench/decoder_block.json --seeds 20
    python benchmarks/search_efficiency.py scale studies/decoder_stack.py --layers 8 --layers 16
    python benchmarks/search_efficiency.py live studies/decoder_stack.py --trials 30 --workdir bench/live

``measure`` times every plan of a small (≤ 256 plans) version of sktune's space once and
saves the table; ``replay`` compares sktune's strategy with plain TPE and random search
on that table over many seeds; ``scale`` times capture + space construction;
``live`` runs a real study and reports per-trial overhead (cold, then with a warm compile
cache) and the best speedup. Figures are printed; nothing is asserted. One thread.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True)


@app.command()
def measure(model: Path, out: Annotated[Path, typer.Option("-o", "--out")],
            max_configs: int = 256, n_batches: int = 20, input_sets: int = 3,
            remeasure: Annotated[int, typer.Option(help="Re-measure this many fastest exact plans twice more and keep each one's median ratio (0: off).")] = 8,
            option: Annotated[list[str], typer.Option(help="Backend option to include (repeatable).")] = [],  # noqa: B006
            cache: Path = Path(".sktune/bench-cache")) -> None:
    """Exhaustively measure a small version of sktune's space for MODEL."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache.resolve() / "inductor"))
    from sktune.backends.inductor import OPTIONS
    from sktune.benchlib.exhaustive import distinct_plans, measure_all, remeasure_top, save, small_space
    from sktune.errors import SktuneError
    from sktune.plan import Plan
    from sktune.worker.runner import RunnerConfig, TrialRunner

    # A name no graph offers is refused before the capture (one a graph lacks, after it: narrowed).
    if unknown := sorted(set(option) - {o.name for o in OPTIONS}):
        raise SktuneError(f"--option {', '.join(unknown)}: not an option of the inductor backend; its options: "
                          f"{', '.join(o.name for o in OPTIONS)}")
    started = time.perf_counter()
    runner = TrialRunner(RunnerConfig(model_path=str(model), input_sets=input_sets,
                                      probe_cache=str(cache.resolve() / "exactness-probe.json")))
    workload = runner.describe()
    space, max_cuts = small_space(workload, max_configs, option)
    n = len(distinct_plans(space))
    print(f"{model}: {len(workload.ops)} ops, {len(space.blocks)} blocks, {len(space.fallbacks)} fallbacks, "
          f"options {option}: {n} distinct plans")

    def progress(done: int, total: int) -> None:
        if done % 10 == 0 or done == total:
            print(f"  {done}/{total} measured ({time.perf_counter() - started:.0f} s)", flush=True)

    measurements = measure_all(runner, space, n_batches, progress)
    if remeasure:  # the fastest of many noisy ratios is biased low: its median of three instead
        for key in remeasure_top(runner, measurements, n_batches, top=remeasure):
            ratios = measurements[key]["ratios"]
            plan = Plan.loads(key)
            spans = ",".join(f"{s.first_op}:{s.last_op}" for s in plan.scopes if s.name) or "unfused"
            spans += f" {plan.option_dict}" if plan.option_dict else ""
            print(f"  re-measured {spans}: {' '.join(f'{r:.4f}' for r in ratios)} -> {measurements[key]['ratio']:.4f}")
    out.parent.mkdir(parents=True, exist_ok=True)
    save(out, str(model), workload, max_cuts, measurements, option, n_batches)
    exact = [m for m in measurements.values() if m["bitwise"]]
    best = min(m["ratio"] for m in exact)
    print(f"saved {out}: {len(measurements)} plans, {len(exact)} bitwise, exhaustive best ratio {best:.3f} "
          f"({1 / best:.2f}×), {time.perf_counter() - started:.0f} s")


@app.command()
def replay(table: Annotated[Path, typer.Argument(exists=True, dir_okay=False)], seeds: int = 20, max_trials: int = 256, tolerance: float = 0.02,
           patience: Annotated[int | None, typer.Option(help="Stop a run after this many trials without a significant gain, as sktune run does (default: never, so every strategy gets MAX_TRIALS).")] = None,
           json_out: Path | None = None) -> None:
    """Compare sktune's strategy, TPE without seeds and random search on a measured table, each
    through sktune's own objective and loop (a table lookup instead of a compile)."""
    from sktune.benchlib.replay import CHECKPOINTS, STRATEGIES, exhaustive_best, replay as run_one, summarize

    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    data = json.loads(table.read_text())
    best = exhaustive_best(data["measurements"])
    runs = [run_one(data, s, seed, max_trials, patience) for s in STRATEGIES for seed in range(seeds)]
    result = summarize(runs, best, tolerance)
    print(f"{data['model']}: {data['n_configs']} plans, exhaustive best exact ratio {best:.4f} "
          f"({1 / best:.2f}×); target: within {tolerance:.0%}; {seeds} seeds; at most {max_trials} trials")
    # To the target, medians over seeds: trials (not skipped), compiles and measurements (a
    # trial that reused an earlier one's plan costs neither: sktune/tuning/reuse.py).
    shown = [k for k in CHECKPOINTS if k <= max_trials]  # a later checkpoint would repeat the last trial's best
    header = f"{'strategy':<14} {'trials':>7} {'compiles':>9} {'measurements':>13} {'never':>6}" + "".join(
        f" {'best@' + str(k):>9}" for k in shown)
    print("to within the target (median over seeds):")
    print(header)
    for strategy, row in result.items():
        print(f"{strategy:<14} {row['trials_to_target_median']:>7} {row['compiles_to_target_median']:>9} "
              f"{row['measurements_to_target_median']:>13} {row['never_reached']:>6}" + "".join(
                  f" {1 / row[f'best_after_{k}_median']:>8.2f}×" for k in shown))
    print(_starting_points_vs_best(data, best, tolerance))
    fewer = result["random"]["trials_to_target_median"] / result["sktune"]["trials_to_target_median"]
    capped = result["random"]["trials_to_target_median"] > max_trials  # most seeds never got there
    print(f"random needs {'at least ' if capped else ''}{fewer:.1f}× the trials sktune needs (median over seeds"
          + (f"; a seed that never got there within {max_trials} trials counts as {max_trials + 1})" if capped else ")"))
    if json_out:
        json_out.write_text(json.dumps({"best": best, "tolerance": tolerance, "strategies": result}, indent=2))


@app.command()
def scale(model: Path, layers: Annotated[list[int], typer.Option()] = [8, 16]) -> None:  # noqa: B006
    """Capture + space construction time of MODEL's ``build_stack(n)`` for each --layers n."""
    import importlib.util

    import torch

    from sktune.backends.inductor import InductorBackend
    from sktune.graph.capture import capture
    from sktune.space.search_space import build_space

    torch.set_num_threads(1)
    spec = importlib.util.spec_from_file_location("stack_model", model)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    inputs = module.example_inputs(0)
    backend = InductorBackend()
    start = time.perf_counter()
    capture(module.build_stack(1).eval(), inputs)  # Dynamo's one-off start-up, paid once per worker
    print(f"first capture in the process (1 layer, Dynamo start-up): {time.perf_counter() - start:.2f} s")
    for n in layers:
        model_n = module.build_stack(n).eval()
        for attempt in range(2):
            start = time.perf_counter()
            graph = capture(model_n, inputs)
            captured = time.perf_counter()
            ops = graph.ops
            space = build_space([o.target for o in ops], [o.module for o in ops], graph.boundaries,
                                backend.capabilities(graph), span_us=None)
            built = time.perf_counter()
            units = f"{len(space.repeats.units)} units × {space.repeats.length} ops" if space.repeats else "flat"
            print(f"{n} layers, {len(ops)} ops: capture {captured - start:.2f} s + space {built - captured:.3f} s "
                  f"= {built - start:.2f} s ({units}, {len(space.blocks)} blocks, "
                  f"{len(set(space.layout.block_keys)) + len(set(space.layout.cut_keys))} structure parameters) "
                  f"[run {attempt + 1}]")


@app.command()
def live(model: Path, trials: int = 30, workdir: Path = Path("bench/live"), seed: int = 0,
         layers: Annotated[int | None, typer.Option(help="Tune MODEL's build_stack(LAYERS) instead of its build_model().")] = None,
         compile_helper: bool = True) -> None:
    """A real study: start-up, per-trial overhead (cold, then warm cache), best speedup after TRIALS."""
    workdir.mkdir(parents=True, exist_ok=True)
    if layers is not None:
        model = _stack_model(model, layers, workdir)
    from sktune.tuning.loop import tune
    from sktune.tuning.attrs import StudyAttr, TrialAttr
    from sktune.tuning.settings import TuneSettings
    from sktune.tuning.summary import summary

    settings = TuneSettings(model_path=model.resolve(), trials=trials, stop_early=False, seed=seed,
                            compile_helper=compile_helper,
                            storage=f"sqlite:///{(workdir / 'live.db').resolve()}",
                            study_name=f"live-{model.stem}-{int(time.time())}", cache_root=(workdir / "cache").resolve())
    cold = not settings.cache_root.exists()  # a reused --workdir keeps its compile cache
    started = time.perf_counter()
    study = tune(settings)
    wall = time.perf_counter() - started
    data = summary(study)
    startup = study.user_attrs.get(StudyAttr.STARTUP_S) or {}
    overheads = [t.user_attrs[TrialAttr.OVERHEAD_S] for t in study.trials if TrialAttr.OVERHEAD_S in t.user_attrs]
    print(f"{model}: {data['n_ops']} ops, {data['n_trials']} trials ({data['n_complete']} complete, "
          f"{data['n_infeasible']} not bitwise, {data['n_pruned']} pruned/skipped) in {wall:.0f} s")
    print("worker start-up: " + ", ".join(f"{k} {v:.2f} s" for k, v in startup.items()))
    print("then: " + ", ".join(f"{k} {v:.1f} s" for k, v in (study.user_attrs.get(StudyAttr.PHASES_S) or {}).items()))
    cache = "cold cache" if cold else "compile cache from an earlier run"
    print(f"per-trial overhead beyond measurement, {cache}: median {statistics.median(overheads):.2f} s "
          f"(min {min(overheads):.2f}, max {max(overheads):.2f})")
    print("  where a trial's time went (median s): " + _breakdown(study))
    print(f"best exact after {data['n_trials']} trials: {_best_line(data)}")
    # Warm cache: the same plans again in a fresh worker process using the study's Inductor cache.
    cache_dir = settings.compile_cache
    plans = [t.user_attrs[TrialAttr.PLAN] for t in study.trials if TrialAttr.OVERHEAD_S in t.user_attrs]
    code = (
        "import json, os, statistics, sys, time\n"
        f"os.environ['TORCHINDUCTOR_CACHE_DIR'] = {str(cache_dir)!r}\n"
        "from sktune.plan import Plan\n"
        "from sktune.pipe.protocol import TrialRequest\n"
        "from sktune.worker.runner import RunnerConfig, TrialRunner\n"
        f"runner = TrialRunner(RunnerConfig(model_path={str(model.resolve())!r}, "
        f"capture_cache={str((settings.cache_root / 'captures').resolve())!r}))\n"
        "print('capture', runner.startup_s['capture'], runner.capture_reused, file=sys.stderr)\n"
        "plans = json.load(sys.stdin)\n"
        "out = []\n"
        "for plan in plans:\n"
        "    t = time.perf_counter(); r = runner.run(TrialRequest(Plan.from_json(plan), 2))\n"
        "    out.append(time.perf_counter() - t - r.measure_s)\n"
        "print(json.dumps(out))\n"
    )
    import subprocess

    result = subprocess.run([sys.executable, "-c", code], input=json.dumps(plans), capture_output=True, text=True,
                            check=True)
    warm = json.loads(result.stdout.strip().splitlines()[-1])
    capture_line = [line for line in result.stderr.splitlines() if line.startswith("capture ")][-1].split()
    print(f"second start: captured graph {'loaded from the cache' if capture_line[2] == 'True' else 'captured again'} "
          f"in {float(capture_line[1]):.2f} s")
    print(f"per-trial overhead beyond measurement, warm cache ({len(warm)} plans again, fresh process): "
          f"median {statistics.median(warm):.2f} s (min {min(warm):.2f}, max {max(warm):.2f}; "
          f"first {warm[0]:.2f} s includes the process's first compile)")
    (workdir / "live.json").write_text(json.dumps({"summary": data, "overheads_cold": overheads,
                                                  "overheads_warm": warm, "startup_s": startup, "wall_s": wall}))
    print(f"study {settings.study} in {settings.storage}; summary in {workdir / 'live.json'}")


def _best_line(data: dict) -> str:
    """The study's named best against unfused, and fuse-all's speedup and gain kept where the
    summary has them (fuse-all is the last starting point: a short study may not reach it,
    and a model that fusing everything slows down keeps no gain)."""
    if data["best_trial"] is None:
        return "no exact plan"
    line = f"trial #{data['best_trial']}, {data['speedup']:.2f}× " + (
        "(fuses nothing: keep the model unfused)" if data["best_fuses_nothing"]
        else f"[{data['speedup_ci'][0]:.2f}, {data['speedup_ci'][1]:.2f}]") + " vs unfused"
    fuse_all = data.get("fuse_all")
    if fuse_all is None:
        return line + "; no fuse-all figure (it did not run, or failed)"
    line += f"; fuse-all {1 / fuse_all['ratio']:.2f}× ({'bitwise' if fuse_all['bitwise'] else 'not bitwise'})"
    if data.get("gain_kept") is not None:
        line += f"; gain kept {data['gain_kept']:.0%}"
    return line


def _starting_points_vs_best(data: dict, best: float, tolerance: float) -> str:
    """Whether an anchor or seed already is (within the tolerance) the exhaustive best:
    if one is, the table only tests the starting points, not the sampler."""
    from sktune.benchlib.exhaustive import space_for
    from sktune.benchlib.replay import table_workload
    from sktune.tuning.space_setup import starting_points

    workload = table_workload(data)
    space = space_for(workload, data["max_cuts"], data["options"])
    measured = []
    for name, params in starting_points(space, workload):
        m = data["measurements"].get(space.decode(params).dumps())
        if m and m["bitwise"] and m["ratio"] is not None:
            measured.append((m["ratio"], name))
    if not measured:
        return "no starting point is exact"
    ratio, name = min(measured)
    verdict = ("it is within the target: the starting points alone reach it" if ratio <= best * (1 + tolerance)
               else "outside the target: only the sampler can reach it")
    return (f"best exact starting point: {name} at {ratio:.4f} ({(ratio / best - 1) * 100:+.1f}% from the "
            f"exhaustive best); {verdict}")


def _stack_model(model: Path, layers: int, workdir: Path) -> Path:
    """A model file tuning ``build_stack(layers)`` of MODEL (same inputs)."""
    path = (workdir / f"{model.stem}_{layers}.py").resolve()
    path.write_text(
        "import importlib.util\n"
        f"_spec = importlib.util.spec_from_file_location('stack_base', {str(model.resolve())!r})\n"
        "_base = importlib.util.module_from_spec(_spec)\n_spec.loader.exec_module(_base)\n"
        "example_inputs = _base.example_inputs\n"
        f"def build_model():\n    return _base.build_stack({layers})\n")
    return path


def _breakdown(study: "optuna.Study") -> str:  # noqa: F821
    """Median compile, verify, measure and the rest (IPC, bookkeeping) per trial; regions reused."""
    from sktune.tuning.attrs import TrialAttr

    rows = [t.user_attrs for t in study.trials if TrialAttr.COMPILE_S in t.user_attrs]
    if not rows:
        return "no trial ran"
    med = {k: statistics.median(r.get(k) or 0.0 for r in rows)
           for k in (TrialAttr.COMPILE_S, TrialAttr.VERIFY_S, TrialAttr.MEASURE_S)}
    rest = statistics.median(r[TrialAttr.OVERHEAD_S] - r[TrialAttr.COMPILE_S] - r[TrialAttr.VERIFY_S]
                             for r in rows if TrialAttr.OVERHEAD_S in r)
    observed = [r.get(TrialAttr.OBSERVED) or {} for r in rows]
    compiled = sum(o.get("regions_compiled", 0) for o in observed)
    reused = sum(o.get("regions_reused", 0) for o in observed)
    return (f"compile {med[TrialAttr.COMPILE_S]:.2f}, verify {med[TrialAttr.VERIFY_S]:.2f}, "
            f"measure {med[TrialAttr.MEASURE_S]:.2f}, IPC and the rest {rest:.2f}; "
            f"regions compiled {compiled}, reused {reused}")


if __name__ == "__main__":
    from sktune.benchlib.script import run

    run(app)
