"""Where each DataLoader worker's wall time goes, from samples already taken (issue #38): the
accounting behind the input-bound verdict (``watchdog/diagnose/throughput.py``, NOTE [
Input-bound verdict ]) and ``dlwatch_worker_seconds_total``.

NOTE [ Worker time ]
Each worker's wall time between two consecutive full samples at which it was seen, the same
process at both (its ``start_ticks``), goes to **cpu** (the CPU seconds of its threads, ``stat``
utime + stime, at most the wall time), and the rest by the state it was seen in (``stat`` field
3 and ``/proc/PID/wchan``, proc(5)): at the later sample, or at the earlier one when running
then. Seen in state ``R`` at both ends, it wanted a CPU at both instants, and a thread in ``R``
that is not running waits on a run queue: the rest is **runnable**. A CPU-bound worker on a
loaded machine is ``R`` at nearly every sample while getting a fraction of a CPU; this rest was
once counted as blocked in the Dataset whenever its run queue was read at fewer than two samples
(``/proc/PID/schedstat`` is read only at samples that read threads), which is the rule for a
worker started again each epoch (``persistent_workers=False``) on a busy machine: a pure-CPU
``__getitem__`` read "blocked 49 %" and got the "batches in transit" verdict. Asleep in a poll
(``IDLE_WCHANS``: PyTorch's wait for indices), the rest is **idle**; in any other sleep or state
``D`` (a read, a sleep, a lock), **io**. Where its run queue was read at two samples or more,
a run-queue wait beyond the time seen in ``R`` was spent runnable between samples that saw it
blocked, and is moved from its blocked time (io and idle alike). A worker born within a pair
(its start-up at each epoch, before its first sample) has no time in it, and one that ended
within a pair (seen a zombie, state ``Z``, or dead, ``X``, at its end) has only its CPU seconds
of it: the wait for its parent to reap it is no wait in the Dataset. The workers' CPUs together
(:func:`workers_cpus`) are their CPU seconds over the time any of them was counted, so workers
started one after another (one per epoch) count as one.

NOTE [ Stopped jobs ]
A process stopped by SIGSTOP (or SIGTSTP, SIGTTIN, SIGTTOU: state ``T``) or stopped by a tracer
(state ``t``; proc(5), ``/proc/PID/stat`` field 3) waits for nobody's data: a job paused by an
operator or a debugger. A pair of consecutive samples at either of which main or a worker was
seen stopped is *stopped time*: it is no wall time of any worker's (no cpu, runnable, io or
idle), no data wait of main's and no part of the span a share is taken of. The sample sees the
state at its instant, so a stop that begins or ends between two samples costs the whole pair
(at most the time between two full samples each side: ``warning_interval_s`` while batches
flow): a verdict errs towards less time judged, never towards a stop taken for a wait.

NOTE [ Threads wanting a CPU ]
A job oversubscribes its CPUs when its own threads that want one at once (running, or runnable
on a run queue: state ``R``) outnumber the CPUs it may use. That count is the job's own: other
processes' load makes the job's threads wait longer on the run queue, and takes CPU time from
them, but it does not make more of them want a CPU (a thread that computes is ``R`` on an idle
machine and on a loaded one alike). Time-based figures do not have that property: CPU used plus
the main thread's run-queue wait (``/proc/PID/schedstat`` is read for each process's main
thread only) shrinks under other load (the job gets less CPU) and leaves out the run-queue wait
of every other thread, the intra-op pool's threads included, so a job of three workers with
four intra-op threads each on 2 CPUs measured 2.47 "CPUs of demand" beside other work, under
a 2.5 threshold, while 3.4 to 4.9 of its threads were ``R`` on average in such runs. The count
is not the pool's size either: a pool thread that finished its chunk sleeps (state ``S``) at
the pool's barrier until the slowest sibling gets a CPU, so the more the CPUs are contended, the
closer the count falls to one thread per busy worker. The count is taken at
the full samples that read threads (:func:`threads_wanting_cpu`; the watcher reads them while
the tree keeps half its usable CPUs busy, and at least every ``stall_timeout_s / 4``: NOTE [
Thread reads ] in watchdog/collect/sampler.py), each thread's state from ``/proc/PID/task/TID/stat``;
a window with fewer such samples than ``THREAD_SAMPLES_MIN`` counts each process's own state
(its main thread's), a lower bound, so it errs towards not calling a job oversubscribed. A
sample is an instant: the mean over a window's samples (4 or 5 in a 60 s window while batches
flow at the default ``warning_interval_s`` of 15 s, one a second during a stall) estimates the
mean count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from ..types import ProcessSample, ProcId, Sample, samples_since

# Wait channels of a worker asleep in a poll: PyTorch's wait for indices (poll_schedule_timeout,
# do_sys_poll, do_select, ep_poll, as /proc/PID/wchan names them).
IDLE_WCHANS = ("poll", "select")
# The states of a process that has ended (proc(5)): a zombie its parent has not reaped yet, dead.
ENDED_STATES = ("Z", "X")

STATES = ("cpu", "runnable", "io", "idle")


def job_stopped(sample: Sample) -> bool:
    """Whether ``sample`` saw main or a worker stopped (NOTE [ Stopped jobs ]; kept with the
    sample: :attr:`Sample.stopped`)."""
    return sample.stopped


def stopped_pairs(samples: Sequence[Sample]) -> List[Tuple[float, float]]:
    """``(start, end)`` (``time.monotonic()`` seconds) of each pair of consecutive ``samples``
    that is stopped time (NOTE [ Stopped jobs ])."""
    seen = [job_stopped(s) for s in samples]
    return [
        (a.t_mono, b.t_mono)
        for (a, b), x, y in zip(zip(samples, samples[1:]), seen, seen[1:])
        if (x or y) and b.t_mono > a.t_mono
    ]


def overlap(pairs: Sequence[Tuple[float, float]], start: float, end: float) -> float:
    """Seconds of the intervals ``pairs`` (not overlapping each other) within ``[start, end]``."""
    return sum(max(0.0, min(b, end) - max(a, start)) for a, b in pairs)


@dataclass(frozen=True)
class WorkerTime:
    """Where one worker's wall time went over a span (seconds): ``cpu_s`` the CPU its threads
    used (may exceed ``span_s`` with intra-op threads), and the wall time split into
    ``running_s`` (CPU, at most the span), ``runnable_s``, ``io_s`` and ``idle_s`` (see NOTE [
    Input-bound verdict ]); ``runq_read`` whether the run-queue wait was read at two samples;
    ``threads_running`` the most of its threads seen running at once (0: never read);
    ``io_bytes`` bytes it passed to read/write calls (``rchar + wchar``, its queues' pipes
    included); ``stopped_s`` the stopped time left out of the span (NOTE [ Stopped jobs ]);
    ``intervals`` the ``(start, end)`` (``time.monotonic()`` seconds) of the time counted, runs
    of consecutive pairs of samples, for :func:`workers_cpus` (workers started one after another,
    one per epoch, use one worker's CPUs, not their sum)."""

    pid: int
    worker_id: str
    span_s: float
    cpu_s: float
    running_s: float
    runnable_s: float
    io_s: float
    idle_s: float
    runq_read: bool = False
    threads_running: int = 0
    io_bytes: int = 0
    threads: int = 0
    stopped_s: float = 0.0
    intervals: Tuple[Tuple[float, float], ...] = ()

    def share(self, state: str) -> float:
        """The share (0..1) of the span in ``state`` (one of :data:`STATES`)."""
        if self.span_s <= 0:
            return 0.0
        value = {"cpu": self.running_s, "runnable": self.runnable_s, "io": self.io_s, "idle": self.idle_s}[state]
        return value / self.span_s


def full_samples(samples: Sequence[Sample]) -> List[Sample]:
    """The full samples of ``samples`` (a lean one holds the last one's processes, the same
    tuple: NOTE [ Lean ticks ] in watchdog/collect/read_plan.py)."""
    out: List[Sample] = []
    for s in samples:
        if out and s.processes is out[-1].processes:
            continue
        out.append(s)
    return out


def _idle(p: ProcessSample) -> bool:
    return p.state in ("S", "I") and bool(p.wchan) and any(w in (p.wchan or "") for w in IDLE_WCHANS)


def _blocked_class(p: ProcessSample) -> Optional[str]:
    """``io``, ``idle`` or ``None`` (running or runnable: state ``R``) for the state ``p`` was
    seen in."""
    if p.state == "R":
        return None
    return "idle" if _idle(p) else "io"


def worker_ids(sample: Sample) -> Dict[int, str]:
    """pid -> worker id (the inside view's order of a loader's workers, else their start order)."""
    ids: Dict[int, str] = {}
    for v in sample.loaders:
        for i, pid in enumerate(v.workers):
            ids.setdefault(pid, str(i))
    workers = sorted(sample.workers, key=lambda p: (p.create_time, p.pid))
    for i, p in enumerate(workers):
        ids.setdefault(p.pid, str(i))
    return ids


def worker_times(full: Sequence[Sample], since: float = float("-inf")) -> Tuple[WorkerTime, ...]:
    """Each worker's time over consecutive pairs of the full samples ``full`` whose later one
    is after ``since`` (``time.monotonic()`` seconds), see NOTE [ Worker time ]; stopped time
    (NOTE [ Stopped jobs ]) is left out, and so is a worker's time before its first sample and
    after it ended."""
    acc: Dict[ProcId, Dict[str, float]] = {}
    stops: Dict[ProcId, List[Tuple[float, float]]] = {}
    runq: Dict[ProcId, List[Tuple[float, float]]] = {}
    spans: Dict[ProcId, List[Tuple[float, float]]] = {}
    ids: Dict[int, str] = {}
    threads: Dict[ProcId, int] = {}
    counts: Dict[ProcId, int] = {}
    for a, b in zip(full, full[1:]):
        if b.t_mono <= since or b.t_mono - a.t_mono <= 0:
            continue
        rows = b.pair_rows(a, _pair_rows)
        if rows and any(r[0].pid not in ids for r in rows):
            ids.update(worker_ids(b))
        for key, dt, stopped, cpu, running, ended, where, io, points, num_threads, threads_r in rows:
            d = acc.setdefault(key, {"span": 0.0, "cpu": 0.0, "running": 0.0, "io": 0.0, "idle": 0.0, "seen_r": 0.0})
            if stopped:
                d["stopped"] = d.get("stopped", 0.0) + dt
                stops.setdefault(key, []).append((a.t_mono, b.t_mono))
                continue
            d["cpu"] += cpu
            d["running"] += running
            _extend(spans.setdefault(key, []), a.t_mono, b.t_mono)
            if ended:  # it ended within the pair: its CPU is all it spent of it
                d["span"] += running
                continue
            d["span"] += dt
            d[where] += dt - running
            d["io_bytes"] = d.get("io_bytes", 0.0) + io
            seen = runq.setdefault(key, [])
            for t, value in points:
                if not seen or seen[-1][0] < t:
                    seen.append((t, value))
            counts[key] = max(counts.get(key, 0), num_threads)
            if threads_r is not None:
                threads[key] = max(threads.get(key, 0), threads_r)
    out = []
    for key, d in acc.items():
        span = d["span"]
        if span <= 0:  # seen only while stopped
            continue
        # time seen in state R at both ends of a pair without using a CPU wanted one: runnable
        runnable = d["seen_r"]
        points = runq.get(key, [])
        read = False
        live = points[-1][0] - points[0][0] - overlap(stops.get(key, ()), points[0][0], points[-1][0]) if points else 0
        if len(points) >= 2 and live > 0:
            share = max(0.0, points[-1][1] - points[0][1]) / live  # the run queue does not grow while stopped
            read = True
            # a run-queue wait read beyond the time seen in R was spent runnable between samples
            # that saw the worker blocked: taken from its blocked time alike
            blocked = d["io"] + d["idle"]
            more = min(blocked, max(0.0, share * span - runnable))
            if more > 0:
                d["io"] -= more * d["io"] / blocked
                d["idle"] -= more * d["idle"] / blocked
                runnable += more
        out.append(
            WorkerTime(
                pid=key.pid,
                worker_id=ids.get(key.pid, "?"),
                span_s=span,
                cpu_s=d["cpu"],
                running_s=d["running"],
                runnable_s=runnable,
                io_s=max(0.0, d["io"]),
                idle_s=max(0.0, d["idle"]),
                runq_read=read,
                threads_running=threads.get(key, 0),
                io_bytes=int(d.get("io_bytes", 0)),
                threads=counts.get(key, 0),
                stopped_s=d.get("stopped", 0.0),
                intervals=tuple(spans.get(key, ())),
            )
        )
    return tuple(sorted(out, key=lambda w: (w.worker_id, w.pid)))


def _pair_rows(a: Sample, b: Sample) -> tuple:
    """What each worker of ``b`` (a full sample; ``a`` the full one before it) spent between
    them, as :func:`worker_times` sums it: ``(ident, seconds, stopped, CPU s, running s, ended,
    blocked class, I/O bytes, run-queue points, threads, threads in R or None)``; a worker that
    started within the pair, another process with its pid, or one ended before it has none.
    Kept with ``b`` (``Sample.pair_rows``): the looks for warnings sum the same pairs again."""
    dt = b.t_mono - a.t_mono
    stopped = job_stopped(a) or job_stopped(b)
    rows = []
    for pb in b.workers:
        pa = a.process(pb.pid)
        if pa is None or pa.start_ticks != pb.start_ticks or pa.state in ENDED_STATES:
            continue
        cpu = max(0.0, pb.cpu_s - pa.cpu_s)
        io = (pb.read_chars or 0) + (pb.write_chars or 0) - (pa.read_chars or 0) - (pa.write_chars or 0)
        points = tuple((t, p.runq_wait_s) for t, p in ((a.t_mono, pa), (b.t_mono, pb)) if p.runq_wait_s is not None)
        rows.append(
            (
                pb.ident,
                dt,
                stopped,
                cpu,
                min(cpu, dt),
                pb.state in ENDED_STATES,
                _blocked_class(pb) or _blocked_class(pa) or "seen_r",
                max(0, io),
                points,
                pb.num_threads,
                sum(1 for t in pb.threads if t.state == "R") if pb.threads else None,
            )
        )
    return tuple(rows)


def _extend(runs: List[Tuple[float, float]], start: float, end: float) -> None:
    """Add ``[start, end]`` to ``runs`` (sorted, not overlapping), joining it to the last run
    when it begins where that ends."""
    if runs and runs[-1][1] == start:
        runs[-1] = (runs[-1][0], end)
    else:
        runs.append((start, end))


# NOTE [ Threads wanting a CPU ]: a window needs this many full samples that read threads to
# count its threads; with fewer, each process's own state (its main thread's) is counted.
THREAD_SAMPLES_MIN = 3


@dataclass(frozen=True)
class Wanting:
    """How many of the job's own threads wanted a CPU at once (NOTE [ Threads wanting a CPU ]):
    ``mean`` over ``samples`` full samples, ``peak`` the most at one, ``by_threads`` whether
    each thread's state was counted (else each process's: a lower bound)."""

    mean: float
    peak: int
    samples: int
    by_threads: bool

    def describe(self) -> str:
        """The figure as the evidence says it."""
        what = "threads" if self.by_threads else "processes (threads not read: a lower bound)"
        return f"{self.mean:.1f} on average, up to {self.peak}, in state R ({what}, {self.samples} samples)"


def threads_wanting_cpu(full: Sequence[Sample]) -> Optional[Wanting]:
    """The job's own demand for CPUs over the full samples ``full``, see NOTE [ Threads wanting
    a CPU ]: the mean count of main's and its workers' threads in state ``R`` (running or
    runnable, proc(5) ``/proc/PID/task/TID/stat`` field 3) at the samples that read threads,
    when there are ``THREAD_SAMPLES_MIN`` or more; else of the processes in state ``R`` (the
    main thread of each: a lower bound). Samples where a process was stopped are left out.
    ``None`` when no sample is left."""
    live = [s for s in full if s.main is not None and not job_stopped(s)]
    read = [s for s in live if s.threads_read and any(p.threads for p in _own(s))]
    by_threads = len(read) >= THREAD_SAMPLES_MIN
    counts = [
        sum(sum(1 for t in p.threads if t.state == "R") if by_threads else int(p.state == "R") for p in _own(s))
        for s in (read if by_threads else live)
    ]
    if not counts:
        return None
    return Wanting(sum(counts) / len(counts), max(counts), len(counts), by_threads)


def _own(s: Sample) -> List[ProcessSample]:
    """Main and the workers of ``s``: the processes whose threads the job runs itself."""
    return [p for p in ((s.main,) + tuple(s.workers)) if p is not None]


def workers_cpus(workers: Sequence[WorkerTime]) -> float:
    """The CPUs the workers used together (CPU seconds per second): their CPU seconds over the
    time at least one of them was counted (the union of their ``intervals``), so that workers
    started one after another (``persistent_workers=False``: new ones each epoch) count as the
    one at a time they are; each one's CPU over its own span, summed, when no intervals are
    known."""
    live = _union_s([r for w in workers for r in w.intervals])
    if live <= 0:
        return sum(w.cpu_s / w.span_s for w in workers if w.span_s > 0)
    return sum(w.cpu_s for w in workers) / live


def workers_at_once(workers: Sequence[WorkerTime]) -> Optional[float]:
    """How many workers were counted at once on average over the time any was (``None``: no
    intervals known): 1.0 for one worker per epoch, ``num_workers`` for persistent ones."""
    runs = [r for w in workers for r in w.intervals]
    live = _union_s(runs)
    return None if live <= 0 else sum(b - a for a, b in runs) / live


def _union_s(runs: Sequence[Tuple[float, float]]) -> float:
    """Seconds covered by the intervals ``runs`` (which may overlap)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(runs):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


@dataclass
class WorkerClock:
    """Each worker's seconds by state (:data:`STATES`), summed over the job's life by worker id,
    for ``dlwatch_worker_seconds_total``: :meth:`update` at each look for warnings adds the time
    since the last one, from the timeline's full samples."""

    seconds: Dict[Tuple[str, str], float] = field(default_factory=dict)
    mark: float = float("-inf")

    def update(self, timeline: Sequence[Sample]) -> None:
        """Add the workers' time between full samples of ``timeline`` after the last update."""
        full = full_samples(samples_since(timeline, self.mark))
        if len(full) < 2:
            return
        for w in worker_times(full, self.mark):
            for state, value in (("cpu", w.running_s), ("runnable", w.runnable_s), ("io", w.io_s), ("idle", w.idle_s)):
                key = (w.worker_id, state)
                self.seconds[key] = self.seconds.get(key, 0.0) + value
        self.mark = full[-1].t_mono

    def totals(self) -> Tuple[Tuple[str, str, float], ...]:
        """``(worker id, state, seconds)``, sorted."""
        return tuple((k[0], k[1], v) for k, v in sorted(self.seconds.items()))
