"""Hand-built records for the unit tier: samples, threads, kernel waits and facts, plus the
captured fixtures under ``tests/fixtures``. Nothing here starts a process."""

from __future__ import annotations

import os
from typing import Optional

from watchdog.collect import pyspy, waits
from watchdog.types import (
    MODE_LIVE,
    ROLE_MAIN,
    ROLE_WORKER,
    Facts,
    HangVerdict,
    HostSample,
    ProcessSample,
    ProcessStack,
    Sample,
    Stall,
    ThreadSample,
    ThreadStack,
)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIXTURES = os.path.join(os.path.dirname(HERE), "fixtures")
MAIN_PID, WORKER_PID = 2842, 2847

# Captured from /proc/PID/task/TID/syscall on Linux 6.18, x86_64 (see tests/fixtures/proc_task_syscall.txt).
LOCK_UNTIMED = "202 0x5561c80fe7c0 0x189 0x0 0x0 0x0 0xffffffff 0x7f6897c25950 0x7f6898aa3f16"
LOCK_TIMED = "202 0x5561c80fe7c0 0x89 0x0 0x7f68974209f0 0x0 0xffffffff 0x7f6897420940 0x7f6898aa3f16"
MP_LOCK = "202 0x7f689849a000 0x109 0x0 0x0 0x0 0xffffffff 0x7f68767fb990 0x7f6898aa3f16"
IDLE_POLL = "7 0x7fbe1deb6180 0x1 0x1388 0x1 0x0 0x0 0x7ffc8ccd7e60 0x7fbe41b1a26f"
SOCKET_POLL_30S = "7 0x7f6875ffaa78 0x1 0x7530 0x0 0x0 0x0 0x7f6875ffaa10 0x7f6898b1a26f"
SLEEP = "230 0x1 0x1 0x7f6896c1bab0 0x0 0x0 0x7f689914e6e8 0x7f6896c1ba70 0x7f6898aed545"
PIPE_WRITE = "1 0x9 0x5561c8172180 0x10000 0x0 0x0 0x0 0x7f6853ffe9f0 0x7f6898b1638f"
PIPE_READ = "0 0x6 0x7f68985cec30 0xa 0x0 0x0 0x7f689914e6e8 0x7f6874ff8a30 0x7f6898b162ec"


def fixture(name: str) -> str:
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as f:
        return f.read()


def wait(line: Optional[str], state: str = "S"):
    return waits.decode(state, line, "x86_64")


def thread(tid, cpu=0.0, vol=0, io=0, syscall=IDLE_POLL, state="S", nonvol=0):
    return ThreadSample(
        tid=tid,
        name="python",
        state=state,
        cpu_s=cpu,
        voluntary_ctxt_switches=vol,
        nonvoluntary_ctxt_switches=nonvol,
        io_bytes=io,
        wait=wait(syscall, state),
    )


def detail(tid, syscall, state="S", name="python", wchan="futex_do_wait", vol=0, start_ticks=None):
    return ThreadSample(
        tid=tid,
        name=name,
        state=state,
        wchan=wchan,
        wait=wait(syscall, state),
        start_ticks=start_ticks,
        voluntary_ctxt_switches=vol,
    )


def proc(pid, role, threads, method=None, ppid=1, cpu=0.0, status="S", **kw):
    return ProcessSample(
        pid=pid,
        ppid=ppid,
        create_time=1.0,
        role=role,
        name="python",
        cmdline=("python",),
        state=status,
        wchan="futex_do_wait",
        cpu_s=cpu,
        rss_bytes=kw.pop("rss", 1),
        uss_bytes=kw.pop("uss", None),
        pss_bytes=None,
        num_fds=kw.pop("num_fds", 3),
        rlimit_nofile_soft=kw.pop("rlimit", 1024),
        num_threads=len(threads),
        read_chars=kw.pop("read_chars", 0),
        write_chars=kw.pop("write_chars", 0),
        start_method=method,
        threads=tuple(threads),
        **kw,
    )


