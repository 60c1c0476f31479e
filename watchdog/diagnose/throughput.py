"""Is the job input-bound? A live verdict from samples already taken (issue #38).

NOTE [ Input-bound verdict ]
Over a sliding window (the timeline's last ``WINDOW_S`` seconds), from what the sidecar already
reads and the job's recorder already counts (no read and nothing per batch of its own):

* main's **data wait**: the share of the window main spent inside ``__next__`` of its
  iterators (the inside view's ``wait_s`` per iterator, plus the wait in progress for a batch a
  worker owns: :func:`open_wait_s`). The window begins at the sample before main's first
  iterator when that is later (:func:`since_first_iterator`): the job's set-up before its first
  DataLoader (imports, the model, the Dataset) is neither its step nor a wait for data, and
  counted as its step it made the headline "54 % of the last 21 s" beside the report's loader
  section "data wait 85%" for the same 214 batches. The loader section's figure is another
  one, each iterator's wait over its own life (creation to last batch), and says so; the
  HTML report's step-time section starts where the verdict does (watchdog/report/step_time.py).
  Without the inside view (``dlwatch attach`` without the recorder, ``--no-hook``) there is no
  verdict: it says so, and how to start the job with the recorder, rather than guess.
* each DataLoader worker's time, split between **cpu** (CPU seconds of its threads, ``stat``
  utime + stime, at most the wall time), **runnable** (wanting a CPU: seen in state R without
  using one, and ``/proc/PID/schedstat``'s second field for its main thread where read), **io**
  (blocked inside the Dataset: state D, or asleep in anything but a poll: a read, a sleep, a
  lock) and **idle** (asleep in a poll: PyTorch's worker loop waits for its next indices in
  ``index_queue.get(timeout=5.0)``, a ``poll(2)`` on the queue's pipe, whose kernel wait
  channel is ``poll_schedule_timeout``/``do_sys_poll``; /proc/PID/wchan, proc(5)): NOTE [ Worker
  time ] in worker_time.py. Workers started one after another (new ones each epoch) use one
  worker's CPUs, not their sum (:func:`workers_cpus`). ``delayacct_blkio_ticks`` (``stat`` field
  42) is not used: it is 0 unless ``kernel.task_delayacct`` is on, and it is off by default.

The verdict, from the data-wait share D (``INPUT_BOUND_SHARE`` and up is input-bound):

* ``not_input_bound`` below ``NOT_BOUND_SHARE``; ``slightly_input_bound`` between the two
  (said by ``dlwatch status``, never warned about);
* ``epoch_starts``: the first batches of iterators created in the window (workers started
  again at each epoch) are at least ``EPOCH_START_SHARE`` of the wait: ``persistent_workers=True``;
* ``loading_in_main``: ``num_workers=0``, main loads its own batches;
* ``cpu_oversubscribed``: the workers wait runnable ``RUNNABLE_SHARE`` of their time or more
  while the job's own threads that want a CPU at once (main's and the workers' threads in state
  R, running or runnable, averaged over the window's samples: NOTE [ Threads wanting a CPU ] in
  worker_time.py) number at least ``OVERSUBSCRIBED_DEMAND`` times the usable CPUs (affinity,
  cgroup quota): fewer workers, or one intra-op thread per worker when a worker runs several
  (several running at once, more than ``MULTI_THREAD_CPUS`` CPUs, or ``INTRA_OP_THREADS``
  threads or more: an intra-op pool). The count is the job's own: other processes' load makes
  its threads wait longer but not more of them want a CPU, so it neither turns a job's own
  oversubscription into "CPU-bound" (as CPU used plus run-queue share did: under other load the
  job gets less CPU, and the run-queue wait of intra-op threads was never read) nor makes a
  job of as many single-threaded workers as CPUs look oversubscribed (its count is at most the
  usable CPUs plus main, which waits ``INPUT_BOUND_SHARE`` or more of its time: under 1.5 times
  the usable CPUs from 2 CPUs on). The margin, measured on this project's 2-CPU VM, 3 runs
  without and 3 beside 8 busy loops (docs/performance.md, "Input-bound verdicts under load"):
  ``input_bound_oversubscribed`` (four workers of four intra-op threads) counted 4.2 to 5.5
  threads against the line of 3, at least 1.4 times over it (its workers waited runnable 49 to
  53 % of their time, twice ``RUNNABLE_SHARE``); ``input_bound_cpu_few_workers`` (one CPU-bound
  worker, waiting runnable 29 to 69 % for the others' CPUs) counted 1.0 to 1.1, 2.7 times under
  it, and got ``workers_cpu_bound``;
* ``workers_cpu_bound``: the workers compute (or wait runnable for a CPU that other processes
  hold: then the job's own threads wanting a CPU are stated, under the line) ``CPU_BOUND_SHARE``
  of their time or more: more workers up to the usable CPUs, or cheaper transforms when they are
  all used;
* ``workers_io_bound``: the workers are busy (cpu + runnable) less than ``IO_BUSY_MAX`` of their
  time and blocked in the Dataset more than idle: more workers than CPUs help, or prefetch;
* between the two lines, or busy under ``IO_BUSY_MAX`` yet more than idle, when idle is not
  the workers' largest share: ``workers_cpu_bound`` with the blocked share stated (busy most of
  their time, blocked the rest: more workers help either way);
* ``pin_memory_thread``: idle is the workers' largest share (at least their busy and their
  blocked time) while main waits, and PyTorch pins memory (``pin_memory`` with an accelerator:
  the inside view's ``pin_memory_effective``); without one, ``pin_memory`` is never named;
* ``workers_idle``: the same without a pin-memory thread: the batch is in transit (large
  pickled batches through the result queue), not named further. It was once the verdict left
  over, and told a job whose workers were idle 0 % of their time (busy 51 %, "blocked" 49 %)
  to return tensors from a Dataset that returned 16 floats.

Where iterators were started again in the window (workers started for each epoch) or their
first batches are ``EPOCH_START_NOTED`` of the wait or more, the evidence says that share
whatever the verdict: the trial's job of one CPU-bound worker started each epoch spent 4 to 6 %
of its wait on first batches, so CPU-bound (more workers), not ``epoch_starts``.

Each states its figures and the gain the input side can give at most: a job that waits a share
D of its time for data gets at most ``1 / (1 - D)`` times faster from the input side (and no
more than the usable CPUs allow, for CPU-bound workers). The warning (``input_bound``) needs
``MIN_SPAN_S`` seconds and ``MIN_BATCHES`` batches of the window: a sustained episode; the
daemon writes it once per kind and set of processes (``_WARNING_COOLDOWN_S``).

Time while main or a worker is stopped (SIGSTOP, a debugger: NOTE [ Stopped jobs ] in
worker_time.py) is neither data wait nor the workers' time, and is not judged: the shares are of
the rest of the window; a window stopped ``STOPPED_SHARE`` of its span or more (or whose rest is
shorter than ``MIN_SPAN_S``) gets ``job_stopped``, no verdict. The worker accounting itself
(cpu, runnable, io, idle) is in ``worker_time.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional, Sequence, Tuple

from ..types import (
    MODE_LIVE,
    SEVERITY_WARNING,
    Facts,
    Fix,
    LoaderView,
    Sample,
    TextEnum,
    samples_since,
)
from .common import DOC_MULTI_PROCESS_LOADING, DOC_PIN_MEMORY
from .engine import Finding, rule
from .live import usable_cpus
from .worker_time import (
    IDLE_WCHANS,
    STATES,
    Wanting,
    WorkerClock,
    WorkerTime,
    full_samples,
    job_stopped,
    overlap,
    stopped_pairs,
    threads_wanting_cpu,
    worker_ids,
    worker_times,
    workers_at_once,
    workers_cpus,
)

__all__ = [
    "IDLE_WCHANS",
    "STATES",
    "Judgement",
    "Verdict",
    "WorkerClock",
    "WorkerTime",
    "input_bound",
    "judge",
    "main_waits",
    "needs_inside_view_text",
    "open_wait_s",
    "since_first_iterator",
    "worker_ids",
    "worker_times",
    "workers_cpus",
]

# Seconds of timeline judged (a sliding window ending at the latest sample).
WINDOW_S = 60.0
# A verdict needs the window to span this many seconds with this many batches delivered.
MIN_SPAN_S = 20.0
MIN_BATCHES = 10
# Data-wait shares: under NOT_BOUND_SHARE not input-bound; from INPUT_BOUND_SHARE on, input-bound
# (the input side can then make the job at least 1.25 x faster).
NOT_BOUND_SHARE = 0.05
INPUT_BOUND_SHARE = 0.2
# The causes (shares of the workers' wall time, averaged over the workers).
CPU_BOUND_SHARE = 0.6
RUNNABLE_SHARE = 0.25
# The job's own threads wanting a CPU at once (mean count, NOTE [ Threads wanting a CPU ]) at
# this multiple of the usable CPUs or more is oversubscription: half again as many as CPUs.
OVERSUBSCRIBED_DEMAND = 1.5
IO_BUSY_MAX = 0.5
EPOCH_START_SHARE = 0.5
# The first batches' share of the wait is stated from this share on, or when iterators were
# started again in the window (workers started for each epoch), whatever the verdict.
EPOCH_START_NOTED = 0.1
# A worker's CPU use above this many CPUs (or more than one thread running at a sample) runs
# intra-op threads of its own.
MULTI_THREAD_CPUS = 1.2
# A worker runs PyTorch's result-queue feeder beside its main thread; this many threads or more
# hold an intra-op (OpenMP) pool.
INTRA_OP_THREADS = 4
# The fix of workers that each run several threads, as ``dlwatch verify`` applies it: one thread
# for the OpenMP runtime and the BLAS libraries in the whole job (OpenBLAS and MKL read these at
# load, before any explicit call), and torch.set_num_threads(1) in each worker after the job's
# own worker_init_fn (which may have raised it: no variable overrides an explicit call).
THREAD_ENV = (("OMP_NUM_THREADS", "1"), ("OPENBLAS_NUM_THREADS", "1"), ("MKL_NUM_THREADS", "1"))
THREAD_FIX = Fix(env=THREAD_ENV, worker_threads=1)
# A window stopped (NOTE [ Stopped jobs ] in worker_time.py) this share of its span or more gets
# no verdict.
STOPPED_SHARE = 0.5


class Verdict(TextEnum):
    """What :func:`judge` concluded; the value is what reports, ``dlwatch status`` and JSON show."""

    NEEDS_INSIDE_VIEW = "needs_inside_view"
    STOPPED = "job_stopped"
    TOO_EARLY = "not_enough_batches"
    NOT_INPUT_BOUND = "not_input_bound"
    SLIGHTLY = "slightly_input_bound"
    EPOCH_STARTS = "epoch_starts"
    IN_MAIN = "loading_in_main"
    OVERSUBSCRIBED = "cpu_oversubscribed"
    CPU_BOUND = "workers_cpu_bound"
    IO_BOUND = "workers_io_bound"
    PIN_MEMORY = "pin_memory_thread"
    WORKERS_IDLE = "workers_idle"


INPUT_BOUND = frozenset(
    {
        Verdict.EPOCH_STARTS,
        Verdict.IN_MAIN,
        Verdict.OVERSUBSCRIBED,
        Verdict.CPU_BOUND,
        Verdict.IO_BOUND,
        Verdict.PIN_MEMORY,
        Verdict.WORKERS_IDLE,
    }
)


@dataclass(frozen=True)
class Judgement:
    """One verdict (:class:`Verdict`) with its figures: ``span_s`` the seconds judged (the
    window less ``stopped_s``, the time main or a worker was stopped: NOTE [ Stopped jobs ]),
    ``batches`` main delivered in it, ``wait_share`` main's data wait (0..1), ``epoch_share``
    the part of that wait spent on iterators' first batches, ``main_cpus`` main's CPU use (CPUs),
    ``workers`` each worker's time, ``usable`` the CPUs the job may use and ``usable_how`` how
    that was known, ``num_workers`` the setting, ``wanting`` how many of the job's own threads
    wanted a CPU at once (NOTE [ Threads wanting a CPU ] in worker_time.py), ``gain`` the most the
    input side can speed the job up (``None``: no bound, main does nothing else), and the words: ``summary``,
    ``evidence``, ``remedy``, ``fix`` (what ``dlwatch verify`` can apply)."""

    verdict: Verdict
    summary: str
    span_s: float = 0.0
    batches: int = 0
    wait_share: Optional[float] = None
    epoch_share: Optional[float] = None
    main_cpus: Optional[float] = None
    workers: Tuple[WorkerTime, ...] = ()
    usable: Optional[float] = None
    usable_how: str = ""
    num_workers: Optional[int] = None
    gain: Optional[float] = None
    evidence: Tuple[str, ...] = ()
    remedy: str = ""
    fix: Optional[Fix] = None
    confidence: float = 0.0
    stopped_s: float = 0.0
    wanting: Optional[Wanting] = None

    @property
    def input_bound(self) -> bool:
        """Whether the verdict is one of the input-bound ones."""
        return self.verdict in INPUT_BOUND

    def share(self, state: str) -> Optional[float]:
        """The workers' mean share of their time in ``state`` (``None``: no worker)."""
        span = sum(w.span_s for w in self.workers)
        if span <= 0:
            return None
        return sum(w.share(state) * w.span_s for w in self.workers) / span

    def as_dict(self) -> Dict[str, object]:
        """The verdict as JSON (``dlwatch status --json``)."""
        return {
            "verdict": str(self.verdict),
            "summary": self.summary,
            "window_s": round(self.span_s, 1),
            "stopped_s": round(self.stopped_s, 1),
            "batches": self.batches,
            "data_wait_share": None if self.wait_share is None else round(self.wait_share, 3),
            "epoch_start_share": None if self.epoch_share is None else round(self.epoch_share, 3),
            "main_cpus": None if self.main_cpus is None else round(self.main_cpus, 2),
            "workers": {s: None if self.share(s) is None else round(self.share(s) or 0.0, 3) for s in STATES},
            "usable_cpus": self.usable,
            "threads_wanting_cpu": None if self.wanting is None else round(self.wanting.mean, 2),
            "num_workers": self.num_workers,
            "speedup_at_most": None if self.gain is None else round(self.gain, 2),
            "evidence": list(self.evidence),
            "remedy": self.remedy,
            "remedy_apply": self.fix.as_dict() if self.fix else None,
        }

    def lines(self) -> List[str]:
        """The verdict as ``dlwatch status`` prints it."""
        out = [f"input: {self.summary}"]
        out += [f"  {e}" for e in self.evidence]
        if self.remedy:
            out.append(f"  remedy: {self.remedy}")
        return out


