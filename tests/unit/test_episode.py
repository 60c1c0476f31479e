"""The hang-episode policy (``detect.Episode``), on hand-built stalls: when an examination is
due, what an examination concludes from its evidence, what a report already covers, when a
stall resolves, and one report per episode."""

from __future__ import annotations

import dataclasses

from tests.unit.builders import (
    LOCK_UNTIMED,
    MAIN_PID,
    SLEEP,
    WORKER_PID,
    detail,
    fixture,
    main_native_threads,
    pair_details,
    sample,
    stall,
    waiting_pair,
)
from watchdog import detect
from watchdog.collect import pyspy
from watchdog.types import Evidence, PipeEnds, ProcessStack


def _episode(terminate=False):
    return detect.Episode(stall_timeout_s=5.0, busy_stall_timeout_s=300.0, terminate=terminate)


def _stall(s, since=100.0, **kw):
    return stall(s=s, quiet_since_mono=since, **kw)


def test_an_examination_is_due_at_the_stall_timeout_and_again_a_timeout_after_a_dismissal():
    ep = _episode()
    assert ep.due(_stall(4.0), 104.0) is None
    assert ep.due(_stall(5.0), 105.0) == detect.TRIGGER_STALL
    ep.dismissed(105.0)
    assert ep.due(_stall(9.0), 109.0) is None
    assert ep.due(_stall(10.0), 110.0) == detect.TRIGGER_STALL


def test_a_reported_hang_is_looked_at_again_only_to_escalate_it():
    ep = _episode()
    assert ep.report(detect.Reported(1.0, False, False, ("worker_stuck", "a.py:3"), 100.0), _stall(5.0), 105.0)
    assert ep.due(_stall(20.0), 120.0) is None  # the same unproven hang: no new look at the stall timeout
    stuck = _stall(20.0, stuck_s=((7, 20.0),))
    assert ep.due(stuck, 120.0) == detect.TRIGGER_PROOF  # a proof may come: report mode looks again
    assert ep.already_reported(terminate=False, proven=False) and not ep.already_reported(False, proven=True)
    ended = _episode(terminate=True)
    ended.report(detect.Reported(1.0, True, True, ("fork_inherited_lock", "a.py:9"), 100.0), _stall(5.0), 105.0)
    assert ended.due(stuck, 120.0) is None  # already ending it: nothing to escalate


def test_a_delivered_batch_ends_the_episode_and_says_how_long_a_suspected_stall_lasted():
    ep = _episode()
    ep.report(detect.Reported(1.0, False, False, ("worker_stuck", "a.py:3"), 100.0), _stall(5.0), 105.0)
    assert ep.delivered(1.0, 106.0) is None  # no batch since
    over = ep.delivered(2.0, 112.0)
    assert over is not None and over.key == ("worker_stuck", "a.py:3") and ep.reported is None
    assert ep.resolved[("worker_stuck", "a.py:3")] == 12.0
    proven = _episode()
    proven.report(detect.Reported(1.0, True, True, ("fork_inherited_lock", "b.py:1"), 100.0), _stall(5.0), 105.0)
    assert proven.delivered(2.0, 112.0) is None and not proven.resolved  # a proven hang never "resolves"


def test_a_hang_measured_in_batches_resolves_only_on_a_batch_or_a_sample_not_on_workers_going():
    # Workers killed while main lingers: the tracker's delivery mark restarts (the members
    # changed) and main works in its except clause, but no batch and no sample moved.
    ep = _episode()
    workers = frozenset({("w", 1), ("w", 2)})
    reported = detect.Reported(1.0, False, False, ("worker_stuck", "a.py:3"), 100.0, batch=90.0, members=workers)
    ep.report(reported, _stall(5.0), 105.0)
    assert ep.delivered(2.0, 110.0, batch=90.0, members=frozenset()) is None and ep.reported is not None
    assert ep.delivered(3.0, 111.0, batch=float("-inf"), members=frozenset()) is None
    over = ep.delivered(3.0, 112.0, batch=111.5, members=workers)  # a sample moved: it was slow
    assert over is not None and ep.resolved[("worker_stuck", "a.py:3")] == 12.0


def test_without_the_batch_measure_workers_that_only_went_are_no_delivery():
    ep = _episode()
    workers = frozenset({("w", 1), ("w", 2)})
    ep.report(
        detect.Reported(1.0, False, False, ("worker_stuck", "a.py:3"), 100.0, members=workers), _stall(5.0), 105.0
    )
    assert ep.delivered(2.0, 110.0, members=frozenset({("w", 1)})) is None  # one killed, main works on
    assert ep.delivered(1.0, 111.0, members=workers) is None  # no delivery mark moved
    fresh = frozenset({("w", 3), ("w", 4)})  # the next epoch's workers: the loader moved
    assert ep.delivered(3.0, 112.0, members=fresh) is not None


def test_one_episode_one_report_until_a_stall_at_that_place_lasts_twice_the_longest_that_resolved():
    ep = _episode()
    key = ("worker_stuck", "a.py:3")
    assert ep.report(detect.Reported(1.0, False, False, key, 100.0), _stall(5.0), 105.0)
    ep.delivered(2.0, 108.0)  # resolved after 8 s
    assert not ep.report(detect.Reported(2.0, False, False, key, 108.0), _stall(5.0, since=108.0), 113.0)
    assert ep.reported is not None and not ep.reported.published
    assert ep.delivered(3.0, 116.0) is None  # an unpublished look resolves silently
    again = dataclasses.replace(detect.Reported(3.0, False, False, key, 116.0))
    assert ep.report(again, _stall(16.0, since=116.0), 132.0)  # twice the longest (8 s): reported
    other = _episode()
    other.resolved[key] = 8.0
    busy = _stall(5.0, trigger=detect.TRIGGER_BUSY)
    assert other.report(detect.Reported(1.0, True, False, key, 100.0), busy, 105.0)  # the ceiling always reports
    assert other.report(detect.Reported(1.0, False, False, ("worker_stuck", "b.py:1"), 100.0), _stall(5.0), 105.0)


