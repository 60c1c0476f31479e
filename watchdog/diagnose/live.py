"""Warnings, from the timeline alone, while the job runs (``live`` mode; never stops it).

Thresholds are fractions of the limit the kernel enforces (RLIMIT_NOFILE, ``/dev/shm`` size,
usable CPUs) or growth well above noise; healthy jobs stay below them.
"""

from __future__ import annotations

import bisect
import statistics
from typing import List, Optional, Sequence, Tuple

from ..types import MODE_LIVE, ROLE_WORKER, SEVERITY_WARNING, Facts, ProcessSample, Sample, samples_since
from .common import (
    DOC_MEMORY_LEAK,
    DOC_MULTI_PROCESS_LOADING,
    DOC_PIN_MEMORY,
    DOC_SHARING_STRATEGIES,
    fit_line,
    memory_points,
    mib,
    since_last_drop,
    written,
)
from .engine import Finding, rule
from .loaders import kept_loaders_text, kept_persistent_loaders, live_iterator_evidence
from .worker_time import full_samples

LIVE = (MODE_LIVE,)

PRESSURE_FRACTION = 0.8
# Copy-on-read growth: at least this much per worker, this fast, fitted this well.
GROWTH_MIN_BYTES = 64 * 2**20
GROWTH_MIN_BYTES_PER_S = 1 * 2**20
GROWTH_MIN_R2 = 0.8
GROWTH_MIN_POINTS = 4
# Copy-on-read level: every worker's USS at least this much, and this share of main's own USS
# (measured here: a healthy worker holds about 20% of main's, a copy-on-read one 70%).
COPIED_MIN_BYTES = 96 * 2**20
COPIED_MIN_SHARE = 0.5
# Copy-on-read is judged by level only when at least this share of a worker's private memory is
# main's anonymous memory it no longer shares (:func:`copied_from_main`); without those figures,
# only while it holds at most COPIED_MAX_SHARE times main's USS. A worker that holds more than
# it copied allocated it (a cache, decoded samples).
COPIED_OF_PRIVATE = 0.5
COPIED_MAX_SHARE = 2.0


def copied_from_main(main: ProcessSample, worker: ProcessSample) -> Optional[int]:
    """Bytes of main's anonymous memory a forked worker no longer shares, i.e. has copied:
    main's Anonymous minus what the worker still shares of it (its Anonymous minus its
    Private_Dirty, ``smaps_rollup``, Documentation/filesystems/proc.rst); ``None`` when a
    figure is missing. An estimate: main's own growth since the fork counts as copied too."""
    if main.anon_bytes is None or worker.anon_bytes is None or worker.dirty_bytes is None:
        return None
    return max(0, main.anon_bytes - max(0, worker.anon_bytes - worker.dirty_bytes))


# Oversubscription: runnable threads above this multiple of usable CPUs, in this share of samples.
OVERSUBSCRIBED_FACTOR = 2.0
OVERSUBSCRIBED_SHARE = 0.6
OVERSUBSCRIBED_MIN_SAMPLES = 5
# ... judged on the last OVERSUBSCRIBED_SAMPLES full samples that read threads, none older than
# OVERSUBSCRIBED_WINDOW_S: 25 s of them at full samples every 5 s, 75 s at the default 15 s (a
# count of samples, not of ticks: lean ticks between full samples hold no new reading). Full
# samples 30 s apart or more (warning_interval_s and stall_timeout_s / 2 both 30 s or more) leave
# fewer than OVERSUBSCRIBED_MIN_SAMPLES in the window, and the rule says nothing.
OVERSUBSCRIBED_SAMPLES = 6
OVERSUBSCRIBED_WINDOW_S = 120.0
OVERSUBSCRIBED_MIN_INVOLUNTARY_PER_S = 100.0
# CUDA pinned host memory: a warning at this share of RAM, or when it grows steadily this much.
PINNED_RAM_SHARE = 0.25
PINNED_GROWTH_MIN_BYTES = 256 * 2**20


def _live(facts: Facts) -> bool:
    return facts.sample.main is not None


