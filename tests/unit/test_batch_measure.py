"""The batch measure (NOTE [ Hang criterion ] in watchdog/detect/progress.py): with the inside view and
main waiting in ``__next__``, the loader moves only when a batch comes or a worker reaches for a
new sample; threads that poll, retry or wake are no progress. Also the polling look, the
``/proc/locks`` reader, the recorder's fetch counter and the report's wording."""

from __future__ import annotations

import dataclasses
import mmap
import os

import pytest

from tests.unit.builders import (
    LOCK_UNTIMED,
    MAIN_PID,
    SLEEP,
    WORKER_PID,
    assess_tracked,
    detail,
    fixture,
    hang_facts,
    in_next,
    poller,
    sleeping_stack,
    track,
    waiting_view,
)
from watchdog import detect
from watchdog.collect import inside, procfs, pyspy
from watchdog.diagnose import diagnose
from watchdog.types import (
    FileLock,
    Frame,
    LoaderWork,
    Measure,
    Polling,
    WorkerFetch,
)


def test_a_worker_that_polls_forever_is_a_stall_under_the_batch_measure_but_not_under_activity():
    tracker, st = track(poller)
    assert tracker.measure == Measure.BATCHES and st.measure == "batches"
    assert st.stall_s == pytest.approx(20.0)
    assert dict(st.progress_age_s)[WORKER_PID] == pytest.approx(20.0)
    assert st.no_delivery_s == pytest.approx(20.0)
    (work,) = [w for w in st.loader_work if w[0] == WORKER_PID]  # over the stall's last 10 s
    assert st.work_window_s == pytest.approx(10.0)
    assert work[1] == pytest.approx(0.2) and work[2] == 10 * 4096
    # The same job without the workers' sample counts: its wake-ups are progress, as before.
    tracker, st = track(lambda t: poller(t, fetches=False))
    assert tracker.measure == Measure.ACTIVITY and st.stall_s < 2.0


