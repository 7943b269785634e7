"""``sktune run MODEL.py``: tune, with progress on screen; the study is saved as it goes."""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import threading
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from sktune.cli._errors import MAX_TIMEOUT_S, err_console, print_error, user_errors
from sktune.cli._paths import check_output
from sktune.cli.summary_view import print_summary
from sktune.tuning.settings import DEFAULT_INPUT_SETS, DEFAULT_STORAGE

if TYPE_CHECKING:
    from sktune.pipe.workload import Workload

BackendName = Annotated[str, typer.Option(help="auto (a device where present, else real fusion on the CPU) or a "
                                                  "backend's name (an unknown name lists them)")]


class EffortName(str, Enum):
    quick = "quick"
    default = "default"
    thorough = "thorough"


def run_command(
    model: Annotated[Path, typer.Argument(help="Python file defining build_model() and example_inputs(seed).")],
    backend: BackendName = "auto",
    effort: Annotated[EffortName, typer.Option(help="quick (15 trials) | default (30) | thorough (100): trials, timing batches, patience, finalists.")] = EffortName.default,
    trials: Annotated[int | None, typer.Option(min=1, help="Trials to run in this invocation (default: the effort's); the unfused plan, the best's refinements, each shape's yardsticks and reused plans may add a few.")] = None,
    patience: Annotated[int | None, typer.Option(min=1, help="Stop after this many trials in a row without a significant gain (default: the effort's: 6 / 12 / 30).")] = None,
    no_stop: Annotated[bool, typer.Option("--no-stop", help="Run every trial: never stop early for lack of gains.")] = False,
    probe: Annotated[bool, typer.Option(help="Probe each op type alone for bitwise exactness first (where the backend probes; cached).")] = True,
    compile_helper: Annotated[bool, typer.Option(
        help="A second process compiles half of each trial's new regions (where the backend shares compiles; uses a second core "
             "while compiling, never while timing).")] = True,
    timeout: Annotated[float | None, typer.Option(min=1, help="Stop starting new trials after this many seconds.")] = None,
    study: Annotated[str | None, typer.Option(help="Study name (default: MODEL-BACKEND). Same name + storage resumes.")] = None,
    storage: Annotated[str, typer.Option(show_default=False, help=f"Optuna storage URL (default: {DEFAULT_STORAGE}, a file in the folder sktune runs in).")] = DEFAULT_STORAGE,
    seed: Annotated[int, typer.Option(min=0, max=2**32 - 1, help="Sampler seed.")] = 0,
    threads: Annotated[int, typer.Option(min=1, help="CPU threads for compiled and eager runs (1 is the least noisy).")] = 1,
    input_sets: Annotated[int, typer.Option(min=1, help="Input sets (seeds) every candidate is verified on.")] = DEFAULT_INPUT_SETS,
    trial_timeout: Annotated[float, typer.Option(min=1, max=MAX_TIMEOUT_S, help="Seconds before a trial's worker is killed as hung (at most a day).")] = 300.0,
    bisect_runs: Annotated[int | None, typer.Option(min=0, help="Compile+verify runs to locate the op range behind a mismatch (default: the backend's own; 0 where outputs can be compared op by op).")] = None,
    diagnose: Annotated[int, typer.Option(min=0, help="Hung trials to rerun once with the backend's debug options (e.g. CANN's op execution trace).")] = 1,
    allow_changed: Annotated[bool, typer.Option(help="Resume a study even if the model file or versions changed.")] = False,
    shapes: Annotated[str | None, typer.Option(help="Tune for these of the model's input_shapes() only, e.g. bs1,bs8 (default: all).")] = None,
    warm_start: Annotated[str | None, typer.Option(help="Earlier studies (comma-separated) whose best exact plans are tried first.")] = None,
    warm_storage: Annotated[str | None, typer.Option(help="Storage URL of the --warm-start studies (default: --storage).")] = None,
    summary_json: Annotated[Path | None, typer.Option(help="Write the machine-readable summary here.")] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks and debug logs.")] = False,
) -> None:
    """Search fusion scopes and backend options; keep only bitwise-exact candidates."""
    with user_errors(debug):
        from sktune.backends import resolve_backend_name
        from sktune.errors import SktuneError
        from sktune.load import check_model_path, check_syntax
        from sktune.tuning.loop import tune
        from sktune.tuning.settings import TuneSettings
        from sktune.tuning.summary import summary

        if debug:
            logging.getLogger("sktune").setLevel(logging.DEBUG)
        check_model_path(model)
        check_syntax(model.resolve())
        if summary_json is not None:
            check_output(summary_json, "--summary-json")
        if warm_storage is not None and not warm_start:
            raise SktuneError("--warm-storage names where the --warm-start studies are: give --warm-start too")
        if patience is not None and no_stop:
            raise SktuneError("--patience stops the search early and --no-stop never does: give one of them")
        settings = TuneSettings(
            model_path=model.resolve(), backend=resolve_backend_name(backend), trials=trials, effort=effort.value,
            patience=patience, stop_early=not no_stop, probe=probe, compile_helper=compile_helper, timeout=timeout,
            study_name=study, storage=storage, seed=seed, threads=threads, input_sets=input_sets,
            trial_timeout=trial_timeout, bisect_runs=bisect_runs, diagnose=diagnose, allow_changed=allow_changed,
            shapes=_names("--shapes", shapes), warm_start=_names("--warm-start", warm_start) or (),
            warm_storage=warm_storage,
        )
        progress = _Progress(settings.resolved_effort.trials)
        try:
            with sigterm_as_interrupt(), progress:
                result = tune(settings, callbacks=[progress.on_trial], on_ready=progress.on_ready,
                              on_status=progress.on_status)
                data = summary(result)
                progress.finish(data)
        except KeyboardInterrupt as stop:
            from sktune.tuning.unprepared import stop_note

            saved = stop_note(settings.study, settings.storage)  # saved, deleted, or handed to another worker
            terminated = isinstance(stop, Terminated)
            how = "terminated" if terminated else "interrupted"
            after_finalists = getattr(stop, "after_finalists", False)
            # Read only where it is shown or written: a plain stop should stop at once.
            stopped = (_stopped_summary(settings.study, settings.storage)
                       if after_finalists or summary_json is not None else None)
            if (after_finalists and isinstance(stopped, dict)
                    and stopped["best_plan"] is not None and not stopped.get("provisional")):
                # Stopped after this run's finalists' round (its profiles, say): its result stands.
                print_summary(stopped)
                saved = "after its finalists' round: the result above stands (the best's profiles were not taken)"
            err_console.print(f"{how}: {saved}", soft_wrap=True)
            if summary_json is not None and stopped is not None:
                _write_stopped_summary(summary_json, stopped, how)
            raise typer.Exit(143 if terminated else 130) from None
        except Exception as exc:
            from sktune.tuning.storage import mask_url, raised_by_storage, storage_error

            if isinstance(exc, SktuneError) or not raised_by_storage(exc):
                raise
            raise SktuneError(f"the study's storage {mask_url(settings.storage)} failed during the run: "
                              f"{storage_error(exc, settings.storage)}. Whatever trials completed before it are "
                              "saved there: once it works again, run the same command to resume") from exc
    print_summary(data)
    if summary_json is not None:
        with user_errors(debug):
            _write_summary(summary_json, data)
        err_console.print(f"summary written to {summary_json}")
    if data["best_plan"] is None and not data.get("keep_unfused_reason"):
        # Not even the unfused plan completed: there is no result, and the run says why.
        from sktune.report.export import no_result

        print_error(no_result(data))
        raise typer.Exit(1)


