"""resume.py on its own (issue 25): a new study records what it tunes and queues one
starting point; the rest are queued one at a time, after each trial, read from the study
(so a resumed run and a second worker continue the same list); a trial queued during the
search runs before the remaining starting points; a resumed study must match; only the
worker that created a study prepares it, and a run that fails before preparing the study
it created deletes it. Scripted objectives: no compile, no worker."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import optuna
import pytest

from sktune.errors import SktuneError
from sktune.graph.opgraph import Op
from sktune.space.search_space import SearchSpace
from sktune.tuning.attrs import StudyAttr, TrialAttr
from sktune.measure.op_profile import OpProfile
from sktune.tuning import creator, unprepared
from sktune.tuning.creator import awaited_creator, measures_space_inputs, wait_for_creator
from sktune.tuning.resume import StartingQueue, fingerprint, open_study, prepare
from sktune.tuning.sampler import make_sampler
from sktune.tuning.space_setup import reuse_space_inputs, space_from_workload, starting_points
from sktune.tuning.storage import make_storage
from sktune.tuning.unprepared import dropped_unless_prepared
from sktune.pipe.workload import ServedShape, Workload
from tests.unit.test_space import BOUNDARIES, INDUCTOR_LIKE, MODULES, TARGETS

SETTINGS = {StudyAttr.THREADS: 1, StudyAttr.INPUT_SETS: 3}
WAITING = optuna.trial.TrialState.WAITING


AVX512 = {"cpu_capability": "AVX512", "vec_isa": "avx512 16"}


def describe(sha: str = "m", cpu: dict[str, str] | None = None) -> Workload:
    return Workload(tuple(Op(k, f"op{k}", t, m, "", "") for k, (t, m) in enumerate(zip(TARGETS, MODULES))),
                    tuple(BOUNDARIES), INDUCTOR_LIKE, {"backend": "inductor", "torch": "2.13", **(cpu or AVX512)},
                    sha, [[4, 8]])


@pytest.fixture
def space() -> SearchSpace:
    return space_from_workload(describe())


def new_study(storage: optuna.storages.BaseStorage | None = None) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    return optuna.create_study(study_name="s", storage=storage, direction="minimize", sampler=make_sampler(0),
                               load_if_exists=True)


def scripted(trial: optuna.Trial, space: SearchSpace) -> float:
    plan = space.suggest(trial)
    trial.set_user_attr(TrialAttr.PLAN, plan.to_json())
    trial.set_constraint("bitwise", 0.0)
    return 1.0 - 0.01 * len(plan.scopes)


def names(study: optuna.Study) -> list[str | None]:
    return [t.user_attrs.get(TrialAttr.ANCHOR) for t in study.trials if t.state != WAITING]


def test_a_new_study_records_what_it_tunes_and_queues_one_starting_point(space: SearchSpace) -> None:
    study = new_study()
    queue = prepare(study, describe(), space, Path("m.py"), SETTINGS)
    points = starting_points(space, describe())
    assert len(points) > 3 and queue.points == tuple(points)
    assert study.user_attrs[StudyAttr.SPACE] == space.signature()
    assert study.user_attrs[StudyAttr.FINGERPRINT] == fingerprint(describe())
    assert study.user_attrs[StudyAttr.THREADS] == 1
    waiting = study.get_trials(states=(WAITING,))
    assert [t.user_attrs[TrialAttr.ANCHOR] for t in waiting] == [points[0][0]]


def test_the_starting_points_run_in_order_one_queued_at_a_time(space: SearchSpace) -> None:
    study = new_study()
    queue = prepare(study, describe(), space, Path("m.py"), SETTINGS)
    waiting_at_each_end = []

    def count(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        waiting_at_each_end.append(len(study.get_trials(states=(WAITING,))))

    study.optimize(lambda t: scripted(t, space), n_trials=len(queue.points) + 2, callbacks=[queue, count])
    assert names(study)[:len(queue.points)] == [name for name, _ in queue.points]
    assert names(study)[len(queue.points):] == [None, None]  # then the sampler
    assert set(waiting_at_each_end[:len(queue.points) - 1]) == {1} and queue.pending(study) == []


def test_a_trial_queued_during_the_search_runs_before_the_remaining_starting_points(space: SearchSpace) -> None:
    study = new_study()
    queue = prepare(study, describe(), space, Path("m.py"), SETTINGS)
    repair = {**queue.points[-1][1]}  # any plan, queued by the second trial (as dcci_seed.py does)

    def objective(trial: optuna.Trial) -> float:
        if trial.number == 1:
            trial.study.enqueue_trial(repair, user_attrs={TrialAttr.ANCHOR: "repair"})
        return scripted(trial, space)

    study.optimize(objective, n_trials=4, callbacks=[queue])
    assert names(study) == [queue.points[0][0], queue.points[1][0], "repair", queue.points[2][0]]
    # The last starting point has the repair's plan: already in the study, it is not queued again.
    assert queue.points[-1] not in queue.pending(study)


def test_a_resumed_run_and_a_second_worker_continue_the_same_list(space: SearchSpace, tmp_path: Path) -> None:
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/s.db")
    study = new_study(storage)
    queue = prepare(study, describe(), space, Path("m.py"), SETTINGS)
    study.optimize(lambda t: scripted(t, space), n_trials=2, callbacks=[queue])  # stopped after 2
    # A resumed run (or a second worker): a fresh queue, the same study.
    again = new_study(storage)
    resumed = prepare(again, describe(), space_from_workload(describe()), Path("m.py"), SETTINGS)
    assert resumed.pending(again) == list(queue.points[3:])  # the third is waiting already
    other = new_study(storage)
    other_queue = StartingQueue(queue.points)
    for _ in range(len(queue.points)):  # two workers, taking turns
        again.optimize(lambda t: scripted(t, space), n_trials=1, callbacks=[resumed])
        other.optimize(lambda t: scripted(t, space), n_trials=1, callbacks=[other_queue])
    ran = [n for n in names(again) if n is not None]
    assert ran == [name for name, _ in queue.points]  # each once, in order, none lost


def test_a_starting_point_whose_run_was_stopped_is_queued_again(space: SearchSpace) -> None:
    """A Ctrl-C, SIGTERM or kill during a starting point is not its plan's failure: a resume
    runs it (it counted as done, and the starting point was lost). A plan's own failure is done."""
    from sktune.tuning.trial_writer import mark_interrupted, mark_stopped

    study = new_study()
    queue = StartingQueue([("a", {"x": 1}), ("b", {"x": 2}), ("c", {"x": 3}), ("d", {"x": 4})])
    distribution = optuna.distributions.IntDistribution(0, 9)

    def failed(params: dict, why: str | None) -> None:
        trial = study.ask({"x": distribution})
        assert trial.params == params
        if why == "stopped":
            mark_stopped(trial)
        elif why == "killed":
            mark_interrupted(study._storage, trial._trial_id)
        elif why is not None:
            trial.set_user_attr(TrialAttr.FAILURE, why)
        study.tell(trial, state=optuna.trial.TrialState.FAIL)

    for (name, params), why in zip(queue.points, ("stopped", "killed", None, "hang: no answer within 600 s")):
        study.enqueue_trial(params)
        failed(params, why)
    assert [name for name, _ in queue.pending(study)] == ["a", "b", "c"]  # d failed by its plan: done