def open_wait_s(v: LoaderView, now: float) -> float:
    """Seconds main has been in ``__next__`` of ``v`` at ``now`` for a batch a worker owns
    (``waiting_worker`` >= 0), not yet in ``wait_s``; 0 otherwise (an epoch's end leaves
    ``waiting_since`` set with worker -1: not a wait for data)."""
    if v.waiting_since is None or v.waiting_worker < 0:
        return 0.0
    return max(0.0, now - v.waiting_since)


@dataclass
class _Waits:
    wait_s: float = 0.0
    epoch_s: float = 0.0
    batches: int = 0
    views: List[LoaderView] = field(default_factory=list)
    stopped_wait_s: float = 0.0
    new_iterators: int = 0


def main_waits(samples: Sequence[Sample], main_pid: int) -> _Waits:
    """Main's data wait over ``samples`` (every sample: lean ones carry the counters): per
    iterator of main, its wait (``wait_s`` and the wait in progress) at its last sight less
    that at its first (0 for one created in the window), less what it gained over stopped
    pairs of samples (``stopped_wait_s``: main stopped inside ``__next__``, or a worker
    stopped; NOTE [ Stopped jobs ] in worker_time.py); ``epoch_s`` the part spent on the first
    batch of iterators created in the window (workers started for it); ``views`` each iterator
    as last seen."""
    t0 = samples[0].t_mono
    first: Dict[Tuple[int, float], Tuple[float, int]] = {}
    last: Dict[Tuple[int, float], Tuple[float, int, LoaderView, float]] = {}
    before: Dict[Tuple[int, float], Tuple[float, int]] = {}
    stopped_gain: Dict[Tuple[int, float], float] = {}
    stopped_opening: Dict[Tuple[int, float], float] = {}
    seen = [job_stopped(s) for s in samples]
    for i, s in enumerate(samples):
        stopped = i > 0 and (seen[i] or seen[i - 1])
        now: Dict[Tuple[int, float], Tuple[float, int]] = {}
        for v in s.loaders:
            if v.pid != main_pid:
                continue
            key = (v.iterator, v.created)
            w = v.wait_s + open_wait_s(v, s.t_mono)
            first.setdefault(key, (w, v.batches))
            last[key] = (w, v.batches, v, s.t_mono)
            now[key] = (w, v.batches)
            if stopped:
                prev = before.get(key)
                base = prev[0] if prev is not None else (0.0 if v.created >= t0 else w)
                gain = max(0.0, w - base)
                stopped_gain[key] = stopped_gain.get(key, 0.0) + gain
                if prev is None or prev[1] == 0:  # still waiting for its first batch
                    stopped_opening[key] = stopped_opening.get(key, 0.0) + gain
        before.update(now)
    out = _Waits()
    for key, (w, n, v, t) in last.items():
        w0, n0 = first[key]
        new = v.created >= t0
        stop = stopped_gain.get(key, 0.0)
        gained = max(0.0, w - (0.0 if new else w0) - stop)
        out.wait_s += gained
        out.stopped_wait_s += stop
        out.batches += max(0, n - (0 if new else n0))
        out.views.append(v)
        if new and _workers_setting(v):
            out.new_iterators += 1
            opening = v.first_batch_s if v.first_batch_s is not None else open_wait_s(v, t)
            out.epoch_s += min(gained, max(0.0, opening - stopped_opening.get(key, 0.0)))
    return out


