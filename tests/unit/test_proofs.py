"""Proofs across processes (NOTE [ Deadlock proof ] in watchdog/detect/proof.py, issue #34 section 2):
who can release a file lock (``collect.chain.lock_holds``, read from real processes holding real
locks), and :func:`watchdog.detect.prove` on captured waits: a cycle through file locks is
proven and named, a lock whose holder can still run proves nothing, and PyTorch's own loader
waits join a proof only through such a lock."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.unit.builders import (
    IDLE_POLL,
    MAIN_PID,
    SLEEP,
    WORKER_PID,
    detail,
    fixture,
    proc,
    sample,
    stall,
)
from watchdog import detect
from watchdog.collect import chain, procfs, pyspy
from watchdog.diagnose import diagnose
from watchdog.types import (
    ROLE_MAIN,
    ROLE_WORKER,
    Facts,
    Frame,
    HangVerdict,
    LoaderView,
    LockHold,
    ProcessStack,
    Proof,
    ProofKind,
    ProofLink,
    ThreadStack,
)

# /proc/PID/task/TID/syscall of a thread blocked in flock(fd, LOCK_EX) and in fcntl(fd,
# F_SETLKW, …) (fcntl.lockf), as captured on Linux 6.18, x86_64 (probes/cases/
# flock_cycle_two_workers.py, fcntl_main_holds_worker_lock.py).
FLOCK_FD11 = "73 0xb 0x2 0x0 0x7f796a281ad8 0x2a000 0x0 0x7ffcb35440a8 0x7f798bb16897"
FLOCK_FD15 = "73 0xf 0x2 0x0 0x7f796a281ad8 0x2a000 0x0 0x7ffcb35440a8 0x7f798bb16897"
LOCKF_FD12 = "72 0xc 0x7 0x7ffd1c2a2a10 0x0 0x0 0x0 0x7ffd1c2a29d8 0x7f8a2b716897"

W0, W1 = WORKER_PID, WORKER_PID + 1
ROLES = {MAIN_PID: "main", W0: "worker 0", W1: "worker 1"}


def _cycle_holds(complete=True, b_holders=(W1,)):
    return {
        (W0, 11): LockHold("/data/b.lock", ("FLOCK WRITE",), b_holders, complete),
        (W1, 15): LockHold("/data/a.lock", ("FLOCK WRITE",), (W0,), complete),
    }


def _cycle_details():
    return {W0: (detail(W0, FLOCK_FD11),), W1: (detail(W1, FLOCK_FD15),)}


def test_two_workers_each_holding_the_flock_the_other_waits_for_are_proven_and_the_cycle_named():
    proof = detect.prove(_cycle_details(), {}, None, (), None, None, _cycle_holds(), None, ROLES)
    assert proof is not None and proof.pids == (W0, W1)
    assert proof.conclusion.startswith(
        f"worker 0 (pid {W0}) holds /data/a.lock and waits for /data/b.lock; "
        f"worker 1 (pid {W1}) holds /data/b.lock and waits for /data/a.lock"
    )
    assert "/proc/locks" in proof.links[0].why and "/data/b.lock" in proof.links[0].why


def test_a_file_lock_wait_proves_nothing_while_a_holder_can_run_or_a_holder_is_unknown():
    # A third process holds b.lock too (the open file shared by fork) and sleeps: it may release it.
    details = {**_cycle_details(), 4000: (detail(4000, SLEEP),)}
    assert detect.prove(details, {}, None, (), None, None, _cycle_holds(b_holders=(W1, 4000)), None, ROLES) is None
    # Some process's descriptors could not be read: an unseen holder may exist.
    assert detect.prove(_cycle_details(), {}, None, (), None, None, _cycle_holds(complete=False)) is None
    # Without the holders (the code before: a lock wait was never part of a proof).
    assert detect.prove(_cycle_details(), {}) is None


def _main_stack(extra=()):
    threads = pyspy.parse_dump(fixture("pyspy_main_native.json"))
    main_thread = next(t for t in threads if t.tid == MAIN_PID)
    return ProcessStack(MAIN_PID, (main_thread, *extra), False, None, "", 0.0)


def _main_and_workers(main_threads):
    procs = [proc(MAIN_PID, ROLE_MAIN, [])] + [proc(w, ROLE_WORKER, [], "fork", ppid=MAIN_PID) for w in (W0, W1)]
    smp = sample(30.0, procs)
    details = {
        MAIN_PID: main_threads,
        W0: (detail(W0, LOCKF_FD12),),
        W1: (detail(W1, LOCKF_FD12),),
    }
    holds = {(w, 12): LockHold("/cache/cache.lock", ("POSIX WRITE",), (MAIN_PID,), True) for w in (W0, W1)}
    return smp, details, holds


def test_main_holding_the_lock_its_workers_wait_for_while_it_waits_for_their_batch_is_a_proven_cycle():
    smp, details, holds = _main_and_workers((detail(MAIN_PID, IDLE_POLL),))
    waits = detect.loader_waits(smp, {MAIN_PID: _main_stack()})
    assert waits == {(MAIN_PID, MAIN_PID): (W0, W1)}
    proof = detect.prove(details, {}, None, (), None, None, holds, waits, ROLES)
    assert proof is not None and proof.pids == (MAIN_PID, W0, W1)
    assert "main (pid 2842) holds /cache/cache.lock and waits in the DataLoader for pid(s)" in proof.conclusion
    assert f"worker 0 (pid {W0}) waits for /cache/cache.lock" in proof.conclusion


def test_a_main_thread_that_can_release_the_lock_leaves_the_cycle_unproven():
    # The healthy twin: a thread of main writes the cache for a while, then releases the lock.
    smp, details, holds = _main_and_workers((detail(MAIN_PID, IDLE_POLL), detail(2850, SLEEP)))
    waits = detect.loader_waits(smp, {MAIN_PID: _main_stack()})
    assert detect.prove(details, {}, None, (), None, None, holds, waits, ROLES) is None


def test_a_loader_with_a_timeout_or_no_lock_in_the_cycle_is_never_proven_by_its_own_waits():
    smp, details, holds = _main_and_workers((detail(MAIN_PID, IDLE_POLL),))
    timed = LoaderView(
        MAIN_PID, 1, "_MultiProcessingDataLoaderIter", None, (("timeout", 30.0),), "DS", False, (W0, W1), (),
        0.0, 0, 0.0, 0, None, 20.0, 0, 0, None, 0, None, None,
    )  # fmt: skip
    assert detect.loader_waits(dataclasses.replace(smp, loaders=(timed,)), {MAIN_PID: _main_stack()}) == {}
    # Main waits for a batch and both workers are idle for their next index: the loader-level
    # argument decides that after a whole stall, never the kernel proof from one look.
    idle = pyspy.parse_dump(fixture("pyspy_worker_idle.json"))[0]
    stacks = {MAIN_PID: _main_stack()} | {
        w: ProcessStack(w, (dataclasses.replace(idle, tid=w),), False, None, "", 0.0) for w in (W0, W1)
    }
    waits = detect.loader_waits(smp, stacks)
    assert waits[(W0, W0)] == (MAIN_PID,)
    quiet = {MAIN_PID: (detail(MAIN_PID, IDLE_POLL),), W0: (detail(W0, IDLE_POLL),), W1: (detail(W1, IDLE_POLL),)}
    assert detect.prove(quiet, {}, None, (), None, None, {}, waits, ROLES) is None


def test_main_waiting_for_workers_stuck_among_themselves_is_not_part_of_their_cycle():
    smp = sample(
        30.0,
        [proc(MAIN_PID, ROLE_MAIN, [])] + [proc(w, ROLE_WORKER, [], "fork", ppid=MAIN_PID) for w in (W0, W1)],
    )
    waits = detect.loader_waits(smp, {MAIN_PID: _main_stack()})
    details = {MAIN_PID: (detail(MAIN_PID, IDLE_POLL),), **_cycle_details()}
    proof = detect.prove(details, {}, None, (), None, None, _cycle_holds(), waits, ROLES)
    assert proof is not None and proof.pids == (W0, W1)


# --- who holds a lock, read from real processes --------------------------------------------------

HOLDER = textwrap.dedent(
    """
    import fcntl, os, sys, time
    f = open(sys.argv[1], "a")
    if sys.argv[2] == "flock":
        fcntl.flock(f, fcntl.LOCK_EX)
    else:
        fcntl.lockf(f, fcntl.LOCK_EX)
    child = os.fork()  # the child shares the open file (and an flock lock with it), not a POSIX lock
    if child == 0:
        time.sleep(60)
        os._exit(0)
    print(child, flush=True)
    time.sleep(60)
    """
)
WAITER = textwrap.dedent(
    """
    import fcntl, sys
    f = open(sys.argv[1], "a")
    (fcntl.flock if sys.argv[2] == "flock" else fcntl.lockf)(f, fcntl.LOCK_EX)
    """
)


@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="needs /proc/locks")
@pytest.mark.parametrize("how", ["flock", "lockf"])
def test_lock_holds_reads_who_can_release_a_lock_from_proc_locks_and_every_descriptor(tmp_path, how):
    path = str(tmp_path / "x.lock")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, path, how], stdout=subprocess.PIPE, text=True)
    waiter, child = None, None
    try:
        child = int(holder.stdout.readline())
        waiter = subprocess.Popen([sys.executable, "-c", WAITER, path, how])
        deadline = time.monotonic() + 20
        threads = ()
        while time.monotonic() < deadline:
            threads = procfs.thread_details(waiter.pid)
            if threads and threads[0].wait is not None and threads[0].wait.syscall in ("flock", "fcntl"):
                break
            time.sleep(0.05)
        assert threads and threads[0].wait.syscall in ("flock", "fcntl"), threads
        start = procfs.proc_stat(os.getpid()).start_ticks
        holds = chain.lock_holds({waiter.pid: threads}, start)
        (hold,) = holds.values()
        assert hold.path == path and hold.complete
        if how == "flock":  # the forked child holds the same open file: it can release the lock too
            assert hold.holders == tuple(sorted((holder.pid, child))) and hold.locks == ("FLOCK WRITE",)
        else:  # a POSIX lock is its process's alone
            assert hold.holders == (holder.pid,) and hold.locks == ("POSIX WRITE",)
    finally:
        for p in (waiter, holder):
            if p is not None:
                p.kill()
                p.wait(timeout=10)
        if child is not None:
            try:
                os.kill(child, signal.SIGKILL)
            except OSError:
                pass


# --- the diagnosis names the cycle -------------------------------------------------------------

TORCH = "/opt/venv/lib/python3.11/site-packages/torch/utils/data"
USER = "/home/user/train/shards.py"
# /proc/PID/task/TID/syscall of a thread waiting on a multiprocessing.Lock (a shared futex).
SEM_WAIT = "202 0x7f689849a000 0x109 0x0 0x0 0x0 0xffffffff 0x7f68767fb990 0x7f6898aa3f16"
SHARD_SOURCE = {
    44: "    def __getitem__(self, i):",
    45: "        if get_worker_info().id == 0:",
    46: "            with self.a:",
    47: "                time.sleep(0.5)",
    48: "                with self.b:",
    49: "                    pass",
    50: "        else:",
    51: "            with self.b:",
    52: "                time.sleep(0.5)",
    53: "                with self.a:",
    54: "                    pass",
}


def _worker_thread(pid, line):
    frames = (
        ("SharedShards.__getitem__", USER, line),
        ("_MapDatasetFetcher.fetch", f"{TORCH}/_utils/fetch.py", 54),
        ("_worker_loop", f"{TORCH}/_utils/worker.py", 374),
    )
    return ThreadStack(pid, "MainThread", False, False, tuple(Frame(f, file, n, False) for f, file, n in frames))


def _two_worker_facts(syscalls, lines, proof=None, loaders=()):
    main_threads = pyspy.parse_dump(fixture("pyspy_main_native.json"))
    procs = [proc(MAIN_PID, ROLE_MAIN, [])] + [proc(w, ROLE_WORKER, [], "fork", ppid=MAIN_PID) for w in (W0, W1)]
    smp = dataclasses.replace(sample(30.0, procs), loaders=loaders)
    stacks = [(MAIN_PID, ProcessStack(MAIN_PID, main_threads, True, None, "", 0.1))] + [
        (w, ProcessStack(w, (_worker_thread(w, n),), True, None, "", 0.1)) for w, n in zip((W0, W1), lines)
    ]
    return Facts(
        mode="hang",
        sample=smp,
        timeline=(smp,),
        stall=stall(worker_pids=(W0, W1)),
        verdict=HangVerdict("dataloader", True, "test", main_threads[0]),
        stacks=tuple(stacks),
        thread_details=tuple((w, (detail(w, s, name="pt_data_worker"),)) for w, s in zip((W0, W1), syscalls)),
        source_lines=tuple(((USER, n), text) for n, text in SHARD_SOURCE.items()),
        proof=proof,
    )


def _loader_view():
    return LoaderView(
        MAIN_PID, 1, "_MultiProcessingDataLoaderIter", None, (), "DS", False, (W0, W1), (),
        0.0, 0, 0.0, 0, None, 20.0, 0, 0, None, 0, None, None,
    )  # fmt: skip


def test_workers_inside_with_a_waiting_for_b_and_the_reverse_are_a_suspected_cycle_named_from_both_stacks():
    facts = _two_worker_facts((SEM_WAIT, SEM_WAIT), (48, 53), loaders=(_loader_view(),))
    (first, *_) = diagnose(facts)
    assert first.kind == "worker_deadlock", (first.kind, first.summary)
    assert (
        f"worker 0 (pid {W0}) holds self.a (taken at line 46) and waits for self.b; "
        f"worker 1 (pid {W1}) holds self.b (taken at line 51) and waits for self.a"
    ) in first.summary
    assert any("the kernel shows no holder" in line for line in first.evidence)
    assert "one global order" in first.remedy
    # Both wait for the same lock (no cycle): not this finding.
    facts = _two_worker_facts((SEM_WAIT, SEM_WAIT), (48, 48), loaders=(_loader_view(),))
    assert "holds self." not in diagnose(facts)[0].summary


def test_a_proven_flock_cycle_is_a_worker_deadlock_with_the_lock_order_remedy():
    conclusion = (
        f"worker 0 (pid {W0}) holds /data/a.lock and waits for /data/b.lock; worker 1 (pid {W1}) holds "
        f"/data/b.lock and waits for /data/a.lock: every thread of pid(s) {W0}, {W1} waits with no timeout for a "
        "thread of this same set: none can ever run again"
    )
    links = tuple(ProofLink(w, w, "pt_data_worker", "flock on fd 11", "fd 11 is /data/b.lock") for w in (W0, W1))
    facts = _two_worker_facts((FLOCK_FD11, FLOCK_FD15), (48, 53), Proof(ProofKind.KERNEL, (W0, W1), links, conclusion))
    (first, *_) = diagnose(facts)
    assert first.kind == "worker_deadlock"
    assert "deadlocked on file locks across processes" in first.summary
    assert f"worker 0 (pid {W0}) holds /data/a.lock and waits for /data/b.lock" in first.summary
    assert "one global order" in first.remedy and "storage" not in first.remedy


def test_a_helper_process_of_the_job_that_ended_is_named_zombies_included():
    # probes/cases/ready_marker_producer_died.py: main forked a producer that died unreaped.
    from tests.unit.builders import MAIN_PID, WORKER_PID, live_facts, proc, sample
    from watchdog.diagnose.hangs import ended_helpers
    from watchdog.types import ROLE_MAIN, ROLE_OTHER, ROLE_STARTING, ROLE_WORKER

    producer = WORKER_PID + 10

    def s(t, producer_state=None):
        procs = [proc(MAIN_PID, ROLE_MAIN, []), proc(WORKER_PID, ROLE_WORKER, [])]
        if producer_state:
            procs.append(proc(producer, ROLE_STARTING, [], status=producer_state))
        return sample(t, procs)

    timeline = (s(0.0, "S"), s(1.0, "S"), s(2.0, "Z"), s(3.0))
    (ended, ago), *_ = ended_helpers(live_facts(timeline))
    assert ended.pid == producer and ago == 2.0
    assert ended_helpers(live_facts(timeline[:2])) == []  # still running
    workers_only = tuple(
        sample(float(t), [proc(MAIN_PID, ROLE_MAIN, []), proc(WORKER_PID, ROLE_OTHER, [])]) for t in range(2)
    )
    assert ended_helpers(live_facts(workers_only + (s(3.0),))) == []  # alive in the last sample