def test_a_sample_reached_for_or_a_batch_received_restarts_the_clock():
    _, st = track(lambda t: poller(t, samples=int(t) // 4))
    assert st.stall_s == pytest.approx(0.0)  # the 20th second raised the count
    _, st = track(lambda t: poller(t, samples=7 + (t >= 15)))
    assert st.stall_s == pytest.approx(5.0)
    _, st = track(lambda t: poller(t, view=waiting_view(batches=3 + (t >= 12))))
    assert st.stall_s == pytest.approx(8.0)


def test_delivered_batches_add_up_every_epochs_iterator_and_never_count_one_twice():
    site, val = Frame("<module>", "/job/train.py", 12, False), Frame("<module>", "/job/train.py", 30, False)

    def it(iterator, batches, where=site):
        return dataclasses.replace(waiting_view(batches=batches), iterator=iterator, site=where)

    tracker = detect.ProgressTracker(cpu_progress_s=0.05)
    views = [
        (it(1, 5),),  # epoch 0, first seen: counted whole
        (it(1, 25),),
        (it(1, 25), it(2, 0)),  # epoch 1 begins: its own count is 0, the total is not
        (),  # the inside view could not be read: nothing forgotten, nothing added
        (it(1, 25), it(2, 10), it(3, 4, val)),
        (it(2, 10), it(3, 4, val)),  # the first iterator's slot reused: its batches stay counted
    ]
    for t, loaders in enumerate(views):
        tracker.update(dataclasses.replace(poller(float(t)), loaders=loaders))
    assert dict(tracker.delivered) == {site: 35, val: 4}


def test_main_outside_next_or_at_an_epochs_end_is_not_under_the_batch_measure():
    assert detect.batch_measure(poller(1.0))
    assert not detect.batch_measure(poller(1.0, view=waiting_view(waiting_since=None)))
    assert not detect.batch_measure(poller(1.0, view=waiting_view(worker=-1)))
    assert not detect.batch_measure(poller(1.0, fetches=False))


def test_the_clock_starts_when_main_begins_to_wait_not_before():
    def make(t):
        return poller(t, view=waiting_view(waiting_since=15.0 if t >= 15 else None))

    _, st = track(make)
    assert st.measure == "batches" and st.stall_s == pytest.approx(5.0)


def _assess(make, seconds=20, state="S", trigger=detect.TRIGGER_STALL):
    return assess_tracked(make, in_next(), {WORKER_PID: (detail(WORKER_PID, SLEEP, state=state),)}, seconds, trigger)


def test_a_poller_is_a_suspected_hang_however_often_it_wakes():
    a = _assess(poller)
    assert a.hang and a.proof is None and "no worker reached for a new sample" in a.reason


def test_a_burst_when_main_began_to_wait_is_not_work_on_a_sample_still_under_way():
    # The workers fetched their first samples in the stall's first 3 s (a CPU and I/O burst), then only wait.
    def make(t):
        return poller(t, cpu=0.9 * min(t, 3.0), io_per_s=0)

    assert _assess(make).hang


def test_a_worker_that_computes_or_reads_during_the_stall_is_slow_not_stuck():
    assert not _assess(lambda t: poller(t, cpu_per_s=0.9)).hang
    assert not _assess(lambda t: poller(t, io_per_s=4 << 20)).hang
    # a quarter of a core (eight workers on two cores) with its thread running when read
    assert not _assess(lambda t: poller(t, cpu_per_s=0.25), state="R").hang
    assert _assess(lambda t: poller(t, cpu_per_s=0.25), state="S").hang


def _reads(vol0, vol1, syscall0=SLEEP, syscall1=SLEEP):
    return (
        {WORKER_PID: (detail(WORKER_PID, syscall0, vol=vol0),)},
        {WORKER_PID: (detail(WORKER_PID, syscall1, vol=vol1),)},
    )


def test_polling_needs_the_same_user_line_in_both_stacks_and_a_wake_between():
    first = {WORKER_PID: sleeping_stack(WORKER_PID, 31)}
    same, moved = {WORKER_PID: sleeping_stack(WORKER_PID, 31)}, {WORKER_PID: sleeping_stack(WORKER_PID, 40)}
    (p,) = detect.polling(first, same, *_reads(10, 30), 2.0)
    assert (p.pid, p.frame.line, p.wakes, p.gap_s) == (WORKER_PID, 31, 20, 2.0)
    assert detect.polling(first, moved, *_reads(10, 30), 2.0) == ()  # it moved on
    assert detect.polling(first, same, *_reads(10, 10), 2.0) == ()  # asleep
    # In the same untimed lock wait at both reads: blocked, whatever the switch counts say.
    locked = _reads(10, 18, LOCK_UNTIMED, LOCK_UNTIMED)
    assert detect.polling(first, same, *locked, 2.0) == ()


def test_proc_locks_lines_parse_and_waiters_are_skipped():
    text = (
        "1: POSIX  ADVISORY  WRITE 3578 00:2c:1234 1073741824 1073741825\n"
        "1: -> POSIX  ADVISORY  WRITE 3582 00:2c:1234 1073741824 1073741825\n"
        "2: FLOCK  ADVISORY  WRITE 901 fd:01:77 0 EOF\n"
        "3: OFDLCK ADVISORY  READ  -1 00:05:9 0 EOF\n"
        "garbage\n"
    )
    assert procfs.parse_locks(text) == [
        ("POSIX", "WRITE", 3578, (0, 0x2C, 1234)),
        ("FLOCK", "WRITE", 901, (0xFD, 1, 77)),
        ("OFDLCK", "READ", None, (0, 5, 9)),
    ]


def test_a_lock_held_on_a_file_this_process_opened_is_found(tmp_path):
    import fcntl
    import subprocess
    import sys

    path = tmp_path / "cache.db"
    path.write_bytes(b"x")
    code = (
        "import fcntl,sys,time\nf=open(sys.argv[1],'r+b')\nfcntl.lockf(f,fcntl.LOCK_EX)\nprint('ok',flush=True)\n"
        "time.sleep(30)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ok"
        with open(path, "rb") as f:
            locks = procfs.file_locks([os.getpid()])
            assert FileLock(os.getpid(), str(path), holder.pid, "POSIX", "WRITE") in locks
            fcntl.flock(f, fcntl.LOCK_SH)  # our own lock is not another process's
            assert all(x.holder != os.getpid() for x in procfs.file_locks([os.getpid()]))
    finally:
        holder.kill()
        holder.wait(10)


def test_the_recorders_fetch_counter_is_read_back(tmp_path):
    fmt = inside.FORMAT
    path = tmp_path / f"{WORKER_PID}.fetch"
    path.write_bytes(bytes(fmt.FETCH.size))
    with open(path, "r+b") as f:
        buf = mmap.mmap(f.fileno(), fmt.FETCH.size)
        fmt.FETCH.pack_into(buf, 0, 42, 7_500_000_000)
        buf.close()
    view = inside.InsideReader(str(tmp_path)).read([WORKER_PID])
    assert view.fetches == (WorkerFetch(WORKER_PID, 42, 7.5),)
    assert inside.InsideReader(str(tmp_path)).read([1]).fetches == ()  # another job's pid
    path.write_bytes(b"short")
    assert "fetch" in (inside.InsideReader(str(tmp_path)).read([WORKER_PID]).note or "")
    # The job writes this folder: a FIFO or a link there is refused, never opened blocking or followed.
    path.unlink()
    os.mkfifo(path)
    view = inside.InsideReader(str(tmp_path)).read([WORKER_PID])
    assert view.fetches == () and "not a regular file" in (view.note or "")
    path.unlink()
    os.symlink("/dev/zero", path)
    assert inside.InsideReader(str(tmp_path)).read([WORKER_PID]).fetches == ()


def test_the_report_names_the_polling_line_and_the_locks_holder_and_gives_no_timeout_advice():
    (t,) = pyspy.parse_dump(fixture("pyspy_worker_fork_lock_native.json"))
    user = next(f for f in t.frames if not f.native and "site-packages" not in f.file and "torch" not in f.file)
    st = dataclasses.replace(
        hang_facts([t]).stall,
        measure="batches",
        loader_work=(LoaderWork(WORKER_PID, 0.01, 2048),),
        work_window_s=10.0,
        trigger="stall_timeout",
    )
    facts = hang_facts(
        [t],
        worker_details=(detail(WORKER_PID, SLEEP, name="pt_data_worker", wchan="hrtimer_nanosleep"),),
        stall=st,
        polling=(Polling(WORKER_PID, t.tid, user, 20, 2.0),),
        file_locks=(
            FileLock(WORKER_PID, "/data/cache.db", MAIN_PID, "POSIX", "WRITE"),
            FileLock(WORKER_PID, "/data/cache.db", MAIN_PID, "POSIX", "READ"),
        ),
    )
    first = diagnose(facts)[0]
    text = "\n".join(first.evidence)
    assert "polls (the same line in two stacks 2 s apart, 20 wake-ups between)" in text
    assert "no new sample for 20 s (0.01 s of CPU, 2 KiB of I/O in the last 10 s)" in text
    assert text.count("/data/cache.db is locked (POSIX WRITE, POSIX READ) by pid 2842 (main)") == 1
    assert "/data/cache.db is locked" in first.remedy and "keeps trying" in first.remedy
    assert "raise stall_timeout_s" not in first.remedy and "socket" not in first.remedy


def test_the_busy_stall_ceiling_spares_a_worker_that_reads_its_sample_but_not_one_that_only_burns_cpu():
    reads = _assess(lambda t: poller(t, io_per_s=1 << 20), seconds=300, trigger=detect.TRIGGER_BUSY)
    assert not reads.hang and "reading a sample" in reads.reason
    spins = _assess(lambda t: poller(t, cpu_per_s=1.0, io_per_s=0), seconds=300, trigger=detect.TRIGGER_BUSY)
    assert spins.hang


def test_the_work_window_is_never_shorter_than_one_sampling_interval():
    tracker = detect.ProgressTracker(cpu_progress_s=0.05)
    for t in range(0, 61, 15):  # interval_s = 15
        tracker.update(poller(float(t), cpu_per_s=0.9))
    st = tracker.stall(poller(60.0, cpu_per_s=0.9))
    assert st.work_window_s >= 15.0
    (work,) = [w for w in st.loader_work if w[0] == WORKER_PID]
    assert work[1] == pytest.approx(0.9 * st.work_window_s)


def test_a_lean_sample_folds_in_like_a_full_one_from_the_counts_alone():
    # NOTE [ Lean ticks ]: a lean sample carries the last sample's process tuple itself and new
    # inside-view counts; the tracker takes the counts without its per-process pass, and ends
    # where a full pass over the same (unchanged) processes ends.
    def feed(lean):
        tracker = detect.ProgressTracker(0.5)
        first = poller(0.0, samples=1)
        tracker.update(first)
        for t in range(1, 8):
            smp = poller(float(t), samples=1 + min(t, 4), cpu=0.0)  # counts rise until t=4, then stop
            procs = first.processes if lean else tuple(dataclasses.replace(p) for p in first.processes)
            tracker.update(dataclasses.replace(smp, processes=procs))
        return tracker, tracker.stall(dataclasses.replace(poller(7.0, samples=5, cpu=0.0), processes=procs))

    (lean, lean_stall), (full, full_stall) = feed(True), feed(False)
    assert lean.last_batch_mono == full.last_batch_mono == 4.0
    assert lean.measure == full.measure == Measure.BATCHES
    assert lean_stall.stall_s == pytest.approx(full_stall.stall_s) == pytest.approx(3.0)
    assert dict(lean_stall.progress_age_s)[WORKER_PID] == pytest.approx(3.0)
    # a lean sample whose counts rose: no stall (the watcher then skips measuring it)
    tracker = detect.ProgressTracker(0.5)
    first = poller(0.0, samples=1)
    tracker.update(first)
    rose = dataclasses.replace(poller(1.0, samples=2, cpu=0.0), processes=first.processes)
    tracker.update(rose)
    assert tracker.last_batch_mono == rose.t_mono and tracker.stall(rose).stall_s == 0.0
    # a lean sample that would change the measure (main left __next__) is folded in whole
    tracker = detect.ProgressTracker(0.5)
    first = poller(0.0)
    tracker.update(first)
    tracker.update(dataclasses.replace(poller(1.0, view=waiting_view(waiting_since=None)), processes=first.processes))
    assert tracker.measure == Measure.ACTIVITY


def test_a_counters_read_uses_the_held_file_and_a_full_read_sees_it_replaced(tmp_path):
    fmt = inside.FORMAT
    path = tmp_path / f"{WORKER_PID}.fetch"

    def write(target, count):
        target.write_bytes(bytes(fmt.FETCH.size))
        with open(target, "r+b") as f:
            buf = mmap.mmap(f.fileno(), fmt.FETCH.size)
            fmt.FETCH.pack_into(buf, 0, count, 1_000_000_000)
            buf.close()

    write(path, 1)
    reader = inside.InsideReader(str(tmp_path))
    assert reader.read([WORKER_PID]).fetches[0].samples == 1
    write(path, 2)  # the recorder writes in place (its mmap): the held descriptor sees it
    assert reader.read([WORKER_PID], counters=True).fetches[0].samples == 2
    fresh = tmp_path / "new"
    write(fresh, 7)
    os.replace(fresh, path)  # another file under the name
    assert reader.read([WORKER_PID], counters=True).fetches[0].samples == 2  # a lean read keeps the held one
    assert reader.read([WORKER_PID]).fetches[0].samples == 7  # a full read lists the folder again
    os.unlink(path)
    assert reader.read([WORKER_PID]).fetches == () and reader._held == {}  # gone: its descriptor closed
    os.symlink("/dev/zero", path)  # a link the job put there is never followed
    assert reader.read([WORKER_PID]).fetches == ()


def test_samples_without_threads_leave_the_wake_ups_of_a_stall_to_samples_with_them():
    # NOTE [ Thread reads ]: while batches flow, a full sample may read no thread (its
    # processes' threads empty, threads_read False). Those samples must not count as readings of
    # the wake-ups (0 of them): the stall that follows would see every wake-up since the job
    # started as happening within its first second.
    tracker = detect.ProgressTracker(0.5)
    for t in range(7):
        smp = poller(float(t), samples=1 + min(t, 5))  # counts rise until t=5, then stop
        if 1 <= t <= 5:
            smp = dataclasses.replace(
                smp,
                processes=tuple(dataclasses.replace(p, threads=()) for p in smp.processes),
                threads_read=False,
            )
        tracker.update(smp)
    st = tracker.stall(poller(6.0, samples=6))
    assert st.stall_s == pytest.approx(1.0)
    (work,) = [w for w in st.loader_work if w[0] == WORKER_PID]
    assert work[3] == pytest.approx(50 * st.work_window_s)  # the worker wakes 50 times a second