# --- what an examination concludes (Episode.conclude) ---------------------------------------------


def _looked(worker_syscall, worker_frames="pyspy_worker_fork_lock_native.json", workers_after=True, main_stack=True):
    """A sample with main waiting in the DataLoader's __next__ (the native fixture) and one
    worker whose only thread waits in ``worker_syscall``, and the Evidence of a look at it."""
    smp = waiting_pair(worker_syscall, worker_ppid=MAIN_PID)
    after = smp if workers_after else sample(30.5, [smp.processes[0]])
    details = pair_details(worker_syscall)
    stacks = {WORKER_PID: ProcessStack(WORKER_PID, pyspy.parse_dump(fixture(worker_frames)), False, None, "", 0.0)}
    if main_stack:
        stacks[MAIN_PID] = ProcessStack(MAIN_PID, main_native_threads(), False, None, "", 0.0)
    ev = Evidence(
        details, details, {MAIN_PID: (WORKER_PID,), WORKER_PID: ()}, PipeEnds({}, {}, {}, True), stacks, {}, (), after
    )
    return smp, ev


def test_a_worker_proven_stuck_while_main_waits_for_its_data_is_reported_and_may_be_ended():
    smp, ev = _looked(LOCK_UNTIMED)
    ep = _episode(terminate=True)
    d = ep.conclude(ev, smp, _stall(20.0, trigger=detect.TRIGGER_STALL), set(), 120.0)
    assert d.conclusion is detect.Conclusion.REPORT
    assert d.assessment.proof is not None and d.assessment.proof.pids == (WORKER_PID,)
    assert d.terminable and d.terminate
    assert not _episode().conclude(ev, smp, _stall(20.0, trigger=detect.TRIGGER_STALL), set(), 120.0).terminate


def test_workers_that_came_or_went_during_the_look_mean_the_job_moved():
    smp, ev = _looked(LOCK_UNTIMED, workers_after=False)
    ep = _episode()
    d = ep.conclude(ev, smp, _stall(20.0, trigger=detect.TRIGGER_STALL), set(), 120.0)
    assert d.conclusion is detect.Conclusion.DISMISS and "workers changed" in d.assessment.reason
    assert ep.due(_stall(24.0), 124.0) is None and ep.due(_stall(25.0), 125.0) == detect.TRIGGER_STALL


def test_an_early_look_past_the_batch_rhythm_reports_only_a_proof():
    smp, ev = _looked(SLEEP)  # a timed sleep: suspected at most
    ep = _episode()
    d = ep.conclude(ev, smp, _stall(3.0, trigger=detect.TRIGGER_RHYTHM), set(), 103.0)
    assert d.conclusion is detect.Conclusion.LOOK_AGAIN and ep.rhythm_floor == 103.0
    proven_smp, proven = _looked(LOCK_UNTIMED)
    assert ep.conclude(proven, proven_smp, _stall(3.0, trigger=detect.TRIGGER_RHYTHM), set(), 104.0).conclusion is (
        detect.Conclusion.REPORT
    )


def test_a_rank_stalled_outside_its_loader_waits_for_the_peer_whose_loader_is_stuck():
    smp, ev = _looked(SLEEP, main_stack=False)
    smp = sample(30.0, [smp.processes[0]])  # no workers: main is outside its loader
    ev = dataclasses.replace(ev, after=smp, stacks={}, details={MAIN_PID: (detail(MAIN_PID, SLEEP),)})
    ev = dataclasses.replace(ev, stable=ev.details)
    st = _stall(20.0, trigger=detect.TRIGGER_STALL, worker_pids=())
    ep = _episode()
    peer = "rank 1 (pid 99) has waited 30 s in its DataLoader for batch 4 from worker 0"
    d = ep.conclude(ev, smp, st, set(), 120.0, stalled_peers=[peer])
    assert d.conclusion is detect.Conclusion.PEER and d.peer == peer
    assert _episode().conclude(ev, smp, st, set(), 120.0).conclusion is detect.Conclusion.REPORT


def test_the_same_unproven_hang_is_not_reported_twice_but_a_first_proof_is():
    smp, ev = _looked(SLEEP)
    ep = _episode()
    first = ep.conclude(ev, smp, _stall(20.0, trigger=detect.TRIGGER_STALL), set(), 120.0)
    assert first.conclusion is detect.Conclusion.REPORT and first.assessment.proof is None
    ep.report(detect.Reported(1.0, False, False, ("worker_stuck", "a.py:3"), 100.0), _stall(20.0), 120.0)
    again = ep.conclude(ev, smp, _stall(30.0, trigger=detect.TRIGGER_STALL), set(), 130.0)
    assert again.conclusion is detect.Conclusion.REPORTED
    proven_smp, proven = _looked(LOCK_UNTIMED)
    assert ep.conclude(proven, proven_smp, _stall(40.0, trigger=detect.TRIGGER_PROOF), set(), 140.0).conclusion is (
        detect.Conclusion.REPORT
    )
