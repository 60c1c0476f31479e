"""Detection on hand-built samples: what counts as progress (NOTE [ Hang criterion ]), which
trigger comes due, the proofs (NOTE [ Deadlock proof ]) and the examination's verdict."""

from __future__ import annotations

import dataclasses

import pytest

from tests.unit.builders import (
    IDLE_POLL,
    LOCK_UNTIMED,
    MAIN_PID,
    MP_LOCK,
    PIPE_WRITE,
    SLEEP,
    SOCKET_POLL_30S,
    WORKER_PID,
    detail,
    fixture,
    fork_lock_thread,
    loader_view,
    main_native_threads,
    pair_details,
    proc,
    sample,
    stall,
    thread,
    track_procs,
    waiting_pair,
)
from watchdog import detect
from watchdog.collect import pyspy
from watchdog.collect.examine import stable_details
from watchdog.types import (
    ROLE_MAIN,
    ROLE_OTHER,
    ROLE_STARTING,
    ROLE_WORKER,
    ROLE_WORKER_CHILD,
    FileLock,
    HangVerdict,
    LoaderWork,
    Measure,
    PipeEnds,
    ProcessStack,
    ProcId,
    Proof,
    ProofKind,
)


def test_pytorch_idle_polls_and_busy_background_threads_are_not_loader_progress():
    tracker = detect.ProgressTracker(cpu_progress_s=0.05)
    stall = track_procs(
        tracker,
        12,
        lambda i: [
            proc(
                MAIN_PID,
                ROLE_MAIN,
                [thread(MAIN_PID, vol=3 * (i // 5)), thread(11, cpu=float(i), syscall=None, state="R")],
                cpu=float(i),
            ),
            proc(WORKER_PID, ROLE_WORKER, [thread(WORKER_PID, vol=2 * (i // 5))], "fork"),
        ],
    )
    assert stall.stall_s == pytest.approx(12.0)
    assert dict(stall.progress_age_s)[WORKER_PID] == pytest.approx(12.0)
    assert stall.tree_quiet_s == 0.0  # the busy thread is work in the tree, not the loader's progress


def test_cpu_that_pytorchs_idle_polls_add_up_is_not_progress_but_a_busy_main_is():
    # A hung loader's main wakes every 5 s in _try_get_data and uses a few ms each time: 0.05 s
    # (cpu_progress_s) after ~16 s on a busy machine. That is not a batch delivered.
    def at(t, main_cpu):
        return sample(1000.0 + t, [proc(MAIN_PID, ROLE_MAIN, [thread(MAIN_PID, cpu=main_cpu, vol=t // 5)]), worker])

    worker = proc(WORKER_PID, ROLE_WORKER, [thread(WORKER_PID, syscall=LOCK_UNTIMED)], "fork")
    tracker = detect.ProgressTracker(cpu_progress_s=0.05)
    for t in range(61):
        tracker.update(at(t, 0.01 * (t // 4)))
    stall = tracker.stall(at(60, 0.15))
    assert stall.stall_s == pytest.approx(60.0)
    assert stall.no_delivery_s == pytest.approx(60.0)
    # main busy (half a core) between looks is progress, even when each look finds it in a poll
    tracker = detect.ProgressTracker(cpu_progress_s=0.05)
    for t in range(11):
        tracker.update(at(t, 0.5 * t))
    assert tracker.stall(at(10, 5.0)).stall_s == 0.0


def test_wakes_from_the_users_timed_waits_are_progress_under_the_activity_measure():
    # Samples that sleep 2-4 s each (remote storage) or wait on a socket with a 30 s timeout:
    # the worker's wake-ups are its own code moving, not PyTorch's 5 s polls. (Main's I/O
    # unreadable: the activity measure; with it readable, see test_main_wait_measure.)
    for syscall in (SLEEP, SOCKET_POLL_30S):
        tracker = detect.ProgressTracker(cpu_progress_s=0.05)
        stall = track_procs(
            tracker,
            12,
            lambda i, syscall=syscall: [
                proc(MAIN_PID, ROLE_MAIN, [thread(MAIN_PID)], read_chars=None),
                proc(WORKER_PID, ROLE_WORKER, [thread(WORKER_PID, vol=i // 3, syscall=syscall)], "fork"),
            ],
        )
        assert stall.stall_s < 3.0 and stall.measure == Measure.ACTIVITY, syscall


def test_ambiguous_timed_futex_wakes_count_only_once_the_examination_trusts_them():
    timed_futex = "202 0x1 0x89 0x0 0x7ffe 0x0 0x0 0x7f 0x7f"

    def make(i):
        return [
            proc(MAIN_PID, ROLE_MAIN, [thread(MAIN_PID)], read_chars=None),
            proc(WORKER_PID, ROLE_WORKER, [thread(WORKER_PID, vol=i // 2, syscall=timed_futex)], "fork"),
        ]

    tracker = detect.ProgressTracker(cpu_progress_s=0.05)
    assert track_procs(tracker, 8, make).stall_s == pytest.approx(8.0)
    assert (WORKER_PID, WORKER_PID) in tracker.woke_during_stall(sample(8.0, make(8)))
    sig = make(0)[1].threads[0].wait.signature
    tracker.trust_timed_waits([(ProcId(WORKER_PID, 0), WORKER_PID, sig)])
    tracker.update(sample(10.0, make(10)))
    assert tracker.stall(sample(10.0, make(10))).stall_s == 0.0


def test_worker_children_and_starting_workers_are_the_loaders_progress_but_other_processes_are_not():
    def make(i, child_role):
        return [
            proc(MAIN_PID, ROLE_MAIN, [thread(MAIN_PID)]),
            proc(WORKER_PID, ROLE_WORKER, [thread(WORKER_PID, syscall="61 0x1 0x0 0x0 0x0 0x0 0x0 0x7f 0x7f")], "fork"),
            proc(
                3000,
                child_role,
                [],
                ppid=WORKER_PID,
                cpu=float(i),
                owner_pid=WORKER_PID if child_role == ROLE_WORKER_CHILD else None,
            ),
        ]

    busy_child = track_procs(detect.ProgressTracker(0.05), 10, lambda i: make(i, ROLE_WORKER_CHILD))
    assert busy_child.stall_s < 1.0 and dict(busy_child.progress_age_s)[WORKER_PID] < 1.0
    starting = track_procs(detect.ProgressTracker(0.05), 10, lambda i: make(i, ROLE_STARTING))
    assert starting.stall_s < 1.0
    summary_writer = track_procs(detect.ProgressTracker(0.05), 10, lambda i: make(i, ROLE_OTHER))
    assert summary_writer.stall_s == pytest.approx(10.0) and summary_writer.tree_quiet_s < 1.0


def test_a_stopped_job_stops_the_stall_clock():
    def make(i):
        status = "T" if 3 <= i <= 30 else "S"
        return [
            proc(MAIN_PID, ROLE_MAIN, [thread(MAIN_PID, state=status)], status=status),
            proc(WORKER_PID, ROLE_WORKER, [thread(WORKER_PID)], "fork"),
        ]

    tracker = detect.ProgressTracker(0.05)
    for i in range(31):
        tracker.update(sample(float(i), make(i)))
    assert tracker.stopped == (MAIN_PID,)
    assert tracker.stall(sample(30.0, make(30))).stall_s == 0.0
    tracker.update(sample(34.0, make(34)))
    assert tracker.stopped == () and tracker.stall(sample(34.0, make(34))).stall_s == pytest.approx(4.0)


def test_io_cpu_and_new_workers_are_progress():
    tracker = detect.ProgressTracker(cpu_progress_s=0.05)
    w = proc(WORKER_PID, ROLE_WORKER, [thread(WORKER_PID)], "fork")
    tracker.update(sample(0.0, [proc(MAIN_PID, ROLE_MAIN, [thread(MAIN_PID)]), w]))
    tracker.update(sample(5.0, [proc(MAIN_PID, ROLE_MAIN, [thread(MAIN_PID, io=4096)]), w]))
    assert tracker.stall(sample(6.0, [proc(MAIN_PID, ROLE_MAIN, [])])).stall_s == pytest.approx(1.0)
    tracker.update(
        sample(
            9.0,
            [proc(MAIN_PID, ROLE_MAIN, [thread(MAIN_PID, io=4096)]), w, proc(21, ROLE_WORKER, [thread(21)], "fork")],
        )
    )
    assert tracker.stall(sample(9.0, [proc(MAIN_PID, ROLE_MAIN, [])])).stall_s == 0.0


def test_a_worker_whose_every_thread_waits_on_a_private_futex_becomes_a_proof_candidate():
    def make(i):
        return [
            proc(
                MAIN_PID, ROLE_MAIN, [thread(MAIN_PID), thread(11, cpu=float(i), state="R", syscall=None)], cpu=float(i)
            ),
            proc(WORKER_PID, ROLE_WORKER, [thread(WORKER_PID, syscall=LOCK_UNTIMED)], "fork"),
        ]

    tracker = detect.ProgressTracker(0.05)
    st = track_procs(tracker, 6, make)
    assert dict(st.stuck_s)[WORKER_PID] == pytest.approx(6.0)
    assert detect.due_trigger(st, 5.0, 300.0, float("-inf"), 6.0) == detect.TRIGGER_PROOF
    assert detect.due_trigger(st, 10.0, 300.0, float("-inf"), 6.0) is None


def test_due_trigger_respects_the_last_dismissal():
    st = stall(s=20.0)
    assert detect.due_trigger(st, 5.0, 300.0, float("-inf"), 30.0) == detect.TRIGGER_STALL
    assert detect.due_trigger(st, 5.0, 300.0, 28.0, 30.0) is None
    assert detect.due_trigger(stall(s=400.0), 5.0, 300.0, float("-inf"), 500.0) == detect.TRIGGER_BUSY


# --- proofs ---------------------------------------------------------------------------------------


def test_a_process_whose_threads_all_wait_on_private_futexes_is_proven_stuck():
    proof = detect.prove({WORKER_PID: (detail(WORKER_PID, LOCK_UNTIMED),)}, {})
    assert proof.kind == "kernel" and proof.pids == (WORKER_PID,)
    assert "0x189" in proof.links[0].raw and "private futex" in proof.links[0].why


@pytest.mark.parametrize(
    "other",
    [
        "202 0x1 0x89 0x0 0x7ffe 0x0 0x0 0x7f 0x7f",  # a timed wait: it wakes
        MP_LOCK,  # a shared futex: another process may wake it
        "running",
        IDLE_POLL,
    ],
)
def test_no_proof_while_any_thread_can_still_run(other):
    state = "R" if other == "running" else "S"
    assert detect.prove({MAIN_PID: (detail(MAIN_PID, LOCK_UNTIMED), detail(12, other, state=state))}, {}) is None


def test_a_pipe_writer_whose_only_reader_is_itself_stuck_is_proven():
    # multiprocessing's exit handler joins a feeder thread blocked writing to a pipe only main reads.
    details = {MAIN_PID: (detail(MAIN_PID, LOCK_UNTIMED), detail(12, PIPE_WRITE))}
    pipes = PipeEnds({(MAIN_PID, 9): "pipe:[77]"}, {"pipe:[77]": (MAIN_PID,)}, {"pipe:[77]": (MAIN_PID,)}, True)
    proof = detect.prove(details, {}, pipes)
    assert proof is not None and proof.pids == (MAIN_PID,)
    assert any("pipe:[77]" in link.why for link in proof.links)
    other_reader = PipeEnds({(MAIN_PID, 9): "pipe:[77]"}, {"pipe:[77]": (MAIN_PID, 5000)}, {}, True)
    assert detect.prove(details, {}, other_reader) is None
    incomplete = PipeEnds(pipes.targets, pipes.readers, pipes.writers, False)
    assert detect.prove(details, {}, incomplete) is None


def test_changed_waits_between_two_reads_are_not_trusted():
    first = {WORKER_PID: (detail(WORKER_PID, LOCK_UNTIMED, vol=5),)}
    moved = {WORKER_PID: (detail(WORKER_PID, LOCK_UNTIMED, vol=6),)}
    assert detect.prove(stable_details(first, first), {}) is not None
    assert detect.prove(stable_details(first, moved), {}) is None


def test_the_loader_idle_proof_needs_every_worker_idle_and_main_waiting():
    main_threads = pyspy.parse_dump(fixture("pyspy_main_native.json"))
    smp = sample(
        30.0,
        [proc(MAIN_PID, ROLE_MAIN, [thread(MAIN_PID)]), proc(WORKER_PID, ROLE_WORKER, [thread(WORKER_PID)], "fork")],
    )
    verdict = HangVerdict("dataloader", True, "waits", main_threads[0])
    idle = pyspy.parse_dump(fixture("pyspy_worker_idle.json"))
    stacks = {
        MAIN_PID: ProcessStack(MAIN_PID, main_threads, False, None, "", 0.0),
        WORKER_PID: ProcessStack(WORKER_PID, idle, False, None, "", 0.0),
    }
    proof = detect.prove_loader_idle(verdict, smp, stacks, stall(s=20.0), 5.0)
    assert proof is not None and proof.kind == "loader_idle"
    busy = pyspy.parse_dump(fixture("pyspy_worker_fork_lock_native.json"))
    stacks[WORKER_PID] = ProcessStack(WORKER_PID, busy, True, None, "", 0.0)
    assert detect.prove_loader_idle(verdict, smp, stacks, stall(s=20.0), 5.0) is None


# --- the examination ------------------------------------------------------------------------------


def _exam(worker_syscall, worker_stack, woke=frozenset(), tree_quiet=20.0, proof=None, verdict_kind="dataloader"):
    main_threads = main_native_threads()
    st = stall(s=20.0, tree_quiet_s=tree_quiet) if tree_quiet != 20.0 else stall(s=20.0)
    verdict = HangVerdict(verdict_kind, True, "waits", main_threads[0])
    stacks = {
        MAIN_PID: ProcessStack(MAIN_PID, main_threads, False, None, "", 0.0),
        WORKER_PID: ProcessStack(WORKER_PID, worker_stack, False, None, "", 0.0),
    }
    details = pair_details(worker_syscall)
    smp = waiting_pair(worker_syscall)
    return detect.assess(detect.TRIGGER_STALL, smp, st, verdict, stacks, details, proof, set(woke), 5.0)


def _sleeping_worker():
    return (fork_lock_thread(),)


def test_a_users_timed_wait_that_woke_is_dismissed_and_trusted():
    a = _exam(SLEEP, _sleeping_worker(), woke={(WORKER_PID, WORKER_PID)})
    assert not a.hang and "timeout" in a.reason
    assert a.timed_waits and a.timed_waits[0][1] == WORKER_PID


def test_a_users_timed_wait_that_never_woke_is_a_suspected_hang():
    a = _exam(SLEEP, _sleeping_worker())
    assert a.hang and a.proof is None


def test_work_elsewhere_in_the_tree_dismisses_an_unproven_stall_but_not_a_proven_one():
    assert not _exam(SLEEP, _sleeping_worker(), tree_quiet=2.0).hang
    proof = Proof(ProofKind.KERNEL, (WORKER_PID,), (), "x")
    assert _exam(LOCK_UNTIMED, _sleeping_worker(), tree_quiet=2.0, proof=proof).hang


def test_the_busy_stall_ceiling_is_always_a_hang():
    main_threads = pyspy.parse_dump(fixture("pyspy_main_native.json"))
    smp = sample(400.0, [proc(MAIN_PID, ROLE_MAIN, [thread(MAIN_PID)])])
    a = detect.assess(
        detect.TRIGGER_BUSY,
        smp,
        stall(s=400.0, worker_pids=()),
        HangVerdict("dataloader", True, "w", main_threads[0]),
        {},
        {},
        None,
        set(),
        5.0,
    )
    assert a.hang and "busy_stall" in a.reason


def test_confirm_without_stack_uses_proc_wait_state():
    details = (detail(10, IDLE_POLL, wchan="poll_schedule_timeout.constprop.0"),)
    v = detect.confirm(10, None, details, worker_count=2)
    assert v.kind == "dataloader" and not v.confirmed_by_stack
    assert detect.confirm(10, None, details, worker_count=0).kind == "outside_loader"


def _with_loaders(*loaders):
    import dataclasses

    return dataclasses.replace(sample(120.0, [proc(MAIN_PID, ROLE_MAIN, [])]), loaders=loaders)


def test_the_batch_rhythm_rule_needs_enough_intervals_a_waiting_main_and_a_worker_that_owns_the_batch():
    assert detect.rhythm(_with_loaders(loader_view()), 60.0, 10.0, 10.0).timeout_s == 10.0  # max(10, 10 x 20 ms)
    assert detect.rhythm(_with_loaders(loader_view(p99=2.0)), 60.0, 10.0, 10.0).timeout_s == 20.0
    assert detect.rhythm(_with_loaders(loader_view(p99=40.0)), 60.0, 10.0, 10.0) is None  # slower than stall_timeout_s
    assert detect.rhythm(_with_loaders(loader_view(intervals=19)), 60.0, 10.0, 10.0) is None
    assert detect.rhythm(_with_loaders(loader_view(since=None)), 60.0, 10.0, 10.0) is None  # main is not in __next__
    assert detect.rhythm(_with_loaders(loader_view(worker=-1)), 60.0, 10.0, 10.0) is None  # an epoch ended
    assert detect.rhythm(_with_loaders(loader_view(pid=WORKER_PID)), 60.0, 10.0, 10.0) is None  # not main's iterator
    two = detect.rhythm(_with_loaders(loader_view(p99=0.5), loader_view(p99=3.0)), 60.0, 10.0, 10.0)
    assert two.timeout_s == 30.0 and "p99 3000 ms" in two.criterion  # the most patient iterator


def test_the_batch_rhythm_trigger_counts_from_the_later_of_entering_next_and_the_last_progress():
    rule = detect.rhythm(_with_loaders(loader_view(since=105.0)), 60.0, 10.0, 10.0)
    quiet = stall(quiet_since_mono=100.0, s=20.0)
    assert detect.due_trigger(quiet, 60.0, 300.0, float("-inf"), 114.0, rule) is None
    assert detect.due_trigger(quiet, 60.0, 300.0, float("-inf"), 115.0, rule) == detect.TRIGGER_RHYTHM
    assert (
        detect.due_trigger(quiet, 60.0, 300.0, float("-inf"), 120.0, rule, rhythm_floor_mono=112.0) is None
    )  # looked at 112
    assert detect.due_trigger(quiet, 60.0, 300.0, float("-inf"), 160.0, rule) == detect.TRIGGER_STALL
    assert detect.due_trigger(quiet, 60.0, 300.0, float("-inf"), 115.0, None) is None


# --- ending a job: only a proof, or the opt-in with nothing moving (issue #34) ----------------

HOLDER_PID = 300
FLOCK_WAIT = "73 0x5 0x2 0x0 0x0 0x0 0x0 0x7ffc8ccd7e60 0x7fbe41b1a26f"  # flock(5, LOCK_EX), x86_64


def _unproven_busy_stall(holder_io=0, holder_cpu=0.0, worker_cpu=0.0, worker_state="S", no_delivery=400.0):
    """A busy-stall examination of main waiting in the DataLoader (its stack read) and one worker
    asleep on a multiprocessing lock a third process (the holder, role ``other``) holds: the
    assessment (suspected), the sample, its stall and the examination's thread reads."""
    main_threads = pyspy.parse_dump(fixture("pyspy_main_native.json"))
    smp = sample(
        400.0,
        [
            proc(MAIN_PID, ROLE_MAIN, [thread(MAIN_PID)]),
            proc(WORKER_PID, ROLE_WORKER, [thread(WORKER_PID, syscall=MP_LOCK, state=worker_state)], "fork"),
            proc(HOLDER_PID, ROLE_OTHER, [thread(HOLDER_PID, syscall=SLEEP)], "fork", ppid=MAIN_PID),
        ],
    )
    work = (
        LoaderWork(MAIN_PID, 0.01, 0),
        LoaderWork(WORKER_PID, worker_cpu, 0),
        LoaderWork(HOLDER_PID, holder_cpu, holder_io),
    )
    st = stall(
        s=no_delivery, no_delivery_s=no_delivery, trigger=detect.TRIGGER_BUSY, loader_work=work, work_window_s=10.0
    )
    verdict = HangVerdict("dataloader", True, "w", main_threads[0])
    details = {WORKER_PID: (detail(WORKER_PID, MP_LOCK, state=worker_state),)}
    a = detect.assess(detect.TRIGGER_BUSY, smp, st, verdict, {}, details, None, set(), 5.0)
    assert a.hang and a.proof is None  # the busy-stall ceiling reports, as suspected
    return a, smp, st, details


def test_the_busy_stall_ceiling_never_ends_a_job_by_itself():
    # Issue #34: three healthy runs were ended at busy_stall_timeout_s (304 s). Without the
    # opt-in only a proof ends a job, however long no batch came.
    a, smp, st, details = _unproven_busy_stall(no_delivery=3600.0)
    t = detect.termination(a, st, smp, 5.0, None, False, details)
    assert not t.grounded and "only on a proof" in t.note and not t.unproven
    t_unproven_later = detect.termination(a, st, smp, 5.0, 7200.0, False, details)
    assert not t_unproven_later.grounded and "under terminate_unproven_after_s" in t_unproven_later.note


def test_the_opt_in_ends_an_unproven_stall_only_when_nothing_of_the_job_moves():
    a, smp, st, details = _unproven_busy_stall()
    quiet = detect.termination(a, st, smp, 5.0, 60.0, False, details)
    assert quiet.grounded and quiet.allowed and quiet.unproven
    assert "NOT proven" in quiet.note and "terminate_unproven_after_s" in quiet.note
    # The holder writes steadily (a downloader holding the lock): alive and moving.
    a, smp, st, details = _unproven_busy_stall(holder_io=1 << 20)
    writing = detect.termination(a, st, smp, 5.0, 60.0, False, details)
    assert not writing.grounded and f"pid {HOLDER_PID} is alive and moving" in writing.note
    # Even a trickle of bytes from a process that is not main or a worker is movement.
    a, smp, st, details = _unproven_busy_stall(holder_io=100)
    assert not detect.termination(a, st, smp, 5.0, 60.0, False, details).grounded
    # A worker that computes (an index built in a thread pool) or is runnable at the reads.
    a, smp, st, details = _unproven_busy_stall(worker_cpu=8.0)
    assert not detect.termination(a, st, smp, 5.0, 60.0, False, details).grounded
    a, smp, st, details = _unproven_busy_stall(worker_state="R")
    computing = detect.termination(a, st, smp, 5.0, 60.0, False, details)
    assert not computing.grounded and "a thread running" in computing.note


def test_the_opt_in_never_ends_a_wait_for_a_file_lock_held_outside_the_job():
    a, smp, st, _ = _unproven_busy_stall()
    details = {WORKER_PID: (detail(WORKER_PID, FLOCK_WAIT),)}
    outside = FileLock(WORKER_PID, "/data/ds.lock", 4242, "FLOCK", "WRITE")
    t = detect.termination(a, st, smp, 5.0, 60.0, False, details, (outside,))
    assert not t.grounded and "pid 4242, outside the job" in t.note


def test_a_proof_still_ends_the_job_without_the_opt_in():
    a, smp, st, details = _unproven_busy_stall(holder_io=1 << 20)
    proven = dataclasses.replace(a, proof=Proof(ProofKind.LOADER_IDLE, (MAIN_PID, WORKER_PID), (), "x"))
    t = detect.termination(proven, st, smp, 5.0, None, False, details)
    assert t.grounded and t.note.startswith("proven") and not t.unproven


def test_with_the_opt_in_a_reported_unproven_hang_is_looked_at_again_at_the_stall_timeout():
    reported = detect.Reported(1.0, False, False, ("worker_stuck", "a.py:3"), 100.0)
    late = stall(s=20.0, quiet_since_mono=100.0, no_delivery_s=20.0)
    for opt_in, expected in ((None, None), (30.0, None), (15.0, detect.TRIGGER_STALL)):
        ep = detect.Episode(5.0, 300.0, terminate=True, terminate_unproven_after_s=opt_in)
        ep.report(reported, stall(s=5.0, quiet_since_mono=100.0), 105.0)
        assert ep.due(late, 120.0) == expected, opt_in


# --- issue #34 section 4: a runnable thread waiting for a CPU is not idle ---------------------


def _batch_stall_on_a_loaded_machine(worker_cpu, runq_wait, worker_state="R"):
    """An examination under the batch measure of one worker that used ``worker_cpu`` s of CPU
    and waited ``runq_wait`` s runnable for a CPU (/proc/PID/schedstat) in a 10 s window."""
    main_threads = pyspy.parse_dump(fixture("pyspy_main_native.json"))
    smp = sample(
        60.0,
        [
            proc(MAIN_PID, ROLE_MAIN, [thread(MAIN_PID)]),
            proc(WORKER_PID, ROLE_WORKER, [thread(WORKER_PID, syscall="running", state=worker_state)], "fork"),
        ],
    )
    work = (LoaderWork(MAIN_PID, 0.01, 0, 2, 0.0), LoaderWork(WORKER_PID, worker_cpu, 0, 3, runq_wait))
    st = stall(s=60.0, measure=Measure.BATCHES, trigger=detect.TRIGGER_STALL, loader_work=work, work_window_s=10.0)
    verdict = HangVerdict("dataloader", True, "w", main_threads[0])
    details = {WORKER_PID: (detail(WORKER_PID, "running", state=worker_state),)}
    return detect.assess(detect.TRIGGER_STALL, smp, st, verdict, {}, details, None, set(), 60.0)


def test_a_worker_computing_on_an_overloaded_machine_is_working_not_waiting():
    # Issue #34: at load 20 a worker computing 20 s per sample got 0.3 s of CPU in 10 s (under
    # BUSY_SHARE) and was reported worker_stuck, "used little CPU: they wait, poll or retry".
    # It was runnable all along: 9.6 s on a run queue.
    a = _batch_stall_on_a_loaded_machine(worker_cpu=0.3, runq_wait=9.6, worker_state="S")
    assert not a.hang, a.reason
    assert "waited 9.6 s runnable for a CPU" in a.reason and "working on a sample" in a.reason


def test_a_sleeping_poller_on_a_loaded_machine_is_still_suspected():
    # A poller that sleeps between tries waits on the run queue only for its short wake-ups.
    a = _batch_stall_on_a_loaded_machine(worker_cpu=0.1, runq_wait=0.4, worker_state="S")
    assert a.hang and a.proof is None and "used little CPU" in a.reason


def test_the_tracker_measures_run_queue_wait_over_the_stalls_window():
    tracker = detect.ProgressTracker(cpu_progress_s=0.05)

    def procs(i):
        return [
            proc(MAIN_PID, ROLE_MAIN, [thread(MAIN_PID)]),
            proc(
                WORKER_PID,
                ROLE_WORKER,
                [thread(WORKER_PID, cpu=0.02 * i, syscall="running", state="R")],
                "fork",
                cpu=0.02 * i,
                runq_wait_s=0.9 * i,
            ),
        ]

    st = track_procs(tracker, 30, procs)
    (work,) = [w for w in st.loader_work if w.pid == WORKER_PID]
    assert work.runq_wait_s == pytest.approx(0.9 * st.work_window_s)
    # not read at the window's start: unknown, never taken as zero
    tracker = detect.ProgressTracker(cpu_progress_s=0.05)
    st = track_procs(
        tracker, 30, lambda i: [dataclasses.replace(p, runq_wait_s=None) if i < 29 else p for p in procs(i)]
    )
    (work,) = [w for w in st.loader_work if w.pid == WORKER_PID]
    assert work.runq_wait_s is None


# --- a first user's trial: workers still starting on a loaded machine are the loader moving ---


STARTING_PIDS = (2901, 2902)


def _activity_stall_with_starting_workers(cpu, runq_wait, state, no_delivery_s=6.0):
    """An examination under the activity measure (no worker counts samples yet) at the start of
    an epoch of forkserver workers: main waits in the iterator, two ``worker_starting`` children
    of the forkserver used ``cpu`` s of CPU and waited ``runq_wait`` s runnable for a CPU in the
    10 s window, their state ``state``; nothing else in the job moved for the whole 6 s stall."""
    from watchdog.types import ROLE_STARTING

    main_threads = pyspy.parse_dump(fixture("pyspy_main_native.json"))
    starting = [
        proc(pid, ROLE_STARTING, [thread(pid, cpu=1.1, syscall="running", state=state)], "forkserver", status=state)
        for pid in STARTING_PIDS
    ]
    smp = sample(60.0, [proc(MAIN_PID, ROLE_MAIN, [thread(MAIN_PID)])] + starting)
    work = (LoaderWork(MAIN_PID, 0.01, 0, 2, 0.0),) + tuple(
        LoaderWork(pid, cpu, 0, 1, runq_wait) for pid in STARTING_PIDS
    )
    st = stall(
        s=6.0,
        worker_pids=(),
        measure=Measure.ACTIVITY,
        trigger=detect.TRIGGER_STALL,
        loader_work=work,
        work_window_s=10.0,
        tree_quiet_s=6.0,
        no_delivery_s=no_delivery_s,
    )
    verdict = HangVerdict("dataloader", True, "w", main_threads[0])
    details = {pid: (detail(pid, "running", state=state),) for pid in STARTING_PIDS}
    return detect.assess(detect.TRIGGER_STALL, smp, st, verdict, {}, details, None, set(), 5.0)


def test_workers_still_starting_on_a_loaded_machine_are_the_loader_moving_never_a_hang():
    # The demo's verify, fixed runs (forkserver) at load 9-17 on 2 CPUs: both new workers were
    # worker_starting in state R, under BUSY_SHARE of a core, and the stall was reported
    # "hang: suspected; cause: unknown ... nothing else in the job moved".
    a = _activity_stall_with_starting_workers(cpu=0.2, runq_wait=8.5, state="R")
    assert not a.hang, a.reason
    assert a.reason.startswith("workers starting: worker_starting pid 2901 (forkserver) used 0.20 s")
    assert "waited 8.5 s runnable for a CPU" in a.reason
    # runnable all along but read asleep at the examination: the run-queue wait decides
    assert not _activity_stall_with_starting_workers(cpu=0.05, runq_wait=9.0, state="S").hang
    # a share of a core, whatever the state
    assert not _activity_stall_with_starting_workers(cpu=1.0, runq_wait=0.0, state="S").hang


def test_a_worker_start_that_waits_is_still_a_suspected_hang():
    # A start blocked on a lock or a pipe (the forkserver inherited a held lock) neither uses a
    # CPU nor waits for one.
    a = _activity_stall_with_starting_workers(cpu=0.0, runq_wait=0.0, state="S")
    assert a.hang and a.proof is None and "nothing else in the job moved" in a.reason
    a = _activity_stall_with_starting_workers(cpu=0.01, runq_wait=0.2, state="S")
    assert a.hang, a.reason
    # its figures agree with main's wait: the stall counts from the loader's last move (a
    # starting worker's import read a file 6 s ago), the batch has been awaited for 52 s
    a = _activity_stall_with_starting_workers(cpu=0.0, runq_wait=0.0, state="S", no_delivery_s=52.2)
    assert "no progress for 6 s (no batch for 52 s) and nothing else in the job moved" in a.reason


def test_main_importing_at_its_start_on_a_loaded_machine_is_computing_never_a_hang():
    # The case above beside busy loops: main, still importing torch (no iterator yet, state R),
    # got 0.04 s of CPU in 3 s and was reported stall_outside_loader, "nothing else in the job
    # moved"; it had waited 2.9 s of the 3 runnable for a CPU.
    main_threads = pyspy.parse_dump(fixture("pyspy_main_native.json"))
    smp = sample(60.0, [proc(MAIN_PID, ROLE_MAIN, [thread(MAIN_PID, syscall="running", state="R")], status="R")])

    def judged(runq_wait):
        work = (LoaderWork(MAIN_PID, 0.04, 0, 1, runq_wait),)
        st = stall(s=5.6, worker_pids=(), measure=Measure.ACTIVITY, loader_work=work, work_window_s=3.0)
        verdict = HangVerdict("outside_loader", True, "not in a loader", main_threads[0])
        details = {MAIN_PID: (detail(MAIN_PID, "running", state="R"),)}
        return detect.assess(detect.TRIGGER_STALL, smp, st, verdict, {}, details, None, set(), 5.0)

    a = judged(2.9)
    assert not a.hang and "waited 2.9 s runnable for a CPU" in a.reason and "computing, slow" in a.reason
    # asleep and hardly ever runnable: still suspected
    assert judged(0.05).hang