# Memory growth is a trend only once the job trains: what a process allocates before its loader's
# first batch (imports, a table loaded once, workers warming up) is start-up. A growth predicts
# exhaustion only while it continues (its recent half grew at least PLATEAU_SHARE of its mean
# rate: an allocator that reached its high-water mark, or a cache that filled, is flat), when
# memory would run out within GROWTH_HORIZON_S, and when the prediction reaches no further ahead
# than EXTRAPOLATION_MAX times the growth watched.
PLATEAU_SHARE = 0.5
GROWTH_HORIZON_S = 3600.0
EXTRAPOLATION_MAX = 10.0


def judged_from(timeline: Sequence[Sample]) -> Optional[float]:
    """When memory growth starts to count (``time.monotonic()`` seconds): the first sample in
    which an iterator of the inside view had delivered a batch; without an inside view (no
    sample holds an iterator: ``dlwatch attach``, ``--no-hook``), the first sample with
    DataLoader workers. ``None`` before either: the job is still starting."""
    with_workers = None
    loaders = False
    for s in timeline:
        if s.loaders:
            loaders = True
            if any(v.batches for v in s.loaders):
                return s.t_mono
        if with_workers is None and any(p.role == ROLE_WORKER for p in s.processes):
            with_workers = s.t_mono
    return None if loaders else with_workers


def judged_points(points: List[Tuple[float, float]], start: float, now: float) -> List[Tuple[float, float]]:
    """``points`` (``(t, bytes)``, one per change, oldest first) from ``start`` on: the level held
    at ``start`` first, and the level held at ``now`` last (a flat stretch has no points of its
    own, and a plateau must be seen)."""
    i = bisect.bisect_right(points, (start, float("inf")))
    out = ([(start, points[i - 1][1])] if i else []) + points[i:]
    if out and out[-1][0] < now:
        out.append((now, out[-1][1]))
    return out


def sustained_growth(
    points: List[Tuple[float, float]], min_bytes: float, min_rate: float, min_r2: float
) -> Optional[Tuple[float, float, float, float]]:
    """``(rate, gained, span, r2)`` of a growth that goes on, or ``None``: at least
    GROWTH_MIN_POINTS points, ``min_bytes`` gained, a least-squares slope of ``min_rate`` bytes/s
    fitted with R² ``min_r2``, and the recent half of the span growing at least PLATEAU_SHARE of
    the mean rate (else it levelled off). ``rate`` (bytes/s) is the smaller of the slope and the
    recent half's rate."""
    if len(points) < GROWTH_MIN_POINTS:
        return None
    slope, r2 = fit_line(points)
    gained, span = points[-1][1] - points[0][1], points[-1][0] - points[0][0]
    if span <= 0 or gained < min_bytes or slope < min_rate or r2 < min_r2:
        return None
    mid = points[0][0] + span / 2
    at_mid = points[bisect.bisect_right(points, (mid, float("inf"))) - 1][1]
    recent = (points[-1][1] - at_mid) / (span / 2)
    if recent < PLATEAU_SHARE * gained / span:
        return None
    return min(slope, recent), gained, span, r2


def exhaustion_s(left: float, rate: float, span: float) -> Optional[float]:
    """Seconds until ``left`` bytes are used at ``rate`` bytes/s, or ``None`` when that is beyond
    GROWTH_HORIZON_S or more than EXTRAPOLATION_MAX times the ``span`` (s) the growth was watched."""
    if rate <= 0:
        return None
    eta = left / rate
    return eta if eta <= GROWTH_HORIZON_S and eta <= EXTRAPOLATION_MAX * span else None


def _mostly_copies(main: ProcessSample, w: ProcessSample, private: int, main_uss: int) -> bool:
    copied = copied_from_main(main, w)
    if copied is None:
        return private <= COPIED_MAX_SHARE * main_uss
    return copied >= COPIED_OF_PRIVATE * private