def test_warm_start_plans_run_first_on_a_new_and_on_a_resumed_study(space: SearchSpace) -> None:
    study = new_study()
    warm = ("warm:earlier#7", {**starting_points(space, describe())[-1][1]})
    queue = prepare(study, describe(), space, Path("m.py"), SETTINGS, first=[warm])
    assert queue.points[0] == warm
    study.optimize(lambda t: scripted(t, space), n_trials=2, callbacks=[queue])
    assert names(study)[0] == warm[0]
    # The warm plan is also the last starting point: run once, under its first name.
    assert queue.points[-1][1] == warm[1] and queue.points[-1] not in queue.pending(study)
    other = ("warm:earlier#9", {**starting_points(space, describe())[1][1], "max_fusion_size": 16})
    later = prepare(study, describe(), space, Path("m.py"), SETTINGS, first=[other])
    study.optimize(lambda t: scripted(t, space), n_trials=2, callbacks=[later])
    assert names(study)[-1] == other[0]  # after the one already waiting


def test_resumed_with_other_settings_is_refused(space: SearchSpace) -> None:
    study = new_study()
    prepare(study, describe(), space, Path("m.py"), SETTINGS)
    with pytest.raises(SktuneError, match="--threads 1, not 2"):
        prepare(study, describe(), space, Path("m.py"), {**SETTINGS, StudyAttr.THREADS: 2})