def _write_summary(path: Path, data: dict[str, Any]) -> None:
    from sktune.errors import SktuneError

    try:
        path.write_text(json.dumps(data, indent=2))
    except OSError as exc:
        raise SktuneError(f"cannot write --summary-json {path}: {exc}") from exc


def _stopped_summary(study: str, storage: str) -> dict[str, Any] | str:
    """The summary of what a stopped run saved (its ``provisional`` says why the figures are the
    search's, where no finalists' round named the best), or why there is none: nothing saved,
    the storage gone, or a second Ctrl-C (it skips this; the stop's exit code stands)."""
    from sktune.errors import SktuneError
    from sktune.tuning.attrs import is_prepared
    from sktune.tuning.storage import load_existing_study
    from sktune.tuning.summary import summary

    try:
        loaded = load_existing_study(study, storage)
        if not is_prepared(loaded.user_attrs):  # handed to another worker that prepares it now
            raise SktuneError("this run saved nothing (stopped before the study was prepared)")
        return summary(loaded)
    except (Exception, KeyboardInterrupt) as exc:
        if isinstance(exc, SktuneError):
            return str(exc)
        if isinstance(exc, KeyboardInterrupt):
            return "interrupted again"
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _write_stopped_summary(path: Path, stopped: dict[str, Any] | str, how: str) -> None:
    """``--summary-json`` of a stopped run, for a script that reads it (its ``stopped`` says how
    the run ended); where there is no summary (``stopped`` says why): one line, no file."""
    from sktune.errors import SktuneError

    try:
        if isinstance(stopped, str):
            raise SktuneError(stopped)
        _write_summary(path, {**stopped, "stopped": how})
    except SktuneError as exc:
        err_console.print(f"no summary written to {escape(str(path))}: {escape(str(exc))}", soft_wrap=True)
        return
    err_console.print(f"summary of the trials saved so far written to {escape(str(path))}", soft_wrap=True)


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, ``timeout``, a job scheduler's cancel), stopped as Ctrl-C is: Optuna
    marks the running trial failed, and the run says what was saved. Before, it exited at
    once (143, no word) and left the trial RUNNING until a later run failed it."""


def _terminated(signum: int, frame: Any) -> None:
    raise Terminated


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises ``Terminated`` while the tuning runs; the handler before it after (a
    stop during the summary's writes ends the process as before). Only the main thread may
    set a handler: elsewhere (sktune run called from a thread) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _names(flag: str, value: str | None) -> tuple[str, ...] | None:
    """A comma-separated list of names; an empty one is a user error."""
    from sktune.errors import SktuneError

    if value is None:
        return None
    names = tuple(n.strip() for n in value.split(","))
    if not all(names):
        raise SktuneError(f"{flag}: expected comma-separated names, got {value!r}")
    return names


class _Progress:
    """A rich progress bar whose description shows the best exact speedup so far."""

    def __init__(self, total: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from sktune.tuning.budget import TrialBudget

        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=err_console, transient=False)
        self.task = self.progress.add_task("opening the study…", total=total)
        self.budget = TrialBudget(total)  # the search's rule for what uses up --trials
        self.warned_of: list[int] = []  # the other workers on this host already warned of

    def __enter__(self) -> "_Progress":
        self.progress.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is not None and not issubclass(exc_type, KeyboardInterrupt):
            # An error ends the run: its one line follows, with no bar left before it (a log
            # of piped output read "opening the study… 0/10" above every error).
            self.progress.live.transient = True
            self.progress.live.stop()  # not Progress.stop: it adds a blank line to piped output
            return
        self.progress.__exit__(exc_type, *exc)

    def on_status(self, text: str) -> None:
        """What start-up is doing (the worker's steps; a wait for the study's creator)."""
        self.progress.update(self.task, description=text)

    def on_ready(self, study: Any, workload: Workload, joined: bool = False) -> None:
        self._warn_of_other_workers(study)
        if line := resuming_line(study, joined):
            self.progress.console.print(line, highlight=False)
        self.progress.update(self.task, description=f"{study.study_name}: {len(workload.ops)} ops, tuning…")

    def _warn_of_other_workers(self, study: Any) -> None:
        """Once, when other workers on this host tune the study: at start-up for those already
        running, and after a trial for one started later (the first of two workers sees it only then)."""
        from sktune.tuning.workers import other_local_workers

        if self.warned_of:
            return
        others = other_local_workers(study)
        if others:
            self.progress.console.print(
                f"[yellow]warning:[/] sktune process(es) {others} are tuning this study on this host too: "
                "timings on shared CPU cores interfere. Pin each worker to its own cores "
                "(taskset -c N sktune run ...) or run one worker per device/host."
            )
            self.warned_of = others

    def finish(self, data: dict[str, Any]) -> None:
        """The bar's last line: the table's result (re-measured after the search; the bar
        named the search's best, which can be another trial), and the bar full."""
        if data["best_plan"] is None:
            text = f"{data['study']}: no exact plan"
        elif data["best_fuses_nothing"]:
            text = f"{data['study']}: keep the model unfused"
        else:
            text = f"{data['study']}: best exact {data['speedup']:.2f}×{_emulated(data)} (trial {data['best_trial']})"
        self.progress.update(self.task, description=text, total=self.progress.tasks[0].completed)

    def on_trial(self, study: Any, trial: Any) -> None:
        from sktune.tuning.attrs import TrialAttr
        from sktune.tuning.records import best_record, speedup_of
        from sktune.tuning.refine import REFINED

        # Trials on top of --trials widen the bar (it read 5/4): those after the search
        # (refine.py, yardsticks.py, loop.run_unfused_if_missing), and those the search's
        # budget does not count (skipped, reused: the same TrialBudget rule).
        after_search = (str(trial.user_attrs.get(TrialAttr.ANCHOR) or "").startswith(REFINED)
                        or TrialAttr.YARDSTICK in trial.user_attrs or TrialAttr.PAST_BUDGET in trial.user_attrs)
        if after_search or not self.budget.spends(trial):
            self.progress.update(self.task, total=(self.progress.tasks[0].total or 0) + 1)
        best = best_record(study)
        text = (f"{study.study_name}: best exact {speedup_of(best.ratio):.2f}×{_emulated(study.user_attrs)} "
                f"(trial {best.number})" if best else study.study_name)
        self.progress.update(self.task, advance=1, description=text)
        self._warn_of_other_workers(study)


def _emulated(attrs: dict[str, Any]) -> str:
    """`` emulated`` after a speedup the emulated Ascend gave (a summary's or a study's
    attributes): never read as an NPU figure, on the bar either."""
    from sktune.tuning.attrs import is_emulated

    return " emulated" if attrs.get("emulated") or is_emulated(attrs) else ""


def resuming_line(study: Any, joined: bool = False) -> str | None:
    """``resuming study 'S': 12 trials done earlier (9 exact); best exact so far 1.83× (trial 10)``,
    or None for a study with no trial (a new one). ``joined``: the study was being created by
    another worker when this run opened it; its trials are that worker's, this run's start-up
    meanwhile, not an earlier run's. A trial RUNNING now is most likely another live worker's
    (start-up failed those of this host's dead processes; another host's are failed by the
    heartbeat within its grace period): this run joins that worker."""
    from optuna.trial import TrialState

    from sktune.tuning.attrs import StudyAttr
    from sktune.tuning.records import best_record, is_exact, speedup_of
    from sktune.tuning.summary import confirmed_timing

    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL))
    running = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
    if not done and not running:
        return None
    exact = sum(1 for t in done if is_exact(t))
    best = best_record(study)
    so_far = ""
    verdict = study.user_attrs.get(StudyAttr.CONFIRM_BEST) or {}
    if best and (best.anchor == "unfused" or verdict.get("keep_unfused_reason") and verdict.get("trial") == best.number):
        so_far = f"; so far: keep the model unfused (trial {best.number})"  # the table's 1.00x, not its noise
    elif best and best.ratio:  # as the last run's table gave it: re-measured, where it was
        speedup, how = speedup_of(best.ratio), ""
        if best.timing is not None:
            timing, _, source = confirmed_timing(study, StudyAttr.CONFIRM_BEST, best)
            speedup, how = timing.speedup, ", re-measured" if source == "re-measured" else ""
        so_far = f"; best exact so far {speedup:.2f}×{_emulated(study.user_attrs)} (trial {best.number}{how})"
    if joined:
        return f"joined study {study.study_name!r}, which another worker created: {len(done)} trials done " \
               f"so far ({exact} exact){so_far}"
    if running:
        now = ", ".join(f"#{n}" for n in running)
        return f"joined study {study.study_name!r} while other workers tune it (trial {now} running): " \
               f"{len(done)} trials done so far ({exact} exact){so_far}"
    return f"resuming study {study.study_name!r}: {len(done)} trials done earlier ({exact} exact){so_far}"