@rule("worker_memory_growth", SEVERITY_WARNING, 50, LIVE)
def worker_memory_growth(facts: Facts) -> Optional[Finding]:
    """Workers' private memory grows steadily, or is already large next to main's own: the
    copy-on-read effect (reference counting writes to every page of Python objects a worker
    touches, un-sharing the parent's copy-on-write pages; pytorch/pytorch#13246). Judged on
    the memory a worker wrote (:func:`written`: Private_Dirty, not clean file pages read
    through a memmap), by slope (from the loader's first batch on, a growth that goes on and
    exhausts memory within the horizon: :func:`judged_from`, :func:`sustained_growth`,
    :func:`exhaustion_s`; glibc keeping freed samples grows to a plateau) and by level: each
    worker's against main's USS, the total the workers hold, and what one more worker would
    cost. By level only while most of a worker's private memory is copies of main's
    (:func:`copied_from_main`; without its figures, while it holds at most ``COPIED_MAX_SHARE``
    times main's USS): a worker that allocated what it holds (a bounded cache) is no
    copy-on-read, and an unbounded one is caught by its slope."""
    main = facts.sample.main
    if main is None or not facts.sample.workers:  # not _live(facts)
        return None
    main_uss = main.uss_bytes or 0
    growing = []
    copied: List[Tuple[ProcessSample, int]] = []  # (worker, its USS)
    start = judged_from(facts.timeline)
    for w in facts.sample.workers:
        points = [] if start is None else judged_points(memory_points(facts, w), start, facts.sample.t_mono)
        grows = sustained_growth(points, GROWTH_MIN_BYTES, GROWTH_MIN_BYTES_PER_S, GROWTH_MIN_R2)
        if grows is not None:
            rate, grown, span, _ = grows
            growing.append((w.pid, rate, grown, span, points[-1][1]))
        forked = w.start_method in (
            None,
            "fork",
        )  # spawn/forkserver workers share nothing with main: their USS is their own
        uss = written(w)
        if (
            forked
            and uss
            and main_uss
            and uss >= COPIED_MIN_BYTES
            and uss >= COPIED_MIN_SHARE * main_uss
            and _mostly_copies(main, w, uss, main_uss)
        ):
            copied.append((w, uss))
    avail = facts.sample.host.mem_left_bytes
    total_slope = sum(g[1] for g in growing)
    eta = exhaustion_s(avail, total_slope, max((g[3] for g in growing), default=0.0))
    if eta is None:
        growing = []  # no exhaustion this growth foretells
    if not growing and len(copied) < len(facts.sample.workers):
        return None
    what = "private dirty memory" if all(w.dirty_bytes is not None for w in facts.sample.workers) else "USS"
    evidence = [
        f"worker pid {pid}: {what} +{mib(grown)} in {span:.0f} s ({slope / 2**20:.1f} MiB/s, now {mib(now)})"
        for pid, slope, grown, span, now in growing
    ]
    if copied:
        per = [uss for _, uss in copied]
        mean = sum(per) / len(per)
        evidence += [
            f"worker pid {w.pid}: {what} {mib(uss)}, {uss / main_uss:.0%} of main's own USS ({mib(main_uss)})"
            for w, uss in copied[:4]
        ]
        evidence.append(
            f"{len(copied)} workers hold {mib(sum(per))} of private copies; one more worker would cost about "
            f"{mib(mean)}; available memory {mib(avail)}"
        )
    if growing and eta is not None:
        eta_s = eta
        evidence.append(
            f"available memory {mib(avail)}: exhausted in about {eta_s / 60:.0f} min at {total_slope / 2**20:.1f} "
            "MiB/s across workers"
        )
        summary = (
            f"{len(growing)} DataLoader worker(s) grow steadily ({total_slope / 2**20:.1f} MiB/s together); memory "
            f"runs out in about {eta_s / 60:.0f} min at this rate."
        )
    else:
        share = min(uss / main_uss for _, uss in copied)
        summary = (
            f"Each of the {len(copied)} DataLoader workers holds private memory of at least {share:.0%} of main's own "
            f"({mib(sum(uss for _, uss in copied))} in all, "
            "usually copy-on-read copies of the Dataset's Python objects): "
            f"one more worker costs about {mib(sum(uss for _, uss in copied) / len(copied))}."
        )
    remedy = (
        "Hold the Dataset's metadata in numpy arrays, Arrow tables or tensors instead of Python "
        "lists/dicts/strings (each Python object touched in a worker un-shares its page); or lower num_workers."
    )
    kept = kept_persistent_loaders(facts)
    if kept is not None:  # the memory is that of workers kept alive, not copies read
        text = kept_loaders_text(kept)
        remedy = text[0].upper() + text[1:] + "."
        evidence += live_iterator_evidence(facts)
        if not (growing and eta is not None):
            summary = f"The DataLoader workers hold {mib(sum(uss for _, uss in copied))} of private memory: {text}."
    return Finding(
        confidence=0.7,
        summary=summary,
        evidence=tuple(evidence),
        remedy=remedy,
        pids=tuple(g[0] for g in growing) or tuple(w.pid for w, _ in copied),
        docs=(DOC_MEMORY_LEAK, DOC_MULTI_PROCESS_LOADING),
    )