def test_a_changed_model_is_refused_unless_allowed(space: SearchSpace) -> None:
    study = new_study()
    prepare(study, describe(), space, Path("m.py"), SETTINGS)
    with pytest.raises(SktuneError, match="model_sha256.*--allow-changed") as refused:
        prepare(study, describe("edited"), space, Path("m.py"), SETTINGS)
    assert "the edit changed nothing that runs" not in str(refused.value)  # no digests recorded: unknown
    digests = {"code_sha256": "c", "weights_sha256": "w"}
    recorded = new_study()
    prepare(recorded, replace(describe(), digests=digests), space, Path("m.py"), SETTINGS)
    with pytest.raises(SktuneError, match=r"code_sha256, weights_sha256 unchanged\): the edit changed nothing"):
        prepare(recorded, replace(describe("comment"), digests=digests), space, Path("m.py"), SETTINGS)
    prepare(study, describe("edited"), space, Path("m.py"), SETTINGS, allow_changed=True)
    assert len(study.get_trials(states=(WAITING,))) == 1  # nothing queued twice
    # Kept, once per change, for the export to name (the study's model stays the one it was created on).
    prepare(study, describe("edited"), space, Path("m2.py"), SETTINGS, allow_changed=True)
    (change,) = study.user_attrs[StudyAttr.RESUMED_ACROSS]
    assert change["model"] == "m.py" and change["changed"][0].startswith("model_sha256: ")


def test_a_study_resumed_at_other_tuned_shapes_is_refused_even_when_allowed(space: SearchSpace) -> None:
    """--shapes on resume, or an edited input_shapes(): the trials were weighted and verified at
    the old shapes. The message says which shapes, and how to resume (was: the whole fingerprint)."""
    served = {"bs8": ServedShape(0.7, [[4, 8]]), "bs1": ServedShape(0.3, [[1, 8]])}
    study = new_study()
    prepare(study, replace(describe(), shapes=served), space, Path("m.py"), SETTINGS)
    for allowed in (False, True):
        with pytest.raises(SktuneError, match=r"tuned at shapes bs8, bs1; this run tunes at shapes bs8\..*"
                                              r"resume with --shapes bs8,bs1, or use a new --study name"):
            prepare(study, replace(describe(), shapes={"bs8": served["bs8"]}), space, Path("m.py"), SETTINGS,
                    allow_changed=allowed)
    reweighted = {**served, "bs8": ServedShape(0.5, [[4, 8]])}
    with pytest.raises(SktuneError, match="tuned at shapes bs8, bs1 with other sizes or weights") as refused:
        prepare(study, replace(describe("edited"), shapes=reweighted), space, Path("m.py"), SETTINGS,
                allow_changed=True)
    assert "--shapes" not in str(refused.value)
    flipped = {"bs1": ServedShape(0.8, [[1, 8]]), "bs8": ServedShape(0.2, [[4, 8]])}  # heaviest first: reordered
    with pytest.raises(SktuneError, match="tuned at shapes bs8, bs1 with other sizes or weights") as refused:
        prepare(study, replace(describe(), shapes=flipped), space, Path("m.py"), SETTINGS)
    assert "--shapes" not in str(refused.value)  # it named the same shapes, in another order, as other ones
    with pytest.raises(SktuneError, match="this run tunes at one input shape"):
        prepare(study, describe(), space, Path("m.py"), SETTINGS)
    prepare(study, replace(describe(), shapes=served), space, Path("m.py"), SETTINGS)  # the same shapes: resumed


def test_a_study_resumed_under_another_vector_capability_is_refused_unless_allowed(space: SearchSpace) -> None:
    # Exactness follows vector width: AVX2's verdicts are not AVX-512's.
    study = new_study()
    prepare(study, describe(), space, Path("m.py"), SETTINGS)
    avx2 = describe(cpu={"cpu_capability": "AVX2", "vec_isa": "avx2 8"})
    with pytest.raises(SktuneError, match="cpu_capability: 'AVX512' → 'AVX2'.*vec_isa.*--allow-changed"):
        prepare(study, avx2, space, Path("m.py"), SETTINGS)
    prepare(study, avx2, space, Path("m.py"), SETTINGS, allow_changed=True)


def test_a_study_from_before_the_cpu_was_recorded_resumes(space: SearchSpace) -> None:
    study = new_study()
    prepare(study, describe(), space, Path("m.py"), SETTINGS)
    before = {k: v for k, v in study.user_attrs[StudyAttr.FINGERPRINT].items() if k not in AVX512}
    study.set_user_attr(StudyAttr.FINGERPRINT, before)
    prepare(study, describe(), space, Path("m.py"), SETTINGS)  # nothing said about the CPU: no change