def since_first_iterator(samples: Sequence[Sample], main_pid: int) -> Tuple[List[Sample], bool]:
    """``samples`` from the last one before the first that holds an iterator of main
    (``main_pid``), and whether any were left out: the time before main made its first
    DataLoader iterator (imports, building the model and the Dataset) is no step of a training
    loop and no time it could wait for data, and counted as "its step" it diluted the data-wait
    share (54 % of the last 21 s, while the one iterator in them waited 85 % of its 13 s).
    An iterator is in every sample after it was made (the inside view keeps ended ones), so
    a window that begins after main's first iterator keeps all its samples. The sample before is
    kept: the iterator was made between the two."""
    for i, s in enumerate(samples):
        if any(v.pid == main_pid for v in s.loaders):
            return (list(samples[i - 1 :]), True) if i >= 2 else (list(samples), False)
    return list(samples), False


def needs_inside_view_text(pid: int) -> str:
    """The no-verdict line of a job that records no inside view: how to watch one that does.
    Each ``dlwatch`` command quoted parses (tests/unit/test_quoted_commands.py)."""
    return (
        "no verdict: it needs the inside view (main's time in __next__), which this job does not record; "
        "watch it with `dlwatch run -- python train.py`, or start it with `env $(dlwatch hook-env) python "
        f"train.py` and watch it with `dlwatch attach --pid {pid}` (its pid)"
    )