def sample(t, procs, **host):
    return Sample(
        t_mono=t,
        wall=1e9 + t,
        processes=tuple(procs),
        host=HostSample(host.get("shm_total"), host.get("shm_used"), 1 << 30, host.get("max_maps"), host.get("total")),
    )


def stall(main_pid=MAIN_PID, worker_pids=(WORKER_PID,), s=20.0, **kw):
    ages = ((main_pid, s),) + tuple((p, s) for p in worker_pids)
    fields = dict(
        stall_s=s, quiet_since_mono=10.0, main_pid=main_pid, progress_age_s=ages, no_delivery_s=s, tree_quiet_s=s
    )
    fields.update(kw)
    return Stall(**fields)


def hang_facts(
    worker_threads, verdict_kind="dataloader", method="fork", sources=(), worker_details=None, stacks_ok=True, **kw
):
    """Facts of a hang: main (the native fixture's stack) waiting, one worker with ``worker_threads``."""
    main_threads = pyspy.parse_dump(fixture("pyspy_main_native.json"))
    main = proc(MAIN_PID, ROLE_MAIN, [thread(MAIN_PID)])
    worker = proc(WORKER_PID, ROLE_WORKER, [thread(WORKER_PID, syscall=LOCK_UNTIMED)], method)
    smp = sample(30.0, [main, worker])
    verdict = HangVerdict(verdict_kind, True, "test", main_threads[0])
    stacks = [(MAIN_PID, ProcessStack(MAIN_PID, main_threads, True, None, "", 0.1))]
    if stacks_ok:
        stacks.append((WORKER_PID, ProcessStack(WORKER_PID, tuple(worker_threads), True, None, "", 0.1)))
    else:
        stacks.append((WORKER_PID, ProcessStack(WORKER_PID, (), True, "py-spy cannot attach (ptrace denied)", "", 0.1)))
    details = worker_details or (detail(WORKER_PID, LOCK_UNTIMED, name="pt_data_worker"),)
    defaults = dict(
        mode="hang",
        sample=smp,
        timeline=(smp,),
        stall=stall(),
        verdict=verdict,
        stacks=tuple(stacks),
        thread_details=((WORKER_PID, tuple(details)),),
        main_threads_at_fork=((WORKER_PID, 3),),
        source_lines=tuple(sources),
    )
    defaults.update(kw)
    return Facts(**defaults)


def fork_lock_thread() -> ThreadStack:
    """The worker's one thread in the captured fork-inherited-lock fixture (native frames)."""
    (t,) = pyspy.parse_dump(fixture("pyspy_worker_fork_lock_native.json"))
    return t


def live_facts(timeline, **kw) -> Facts:
    """Facts of a live look at ``timeline`` (its last sample the current one)."""
    return Facts(mode=MODE_LIVE, sample=timeline[-1], timeline=tuple(timeline), **kw)


def python_only(t: ThreadStack) -> ThreadStack:
    return ThreadStack(t.tid, t.name, t.active, t.owns_gil, tuple(f for f in t.frames if not f.native))


def oversubscribed_timeline():
    """Ten samples, 1 s apart, of main and six workers all runnable on one allowed CPU, the
    workers' involuntary context switches climbing 1000 a second (``cpu_oversubscribed``)."""

    def s(t):
        workers = [
            proc(p, ROLE_WORKER, [thread(p, state="R", syscall=None, nonvol=int(t * 1000))], "fork", cpu_affinity=1)
            for p in range(100, 106)
        ]
        return sample(
            t, [proc(MAIN_PID, ROLE_MAIN, [thread(MAIN_PID, state="R", syscall=None)], cpu_affinity=1), *workers]
        )

    return tuple(s(float(t)) for t in range(10))


def track(make, seconds=20):
    """A :class:`~watchdog.detect.ProgressTracker` fed ``make(t)`` for t = 0 … ``seconds`` (one
    sample a second), and its stall at the last one."""
    from watchdog import detect

    tracker = detect.ProgressTracker(cpu_progress_s=0.05)
    for t in range(seconds + 1):
        tracker.update(make(float(t)))
    return tracker, tracker.stall(make(float(seconds)))