def test_an_edited_imported_module_or_replaced_weights_are_a_change(space: SearchSpace) -> None:
    """The model file's hash is the same; the captured graph's code or weights digest is not
    (graph/digest.py). A study from before the digests were recorded resumes."""
    digests = {"code_sha256": "c" * 64, "weights_sha256": "w" * 64}
    study = new_study()
    prepare(study, replace(describe(), digests=digests), space, Path("m.py"), SETTINGS)
    for key, said in (("weights_sha256", r"weights_sha256 \(the model's weights\): wwwwwwwwwwww… → 000000000000…. "
                                         r"If build_model draws its weights at random, seed it"),
                      ("code_sha256", r"code_sha256 \(the captured graph's ops and constants\): cccc")):
        edited = replace(describe(), digests={**digests, key: "0" * 64})
        with pytest.raises(SktuneError, match=said + ".*--allow-changed"):
            prepare(study, edited, space, Path("m.py"), SETTINGS)
    older = new_study(optuna.storages.InMemoryStorage())
    prepare(older, describe(), space, Path("m.py"), SETTINGS)  # recorded no digests
    prepare(older, replace(describe(), digests=digests), space, Path("m.py"), SETTINGS)


def test_a_different_space_is_refused(space: SearchSpace) -> None:
    study = new_study()
    prepare(study, describe(), space, Path("m.py"), SETTINGS)
    narrower = space_from_workload(describe(), options=["max_fusion_size"])
    with pytest.raises(SktuneError, match=r"different graph or search space \(the model or the backend changed\)"):
        prepare(study, describe(), narrower, Path("m.py"), SETTINGS)
    # Another model file of the same name in the same storage meets it under the default study name.
    with pytest.raises(SktuneError, match=r"\(it was created for m.py; a study's default name is the model file's name"):
        prepare(study, describe(), narrower, Path("other/m.py"), SETTINGS)


def profiled(scale: float) -> Workload:
    """describe() with its own op profile: workers started together measure their own."""
    profile = OpProfile(tuple(scale * (1.0 + k % 3) for k in range(len(TARGETS))), tuple(0.5 for _ in TARGETS))
    return replace(describe(), op_profile=profile)


def test_only_the_creator_prepares_the_study_and_a_worker_started_with_it_takes_its_space_inputs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"journal:{tmp_path}/s.log"
    first, created = open_study("s", url, 0)
    second, loaded = open_study("s", url, 1)
    assert (created, loaded) == (True, False)
    assert first.user_attrs[StudyAttr.CREATOR]["pid"] == os.getpid()
    mine, theirs = profiled(2.0), profiled(1.0)  # noise: each worker's own profile differs
    waits: list[float] = []

    def creator_prepares_meanwhile(seconds: float) -> None:  # the creator's start-up ends while this one waits
        waits.append(seconds)
        if len(waits) == 2:
            prepare(first, theirs, space_from_workload(theirs), Path("m.py"), SETTINGS)

    monkeypatch.setattr(creator, "pause", creator_prepares_meanwhile)
    assert awaited_creator(second) == f"the study's creator, pid {os.getpid()} on {socket.gethostname()}"
    assert wait_for_creator(second)
    assert len(waits) == 2  # it waited until the study was prepared, no longer
    assert awaited_creator(second) is None
    workload = reuse_space_inputs(second, mine)
    assert workload.op_profile == theirs.op_profile
    prepare(second, workload, space_from_workload(workload), Path("m.py"), SETTINGS)  # the same space: resumes
    assert StudyAttr.CREATOR in second.user_attrs and second.user_attrs[StudyAttr.SPACE] == \
        space_from_workload(theirs).signature()