def _workers_setting(v: LoaderView) -> int:
    """``num_workers`` as recorded (0 when missing or not a number)."""
    value = v.setting("num_workers")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _pct(x: Optional[float]) -> str:
    return "?" if x is None else f"{100 * x:.0f} %"


def _gain_text(gain: Optional[float]) -> str:
    return "no bound (main does little else)" if gain is None else f"at most {gain:.2f}x"


def bound(wait_share: float) -> Optional[float]:
    """The most the input side can speed up a job that waits ``wait_share`` (0..1) of its time
    for data: ``1 / (1 - wait_share)``; ``None`` when main does almost nothing else (no bound)."""
    return None if wait_share >= 0.98 else 1.0 / (1.0 - wait_share)


def judge(
    facts: Facts, window_s: float = WINDOW_S, min_span_s: float = MIN_SPAN_S, min_batches: int = MIN_BATCHES
) -> Judgement:
    """The input-bound verdict on ``facts`` (a live look: its timeline's last ``window_s``
    seconds), see NOTE [ Input-bound verdict ]. Reads only ``facts``. The verdict with the
    defaults is kept with the facts (``Facts.derived``): the look for warnings and its rule ask
    for the same one."""
    if (window_s, min_span_s, min_batches) == (WINDOW_S, MIN_SPAN_S, MIN_BATCHES):
        return facts.derived(_judge_default)
    return _judge(facts, window_s, min_span_s, min_batches)


