"""Interruptions and resumption: SIGINT, SIGKILL, a changed model; many workers on one study."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import optuna
import pytest
from optuna.storages.journal._storage import JournalOperation  # the log's op codes

from sktune.tuning.attrs import StudyAttr, TrialAttr
from sktune.tuning.host_time import run_records
from sktune.tuning.refine import REFINED
from sktune.tuning.storage import make_storage

MODELS = Path(__file__).resolve().parent.parent / "models"


def start(args: list[str], cwd: Path) -> subprocess.Popen:
    # faulthandler: a run that does not end can be made to print where it is (SIGABRT).
    return subprocess.Popen([sys.executable, "-m", "sktune", "run", *args], cwd=cwd,
                            env={**os.environ, "PYTHONFAULTHANDLER": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def communicate(run: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """The run's output once it ended; if it has not ended within ``timeout``, its stacks."""
    try:
        return run.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        run.send_signal(signal.SIGABRT)
        _, err = run.communicate(timeout=30)
        raise AssertionError(f"sktune run did not end within {timeout} s; where it was:\n{err[-8000:]}") from None


def finished(storage, name: str) -> list:
    return [t for t in optuna.load_study(study_name=name, storage=storage).get_trials() if t.state.is_finished()]


def refined(trials: list) -> list:
    """The best plan with a costly option, tried after the search (tuning/refine.py), on top of --trials."""
    return [t for t in trials if str(t.user_attrs.get(TrialAttr.ANCHOR, "")).startswith(REFINED)]


def within_budget(trials: list) -> list:
    """The trials that --trials paid for: not the unfused plan run after it for the finalists
    (loop.py), nor the refined best."""
    return [t for t in trials if not t.user_attrs.get(TrialAttr.PAST_BUDGET) and t not in refined(trials)]


def wait_for_complete(storage: str, name: str, n: int, timeout: float = 240) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if sum(t.state == optuna.trial.TrialState.COMPLETE for t in finished(storage, name)) >= n:
                return
        except KeyError:
            pass  # study not created yet
        time.sleep(1)
    raise AssertionError(f"fewer than {n} complete trials after {timeout} s")


def wait_for_running(storage: str, name: str, after_complete: int, timeout: float = 240) -> None:
    """Until ``after_complete`` trials are complete and one is RUNNING in a worker that said so
    (a trial takes well under a second now that regions come from the compile cache: a coarse
    poll can land between trials). Between Optuna creating the trial and the sampler's first
    write (``before_trial``) it is RUNNING and names no worker: not the case this waits for."""
    wait_for_complete(storage, name, after_complete, timeout)
    deadline = time.time() + timeout
    while time.time() < deadline:
        trials = optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)
        if any(t.state == optuna.trial.TrialState.RUNNING and "worker" in t.user_attrs for t in trials):
            return
        time.sleep(0.02)
    raise AssertionError(f"no RUNNING trial after {timeout} s")