def test_a_creator_gone_from_this_host_or_too_long_ago_is_not_waited_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    study, _ = open_study("s", f"journal:{tmp_path}/s.log", 0)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    waits: list[float] = []
    monkeypatch.setattr(creator, "pause", waits.append)
    study.set_user_attr(StudyAttr.CREATOR, {"host": socket.gethostname(), "pid": int(gone.stdout), "at": time.time()})
    assert not wait_for_creator(study)
    # An older sktune's creator has no heartbeat: its clock is all there is to go by.
    older = optuna.create_study(study_name="older", storage=make_storage(f"journal:{tmp_path}/s.log"))
    older.set_user_attr(StudyAttr.CREATOR, {"host": "another-host", "pid": 1, "at": time.time() - 3600})
    assert not wait_for_creator(older)
    assert waits == []  # neither was waited for: the worker prepares the study itself

    def stop(seconds: float) -> None:
        raise TimeoutError

    monkeypatch.setattr(creator, "pause", stop)
    older.set_user_attr(StudyAttr.CREATOR, {"host": "another-host", "pid": 1, "at": time.time() - 60})
    with pytest.raises(TimeoutError):  # started a minute ago on another host: may be starting still
        wait_for_creator(older)
    # One with a heartbeat: its silence counts (the next test), not the clock of another host.
    study.set_user_attr(StudyAttr.CREATOR, {"host": "another-host", "pid": 1, "at": time.time() - 3600})
    with pytest.raises(TimeoutError):
        wait_for_creator(study)


def test_a_worker_that_loads_the_study_before_its_creator_is_recorded_waits_for_the_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Creating a study and recording its creator are two writes; a worker between them
    would prepare the study beside its creator."""
    url = f"journal:{tmp_path}/s.log"
    just_created = optuna.create_study(study_name="s", storage=make_storage(url))  # the creator's first write
    polls: list[float] = []

    def creator_records_meanwhile(seconds: float) -> None:
        polls.append(seconds)
        if len(polls) == 3:
            creator.record_creator(just_created)

    monkeypatch.setattr(creator, "pause", creator_records_meanwhile)
    loaded, created = open_study("s", url, 1)
    assert not created and len(polls) == 3
    assert not measures_space_inputs(loaded, created)  # it waits for the creator's space inputs
    polls.clear()
    monkeypatch.setattr(creator, "pause", polls.append)
    optuna.create_study(study_name="never", storage=make_storage(url))  # e.g. made by Optuna itself
    _, created = open_study("never", url, 1)
    assert sum(polls) == pytest.approx(creator.RECORD_WAIT_S)  # then it prepares the study itself
    polls.clear()
    open_study("s", url, 2)
    assert polls == []  # a recorded creator: no wait


def test_a_study_that_sktune_did_not_make_is_refused_by_run_report_and_export(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An Optuna study of something else on a shared storage: its trials have no plans."""
    from sktune.tuning.storage import load_existing_study

    url = f"sqlite:///{tmp_path}/s.db"
    other = optuna.create_study(study_name="other", storage=url)
    other.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=2)
    monkeypatch.setattr(creator, "pause", lambda seconds: pytest.fail("no wait for a creator's record"))
    for opening in (lambda: open_study("other", url, 0), lambda: load_existing_study("other", url)):
        with pytest.raises(SktuneError, match="'other' in sqlite:///.*s.db was not made by sktune run"):
            opening()
    assert len(optuna.load_study(study_name="other", storage=url).trials) == 2  # nothing added
    mine, _ = open_study("mine", url, 0)  # one of sktune's: created here, not yet prepared
    assert load_existing_study("mine", url).study_name == "mine"