def _judge_default(facts: Facts) -> Judgement:
    return _judge(facts, WINDOW_S, MIN_SPAN_S, MIN_BATCHES)


def _judge(facts: Facts, window_s: float, min_span_s: float, min_batches: int) -> Judgement:
    main = facts.sample.main
    now = facts.sample.t_mono
    samples = [s for s in samples_since(facts.timeline, now - window_s) if s.main is not None]
    if main is None or not samples:
        return Judgement(Verdict.TOO_EARLY, "no sample of the job's main process yet")
    samples = [s for s in samples if s.main is not None and s.main.pid == main.pid]
    if not any(s.loaders for s in samples):
        if any(s.workers for s in samples) or facts.inside is None or not any(s.loaders for s in facts.timeline):
            return Judgement(Verdict.NEEDS_INSIDE_VIEW, needs_inside_view_text(main.pid))
    samples, setup = since_first_iterator(samples, main.pid)
    waits = main_waits(samples, main.pid)
    window = samples[-1].t_mono - samples[0].t_mono
    stops = stopped_pairs(samples)
    stopped = overlap(stops, samples[0].t_mono, samples[-1].t_mono)
    span = window - stopped  # the time judged: the window less stopped time (NOTE [ Stopped jobs ])
    if stopped > 0 and (stopped >= STOPPED_SHARE * window or span < min_span_s):
        paused = " (it is stopped now)" if job_stopped(samples[-1]) else ""
        return Judgement(
            Verdict.STOPPED,
            f"no verdict: the job was stopped (SIGSTOP or a debugger) for {stopped:.0f} s of the last {window:.0f} s"
            f"{paused}; a stopped process waits for no data, so that time is not judged",
            span_s=span,
            batches=waits.batches,
            stopped_s=stopped,
        )
    if span < min_span_s or waits.batches < min_batches:
        return Judgement(
            Verdict.TOO_EARLY,
            f"no verdict yet: {waits.batches} batch(es) in {span:.0f} s (it needs {min_batches} in {min_span_s:g} s)",
            span_s=span,
            batches=waits.batches,
        )
    full = full_samples(samples)
    workers = worker_times(full)
    usable, how = usable_cpus(facts)
    usable = usable or float(facts.host_cpus)
    d = min(1.0, waits.wait_s / span)
    main_cpus = None
    if len(full) >= 2:
        m0, m1 = full[0].main, full[-1].main
        live = full[-1].t_mono - full[0].t_mono - overlap(stops, full[0].t_mono, full[-1].t_mono)
        if m0 is not None and m1 is not None and live > 0:
            main_cpus = max(0.0, m1.cpu_s - m0.cpu_s) / live
    settings = [v for v in waits.views if v.batches or v.waiting_since is not None] or waits.views
    nw = max((_workers_setting(v) for v in settings), default=None)
    epoch = waits.epoch_s / waits.wait_s if waits.wait_s > 0 else 0.0
    base = Judgement(
        Verdict.TOO_EARLY,
        "",
        span_s=span,
        batches=waits.batches,
        wait_share=d,
        epoch_share=epoch,
        main_cpus=main_cpus,
        workers=workers,
        usable=usable,
        usable_how=how,
        num_workers=nw,
        stopped_s=stopped,
        wanting=threads_wanting_cpu(full),
    )
    rate = waits.batches / span
    last = f"the {window:.0f} s since its first DataLoader iterator" if setup else f"the last {window:.0f} s"
    judged = last if not stopped else f"{span:.0f} s ({last} less {stopped:.0f} s stopped)"
    head = (
        f"main waited for data {_pct(d)} of {judged} ({waits.batches} batches, {rate:.1f}/s); its step "
        f"ran the rest" + (f", main used {main_cpus:.2f} CPU" if main_cpus is not None else "")
    )
    evidence = [head]
    if workers:
        j = base
        at_once = workers_at_once(workers)
        count = f"{len(workers)} worker process(es)"
        if at_once is not None and len(workers) > max(1, nw or 0) and at_once < len(workers) - 0.5:
            count += f" in turn, {at_once:.1f} at once on average (started again for each iterator)"
        runq = (
            ""
            if all(w.runq_read for w in workers)
            else " (run queue not read for all: time seen in state R without a CPU)"
        )
        evidence.append(
            f"{count}: CPU {_pct(j.share('cpu'))}, runnable waiting for a CPU {_pct(j.share('runnable'))}{runq}, "
            f"blocked in the Dataset (I/O, sleep, lock) {_pct(j.share('io'))}, idle waiting for indices "
            f"{_pct(j.share('idle'))} of their time; {workers_cpus(workers):.2f} CPU(s) in all, "
            f"of {usable:g} usable ({how})"
        )
    if waits.epoch_s > 0 and waits.wait_s > 0 and (waits.new_iterators >= 2 or epoch >= EPOCH_START_NOTED):
        again = "" if waits.new_iterators < 2 else ", workers started again for each"
        evidence.append(
            f"first batches of iterators started in the window: {waits.epoch_s:.1f} s, {_pct(epoch)} of the wait "
            f"({waits.new_iterators} iterator(s) started{again})"
        )
    if d < NOT_BOUND_SHARE:
        return replace(
            base,
            verdict=Verdict.NOT_INPUT_BOUND,
            summary=f"not input-bound: main waits for data {_pct(d)} of its time; the input side can make it at "
            f"most {1 / (1 - d):.2f}x faster",
            evidence=tuple(evidence),
        )
    gain = bound(d)
    if d < INPUT_BOUND_SHARE:
        return replace(
            base,
            verdict=Verdict.SLIGHTLY,
            summary=f"slightly input-bound: main waits for data {_pct(d)} of its time ({_gain_text(gain)} faster "
            "from the input side)",
            evidence=tuple(evidence),
            gain=gain,
        )
    return _cause(base, evidence, waits, d, gain, usable, main_cpus or 0.0)