# Main's own growth: this much at least, over this long, fitted this well, still growing, and
# memory left to the job running out within GROWTH_HORIZON_S at that rate (:func:`exhaustion_s`;
# a job that warms up its allocator, or fills a cache once, flattens out well before).
MAIN_GROWTH_MIN_BYTES = 256 * 2**20
MAIN_GROWTH_MIN_SPAN_S = 10.0
MAIN_GROWTH_MIN_R2 = 0.9


@rule("main_memory_growth", SEVERITY_WARNING, 50, LIVE)
def main_memory_growth(facts: Facts) -> Optional[Finding]:
    """Main's own memory (what it wrote: :func:`written`) grows steadily from the loader's first
    batch on (:func:`judged_from`), goes on growing (:func:`sustained_growth`) and would exhaust
    the memory left to the job (the cgroup's limit, else the host's) within an hour
    (:func:`exhaustion_s`): something kept per step (a loss appended with its graph, outputs
    kept in a list: Lightning-AI/pytorch-lightning#9894, pytorch/pytorch#1085). The OOM killer
    then ends main, and its workers with it."""
    main = facts.sample.main
    if main is None:
        return None
    start = judged_from(facts.timeline)
    if start is None:
        return None
    points = since_last_drop(judged_points(memory_points(facts, main), start, facts.sample.t_mono))
    grows = sustained_growth(points, MAIN_GROWTH_MIN_BYTES, 1.0, MAIN_GROWTH_MIN_R2)
    if grows is None:
        return None
    slope, gained, span, r2 = grows
    left = facts.sample.host.mem_left_bytes
    eta_s = exhaustion_s(left, slope, span)
    if span < MAIN_GROWTH_MIN_SPAN_S or eta_s is None:
        return None
    host = facts.sample.host
    limit = host.mem_limit_bytes
    return Finding(
        confidence=0.75,
        summary=(
            f"The main process grows steadily ({slope / 2**20:.1f} MiB/s, +{mib(gained)} in {span:.0f} s): the "
            f"memory left to the job ({mib(left)}{' under the cgroup limit' if limit else ''}) runs out in about "
            f"{f'{eta_s:.0f} s' if eta_s < 120 else f'{eta_s / 60:.0f} min'} at this rate."
        ),
        evidence=(
            f"main pid {main.pid}: memory it wrote (private dirty) {mib(points[0][1])} -> {mib(points[-1][1])} over "
            f"{span:.0f} s, a straight line (R² {r2:.2f})",
            f"memory left to the job: {mib(left)}"
            + (
                f" (cgroup limit {mib(limit)})"
                if limit
                else f" (host available {mib(facts.sample.host.mem_available_bytes)})"
            ),
        ),
        remedy=(
            "Find what main keeps per step: a loss or output appended to a list without .item()/.detach() keeps its "
            "whole graph; metrics accumulated as tensors; batches or predictions kept for later; a cache that only "
            "grows. Keep Python numbers (.item()) or detached CPU copies, or clear the list."
        ),
        pids=(main.pid,),
        docs=(DOC_MEMORY_LEAK,),
    )


@rule("fd_pressure", SEVERITY_WARNING, 51, LIVE)
def fd_pressure(facts: Facts) -> Optional[Finding]:
    """Open file descriptors above 80% of RLIMIT_NOFILE in a process of the job."""
    if not _live(facts):
        return None
    hot = [
        p
        for p in facts.sample.processes
        if p.num_fds and p.rlimit_nofile_soft and p.num_fds > PRESSURE_FRACTION * p.rlimit_nofile_soft
    ]
    if not hot:
        return None
    return Finding(
        confidence=0.8,
        summary=f"{len(hot)} process(es) use over {PRESSURE_FRACTION:.0%} of their file-descriptor limit; the loader "
        "fails with 'Too many open files' at 100%.",
        evidence=tuple(
            f"{p.role} pid {p.pid}: {p.num_fds} open file descriptors of RLIMIT_NOFILE {p.rlimit_nofile_soft}"
            for p in hot
        ),
        remedy='torch.multiprocessing.set_sharing_strategy("file_system"), or raise the limit (ulimit -n); keep fewer '
        "batches alive in main.",
        pids=tuple(p.pid for p in hot),
        docs=(DOC_SHARING_STRATEGIES,),
    )