def test_a_creator_killed_on_another_host_is_known_by_its_silent_heartbeat(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another host's pid cannot be looked at, nor its clock trusted: its waiters count the
    polls since its heartbeat last rose, and stop waiting after CREATOR_SILENCE_S."""
    study, _ = open_study("s", f"journal:{tmp_path}/s.log", 0)
    study.set_user_attr(StudyAttr.CREATOR, {"host": "another-host", "pid": 1, "at": time.time()})
    assert study.user_attrs[StudyAttr.CREATOR_BEAT] == 0  # recorded with the creator
    polls: list[float] = []
    monkeypatch.setattr(creator, "pause", polls.append)
    assert not wait_for_creator(study)  # killed during its start-up: never beat again
    assert creator.CREATOR_SILENCE_S <= sum(polls) <= creator.CREATOR_SILENCE_S + creator.PREPARE_POLL_S
    assert sum(polls) < creator.CREATOR_PATIENCE_S / 10  # not the 12 minutes it took before

    def beating_for_two_silences(seconds: float) -> None:  # alive: it beats every 10 polls, then prepares
        polls.append(seconds)
        if len(polls) % 10 == 0:
            study.set_user_attr(StudyAttr.CREATOR_BEAT, len(polls))
        if sum(polls) > 2 * creator.CREATOR_SILENCE_S:
            study.set_user_attr(StudyAttr.SPACE, {"signature": "prepared"})

    polls.clear()
    monkeypatch.setattr(creator, "pause", beating_for_two_silences)
    assert wait_for_creator(study)
    assert sum(polls) > 2 * creator.CREATOR_SILENCE_S


def test_the_creator_beats_while_it_prepares_the_study_and_stops_once_it_is_prepared(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"journal:{tmp_path}/s.log"
    study, created = open_study("s", url, 0)
    waiter, _ = open_study("s", url, 1)
    monkeypatch.setattr(creator, "CREATOR_BEAT_S", 0.01)

    def beat_seen() -> int:
        return waiter.user_attrs[StudyAttr.CREATOR_BEAT]

    with creator.creator_heartbeat(study, created):
        deadline = time.monotonic() + 30
        while beat_seen() < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert beat_seen() >= 3  # the waiter on another process sees it rise
        study.set_user_attr(StudyAttr.SPACE, {"signature": "prepared"})
        time.sleep(0.2)
        stopped = beat_seen()
        time.sleep(0.2)
        assert beat_seen() == stopped  # prepared: nothing more to wait for
    with creator.creator_heartbeat(waiter, False):  # a run that loaded the study does not beat
        time.sleep(0.1)
    assert beat_seen() == stopped


def test_one_of_the_workers_that_outwait_a_gone_creator_takes_over_and_the_others_wait_for_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each waiter notices the silence within a poll of the others: each would prepare the
    study over the others' writes. The last record stands; its silence is counted afresh."""
    url = f"journal:{tmp_path}/s.log"
    study, _ = open_study("s", url, 0)
    study.set_user_attr(StudyAttr.CREATOR, {"host": "another-host", "pid": 1, "at": time.time()})  # never beats
    first, _ = open_study("s", url, 1)
    second, _ = open_study("s", url, 2)
    monkeypatch.setattr(creator, "pause", lambda seconds: None)
    assert not wait_for_creator(first) and not wait_for_creator(second)  # both outwaited its silence
    monkeypatch.setattr(creator, "pause", lambda seconds: creator.record_creator(second))  # second writes after
    assert not creator.take_over(first)  # the second's record stands
    monkeypatch.setattr(creator, "pause", lambda seconds: None)
    assert creator.take_over(second)
    polls: list[float] = []

    def second_prepares_late(seconds: float) -> None:  # slower than one silence: its count was raised
        polls.append(seconds)
        if len(polls) % 10 == 0:
            second.set_user_attr(StudyAttr.CREATOR_BEAT, len(polls))
        if len(polls) == 150:
            second.set_user_attr(StudyAttr.SPACE, {"signature": "prepared"})

    monkeypatch.setattr(creator, "pause", second_prepares_late)
    assert wait_for_creator(first) and len(polls) == 150


def test_a_new_creator_record_starts_the_count_of_silence_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"journal:{tmp_path}/s.log"
    study, _ = open_study("s", url, 0)
    study.set_user_attr(StudyAttr.CREATOR, {"host": "another-host", "pid": 1, "at": time.time()})  # never beats
    waiter, _ = open_study("s", url, 1)
    polls: list[float] = []

    def another_waiter_takes_over_at_55_s(seconds: float) -> None:  # its heartbeat is at 0 too, for a while
        polls.append(seconds)
        if len(polls) == 55:
            creator.record_creator(study)
        if len(polls) == 100:
            study.set_user_attr(StudyAttr.SPACE, {"signature": "prepared"})

    monkeypatch.setattr(creator, "pause", another_waiter_takes_over_at_55_s)
    told: list[str] = []
    assert wait_for_creator(waiter, on_new_creator=told.append)  # not given up at 61 s: the new one was silent 45 s
    assert told == [f"the study's creator, pid {os.getpid()} on {socket.gethostname()}"]  # the progress line


def test_the_heartbeat_misses_a_beat_on_a_storage_error_not_all(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    study, created = open_study("s", f"journal:{tmp_path}/s.log", 0)
    monkeypatch.setattr(creator, "CREATOR_BEAT_S", 0.01)
    write, errors = study.set_user_attr, []

    def locked_once(key: str, value: object) -> None:  # e.g. SQLite's "database is locked"
        if not errors:
            errors.append(key)
            raise optuna.exceptions.StorageInternalError("database is locked")
        write(key, value)

    monkeypatch.setattr(study, "set_user_attr", locked_once)
    with creator.creator_heartbeat(study, created):
        deadline = time.monotonic() + 30
        while study.user_attrs[StudyAttr.CREATOR_BEAT] < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert errors == [StudyAttr.CREATOR_BEAT] and study.user_attrs[StudyAttr.CREATOR_BEAT] >= 3


def test_a_worker_measures_its_space_inputs_only_where_it_records_them(tmp_path: Path) -> None:
    url = f"journal:{tmp_path}/s.log"
    study, created = open_study("s", url, 0)
    loaded, again = open_study("s", url, 1)
    assert measures_space_inputs(study, created)  # the creator records them
    assert not measures_space_inputs(loaded, again)  # started with its creator: takes the creator's
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    study.set_user_attr(StudyAttr.CREATOR, {"host": socket.gethostname(), "pid": int(gone.stdout), "at": time.time()})
    assert measures_space_inputs(loaded, again)  # a creator gone: this run prepares the study itself
    shapes = replace(describe(), shapes={"bs8": ServedShape(2.0, [[8, 8]]), "bs1": ServedShape(1.0, [[1, 8]])},
                     exactness_by_shape={"bs8": {"add": {"alone": True}}, "bs1": {"add": {"alone": False}}})
    prepare(study, shapes, space_from_workload(shapes), Path("m.py"), SETTINGS)
    assert not measures_space_inputs(loaded, again)  # prepared: a resumed run searches the stored space
    assert reuse_space_inputs(loaded, describe()).exactness_by_shape == shapes.exactness_by_shape  # yardsticks
    attrs = loaded.user_attrs  # a multi-shape study from before the per-shape answers were stored
    older = optuna.create_study(study_name="older", storage=make_storage(url))
    for key in (k for k in attrs if k != StudyAttr.EXACTNESS_BY_SHAPE):
        older.set_user_attr(key, attrs[key])
    assert measures_space_inputs(older, False)
    unprobed = optuna.create_study(study_name="unprobed", storage=make_storage(url))  # --no-probe: no answers
    bare = replace(shapes, exactness={}, exactness_by_shape={})
    prepare(unprobed, bare, space_from_workload(bare), Path("m.py"), SETTINGS)
    assert not measures_space_inputs(unprobed, False)


def test_a_study_whose_creator_failed_before_preparing_it_is_deleted_and_its_waiter_says_so(
        tmp_path: Path, space: SearchSpace) -> None:
    url = f"journal:{tmp_path}/s.log"
    study, created = open_study("s", url, 0)
    waiter, _ = open_study("s", url, 1)
    with pytest.raises(SktuneError), dropped_unless_prepared(study, created, url):
        raise SktuneError("build_model() raised")  # the model did not load in the worker
    assert optuna.get_all_study_names(make_storage(url)) == []
    with pytest.raises(SktuneError, match="was deleted while this run waited"):
        wait_for_creator(waiter)
    # Kept: a study this run only loaded, and one that was prepared before the failure.
    kept, created = open_study("k", url, 0)
    loaded, again = open_study("k", url, 1)
    loaded.set_user_attr(StudyAttr.CREATOR, {"host": "another-host", "pid": 1, "at": 0.0})  # alive, elsewhere
    with pytest.raises(KeyboardInterrupt), dropped_unless_prepared(loaded, again, url):
        raise KeyboardInterrupt
    with pytest.raises(SktuneError), dropped_unless_prepared(kept, created, url):
        prepare(kept, describe(), space, Path("m.py"), SETTINGS)
        raise SktuneError("a trial failed")
    assert optuna.get_all_study_names(make_storage(url)) == ["k"]


def test_a_creator_stopped_before_preparing_hands_the_study_to_its_waiter_or_leaves_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C or SIGTERM of the creator during its start-up: a worker that loaded the study
    takes it over (deleting it ended that worker, "deleted while this run waited"); a lone
    creator leaves no empty study behind."""
    from sktune.tuning import creator

    monkeypatch.setattr(creator, "pause", lambda seconds: None)
    url = f"journal:{tmp_path}/s.log"
    study, created = open_study("s", url, 0)
    waiter, again = open_study("s", url, 1)  # loaded before the study was prepared: it will wait
    assert waiter.user_attrs[StudyAttr.WAITER]["pid"] == os.getpid()
    elsewhere = {"host": "another-host", "pid": 1, "at": 0.0}  # a live worker (another host's cannot be looked at)
    waiter.set_user_attr(StudyAttr.WAITER, elsewhere)
    with pytest.raises(KeyboardInterrupt), dropped_unless_prepared(study, created, url):
        raise KeyboardInterrupt
    assert optuna.get_all_study_names(make_storage(url)) == ["s"]
    assert "another worker prepares it now" in unprepared.stop_note("s", url)
    assert not wait_for_creator(waiter)  # at once, not after a silence
    # A stop that reached both (one process group): the waiter, last to go, leaves nothing behind.
    waiter.set_user_attr(StudyAttr.WAITER, {**elsewhere, "host": socket.gethostname(), "pid": os.getpid()})
    with pytest.raises(KeyboardInterrupt), dropped_unless_prepared(waiter, again, url):
        raise KeyboardInterrupt
    assert optuna.get_all_study_names(make_storage(url)) == []
    assert unprepared.stop_note("s", url) == "stopped before the study was prepared, so nothing was saved"
    lone, created = open_study("lone", url, 0)
    with pytest.raises(KeyboardInterrupt), dropped_unless_prepared(lone, created, url):
        raise KeyboardInterrupt
    assert optuna.get_all_study_names(make_storage(url)) == []


def test_a_starting_point_with_overrides_is_done_only_by_a_trial_of_that_plan() -> None:
    # fuse-all takes the compiler's costly whole-graph options: a sampled trial with its
    # parameters but without them is another plan, and fuse-all's yardstick still runs.
    study = new_study()
    queue = StartingQueue([("fuse-all", {"x": 1}), ("other", {"x": 2})], {"fuse-all": {"cpp_wrapper": True}})
    study.enqueue_trial({"x": 1})  # as the sampler would propose it: no overrides
    assert [name for name, _ in queue.pending(study)] == ["fuse-all", "other"]
    assert queue.top_up(study) is None  # one waits already
    study.optimize(lambda t: t.suggest_int("x", 1, 2) * 0.5, n_trials=1)
    assert queue.top_up(study) == "fuse-all"
    queued = study.get_trials(states=(WAITING,))[0]
    assert queued.user_attrs == {TrialAttr.ANCHOR: "fuse-all", TrialAttr.OPTION_OVERRIDES: {"cpp_wrapper": True}}
    assert [name for name, _ in queue.pending(study)] == ["other"]


def test_a_trial_left_running_without_a_worker_tag_is_failed_once_past_the_grace_period(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C between Optuna's ask (the trial RUNNING) and the worker's tag left the trial
    RUNNING forever, and its starting point was never measured: no later run looked at it."""
    from datetime import datetime, timedelta

    from sktune.tuning import workers as workers_module
    from sktune.tuning.workers import GRACE_PERIOD_S, fail_orphaned_trials

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    backend = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=backend)
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.RUNNING))
    assert fail_orphaned_trials(study, backend) == []  # just taken: its worker is about to tag it

    class Later(datetime):
        @classmethod
        def now(cls, tz: object = None) -> datetime:  # type: ignore[override]
            return datetime.now() + timedelta(seconds=GRACE_PERIOD_S + 1)

    monkeypatch.setattr(workers_module, "datetime", Later)
    assert fail_orphaned_trials(study, backend) == [0]
    assert study.trials[0].state == optuna.trial.TrialState.FAIL
    assert "interrupted" in study.trials[0].user_attrs[TrialAttr.FAILURE]


