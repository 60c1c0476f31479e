"""The main-wait measure (NOTE [ Hang criterion ] in watchdog/detect/progress.py): without the inside view
(``dlwatch attach`` with no hook), main's iterating thread sitting in a wait like the
DataLoader's 5 s batch poll while its process moves no byte is the stall, whatever the workers
do; a worker that polls forever is then reported, and one that works on a sample is not."""

from __future__ import annotations

import dataclasses

import pytest

from tests.unit.builders import (
    IDLE_POLL,
    LOCK_TIMED,
    MAIN_PID,
    SLEEP,
    WORKER_PID,
    assess_tracked,
    detail,
    in_next,
    pair_details,
    polling_worker,
    proc,
    sample,
    sleeping_stack,
    thread,
    track,
)
from watchdog import detect
from watchdog.types import ROLE_MAIN, HangVerdict, KernelWait, Measure, ProcId, WaitKind

# A busy main: between two samples it ran (its thread is running at the read).
RUNNING = "running"


def _job(t, main_io=0, main_cpu=0.0, main_syscall=IDLE_POLL, cpu_per_s=0.02, io_per_s=4096, main_reads=True):
    """Main waiting (from outside: a 5 s poll, no I/O) and one worker that sleeps and wakes 50
    times a second, reading a few KiB a second (a lock file, a database page)."""
    i = int(t)
    worker = polling_worker(t, cpu_per_s, io_per_s)
    state = "R" if main_syscall == RUNNING else "S"
    main = proc(
        MAIN_PID,
        ROLE_MAIN,
        [thread(MAIN_PID, cpu=main_cpu, vol=i // 5, syscall="running" if state == "R" else main_syscall, state=state)],
        cpu=main_cpu,
        read_chars=main_io if main_reads else None,
    )
    return sample(t, [main, worker])


def test_a_worker_that_polls_forever_while_main_reads_nothing_is_a_stall():
    tracker, st = track(_job)
    assert tracker.measure == Measure.MAIN_WAIT and st.measure == "main_wait"
    assert st.stall_s == pytest.approx(20.0)  # from main's first sample in the wait
    assert st.no_delivery_s == pytest.approx(20.0)  # the busy-stall ceiling counts, whatever the worker reads
    (work,) = [w for w in st.loader_work if w[0] == WORKER_PID]
    assert work[2] == 10 * 4096


def test_a_byte_main_reads_or_writes_restarts_the_clock():
    _, st = track(lambda t: _job(t, main_io=100 * (t >= 12)))
    assert st.measure == Measure.MAIN_WAIT and st.stall_s == pytest.approx(8.0)
    # a batch every 3 s (main reads it and sends the next index): never a stall of note
    _, st = track(lambda t: _job(t, main_io=300 * (int(t) // 3)))
    assert st.stall_s <= 3.0


def test_main_that_works_or_waits_elsewhere_is_not_under_the_main_wait_measure():
    # main trains: half a core between samples, running at some reads
    _, st = track(lambda t: _job(t, main_cpu=0.5 * t, main_syscall=RUNNING if int(t) % 2 else IDLE_POLL))
    assert st.measure == Measure.ACTIVITY and st.stall_s < 2.0
    # main sleeps in the job's own code (a 30 s socket timeout is not PyTorch's poll)
    _, st = track(lambda t: _job(t, main_syscall=SLEEP))
    assert st.measure == Measure.ACTIVITY and st.stall_s < 2.0
    # main's I/O counters unreadable: no main-wait measure
    _, st = track(lambda t: _job(t, main_reads=False))
    assert st.measure == Measure.ACTIVITY and st.stall_s < 2.0


def test_a_timed_wait_the_frames_showed_in_the_jobs_code_is_not_a_batch_wait():
    tracker = detect.ProgressTracker(cpu_progress_s=0.05)
    for t in range(11):
        tracker.update(_job(float(t), main_syscall=LOCK_TIMED))
    assert tracker.measure == Measure.MAIN_WAIT
    sig = _job(0.0, main_syscall=LOCK_TIMED).main.threads[0].wait.signature
    tracker.trust_timed_waits([(ProcId(MAIN_PID, 0), MAIN_PID, sig)])  # an Event.wait(5) loop of the job's own
    for t in range(11, 16):
        tracker.update(_job(float(t), main_syscall=LOCK_TIMED))
    st = tracker.stall(_job(15.0, main_syscall=LOCK_TIMED))
    assert tracker.measure == Measure.ACTIVITY and st.stall_s < 2.0


def test_a_batch_that_comes_after_a_long_wait_says_the_loader_moved():
    tracker = detect.ProgressTracker(cpu_progress_s=0.05)
    for t in range(21):
        tracker.update(_job(float(t)))
    before = tracker.last_delivery_mono
    tracker.update(_job(21.0, main_io=500))
    assert tracker.last_delivery_mono == 21.0 != before
    assert tracker.stall(_job(21.0, main_io=500)).stall_s == 0.0


def _assess(make, verdict, seconds=20, trigger=detect.TRIGGER_STALL):
    return assess_tracked(make, verdict, pair_details(SLEEP), seconds, trigger)


def test_a_poller_seen_from_outside_is_a_suspected_hang_when_mains_stack_is_in_the_iterator():
    a = _assess(_job, in_next())
    assert a.hang and a.proof is None
    assert "main waited for a batch in the DataLoader iterator for 20 s without reading a byte" in a.reason


def test_workers_that_compute_or_read_are_a_slow_batch_seen_from_outside_too():
    assert not _assess(lambda t: _job(t, cpu_per_s=0.9), in_next()).hang
    assert not _assess(lambda t: _job(t, io_per_s=4 << 20), in_next()).hang


def test_without_mains_stack_in_the_iterator_the_activity_checks_decide():
    # py-spy could not read main: the verdict rests on /proc alone; nothing is reported that
    # the activity measure would not report (the job's tree did work meanwhile).
    unread = HangVerdict("dataloader", False, "presumed", None)
    a = _assess(_job, unread)
    assert not a.hang
    outside = HangVerdict("outside_loader", True, "elsewhere", None)
    assert not _assess(_job, outside).hang


def test_the_busy_stall_ceiling_applies_to_a_worker_that_polls_from_outside_too():
    a = _assess(_job, in_next(), seconds=30, trigger=detect.TRIGGER_BUSY)
    assert a.hang and "busy_stall_timeout_s" in a.reason
    assert not _assess(lambda t: _job(t, io_per_s=4 << 20), in_next(), trigger=detect.TRIGGER_BUSY).hang


def _sleeper_stack():
    return {WORKER_PID: sleeping_stack(WORKER_PID, 20)}


def test_a_sample_that_sleeps_seconds_is_slow_from_outside_but_a_fast_poller_is_not():
    # One wake every 2-4 s (a remote object per sample, a 30 s socket timeout answered in 1.5 s):
    # from outside that is a sample under way; the inside view would count its samples.
    def slow(t):
        smp = _job(t)
        worker = smp.processes[1]
        thread_ = dataclasses.replace(worker.threads[0], voluntary_ctxt_switches=int(t) // 3)
        return dataclasses.replace(smp, processes=(smp.processes[0], dataclasses.replace(worker, threads=(thread_,))))

    _, st = track(slow)
    details = {WORKER_PID: (detail(WORKER_PID, SLEEP),), MAIN_PID: (detail(MAIN_PID, IDLE_POLL),)}
    woke = {(WORKER_PID, WORKER_PID)}
    a = detect.assess("stall_timeout", slow(20.0), st, in_next(), _sleeper_stack(), details, None, woke, 5.0)
    assert not a.hang and "woke 3 time(s) in the last 10 s" in a.reason and "/job/data.py:20" in a.reason
    # It woke between the examination's two reads (its stable wait unknown) and sleeps again:
    # still a timed waiter, from the second read (a sample boundary fell in the 0.25 s gap).
    unknown = dataclasses.replace(detail(WORKER_PID, SLEEP), wait=KernelWait(WaitKind.UNKNOWN, detail="changed"))
    changed = {WORKER_PID: (unknown,), MAIN_PID: details[MAIN_PID]}
    _, st = track(slow)
    a = detect.assess(
        "stall_timeout", slow(20.0), st, in_next(), _sleeper_stack(), changed, None, woke, 5.0, latest=details
    )
    assert not a.hang and "woke 3 time(s)" in a.reason
    assert detect.assess("stall_timeout", slow(20.0), st, in_next(), _sleeper_stack(), changed, None, woke, 5.0).hang
    # 50 wakes a second at the same line: a poller, reported
    _, st = track(_job)
    a = detect.assess("stall_timeout", _job(20.0), st, in_next(), _sleeper_stack(), details, None, woke, 5.0)
    assert a.hang and a.proof is None


def test_a_wait_resumed_after_py_spys_stop_does_not_end_mains_wait():
    # An examination's py-spy stops main (PTRACE_ATTACH); its poll resumes as restart_syscall(2):
    # that is the same wait, not a batch delivered (else a hang reported once would be "resolved"
    # and reported again at the next look).
    restart = "219 0x0 0x0 0x0 0x0 0x0 0x0 0x7ffc8ccd7e60 0x7fbe41b1a26f"
    tracker = detect.ProgressTracker(cpu_progress_s=0.05)
    for t in range(21):
        tracker.update(_job(float(t), main_syscall=restart if t in (8, 9) else IDLE_POLL))
    st = tracker.stall(_job(20.0))
    assert st.measure == Measure.MAIN_WAIT and st.stall_s == pytest.approx(20.0)
    assert tracker.last_delivery_mono == 0.0


def _unread_between(every: int, make):
    """``make(t)`` with its threads read only at every ``every``-th sample (the read plan's
    choice without the inside view while the workers move: NOTE [ Thread reads ] in
    watchdog/collect/read_plan.py): at the others, no thread at all and ``threads_read`` false."""

    def at(t):
        s = make(t)
        if int(t) % every == 0:
            return s
        bare = tuple(dataclasses.replace(p, threads=()) for p in s.processes)
        return dataclasses.replace(s, processes=bare, threads_read=False)

    return at


def test_samples_without_threads_keep_mains_wait_and_a_byte_main_moves_still_ends_it():
    # threads read every 5 s: the wait measured at those keeps its start across the others
    tracker, st = track(_unread_between(5, _job))
    assert tracker.measure == Measure.MAIN_WAIT and st.stall_s == pytest.approx(20.0)
    # before, a sample without main's thread ended the measure and restarted the clock
    _, st = track(_unread_between(5, lambda t: _job(t, main_io=100 * (t >= 12))))
    # a byte at an unread sample (t = 12) ends the wait there; a new one is measured from the
    # next read that sees main in it (t = 15): 3 s later than with every thread read, never earlier
    assert st.stall_s == pytest.approx(5.0)


def test_under_the_activity_measure_a_moving_worker_is_progress_at_samples_without_threads():
    # main trains (its thread's CPU read only every 5 s); the worker reads and computes: no stall grows
    busy = dict(cpu_per_s=0.5, io_per_s=4096)
    make = _unread_between(5, lambda t: _job(t, main_cpu=0.5 * t, main_syscall=RUNNING, **busy))
    tracker, st = track(make, seconds=19)
    assert tracker.measure == Measure.ACTIVITY and st.stall_s <= 1.0


@pytest.mark.parametrize("main_io_per_s", [0, 4096], ids=["main-waits", "main-reads"])
def test_lean_samples_between_full_ones_fold_in_nothing(main_io_per_s):
    # dlwatch attach while the workers move (NOTE [ Thread reads ] in read_plan.py): the ticks
    # between full samples are lean, their processes the last full one's; the tracker takes
    # nothing from them, so its stall at a full sample is the one it measures on full ones alone
    def full(t):
        return _job(t, main_io=int(main_io_per_s * t), main_cpu=0.01 * t)

    lean_fed = detect.ProgressTracker(cpu_progress_s=0.05)
    full_fed = detect.ProgressTracker(cpu_progress_s=0.05)
    last = None
    for t in range(31):
        if t % 5 == 0:
            last = full(float(t))
            full_fed.update(last)
            lean_fed.update(last)
        else:
            lean_fed.update(dataclasses.replace(last, t_mono=float(t), wall=1e9 + t, lean=True))
    at = full(30.0)
    mine, theirs = lean_fed.stall(at), full_fed.stall(at)
    assert mine is not None and theirs is not None
    assert mine == theirs
    assert lean_fed.measure == full_fed.measure
