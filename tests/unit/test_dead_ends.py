"""Waits on the dead (issue #34, section 2): lock files whose holder is gone, read for real from
a folder of this test (``watchdog.collect.lockfiles``), and the ``worker_stuck`` finding on
built facts for a lock file whose holder was killed and for a spin on ``get_nowait()`` while
the decoder that fed the queue was killed (``watchdog.diagnose.dead``). The cases that run the
same for real are probes/cases/lock_file_holder_killed.py and decoder_killed_get_nowait.py."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.unit.builders import (
    MAIN_PID,
    SLEEP,
    WORKER_PID,
    detail,
    fork_lock_thread,
    hang_facts,
    proc,
    sample,
)
from watchdog.collect import lockfiles
from watchdog.diagnose import diagnose
from watchdog.types import (
    ROLE_MAIN,
    ROLE_OTHER,
    ROLE_WORKER,
    ExitRecord,
    Frame,
    LoaderWork,
    LockFile,
    Polling,
    ThreadStack,
)

HOLDER = WORKER_PID + 10
SHARDS, DECODE = "/job/shards.py", "/job/decode.py"


# --- reading lock files ------------------------------------------------------------------------


def test_a_lock_files_pid_and_host_are_parsed_and_nothing_else_is_taken():
    assert lockfiles.parse(b"4242\nnode-7.example\n1234567\n") == (4242, "node-7.example")  # filelock's marker
    assert lockfiles.parse(b"4242\n") == (4242, None)  # a pid file
    assert lockfiles.parse(b" 17 \n\x1b[31mred\n") == (17, None)  # a second line that is no host name
    for bad in (b"", b"abc\n", b"0\n", b"99999999\n", b"-3\n", "42\u00e9\n".encode(), b"\xff\n"):
        assert lockfiles.parse(bad) is None, bad


@contextlib.contextmanager
def _job_in(folder):
    """A sample whose main is a real process working in ``folder`` (its cwd and TMPDIR), and
    its open files (a data file there): only that folder is looked in. Killed after."""
    job = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], cwd=folder, env={"TMPDIR": str(folder)}
    )
    try:
        yield sample(0.0, [proc(job.pid, ROLE_MAIN, [])]), [(job.pid, (str(folder / "data.bin"),))]
    finally:
        job.kill()
        job.wait(30)


def test_find_reads_lock_files_in_the_jobs_folders_and_says_what_their_pid_is_now(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped: no process has its pid now (barring reuse in these few ms)
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while lockfiles.holder_state(zombie.pid, time.time(), None)[0] != "zombie" and time.monotonic() < deadline:
        time.sleep(0.05)  # ended, not reaped yet
    try:
        (tmp_path / "data.bin").write_bytes(b"x")
        (tmp_path / "gone.lock").write_text(f"{gone.pid}\n{socket.gethostname()}\n")
        (tmp_path / "zombie.lock").write_text(f"{zombie.pid}\n")
        (tmp_path / "alive.lock").write_text(f"{os.getpid()}\n")
        (tmp_path / "reused.lock").write_text(f"{os.getpid()}\n")
        os.utime(tmp_path / "reused.lock", (1e9, 1e9))  # written long before this process started
        (tmp_path / "elsewhere.lock").write_text(f"{gone.pid}\nanother-host-xyz\n")
        (tmp_path / "notes.txt").write_text(f"{gone.pid}\n")  # not a lock file's name
        with _job_in(tmp_path) as (smp, open_files):
            found = {os.path.basename(x.path): x for x in lockfiles.find(smp, open_files)}
    finally:
        zombie.wait()
    assert found["gone.lock"].holder == "gone" and found["gone.lock"].pid == gone.pid
    assert found["gone.lock"].path == str(tmp_path / "gone.lock") and not found["gone.lock"].other_host
    assert found["zombie.lock"].holder == "zombie" and found["zombie.lock"].holder_start_ticks
    assert found["alive.lock"].holder == "alive"
    assert found["reused.lock"].holder == "reused"
    assert found["elsewhere.lock"].other_host and found["elsewhere.lock"].host == "another-host-xyz"
    assert "notes.txt" not in found


def test_find_never_follows_a_link_never_opens_a_fifo_and_skips_what_the_jobs_user_does_not_own(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("1\n")
    (tmp_path / "data.bin").write_bytes(b"x")
    os.symlink(secret, tmp_path / "link.lock")
    os.mkfifo(tmp_path / "fifo.lock")  # opened blocking, this would hang the reader
    (tmp_path / "big.lock").write_text("1\n" + "x" * 4096)
    os.link(secret, tmp_path / "hardlink.lock")
    (tmp_path / "linked_dir").symlink_to("/etc")
    with _job_in(tmp_path) as (smp, open_files):
        open_files.append((smp.main.pid, (str(tmp_path / "linked_dir" / "x"),)))  # a folder through a link
        started = time.monotonic()
        found = {os.path.basename(x.path) for x in lockfiles.find(smp, open_files)}
        assert time.monotonic() - started < 30
        assert not found & {"link.lock", "fifo.lock", "big.lock", "hardlink.lock"}
        if os.geteuid() == 0:
            other = tmp_path / "other.lock"
            other.write_text("1\n")
            os.chown(other, 65534, 65534)  # another user's file in the job's folder
            assert "other.lock" not in {os.path.basename(x.path) for x in lockfiles.find(smp, open_files)}


# --- the finding -------------------------------------------------------------------------------


def _worker_thread(user_frames):
    """The worker's loop thread: ``user_frames`` (innermost first) over PyTorch's worker loop."""
    t = fork_lock_thread()
    libc = Frame("clock_nanosleep", "/usr/lib/x86_64-linux-gnu/libc.so.6", 0, True)
    return ThreadStack(t.tid, t.name, t.active, t.owns_gil, (libc, *user_frames, *t.frames[5:]))


def _killed_record(now_wall: float, status=signal.SIGKILL) -> ExitRecord:
    return ExitRecord(
        pid=HOLDER,
        start_ticks=555,
        ppid=MAIN_PID,
        role=ROLE_OTHER,
        name="python",
        cmdline=("python",),  # a fork of main (main's command line, as proc() builds it)
        last_seen_mono=18.0,
        last_seen_wall=now_wall - 12.0,
        ended_mono=19.0,
        ended_wall=now_wall - 11.0,
        status=status,
    )


def _facts(thread, sources, polls=True, exits=True, lock=None, holder_in_timeline=True, **kw):
    user = next(f for f in thread.frames if not f.native)
    base = hang_facts(
        [thread],
        worker_details=(detail(WORKER_PID, SLEEP, name="pt_data_worker", wchan="hrtimer_nanosleep"),),
        sources=(),
        polling=(Polling(WORKER_PID, thread.tid, user, 20, 2.0),) if polls else (),
        source_lines=tuple(sources.items()),
        **kw,
    )
    now = base.sample
    earlier = sample(
        10.0,
        [proc(MAIN_PID, ROLE_MAIN, []), proc(WORKER_PID, ROLE_WORKER, [], "fork")]
        + ([proc(HOLDER, ROLE_OTHER, [], ppid=MAIN_PID)] if holder_in_timeline else []),
    )
    latest = dataclasses.replace(now, exits=(_killed_record(now.wall),) if exits else ())
    return dataclasses.replace(
        base, sample=latest, timeline=(earlier, latest), lock_files=(lock,) if lock is not None else ()
    )


def _poll_thread():
    return _worker_thread(
        (
            Frame("acquire", SHARDS, 40, False),
            Frame("LockedShards.__getitem__", SHARDS, 70, False),
        )
    )


POLL_SOURCES = {
    (SHARDS, 36): "            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)",
    (SHARDS, 40): "            time.sleep(POLL_S)  # the poll",
    (SHARDS, 70): "        acquire(LOCK)",
}


def _lock(holder="zombie", pid=HOLDER, ticks=555):
    return LockFile("/tmp/shards.lock", pid, "node-1", 1e9 + 5.0, holder, ticks if holder == "zombie" else None)


def test_a_poll_on_a_lock_file_whose_holder_was_killed_names_the_file_the_pid_and_the_signal():
    first = diagnose(_facts(_poll_thread(), POLL_SOURCES, lock=_lock()))[0]
    text = "\n".join(first.evidence)
    assert first.kind == "worker_stuck" and first.location == f"{SHARDS}:40"
    assert "lock file /tmp/shards.lock names pid 2857 as its holder" in text
    assert "was killed by signal 9 (SIGKILL)" in text and "never deleted the file" in text
    assert first.confidence == pytest.approx(0.9)  # strongly supported; the hang itself stays suspected
    assert "polls in code that takes a soft lock: /job/shards.py:36: `fd = os.open(path, os.O_CREAT" in text
    assert "delete the file" in first.remedy and "filelock.FileLock" in first.remedy
    assert "/tmp/shards.lock" in first.remedy and "acquire(timeout=" in first.remedy


def test_the_cause_is_strongly_supported_only_when_the_poll_is_seen_taking_a_soft_lock():
    # Without the O_EXCL create near the poll, the file is named but the tie is not seen: likely.
    sources = {k: v for k, v in POLL_SOURCES.items() if k[1] != 36}
    first = diagnose(_facts(_poll_thread(), sources, lock=_lock()))[0]
    assert "names pid 2857" in "\n".join(first.evidence) and first.confidence == pytest.approx(0.8)
    assert "shows no soft lock" in "\n".join(first.evidence)
    # tox-dev/filelock's acquire loop in the stack ties it as well as the create does.
    lib = Frame("BaseFileLock.acquire", "/venv/lib/python3.11/site-packages/filelock/_api.py", 380, False)
    thread = _worker_thread((lib, Frame("LockedShards.__getitem__", SHARDS, 70, False)))
    first = diagnose(_facts(thread, sources, lock=_lock()))[0]
    assert first.confidence == pytest.approx(0.9)
    assert "polls inside filelock (filelock/_api.py:380 in BaseFileLock.acquire)" in "\n".join(first.evidence)


def test_a_lock_files_holder_gone_without_a_record_is_still_named_when_the_timeline_saw_it():
    first = diagnose(_facts(_poll_thread(), POLL_SOURCES, exits=False, lock=_lock("gone")))[0]
    text = "\n".join(first.evidence)
    assert "lock file /tmp/shards.lock names pid 2857" in text and "no process has that pid now" in text


@pytest.mark.parametrize(
    "why, kw",
    [
        ("the holder is alive", dict(lock=_lock("alive"))),
        ("the pid was reused by a later process", dict(lock=_lock("reused"))),
        ("the pid was never a process of this job", dict(lock=_lock("gone", pid=4321), exits=False)),
        ("the workers do not poll", dict(lock=_lock(), polls=False)),
    ],
)
def test_no_dead_holder_is_claimed_without_the_facts_for_it(why, kw):
    found = [f for f in diagnose(_facts(_poll_thread(), POLL_SOURCES, **kw)) if f.kind == "worker_stuck"]
    for f in found:
        assert "never deleted the file" not in "\n".join(f.evidence), why
        assert f.confidence < 0.9, why


SPIN_SOURCES = {
    (DECODE, 53): "        while True:",
    (DECODE, 54): "            try:",
    (DECODE, 55): "                return self.frames.get_nowait()",
    (DECODE, 56): "            except queue.Empty:",
    (DECODE, 57): "                os.sched_yield()  # spin",
}


def _spin_thread():
    return _worker_thread((Frame("DecodedFrames.__getitem__", DECODE, 57, False),))


def test_a_spin_on_get_nowait_while_the_decoder_was_killed_names_the_decoder_and_how_it_ended():
    first = diagnose(_facts(_spin_thread(), SPIN_SOURCES))[0]
    text = "\n".join(first.evidence)
    assert first.kind == "worker_stuck" and first.location == f"{DECODE}:55"  # the line to change, not the yield
    assert "gets from a queue without blocking" in text and "decode.py:55" in text
    assert "pid 2857 (python)" in text and "was killed by signal 9 (SIGKILL)" in text
    assert "last seen alive 12 s before the examination" in text
    assert "queue.get(timeout=" in first.remedy and "is_alive()" in first.remedy and "dmesg" in first.remedy


def test_a_spin_with_no_helper_ended_or_no_non_blocking_get_claims_no_dead_feeder():
    for facts in (
        _facts(_spin_thread(), SPIN_SOURCES, exits=False),
        _facts(_spin_thread(), {k: v for k, v in SPIN_SOURCES.items() if k[1] != 55}),
    ):
        for f in diagnose(facts):
            assert "gets from a queue without blocking" not in "\n".join(f.evidence)


# --- a busy worker while a helper ended badly: examined as a hang, not as a slow sample ---------


def _busy(exits=(), cpu_per_s=0.9, state="S", spinning=True):
    from tests.unit.builders import SLEEP, WORKER_PID, assess_tracked, detail, in_next, poller

    def make(t):
        return dataclasses.replace(poller(t, cpu_per_s=cpu_per_s, io_per_s=0), exits=exits)

    details = {WORKER_PID: (detail(WORKER_PID, SLEEP, state=state),)}
    return assess_tracked(make, in_next(), details, spinning=(WORKER_PID,) if spinning else ())


def _record(ended_mono, status, cmdline=("python",), ppid=MAIN_PID):
    """A helper's exit record; by default a fork of main (main's command line, as ``proc`` builds it)."""
    rec = _killed_record(1e9 + 20.0, status)
    return dataclasses.replace(rec, ended_mono=ended_mono, last_seen_mono=ended_mono - 1, cmdline=cmdline, ppid=ppid)


def test_workers_that_burn_cpu_while_a_helper_was_killed_are_a_suspected_hang_not_a_slow_sample():
    assert not _busy().hang  # computing, as far as can be told: slow, not stuck (the busy ceiling decides later)
    a = _busy((_record(2.0, signal.SIGKILL),))
    assert a.hang and a.proof is None
    assert (
        "pid 2857, a process of the job other than main and its workers, was killed by signal 9 (SIGKILL)" in a.reason
    )
    assert "suspected, not proven" in a.reason
    assert _busy((_record(3.0, 1 << 8),)).hang  # it exited with code 1 (a traceback on stderr)
    spawned = ("python", "-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7)")
    assert _busy((_record(2.0, signal.SIGKILL, cmdline=spawned, ppid=WORKER_PID),)).hang  # a worker's spawned child


def test_workers_that_compute_while_an_unrelated_helper_failed_are_a_slow_sample_not_a_hang():
    # tests/real/test_hostile_ended_feeder.py: a metrics uploader exits 1 while the workers each
    # compute a 12 s sample; no worker's stack or source shows a non-blocking get: they work
    assert not _busy((_record(2.0, signal.SIGKILL),), spinning=False).hang
    assert not _busy((_record(3.0, 1 << 8),), spinning=False).hang


@pytest.mark.parametrize(
    "why, rec",
    [
        ("ended on purpose (terminate(): SIGTERM)", _record(2.0, signal.SIGTERM)),
        ("ended cleanly", _record(2.0, 0)),
        ("no record of how it ended", _record(2.0, None)),
        ("ended long before the stall began", _record(-100.0, signal.SIGKILL)),
        ("a program main ran, not a multiprocessing process", _record(2.0, 128 << 8, cmdline=("git", "describe"))),
        ("not a child of main or a worker", _record(2.0, signal.SIGKILL, ppid=1)),
    ],
)
def test_a_helper_that_ended_on_purpose_cleanly_unknowably_or_long_before_changes_nothing(why, rec):
    assert not _busy((rec,)).hang, why


def test_a_spinning_worker_runnable_on_a_loaded_machine_is_burning_cpu_not_quiet():
    from watchdog.diagnose.hangs import runnable_spin

    facts = _facts(_spin_thread(), SPIN_SOURCES, polls=False)
    st = dataclasses.replace(
        facts.stall,
        work_window_s=10.0,
        loader_work=(LoaderWork(WORKER_PID, 1.0, 0, 0, 8.0),),  # a tenth of a core, runnable 8 s of 10
    )
    assert runnable_spin(dataclasses.replace(facts, stall=st), WORKER_PID) == (
        "1.0 s of CPU and 8.0 s runnable, waiting for a CPU, in the last 10 s, and no I/O: no batch was sent"
    )
    idle = dataclasses.replace(st, loader_work=(LoaderWork(WORKER_PID, 0.1, 0, 0, 0.2),))
    assert runnable_spin(dataclasses.replace(facts, stall=idle), WORKER_PID) is None
    reads = dataclasses.replace(st, loader_work=(LoaderWork(WORKER_PID, 1.0, 1 << 20, 0, 8.0),))
    assert runnable_spin(dataclasses.replace(facts, stall=reads), WORKER_PID) is None


def test_many_live_locks_never_crowd_out_a_stale_one(tmp_path):
    (tmp_path / "data.bin").write_bytes(b"x")
    for i in range(lockfiles.MAX_FILES + 8):  # newer than the stale one, their holder alive
        (tmp_path / f"live-{i}.lock").write_text(f"{os.getpid()}\n")
    stale = tmp_path / "stale.lock"
    stale.write_text("4194303\n")  # the highest pid: no process has it here
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    with _job_in(tmp_path) as (smp, open_files):
        found = lockfiles.find(smp, open_files)
    assert len(found) == lockfiles.MAX_FILES and found[0].path == str(stale) and found[0].holder == "gone"
