"""Hand-built records for the unit tier: samples, threads, kernel waits and facts, plus the
captured fixtures under ``tests/fixtures``; the jobs the detection tests share (main waiting
for a batch, a worker that polls, a loader's inside view) and the tracker fed with them.
Nothing here starts a process."""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, Optional, Tuple

from watchdog.collect import pyspy, waits
from watchdog.types import (
    MODE_LIVE,
    ROLE_MAIN,
    ROLE_WORKER,
    Facts,
    Frame,
    HangVerdict,
    HostSample,
    LoaderView,
    ProcessSample,
    ProcessStack,
    Sample,
    Stall,
    ThreadSample,
    ThreadStack,
    WorkerFetch,
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


def oversubscribed_timeline(n=10, every_s=1.0):
    """``n`` samples, ``every_s`` seconds apart, of main and six workers all runnable on one
    allowed CPU, the workers' involuntary context switches climbing 1000 a second
    (``cpu_oversubscribed``)."""

    def s(t):
        workers = [
            proc(p, ROLE_WORKER, [thread(p, state="R", syscall=None, nonvol=int(t * 1000))], "fork", cpu_affinity=1)
            for p in range(100, 106)
        ]
        return sample(
            t, [proc(MAIN_PID, ROLE_MAIN, [thread(MAIN_PID, state="R", syscall=None)], cpu_affinity=1), *workers]
        )

    return tuple(s(k * every_s) for k in range(n))


def track(make, seconds=20, tracker=None):
    """A :class:`~watchdog.detect.ProgressTracker` (``tracker``, else a fresh one counting 0.05
    CPU seconds as progress) fed ``make(t)`` for t = 0 … ``seconds`` (one sample a second), and
    its stall at the last one."""
    from watchdog import detect

    tracker = tracker if tracker is not None else detect.ProgressTracker(cpu_progress_s=0.05)
    for t in range(seconds + 1):
        tracker.update(make(float(t)))
    return tracker, tracker.stall(make(float(seconds)))


def track_procs(tracker, seconds, procs):
    """The stall ``tracker`` measures after one sample a second of ``procs(i)`` (the processes
    at second ``i``, an int) for i = 0 … ``seconds``."""
    return track(lambda t: sample(t, procs(int(t))), seconds, tracker)[1]


# --- main waiting for a batch, and the workers it waits on -----------------------------------


def main_native_threads() -> Tuple[ThreadStack, ...]:
    """Main's threads in the captured py-spy dump of a main waiting in the DataLoader's
    ``__next__`` (native frames: ``pyspy_main_native.json``)."""
    return pyspy.parse_dump(fixture("pyspy_main_native.json"))


def in_next(reason: str = "waits") -> HangVerdict:
    """The verdict on main whose stack (:func:`main_native_threads`) waits in the iterator."""
    return HangVerdict("dataloader", True, reason, main_native_threads()[0])


def waiting_pair(worker_syscall: Optional[str], t: float = 30.0, worker_ppid: int = 1) -> Sample:
    """Main in PyTorch's idle poll and one forked worker whose only thread waits in
    ``worker_syscall`` (a ``/proc/PID/task/TID/syscall`` line), at ``t``."""
    worker = proc(WORKER_PID, ROLE_WORKER, [thread(WORKER_PID, syscall=worker_syscall)], "fork", ppid=worker_ppid)
    return sample(t, [proc(MAIN_PID, ROLE_MAIN, [thread(MAIN_PID)]), worker])


def pair_details(worker_syscall: Optional[str]) -> Dict[int, Tuple[ThreadSample, ...]]:
    """The examination's thread details of :func:`waiting_pair`: main idle, the worker in ``worker_syscall``."""
    return {MAIN_PID: (detail(MAIN_PID, IDLE_POLL),), WORKER_PID: (detail(WORKER_PID, worker_syscall),)}


def loader_view(pid=MAIN_PID, intervals=50, p99=0.02, since=100.0, worker=1, **fields) -> LoaderView:
    """An inside view of a loader of ``pid`` with two workers, ``intervals`` batch intervals
    whose p99 is ``p99`` seconds, main waiting in ``__next__`` since ``since`` (``None``: not
    waiting) for a batch of worker ``worker`` (-1: the epoch ended); ``fields`` override any
    of :class:`LoaderView`'s fields."""
    view = LoaderView(
        pid=pid,
        iterator=1,
        kind="_MultiProcessingDataLoaderIter",
        site=None,
        settings=(("num_workers", 2),),
        dataset_type="DS",
        iterable=False,
        workers=(WORKER_PID, WORKER_PID + 1),
        worker_exitcodes=(),
        created=0.0,
        batches=intervals + 1,
        wait_s=1.0,
        epoch=0,
        first_batch_s=0.5,
        waiting_since=since,
        waiting_idx=intervals + 1,
        waiting_worker=worker,
        last_batch=since,
        intervals=intervals,
        interval_p50_s=p99 / 2,
        interval_p99_s=p99,
    )
    return dataclasses.replace(view, **fields) if fields else view


def waiting_view(batches=3, waiting_since=5.0, worker=0) -> LoaderView:
    """Main's loader (:func:`loader_view`, one worker) after ``batches`` batches, waiting in
    ``__next__`` since ``waiting_since`` for a batch of worker ``worker``."""
    view = loader_view(intervals=2, p99=0.1, since=waiting_since, worker=worker)
    return dataclasses.replace(view, batches=batches, workers=(WORKER_PID,), last_batch=1.0)


def polling_worker(t: float, cpu_per_s: float = 0.02, io_per_s: int = 4096) -> ProcessSample:
    """At second ``t``: a forked worker that sleeps and wakes 50 times a second, using
    ``cpu_per_s`` CPU seconds and reading ``io_per_s`` bytes a second (a lock file, a database page)."""
    i = int(t)
    return proc(
        WORKER_PID,
        ROLE_WORKER,
        [thread(WORKER_PID, cpu=cpu_per_s * t, vol=50 * i, io=io_per_s * i, syscall=SLEEP)],
        "fork",
        cpu=cpu_per_s * t,
        read_chars=io_per_s * i,
    )


def poller(t, samples=7, cpu_per_s=0.02, io_per_s=4096, fetches=True, view=None, cpu=None) -> Sample:
    """At second ``t``, with the inside view: main waiting in ``__next__`` (``view``, else
    :func:`waiting_view`) and :func:`polling_worker` (its CPU seconds ``cpu`` when given, else
    ``cpu_per_s`` x ``t``), whose count of samples reached for is ``samples`` (``fetches``
    False: no count recorded)."""
    cpu_per_s = cpu_per_s if cpu is None else cpu / max(t, 1e-9)
    smp = sample(t, [proc(MAIN_PID, ROLE_MAIN, [thread(MAIN_PID)]), polling_worker(t, cpu_per_s, io_per_s)])
    return dataclasses.replace(
        smp,
        loaders=(view or waiting_view(),),
        fetches=(WorkerFetch(WORKER_PID, samples, 1.0),) if fetches else (),
    )


def sleeping_stack(pid: int, line: int, file: str = "/job/data.py") -> ProcessStack:
    """A process whose one thread sleeps (``clock_nanosleep``) in ``__getitem__`` at ``file:line``."""
    frames = (Frame("clock_nanosleep", "libc.so.6", 0, True), Frame("__getitem__", file, line, False))
    return ProcessStack(pid, (ThreadStack(pid, "MainThread", False, False, frames),), True, None, "", 0.1)


def assess_tracked(make, verdict: HangVerdict, details, seconds=20, trigger=None, spinning=()):
    """:func:`watchdog.detect.assess` of the stall :func:`track` measures on ``make`` after
    ``seconds``, at ``trigger`` (default the stall timeout), with ``verdict`` on main, no
    stacks, ``details`` (pid -> thread details), the worker's thread seen to wake and
    ``spinning`` the workers seen getting from a queue without blocking."""
    from watchdog import detect

    _, st = track(make, seconds)
    return detect.assess(
        trigger or detect.TRIGGER_STALL,
        make(float(seconds)),
        st,
        verdict,
        {},
        details,
        None,
        {(WORKER_PID, WORKER_PID)},
        5.0,
        spinning=spinning,
    )


def manager_job(name: str, status: Optional[int] = 9):
    """``(sample, stacks, details)`` of a job captured from a ``probes/cases`` Manager case
    (``tests/fixtures/NAME``: each process's py-spy JSON and ``/proc/PID/task/TID/syscall``
    lines): main, its workers (the processes whose stacks run ``_worker_loop``), the manager
    and any other live process (role ``other``), and, for a zombie, an exit record with
    ``status`` (``None``: its parent reaped it before a sample saw it). Main's loader view lists
    the workers in pid order (worker 0 first)."""
    import json

    from watchdog.types import ROLE_OTHER, ExitRecord

    doc = json.loads(fixture(name))
    main_pid = doc["processes"][0]["pid"]
    procs, stacks, details, exits = [], {}, {}, []
    for p in doc["processes"]:
        if p["state"] == "Z":
            exits.append(
                ExitRecord(
                    p["pid"],
                    p["start_ticks"],
                    main_pid,
                    ROLE_OTHER,
                    "python",
                    ("python",),
                    25.0,
                    1e9 + 25,
                    26.0,
                    1e9 + 26,
                    status,
                )
            )
            continue
        threads = pyspy.parse_dump(p["pyspy"])
        stacks[p["pid"]] = ProcessStack(p["pid"], threads, True, None, "", 0.1)
        details[p["pid"]] = tuple(detail(int(tid), line) for tid, line in sorted(p["syscalls"].items()))
        if p["pid"] == main_pid:
            role = ROLE_MAIN
        elif "_worker_loop" in p["pyspy"]:
            role = ROLE_WORKER
        else:
            role = ROLE_OTHER
        procs.append(proc(p["pid"], role, [], method="fork" if role == ROLE_WORKER else None, ppid=p["ppid"]))
    workers = tuple(sorted(p.pid for p in procs if p.role == ROLE_WORKER))
    view = dataclasses.replace(loader_view(main_pid), workers=workers)
    smp = dataclasses.replace(sample(30.0, procs), exits=tuple(exits), loaders=(view,))
    return smp, stacks, details


def manager_peers(smp: Sample):
    """Every connection of the manager (the job's ``other`` process) has its other end in main
    or a worker (as read live)."""
    from watchdog.types import ROLE_OTHER

    manager = next(p.pid for p in smp.processes if p.role == ROLE_OTHER)
    assert smp.main is not None
    return {manager: (smp.main.pid,) + tuple(w.pid for w in smp.workers)}


def manager_listeners(smp: Sample, details):
    """The manager's accepter waits on a listener at multiprocessing's own private address."""
    from watchdog.types import ROLE_OTHER

    manager = next(p.pid for p in smp.processes if p.role == ROLE_OTHER)
    return {manager: tuple(d.wait.fd for d in details[manager] if d.wait.syscall in ("accept", "accept4"))}


def concluded_under_terminate(smp: Sample, stacks, details):
    """The decision of an episode under ``--on-hang terminate`` (5 s stall timeout) at 31 s on
    a Manager job ``(smp, stacks, details)`` from :func:`manager_job`: both reads alike, no
    children, no pipes, nothing wakeable, no file locks, the manager's peers and listeners as
    :func:`manager_peers` and :func:`manager_listeners` give them, a 6 s stall."""
    from watchdog import detect
    from watchdog.types import Evidence, PipeEnds, Trigger

    evidence = Evidence(
        details=details,
        stable=details,
        children={p.pid: () for p in smp.processes},
        pipes=PipeEnds({}, {}, {}, True),
        stacks=stacks,
        wakeable={},
        file_locks=(),
        after=smp,
        manager_peers=manager_peers(smp),
        manager_listeners=manager_listeners(smp, details),
    )
    workers = tuple(w.pid for w in smp.workers)
    assert smp.main is not None
    episode = detect.Episode(5.0, 300.0, terminate=True)
    return episode.conclude(evidence, smp, stall(smp.main.pid, workers, s=6.0, trigger=Trigger.STALL), set(), 31.0)


def manager_reads(smp: Sample, stacks, details, wakeable=None, peers=None, listeners=None):
    """The :class:`~watchdog.detect.manager_proof.ManagerReads` of a Manager job ``(smp,
    stacks, details)`` from :func:`manager_job`: its loader waits, ``wakeable`` (default none)
    and ``peers``/``listeners`` (default :func:`manager_peers` and :func:`manager_listeners`)."""
    from watchdog import detect
    from watchdog.detect import manager_proof

    return manager_proof.ManagerReads(
        smp,
        stacks,
        details,
        detect.loader_waits(smp, stacks),
        wakeable or {},
        manager_peers(smp) if peers is None else peers,
        manager_listeners(smp, details) if listeners is None else listeners,
    )


# A helper of the job (role ``other``, started at clock tick 777) that ends: see ended_helper_facts.
HELPER_PID = WORKER_PID + 10


def ended_helper_facts(status: Optional[int], others=(), **kw) -> Facts:
    """Facts of a live look at a job (main, a worker) whose helper ``HELPER_PID`` lived through
    the samples at 0 and 1 s and was found ended at 3 s: its exit record (seen alive at 1 s,
    found ended at 2 s, wait status ``status``, ``None`` when not known) and ``others`` in the
    last sample's ``exits``. ``kw`` go to :class:`~watchdog.types.Facts` (``stderr_tail``,
    ``inside``)."""
    from watchdog.types import ROLE_OTHER, ExitRecord

    def s(t, alive):
        procs = [proc(MAIN_PID, ROLE_MAIN, []), proc(WORKER_PID, ROLE_WORKER, [])]
        if alive:
            procs.append(proc(HELPER_PID, ROLE_OTHER, [], start_ticks=777))
        return sample(t, procs)

    record = ExitRecord(
        HELPER_PID, 777, MAIN_PID, ROLE_OTHER, "python", ("python",), 1.0, 1e9 + 1, 2.0, 1e9 + 2, status
    )
    last = dataclasses.replace(s(3.0, False), exits=(record,) + tuple(others))
    return live_facts((s(0.0, True), s(1.0, True), last), **kw)