@rule("map_count_pressure", SEVERITY_WARNING, 51, LIVE)
def map_count_pressure(facts: Facts) -> Optional[Finding]:
    """A process of the job holds over 80% of ``vm.max_map_count`` memory mappings: every shared
    tensor kept alive in main is one mapping, and ``mmap`` fails with ENOMEM at the limit
    (pytorch/pytorch#92134)."""
    limit = facts.sample.host.max_map_count
    if not _live(facts) or not limit:
        return None
    hot = [p for p in facts.sample.processes if p.map_count and p.map_count > PRESSURE_FRACTION * limit]
    if not hot:
        return None
    rates = []
    for p in hot:
        count = p.map_count or 0  # set and non-zero: hot holds only those
        seen = [
            (s.t_mono, q.map_count) for s in facts.timeline for q in [s.process(p.pid)] if q is not None and q.map_count
        ]
        if len(seen) >= 2 and seen[-1][0] > seen[0][0]:
            rate = (seen[-1][1] - seen[0][1]) / (seen[-1][0] - seen[0][0])
            if rate > 0:
                rates.append(
                    f"{p.role} pid {p.pid}: +{rate:.0f} mappings/s; "
                    f"the limit is reached in about {(limit - count) / rate:.0f} s"
                )
    return Finding(
        confidence=0.8,
        summary=f"{len(hot)} process(es) use over {PRESSURE_FRACTION:.0%} of vm.max_map_count ({limit}); mmap fails "
        "with 'Cannot allocate memory (12)' at 100%.",
        evidence=tuple(f"{p.role} pid {p.pid}: {p.map_count} memory mappings of vm.max_map_count {limit}" for p in hot)
        + tuple(rates),
        remedy="Do not keep received batches alive (clone what you cache); batch more samples per tensor; or sysctl "
        "-w vm.max_map_count=262144.",
        pids=tuple(p.pid for p in hot),
        docs=(DOC_SHARING_STRATEGIES,),
    )


@rule("shm_pressure", SEVERITY_WARNING, 52, LIVE)
def shm_pressure(facts: Facts) -> Optional[Finding]:
    """``/dev/shm`` (as the job sees it) more than 80% full."""
    main = facts.sample.main
    if main is None:  # not _live(facts)
        return None
    h = facts.sample.host
    if not h.shm_total_bytes or h.shm_used_bytes is None or h.shm_used_bytes <= PRESSURE_FRACTION * h.shm_total_bytes:
        return None
    return Finding(
        confidence=0.8,
        summary=f"/dev/shm is {h.shm_used_bytes / h.shm_total_bytes:.0%} full ({mib(h.shm_used_bytes)} of "
        f"{mib(h.shm_total_bytes)}); workers crash with a bus error when it fills.",
        evidence=(f"/dev/shm: {mib(h.shm_used_bytes)} used of {mib(h.shm_total_bytes)} (statvfs, as the job sees it)",),
        remedy="Give the job more shared memory (docker --shm-size, --ipc=host, a Memory emptyDir on Kubernetes) or "
        "lower batch_size × prefetch_factor × num_workers.",
        pids=(main.pid,),
        docs=(DOC_MULTI_PROCESS_LOADING,),
    )


def usable_cpus(facts: Facts) -> Tuple[Optional[float], str]:
    """CPUs the job may use: the smaller of main's affinity and its cgroup quota, and how it was known."""
    main = facts.sample.main
    options: List[Tuple[float, str]] = []
    if main is None:
        return None, "unknown"
    if main.cpu_affinity:
        options.append((float(main.cpu_affinity), f"CPU affinity {main.cpu_affinity}"))
    if main.cpu_quota:
        options.append((main.cpu_quota, f"cgroup cpu.max quota {main.cpu_quota:g} CPUs"))
    if not options:
        return None, "unknown"
    return min(options)