def _cause(
    base: Judgement,
    evidence: List[str],
    waits: _Waits,
    d: float,
    gain: Optional[float],
    usable: float,
    main_cpus: float,
) -> Judgement:
    """Which stage makes an input-bound job wait (NOTE [ Input-bound verdict ])."""
    workers = base.workers
    nw = base.num_workers or 0
    j = base
    persistent = any(v.setting("persistent_workers") for v in waits.views)
    pin = any(v.pin_memory_effective for v in waits.views)
    lead = f"input-bound: main waits for data {_pct(d)} of its time"

    def verdict(
        kind: Verdict,
        why: str,
        remedy: str,
        fix: Optional[Fix] = None,
        confidence: float = 0.7,
        g: Optional[float] = gain,
        extra: Tuple[str, ...] = (),
    ) -> Judgement:
        return replace(
            base,
            verdict=kind,
            summary=f"{lead}: {why}; the job can get {_gain_text(g)} faster from the input side",
            evidence=tuple(evidence) + tuple(extra),
            remedy=remedy,
            fix=fix,
            confidence=confidence,
            gain=g,
        )

    if nw == 0 and not workers:
        suggested = max(1, min(8, int(usable) - 1))
        return verdict(
            Verdict.IN_MAIN,
            "num_workers=0, so main loads every batch itself inside __next__",
            f"Load in worker processes: num_workers={suggested} (up to the usable CPUs less main's), so batches "
            "are prepared while main runs its step.",
            Fix(loader=(("num_workers", suggested),)),
        )
    if waits.epoch_s > 0 and (base.epoch_share or 0.0) >= EPOCH_START_SHARE:
        if not persistent:
            return verdict(
                Verdict.EPOCH_STARTS,
                "epoch starts dominate: most of the wait is for each new iterator's first batch, while its workers "
                "start (worker_init_fn, the Dataset's setup)",
                "persistent_workers=True keeps the workers (and what they set up) across epochs; or make "
                "worker_init_fn and the Dataset's setup cheaper.",
                Fix(loader=(("persistent_workers", True),)),
            )
        return verdict(
            Verdict.EPOCH_STARTS,
            "epoch starts dominate: most of the wait is for new iterators' first batches (new DataLoaders or "
            "iterators are made while persistent workers are kept)",
            "Keep one DataLoader and iterate it again each epoch, rather than making a new one.",
        )
    if not workers:
        return verdict(Verdict.WORKERS_IDLE, "its workers were not seen long enough to tell why", "", confidence=0.4)
    cpu, runnable, io, idle = (j.share(s) or 0.0 for s in STATES)
    worker_cpus = workers_cpus(workers)
    job_cpus = worker_cpus + main_cpus
    n = len(workers)
    running_at_once = max(w.threads_running for w in workers)
    pool = max(w.threads for w in workers)
    threaded = running_at_once > 1 or worker_cpus / n > MULTI_THREAD_CPUS or pool >= INTRA_OP_THREADS
    wanting = base.wanting  # the job's own threads in state R at once (NOTE [ Threads wanting a CPU ])
    if runnable >= RUNNABLE_SHARE and wanting is not None and wanting.mean >= OVERSUBSCRIBED_DEMAND * usable:
        extra = (
            f"the job's own threads wanting a CPU at once (running or runnable): {wanting.describe()}, for "
            f"{usable:g} usable CPU(s); workers of {pool} thread(s), up to {running_at_once or '?'} running at once, "
            f"{worker_cpus / n:.2f} CPU each",
        )
        fewer = max(1, int(usable) - 1)
        if threaded:
            # the fix verify tries is the threads' (THREAD_FIX); fewer workers is named only where
            # the job has more than the usable CPUs take, as a second change of its own
            also = f"; then, a change of its own, num_workers={fewer} for {usable:g} CPU(s)" if nw > fewer else ""
            return verdict(
                Verdict.OVERSUBSCRIBED,
                f"CPU oversubscribed: the workers wait runnable for a CPU {_pct(runnable)} of their time, each "
                "running several intra-op threads",
                "One intra-op thread per worker: torch.set_num_threads(1) in worker_init_fn (PyTorch sets it in "
                "each worker; something raised it), OMP_NUM_THREADS=1 / cv2.setNumThreads(0) for numpy and OpenCV"
                f"{also}.",
                THREAD_FIX,
                extra=extra,
            )
        return verdict(
            Verdict.OVERSUBSCRIBED,
            f"CPU oversubscribed: {n} workers and main on {usable:g} usable CPU(s); the workers wait runnable for "
            f"a CPU {_pct(runnable)} of their time",
            f"Fewer workers: num_workers={fewer}; more only queue for the same CPUs.",
            Fix(loader=(("num_workers", fewer),)) if fewer < nw else None,
            extra=extra,
        )
    busy = cpu + runnable  # runnable: wants a CPU, which other processes may hold
    io_bound = busy < IO_BUSY_MAX and io >= idle
    # "idle while main waits" only when idle is the workers' largest share: not the verdict left over
    idle_leads = idle >= busy and idle >= io
    if busy >= CPU_BOUND_SHARE or (not io_bound and not idle_leads):
        doing = f"{_pct(cpu)} of their time computing" + (
            f", {_pct(runnable)} runnable waiting for a CPU" if runnable >= 0.05 else ""
        )
        if busy < CPU_BOUND_SHARE:  # busy most of the time, blocked in the Dataset the rest
            doing += f", {_pct(io)} blocked in the Dataset"
        room = usable - main_cpus
        more = max(nw + 1, int(room + 0.5))
        busy_elsewhere = (
            (
                f"the workers also waited runnable for a CPU {_pct(runnable)} of their time while the job used "
                f"{job_cpus:.2f} of {usable:g} CPU(s): other processes compete for them (the job's own threads "
                f"wanting a CPU at once: {wanting.describe() if wanting else 'not read'})",
            )
            if runnable >= RUNNABLE_SHARE
            else ()
        )
        if more <= int(room + 0.5) and worker_cpus > 0 and room / worker_cpus > 1.15:
            g = room / worker_cpus if gain is None else min(gain, room / worker_cpus)
            return verdict(
                Verdict.CPU_BOUND,
                f"the workers are CPU-bound ({doing}) and use {worker_cpus:.2f} of the {room:.2f} CPU(s) main leaves",
                f"More workers, up to the usable CPUs: num_workers={more}; or cheaper transforms (decode smaller, "
                "move augmentation to the GPU).",
                Fix(loader=(("num_workers", more),)),
                g=g,
                extra=busy_elsewhere,
            )
        return verdict(
            Verdict.CPU_BOUND,
            f"the workers are CPU-bound ({doing}) and the usable CPUs are used: {job_cpus:.2f} of {usable:g}",
            "Cheaper transforms (decode smaller images, cache decoded samples, move augmentation to the GPU) or "
            "more CPUs; more workers would only share the same CPUs.",
            None,
            extra=busy_elsewhere,
        )
    if io_bound:
        more = max(nw + 1, 2 * nw)
        rate = sum(w.io_bytes for w in workers) / base.span_s
        return verdict(
            Verdict.IO_BOUND,
            f"the workers are I/O-bound: blocked in the Dataset (storage, network, a sleep) {_pct(io)} of their "
            f"time, computing {_pct(cpu)}",
            f"More workers, even more than CPUs, since they mostly wait: num_workers={more}; a larger "
            "prefetch_factor; or faster or cached storage.",
            Fix(loader=(("num_workers", more),)),
            extra=(f"workers read and wrote {rate / 2**20:.1f} MiB/s (rchar + wchar, queues included)",),
        )
    if pin:
        return verdict(
            Verdict.PIN_MEMORY,
            f"the pin-memory thread is the bottleneck: the workers are idle {_pct(idle)} of their time while main "
            "waits, and PyTorch pins each batch in one thread of main",
            "Measure with pin_memory=False (dlwatch verify); pin less per batch (smaller batches, fewer fields), "
            "or copy to the GPU without pinning.",
            Fix(loader=(("pin_memory", False),)),
            confidence=0.5,
        )
    return verdict(
        Verdict.WORKERS_IDLE,
        f"the workers are idle {_pct(idle)} of their time while main waits: the batches are in transit (large "
        "pickled batches through the result queue, or collate in main)",
        "Return tensors or numpy arrays from the Dataset (they travel through shared memory, not pickled through a "
        "pipe); keep per-sample Python objects small.",
        confidence=0.45,
    )