def test_the_verify_only_shapes_are_recorded_when_the_study_is_prepared(space: SearchSpace) -> None:
    # Recorded only by the finalists' round, a run stopped before it forgot them: the summary,
    # the export and the capture-limit warning said nothing of shapes never verified.
    study = new_study()
    prepare(study, replace(describe(), verify_shapes=("bs2", "bs4")), space, Path("m.py"), SETTINGS)
    assert study.user_attrs[StudyAttr.VERIFY_SHAPES] == ["bs2", "bs4"]
    changed = replace(describe("m2"), verify_shapes=("bs2",))  # the model file changed: resumed anyway
    prepare(study, changed, space_from_workload(changed), Path("m.py"), SETTINGS, allow_changed=True)
    assert study.user_attrs[StudyAttr.VERIFY_SHAPES] == ["bs2"]


def test_a_stop_before_any_trial_completed_does_not_say_trials_are_saved(space: SearchSpace, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    study = new_study(optuna.storages.RDBStorage(url))
    prepare(study, describe(), space, Path("m.py"), SETTINGS)
    assert unprepared.stop_note("s", url).startswith("no trial completed yet; study 's' is prepared")
    study.optimize(lambda t: scripted(t, space), n_trials=1)
    assert unprepared.stop_note("s", url).startswith("completed trials are saved in study 's'")