@rule("cpu_affinity_narrowed", SEVERITY_WARNING, 53, LIVE)
def cpu_affinity_narrowed(facts: Facts) -> Optional[Finding]:
    """The job may use fewer CPUs than the host has, and fewer than ``num_workers + 1``: every
    worker inherits the parent's affinity mask, sched_setaffinity(2))."""
    main = facts.sample.main
    if main is None or not facts.sample.workers:  # not _live(facts)
        return None
    usable, how = usable_cpus(facts)
    n = len(facts.sample.workers)
    if usable is None or usable >= facts.host_cpus or usable >= n + 1:
        return None
    return Finding(
        confidence=0.85,
        summary=f"The job may use {usable:g} CPU(s) ({how}) on a {facts.host_cpus}-CPU host, for the main process and "
        f"{n} workers.",
        evidence=tuple(
            f"{p.role} pid {p.pid}: CPU affinity {p.cpu_affinity} CPU(s)" for p in [main, *facts.sample.workers]
        ),
        remedy=(
            "Widen the affinity the job was started with (taskset, numactl, Slurm --cpus-per-task, a library that "
            "pins the main thread) or raise the cgroup CPU limit; or lower num_workers to fit."
        ),
        pids=tuple(p.pid for p in [main, *facts.sample.workers]),
        docs=(DOC_MULTI_PROCESS_LOADING,),
    )


def _runnable(s: Sample) -> int:
    return sum(1 for p in s.processes for t in p.threads if t.state == "R")


def _involuntary(s: Sample) -> int:
    return sum(t.nonvoluntary_ctxt_switches for p in s.processes for t in p.threads)


@rule("cpu_oversubscribed", SEVERITY_WARNING, 54, LIVE)
def cpu_oversubscribed(facts: Facts) -> Optional[Finding]:
    """More runnable threads across main and workers than usable CPUs, with involuntary context
    switches climbing: e.g. many workers each running multi-threaded numpy/torch ops (B31)."""
    main = facts.sample.main
    if main is None or not facts.sample.workers:  # not _live(facts)
        return None
    usable, how = usable_cpus(facts)
    usable = usable or float(facts.host_cpus)
    # one reading per full sample: a lean one holds its full sample's processes (NOTE [ Lean
    # ticks ] in watchdog/collect/read_plan.py), no new reading to count again
    window = samples_since(facts.timeline, facts.sample.t_mono - OVERSUBSCRIBED_WINDOW_S)
    recent = [s for s in full_samples(window) if not s.lean and s.workers and s.threads_read][-OVERSUBSCRIBED_SAMPLES:]
    if len(recent) < OVERSUBSCRIBED_MIN_SAMPLES:
        return None
    runnable = [_runnable(s) for s in recent]
    over = [r for r in runnable if r > OVERSUBSCRIBED_FACTOR * usable]
    span = recent[-1].t_mono - recent[0].t_mono
    rate = (_involuntary(recent[-1]) - _involuntary(recent[0])) / span if span > 0 else 0.0
    if len(over) < OVERSUBSCRIBED_SHARE * len(recent) or rate < OVERSUBSCRIBED_MIN_INVOLUNTARY_PER_S:
        return None
    threads = max(p.num_threads for p in facts.sample.workers)
    per_worker = max((sum(1 for t in p.threads if t.state == "R") for s in recent for p in s.workers), default=0)
    narrowed = usable < facts.host_cpus
    if per_worker > 1:
        remedy = (
            f"Workers run up to {per_worker} runnable threads each: keep one intra-op thread per worker (no "
            "torch.set_num_threads(>1) in worker_init_fn; OMP_NUM_THREADS=1 for numpy/OpenCV) and lower num_workers "
            "to the usable CPUs."
        )
    else:
        remedy = (
            "Each worker runs one thread at a time, so there are simply more busy processes than CPUs: lower "
            f"num_workers to about {max(1, int(usable) - 1)}."
        )
    if narrowed:
        remedy += (
            f" The job may use only {usable:g} of the host's {facts.host_cpus} CPUs ({how}): widen the affinity or "
            "quota it was started with."
        )
    return Finding(
        confidence=0.75,
        summary=f"A median of {statistics.median(runnable):.0f} threads compete for {usable:g} usable CPU(s); the "
        "loader slows down instead of speeding up.",
        evidence=(
            f"runnable threads (state R) across main and {len(facts.sample.workers)} workers: median "
            f"{statistics.median(runnable):.0f} over {len(recent)} samples, above {OVERSUBSCRIBED_FACTOR:g} × "
            f"{usable:g} usable CPUs ({how}) in {len(over)} of them",
            f"involuntary context switches: {rate:.0f}/s across the job",
            f"workers run up to {threads} threads each, at most {per_worker} of them runnable at once",
        ),
        remedy=remedy,
        pids=tuple(p.pid for p in [main, *facts.sample.workers]),
        docs=(DOC_MULTI_PROCESS_LOADING,),
    )