@rule("input_bound", SEVERITY_WARNING, 58, (MODE_LIVE,))
def input_bound(facts: Facts) -> Optional[Finding]:
    """The job waits for its data (NOTE [ Input-bound verdict ]): main spent at least
    ``INPUT_BOUND_SHARE`` of the last ``WINDOW_S`` seconds in ``__next__``, over at least
    ``MIN_SPAN_S`` seconds and ``MIN_BATCHES`` batches; the cause from the workers' time."""
    if facts.sample.main is None:
        return None
    j = judge(facts)
    if not j.input_bound:
        return None
    main = facts.sample.main
    docs = (DOC_PIN_MEMORY,) if j.verdict == Verdict.PIN_MEMORY else (DOC_MULTI_PROCESS_LOADING,)
    # where: the loader main waited in most (its iterator's site, the for line that made it)
    sited = [v for v in facts.sample.loaders if v.pid == main.pid and v.site is not None]
    site = max(sited, key=lambda v: v.wait_s).site if sited else None
    return Finding(
        location=f"{site.file}:{site.line} (the DataLoader main waits for)" if site is not None else None,
        confidence=j.confidence,
        summary=j.summary[0].upper() + j.summary[1:] + ".",
        evidence=j.evidence,
        remedy=j.remedy or "See the evidence: no setting of the DataLoader is named.",
        pids=(main.pid,) + tuple(p.pid for p in facts.sample.workers),
        docs=docs,
        fix=j.fix,  # proven by throughput: ``dlwatch verify`` (watchdog.commands.throughput_ab)
    )
