"""Warnings, from the timeline alone, while the job runs (``live`` mode; never stops it).

Thresholds are fractions of the limit the kernel enforces (RLIMIT_NOFILE, ``/dev/shm`` size,
usable CPUs) or growth well above noise; healthy jobs stay below them.
"""

from __future__ import annotations

import statistics
from typing import List, Optional, Tuple

from ..types import MODE_LIVE, SEVERITY_WARNING, Diagnosis, Facts, Sample
from .common import DOC_MEMORY_LEAK, DOC_MULTI_PROCESS_LOADING, DOC_SHARING_STRATEGIES, mib
from .engine import rule

PRESSURE_FRACTION = 0.8
# Copy-on-read growth: at least this much per worker, this fast, fitted this well.
GROWTH_MIN_BYTES = 64 * 2**20
GROWTH_MIN_BYTES_PER_S = 1 * 2**20
GROWTH_MIN_R2 = 0.8
GROWTH_MIN_POINTS = 4
# Oversubscription: runnable threads above this multiple of usable CPUs, in this share of samples.
OVERSUBSCRIBED_FACTOR = 2.0
OVERSUBSCRIBED_SHARE = 0.6
OVERSUBSCRIBED_MIN_SAMPLES = 5
OVERSUBSCRIBED_MIN_INVOLUNTARY_PER_S = 100.0


def _live(facts: Facts) -> bool:
    return facts.mode == MODE_LIVE and facts.sample.main is not None


def fit_line(points: List[Tuple[float, float]]) -> Tuple[float, float]:
    """Least-squares slope and R² of ``(x, y)`` points (x in seconds, y in bytes)."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    syy = sum((y - my) ** 2 for _, y in points)
    sxy = sum((x - mx) * (y - my) for x, y in points)
    if sxx == 0 or syy == 0:
        return 0.0, 0.0
    return sxy / sxx, (sxy * sxy) / (sxx * syy)


@rule(rank=50)
def worker_memory_growth(facts: Facts) -> Optional[Diagnosis]:
    """Workers' USS grows steadily: the copy-on-read effect (reference counting writes to every
    page of Python objects a worker touches, un-sharing the parent's copy-on-write pages;
    pytorch/pytorch#13246)."""
    if not _live(facts):
        return None
    growing = []
    for w in facts.sample.workers:
        points, last = [], None
        for s in facts.timeline:
            p = s.process(w.pid)
            if p is not None and p.create_time == w.create_time and p.uss_bytes is not None and p.uss_bytes != last:
                points.append((s.t_mono, float(p.uss_bytes)))
                last = p.uss_bytes
        if len(points) < GROWTH_MIN_POINTS:
            continue
        slope, r2 = fit_line(points)
        grown = points[-1][1] - points[0][1]
        if slope >= GROWTH_MIN_BYTES_PER_S and r2 >= GROWTH_MIN_R2 and grown >= GROWTH_MIN_BYTES:
            growing.append((w.pid, slope, grown, points[-1][0] - points[0][0], points[-1][1]))
    if not growing:
        return None
    total_slope = sum(g[1] for g in growing)
    avail = facts.sample.host.mem_available_bytes
    eta_s = avail / total_slope if total_slope > 0 else float("inf")
    evidence = [
        f"worker pid {pid}: USS +{mib(grown)} in {span:.0f} s ({slope / 2**20:.1f} MiB/s, now {mib(now)})"
        for pid, slope, grown, span, now in growing
    ]
    evidence.append(
        f"available memory {mib(avail)}: exhausted in about {eta_s / 60:.0f} min at {total_slope / 2**20:.1f} MiB/s across workers"
    )
    return Diagnosis(
        kind="worker_memory_growth",
        severity=SEVERITY_WARNING,
        confidence=0.7,
        summary=f"{len(growing)} DataLoader worker(s) grow steadily ({total_slope / 2**20:.1f} MiB/s together); memory runs out in about {eta_s / 60:.0f} min at this rate.",
        evidence=tuple(evidence),
        remedy=(
            "Hold the Dataset's metadata in numpy arrays, Arrow tables or tensors instead of Python lists/dicts/strings "
            "(each Python object touched in a worker un-shares its page); or lower num_workers."
        ),
        pids=tuple(g[0] for g in growing),
        docs=(DOC_MEMORY_LEAK, DOC_MULTI_PROCESS_LOADING),
    )


@rule(rank=51)
def fd_pressure(facts: Facts) -> Optional[Diagnosis]:
    """Open file descriptors above 80% of RLIMIT_NOFILE in a process of the job."""
    if not _live(facts):
        return None
    hot = [p for p in facts.sample.processes if p.num_fds and p.rlimit_nofile_soft and p.num_fds > PRESSURE_FRACTION * p.rlimit_nofile_soft]
    if not hot:
        return None
    return Diagnosis(
        kind="fd_pressure",
        severity=SEVERITY_WARNING,
        confidence=0.8,
        summary=f"{len(hot)} process(es) use over {PRESSURE_FRACTION:.0%} of their file-descriptor limit; the loader fails with 'Too many open files' at 100%.",
        evidence=tuple(f"{p.role} pid {p.pid}: {p.num_fds} open file descriptors of RLIMIT_NOFILE {p.rlimit_nofile_soft}" for p in hot),
        remedy='torch.multiprocessing.set_sharing_strategy("file_system"), or raise the limit (ulimit -n); keep fewer batches alive in main.',
        pids=tuple(p.pid for p in hot),
        docs=(DOC_SHARING_STRATEGIES,),
    )