def _pinned_points(facts: Facts) -> List[Tuple[float, float]]:
    """``(t, bytes)``: the job's pinned host memory in all, at each sample where it changed."""
    points, last = [], None
    for s in facts.timeline:
        values = [p.pinned_bytes for p in s.processes if p.pinned_bytes is not None]
        if values and sum(values) != last:
            last = sum(values)
            points.append((s.t_mono, float(last)))
    return points


@rule("pinned_memory_growth", SEVERITY_WARNING, 55, LIVE)
def pinned_memory_growth(facts: Facts) -> Optional[Finding]:
    """CUDA pinned host memory (``/dev/nvidiactl`` mappings in ``smaps``) holds a large share of
    RAM or grows steadily and goes on growing (:func:`sustained_growth`: a cache that reached
    the batches' high-water mark is flat). PyTorch's CachingHostAllocator (aten/src/ATen/cuda/CachingHostAllocator.cpp)
    rounds each pinned block up to a power of two and keeps freed blocks cached for reuse, never
    returning them to the system while the process lives: ``pin_memory=True`` with large or
    variable-size batches and a deep prefetch grows it."""
    if not _live(facts):
        return None
    procs = [p for p in facts.sample.processes if p.pinned_bytes]
    if not procs:
        return None
    total = sum(p.pinned_bytes or 0 for p in procs)  # each set and non-zero
    ram = facts.sample.host.mem_total_bytes
    points = _pinned_points(facts)
    if points and points[-1][0] < facts.sample.t_mono:
        points.append((facts.sample.t_mono, points[-1][1]))  # a plateau since the last change
    growing = None
    grows = sustained_growth(points, PINNED_GROWTH_MIN_BYTES, GROWTH_MIN_BYTES_PER_S, GROWTH_MIN_R2)
    if grows is not None:
        growing = grows[:3]
    large = bool(ram and total >= PINNED_RAM_SHARE * ram)
    if not growing and not large:
        return None
    evidence = [
        f"{p.role} pid {p.pid}: {mib(p.pinned_bytes)} of pinned host memory (/dev/nvidiactl mappings in smaps)"
        for p in procs[:6]
    ]
    if ram:
        evidence.append(
            f"pinned in all: {mib(total)}, {total / ram:.0%} of RAM ({mib(ram)}); available "
            f"{mib(facts.sample.host.mem_left_bytes)}"
        )
    if growing:
        slope, grown, span = growing
        evidence.append(f"pinned memory grew by {mib(grown)} in {span:.0f} s ({slope / 2**20:.1f} MiB/s), steadily")
    for v in facts.sample.loaders:
        if v.setting("pin_memory"):
            evidence.append(
                f"{v.label}: pin_memory=True, batch_size={v.setting('batch_size')}, "
                f"num_workers={v.setting('num_workers')}, prefetch_factor={v.setting('prefetch_factor')}"
            )
    what = "grows steadily" if growing else "holds a large share of RAM"
    return Finding(
        confidence=0.7 if growing else 0.6,
        summary=f"CUDA pinned host memory {what}: {mib(total)} in all; PyTorch's caching host allocator keeps freed "
        "pinned blocks for reuse and never returns them while the process lives.",
        evidence=tuple(evidence),
        remedy=(
            "Lower what is pinned at once: prefetch_factor × num_workers × batch size with pin_memory=True; keep batch "
            "shapes fixed (each new size is cached as a new power-of-two block); or turn pin_memory off and measure "
            "(`dlwatch probe bench --pin-memory false,true`). torch.cuda.host_memory_stats() shows the allocator's "
            "own view."
        ),
        pids=tuple(p.pid for p in procs),
        docs=(DOC_PIN_MEMORY,),
    )