# ~1 min each (a study interrupted and resumed); CI runs them with the slow tests (.ci/run).
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_interrupted_run_resumes_without_losing_trials(tmp_path: Path, sig: signal.Signals) -> None:
    storage = f"sqlite:///{tmp_path}/s.db"
    args = [str(MODELS / "tiny_norm.py"), "--backend", "inductor", "--storage", storage, "--study", "s"]
    run = start([*args, "--trials", "40"], tmp_path)
    wait_for_running(storage, "s", 2)
    run.send_signal(sig)
    out, err = communicate(run, 60)
    complete_before = {t.number for t in finished(storage, "s") if t.state == optuna.trial.TrialState.COMPLETE}
    if sig != signal.SIGKILL:  # Ctrl-C, and kill / timeout / a scheduler's cancel: the trial is failed now
        code, word = (130, "interrupted") if sig == signal.SIGINT else (143, "terminated")
        assert run.returncode == code and f"{word}: completed trials are saved" in err, err[-2000:]
        assert "Traceback" not in err
        stopped = optuna.load_study(study_name="s", storage=storage)
        left = stopped.get_trials()
        assert not [t for t in left if t.state == optuna.trial.TrialState.RUNNING]
        # Its worker time counts in the study's estimated host time (a stopped run's was dropped).
        assert [r.get("stopped") for r in run_records(stopped)] == [True]
    again = subprocess.run([sys.executable, "-m", "sktune", "run", *args, "--trials", "1"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    resumed = optuna.load_study(study_name="s", storage=storage)
    assert len(run_records(resumed)) == (1 if sig == signal.SIGKILL else 2)
    trials = resumed.get_trials()
    complete_after = {t.number for t in within_budget(trials) if t.state == optuna.trial.TrialState.COMPLETE}
    assert complete_before <= complete_after and len(complete_after) == len(complete_before) + 1
    running = [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]
    assert running == [], "the interrupted trial must not stay RUNNING"
    failed = [t for t in trials if t.state == optuna.trial.TrialState.FAIL]
    assert failed and failed[0].user_attrs["failure"].startswith("interrupted:")  # not its plan's failure
    if anchor := failed[0].user_attrs.get("anchor"):  # a starting point stopped midway runs again on resume
        assert any(t.user_attrs.get("anchor") == anchor for t in trials if t.state.name == "COMPLETE")


@pytest.mark.slow  # three runs of the worker; CI runs it
def test_changed_model_is_refused(tmp_path: Path) -> None:
    model = tmp_path / "m.py"
    model.write_text((MODELS / "tiny_norm.py").read_text())
    storage = f"sqlite:///{tmp_path}/s.db"
    args = [str(model), "--backend", "inductor", "--storage", storage, "--study", "s", "--trials", "1"]
    first = subprocess.run([sys.executable, "-m", "sktune", "run", *args], cwd=tmp_path, capture_output=True,
                           text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    model.write_text(model.read_text() + "\n# edited\n")
    second = subprocess.run([sys.executable, "-m", "sktune", "run", *args], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    assert second.returncode == 1 and "model_sha256" in second.stderr and "--allow-changed" in second.stderr
    third = subprocess.run([sys.executable, "-m", "sktune", "run", *args, "--allow-changed"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
    assert third.returncode == 0, third.stderr[-2000:]
    assert "resuming study 's' across a change (--allow-changed): model_sha256" in third.stderr
    assert len(within_budget(finished(storage, "s"))) == 2
    exported = subprocess.run([sys.executable, "-m", "sktune", "export", "--study", "s", "--storage", storage,
                               "--format", "python"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert exported.returncode == 0 and "# Resumed across a change of model_sha256 with" in exported.stdout


@pytest.mark.slow  # three starts of the worker; CI runs it
def test_an_edited_imported_module_or_replaced_weights_are_refused(tmp_path: Path) -> None:
    """The model file is unchanged; what it imports is not (graph/digest.py): a constant of its
    forward, then the weights that build_model loads."""
    (tmp_path / "consts.py").write_text("EPS = 1e-6\nSHIFT = 0.0\n")
    model = tmp_path / "m.py"
    model.write_text((MODELS / "tiny_norm.py").read_text()
                     .replace("import torch\n", "import torch\n\nimport consts\n", 1)
                     .replace("+ 1e-6)", "+ consts.EPS)")
                     .replace("    return Tiny()", "    tiny = Tiny()\n    with torch.no_grad():\n"
                              "        tiny.proj.weight.add_(consts.SHIFT)\n    return tiny"))
    storage = f"sqlite:///{tmp_path}/s.db"
    args = [sys.executable, "-m", "sktune", "run", str(model), "--backend", "inductor", "--storage", storage,
            "--study", "s", "--trials", "1"]
    first = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    for edited, said in (("EPS = 1e-5\nSHIFT = 0.0\n", "code_sha256 (the captured graph's ops and constants)"),
                         ("EPS = 1e-6\nSHIFT = 0.5\n", "weights_sha256 (the model's weights)")):
        (tmp_path / "consts.py").write_text(edited)
        again = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert again.returncode == 1 and said in again.stderr and "--allow-changed" in again.stderr, again.stderr[-2000:]
        assert "model_sha256" not in again.stderr
        other = "weights_sha256" if said.startswith("code") else "code_sha256"
        assert other not in again.stderr  # an edited constant is no new weight, new weights no new code


@pytest.fixture
def postgres_url():
    """A fresh database on the local PostgreSQL (trust auth on 127.0.0.1), dropped afterwards."""
    name = f"sktune_test_{uuid.uuid4().hex[:8]}"
    psql = ["psql", "-h", "127.0.0.1", "-U", "postgres", "-c"]
    subprocess.run([*psql, f"CREATE DATABASE {name}"], check=True, capture_output=True)
    yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    subprocess.run([*psql, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"], capture_output=True)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["postgresql", "journal"])
def test_many_workers_one_study(tmp_path: Path, kind: str, request: pytest.FixtureRequest) -> None:
    storage = request.getfixturevalue("postgres_url") if kind == "postgresql" else f"journal:{tmp_path}/study.log"
    optuna_storage = storage if kind == "postgresql" else optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(f"{tmp_path}/study.log"))
    args = [str(MODELS / "tiny_norm.py"), "--backend", "inductor", "--storage", storage, "--study", "w",
            "--trials", "4"]
    workers = [start(args, tmp_path) for _ in range(3)]
    outs = [w.communicate(timeout=900) for w in workers]
    for w, (out, err) in zip(workers, outs):
        assert w.returncode == 0, err[-2000:]
    trials = finished(optuna_storage, "w")
    numbers = [t.number for t in trials]
    assert sorted(numbers) == list(range(len(trials))), numbers  # no trial twice, none lost
    # Plans the exactness probe calls hopeless are skipped without a compile, and a plan another
    # trial measured takes its outcome (reused_from): neither counts.
    measured = [t for t in trials if "skipped" not in t.user_attrs and "reused_from" not in t.user_attrs]
    # On top of each worker's --trials: the best plan with a costly option (tuning/refine.py;
    # tiny_norm has one, cpp_wrapper) and the unfused plan if no worker had run it (loop.py), with
    # whatever another worker had queued ahead of it: all marked past_budget.
    assert len(within_budget(measured)) == 12 and len(refined(measured)) <= 3
    # Past budget: the unfused plan, and ahead of it at most one starting point per worker (each
    # tops up the queue when none waits; three at the same moment may queue three).
    assert sum(bool(t.user_attrs.get(TrialAttr.PAST_BUDGET)) for t in measured) <= 4
    pids = {t.user_attrs["worker"]["pid"] for t in measured}
    assert len(pids) == 3, "every worker ran trials"
    bests = {optuna.load_study(study_name="w", storage=optuna_storage).best_trial.number for _ in range(2)}
    assert len(bests) == 1
    if kind == "journal":  # the log names who wrote what: one worker prepared the study, its creator
        assert study_attr_writers(tmp_path / "study.log", StudyAttr.OP_PROFILE, StudyAttr.SPACE) == \
            study_attr_writers(tmp_path / "study.log", StudyAttr.CREATOR)


def study_attr_writers(log: Path, *keys: str) -> set[str]:
    """The journal's writers (one per process) of the study attributes ``keys``."""
    ops = [json.loads(line) for line in log.read_text().splitlines()]
    writers = {op["worker_id"] for op in ops if op.get("op_code") == JournalOperation.SET_STUDY_USER_ATTR
               and set(op["user_attr"]) & set(keys)}
    assert writers, keys
    return writers


def test_workers_creating_a_fresh_postgres_storage_at_once(postgres_url: str) -> None:
    """Several workers opening a new database together race to create Optuna's tables
    (seen: 17 of 24 raw RDBStorage openings failed with a unique violation); all must open."""
    code = "import sys; from sktune.tuning.storage import make_storage; make_storage(sys.argv[1])"
    procs = [subprocess.Popen([sys.executable, "-c", code, postgres_url], stderr=subprocess.PIPE, text=True)
             for _ in range(6)]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, errors


def test_a_dropped_postgres_connection_is_survived(postgres_url: str) -> None:
    """A server that closes the pooled connection (a restart, an admin, a proxy's idle
    timeout) failed the next trial's write with a traceback (AdminShutdown), ending the run."""
    storage = make_storage(postgres_url)
    study = optuna.create_study(study_name="s", storage=storage)
    study.enqueue_trial({"x": 1.0})
    study.optimize(lambda t: t.suggest_float("x", 0, 2), n_trials=1)
    database = postgres_url.rsplit("/", 1)[1]
    subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-c",
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    f"WHERE datname = '{database}' AND pid <> pg_backend_pid()"], check=True, capture_output=True)
    study.optimize(lambda t: t.suggest_float("x", 0, 2), n_trials=1)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE"]


@pytest.mark.slow  # ~15 s: a worker start; CI runs it
def test_the_worker_dies_with_a_killed_tuner(tmp_path: Path) -> None:
    """SIGKILL (or a scheduler's SIGTERM) of the tuner must not leave its worker busy (a
    long compile; here the test-only hang fault) on the cores the next run times on. An
    idle worker would end anyway when the pipe closes; a busy one only by the kernel."""
    code = (
        "import sys, time\n"
        "from sktune.plan import Plan\n"
        "from sktune.pipe.protocol import TrialRequest\n"
        "from sktune.tuning.supervisor import SupervisedWorker, runner_config\n"
        f"w = SupervisedWorker(runner_config(model_path={str(MODELS / 'tiny_norm.py')!r}), None)\n"
        "w.start()\n"
        "print(w._process.pid, flush=True)\n"
        "w.run(TrialRequest(Plan.make([])), 600)\n"
    )
    env = {**os.environ, "SKTUNE_TEST_FAULT": "hang", "SKTUNE_TEST_FAULT_MARKER": str(tmp_path / "n")}
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=tmp_path, env=env)
    worker_pid = int(parent.stdout.readline())
    deadline = time.monotonic() + 30
    while not (tmp_path / "n").exists():  # the worker has taken the request and hangs in it
        assert time.monotonic() < deadline, "the worker never took the request"
        time.sleep(0.05)
    os.kill(worker_pid, 0)  # alive while the tuner is
    parent.kill()
    parent.wait(30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(worker_pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise AssertionError(f"worker {worker_pid} outlived its killed tuner")


def test_a_compiled_library_cut_short_is_named_removed_and_not_the_plan_s_failure(tmp_path: Path) -> None:
    """A g++ left running after its run was stopped writes on into the study's compile cache;
    a worker that loads its library meanwhile met "file too short", and the plan counted as
    failed. Only a file under the cache is ever removed."""
    from sktune.child_process import cut_short_library

    cache = tmp_path / "My Project" / "cache"  # a path with a space
    cut = cache / "qh" / "cqhh4sr.main.so"
    try:
        raise ImportError(f"{cut}: file too short")
    except ImportError as exc:
        assert cut_short_library(exc, str(cache)) == cut
        assert cut_short_library(exc, str(tmp_path / "other")) is None  # never a file outside the cache
        assert cut_short_library(exc, None) is None
    try:
        raise OSError("libfoo.so: cannot open shared object file: No such file or directory")
    except OSError as exc:
        assert cut_short_library(exc, str(cache)) is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the start-up check reads ELF files (Linux)")
def test_libraries_cut_short_by_a_stopped_run_are_removed_before_the_worker_compiles(tmp_path: Path) -> None:
    """A cut vector-ISA check library made every later compile of the study fail with C++
    errors ("'at::vec' has not been declared"): Inductor never rebuilds a library it finds.
    A library written in the last minute is left alone: another worker may be writing it."""
    import torch

    from sktune.child_process import drop_cut_short_libraries

    whole = (Path(torch.__file__).parent / "lib" / "libc10.so").read_bytes()
    files = {"whole": whole, "cut": whole[:len(whole) // 2], "header only": whole[:40], "empty": b""}
    for name, data in files.items():
        (tmp_path / "ab").mkdir(exist_ok=True)
        (tmp_path / "ab" / f"{name}.so").write_bytes(data)
        os.utime(tmp_path / "ab" / f"{name}.so", (time.time() - 600, time.time() - 600))
    (tmp_path / "fresh.so").write_bytes(whole[:100])  # being written now, perhaps
    (tmp_path / "replaced.so").write_bytes(whole[:100])  # by the worker this run killed 20 s ago, say
    os.utime(tmp_path / "replaced.so", (time.time() - 30, time.time() - 30))
    removed = drop_cut_short_libraries(str(tmp_path))
    assert sorted(p.stem for p in removed) == ["cut", "empty", "header only"]
    assert sorted(p.name for p in tmp_path.rglob("*.so")) == ["fresh.so", "replaced.so", "whole.so"]
    # A worker that replaces one this run stopped: what that one wrote until 5 s before is checked too.
    assert [p.name for p in drop_cut_short_libraries(str(tmp_path), replaced_at=time.time() - 20)] == ["replaced.so"]
    assert sorted(p.name for p in tmp_path.rglob("*.so")) == ["fresh.so", "whole.so"]


@pytest.mark.slow  # ~30 s: three worker starts and compiles; CI runs it
def test_a_worker_that_meets_a_library_cut_short_removes_it_and_the_plan_runs_again(tmp_path: Path) -> None:
    from sktune.pipe.protocol import TrialRequest, WorkerFailure
    from sktune.plan import Plan, Scope
    from sktune.tuning.supervisor import SupervisedWorker, runner_config

    cache = tmp_path / "cache"
    config = runner_config(model_path=str(MODELS / "tiny_norm.py"), n_batches=2, input_sets=1)
    with SupervisedWorker(config, str(cache)) as worker:
        plan = Plan.make([Scope(0, len(worker.start().targets) - 1, "all")], {})
        assert not isinstance(worker.run(TrialRequest(plan, 2, None), 300), WorkerFailure)
    libraries = list(cache.rglob("*.main.so"))
    assert libraries, "this torch names its compiled regions otherwise: the test needs its file names"
    for library in libraries:  # as a stopped compiler leaves them: the ELF header cut
        library.write_bytes(library.read_bytes()[:40])
    with SupervisedWorker(config, str(cache)) as worker:
        worker.start()
        answers = [worker.run(TrialRequest(plan, 2, None), 300) for _ in range(len(libraries) + 1)]
    failures = [a for a in answers if isinstance(a, WorkerFailure)]
    assert failures and all(f.kind == "interrupted" and "cut short" in f.message for f in failures)
    assert not isinstance(answers[-1], WorkerFailure)  # each cut library removed, compiled afresh
    assert all(library.stat().st_size > 40 for library in libraries if library.exists())