@rule(rank=52)
def shm_pressure(facts: Facts) -> Optional[Diagnosis]:
    """``/dev/shm`` (as the job sees it) more than 80% full."""
    if not _live(facts):
        return None
    h = facts.sample.host
    if not h.shm_total_bytes or h.shm_used_bytes is None or h.shm_used_bytes <= PRESSURE_FRACTION * h.shm_total_bytes:
        return None
    return Diagnosis(
        kind="shm_pressure",
        severity=SEVERITY_WARNING,
        confidence=0.8,
        summary=f"/dev/shm is {h.shm_used_bytes / h.shm_total_bytes:.0%} full ({mib(h.shm_used_bytes)} of {mib(h.shm_total_bytes)}); workers crash with a bus error when it fills.",
        evidence=(f"/dev/shm: {mib(h.shm_used_bytes)} used of {mib(h.shm_total_bytes)} (statvfs, as the job sees it)",),
        remedy="Give the job more shared memory (docker --shm-size, --ipc=host, a Memory emptyDir on Kubernetes) or lower batch_size × prefetch_factor × num_workers.",
        pids=(facts.sample.main.pid,),
        docs=(DOC_MULTI_PROCESS_LOADING,),
    )


def usable_cpus(facts: Facts) -> Tuple[Optional[float], str]:
    """CPUs the job may use: the smaller of main's affinity and its cgroup quota, and how it was known."""
    main = facts.sample.main
    options = []
    if main.cpu_affinity:
        options.append((float(main.cpu_affinity), f"CPU affinity {main.cpu_affinity}"))
    if main.cpu_quota:
        options.append((main.cpu_quota, f"cgroup cpu.max quota {main.cpu_quota:g} CPUs"))
    if not options:
        return None, "unknown"
    return min(options)


@rule(rank=53)
def cpu_affinity_narrowed(facts: Facts) -> Optional[Diagnosis]:
    """The job may use fewer CPUs than the host has, and fewer than ``num_workers + 1``: every
    worker inherits the parent's affinity (field notes B32)."""
    if not _live(facts) or not facts.sample.workers:
        return None
    usable, how = usable_cpus(facts)
    n = len(facts.sample.workers)
    if usable is None or usable >= facts.host_cpus or usable >= n + 1:
        return None
    return Diagnosis(
        kind="cpu_affinity_narrowed",
        severity=SEVERITY_WARNING,
        confidence=0.85,
        summary=f"The job may use {usable:g} CPU(s) ({how}) on a {facts.host_cpus}-CPU host, for the main process and {n} workers.",
        evidence=tuple(f"{p.role} pid {p.pid}: CPU affinity {p.cpu_affinity} CPU(s)" for p in [facts.sample.main, *facts.sample.workers]),
        remedy=(
            "Widen the affinity the job was started with (taskset, numactl, Slurm --cpus-per-task, a library that pins the "
            "main thread) or raise the cgroup CPU limit; or lower num_workers to fit."
        ),
        pids=tuple(p.pid for p in [facts.sample.main, *facts.sample.workers]),
        docs=(DOC_MULTI_PROCESS_LOADING,),
    )


def _runnable(s: Sample) -> int:
    return sum(1 for p in s.processes for t in p.threads if t.state == "R")


def _involuntary(s: Sample) -> int:
    return sum(t.nonvoluntary_ctxt_switches for p in s.processes for t in p.threads)


@rule(rank=54)
def cpu_oversubscribed(facts: Facts) -> Optional[Diagnosis]:
    """More runnable threads across main and workers than usable CPUs, with involuntary context
    switches climbing: e.g. many workers each running multi-threaded numpy/torch ops (B31)."""
    if not _live(facts) or not facts.sample.workers:
        return None
    usable, how = usable_cpus(facts)
    usable = usable or float(facts.host_cpus)
    recent = [s for s in facts.timeline[-30:] if s.workers]
    if len(recent) < OVERSUBSCRIBED_MIN_SAMPLES:
        return None
    runnable = [_runnable(s) for s in recent]
    over = [r for r in runnable if r > OVERSUBSCRIBED_FACTOR * usable]
    span = recent[-1].t_mono - recent[0].t_mono
    rate = (_involuntary(recent[-1]) - _involuntary(recent[0])) / span if span > 0 else 0.0
    if len(over) < OVERSUBSCRIBED_SHARE * len(recent) or rate < OVERSUBSCRIBED_MIN_INVOLUNTARY_PER_S:
        return None
    threads = max(p.num_threads for p in facts.sample.workers)
    return Diagnosis(
        kind="cpu_oversubscribed",
        severity=SEVERITY_WARNING,
        confidence=0.75,
        summary=f"A median of {statistics.median(runnable):.0f} threads compete for {usable:g} usable CPU(s); the loader slows down instead of speeding up.",
        evidence=(
            f"runnable threads (state R) across main and {len(facts.sample.workers)} workers: median {statistics.median(runnable):.0f} over {len(recent)} samples, above {OVERSUBSCRIBED_FACTOR:g} × {usable:g} usable CPUs ({how}) in {len(over)} of them",
            f"involuntary context switches: {rate:.0f}/s across the job",
            f"workers run up to {threads} threads each",
        ),
        remedy="Keep one intra-op thread per worker (do not call torch.set_num_threads(>1) in worker_init_fn; set OMP_NUM_THREADS=1 for numpy/OpenCV) and lower num_workers to the usable CPUs.",
        pids=tuple(p.pid for p in [facts.sample.main, *facts.sample.workers]),
        docs=(DOC_MULTI_PROCESS_LOADING,),
    )
