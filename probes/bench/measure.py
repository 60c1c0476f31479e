"""Run one configuration in a fresh subprocess and measure it, sampling the process tree with
the watchdog's collectors (:class:`watchdog.collect.sampler.Sampler`): peak memory (sum of
USS over main and workers, bytes), peak shared memory the run's processes hold in ``/dev/shm``
(bytes: :func:`watchdog.collect.procfs.shm_held`, not the tmpfs's use by anyone) and
peak open file descriptors, while the child reports its own timings."""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

from watchdog.collect import procfs
from watchdog.collect.sampler import Sampler

from .. import module_name
from ..env import child_env, python, work_dir
from .grid import LoaderConfig

SAMPLE_PERIOD_S = 0.2
RUN_TIMEOUT_S = 600.0
WIDE_SPREAD_CV = 0.10


class RunError(Exception):
    """A benchmark run failed; the message holds the child's last error line."""


@dataclass
class Run:
    """One repeat of one configuration (seconds, samples/s, bytes; CPU seconds of main and its
    workers: ``cpu_s`` over the whole loop, ``steady_cpu_s`` over the ``steady_samples`` of the
    steady window, ``None`` when there was none); ``started_at`` is when its process was started
    (UNIX seconds), which shows the order of the runs; ``others_cpus`` how many of the machine's
    ``host_cpus`` other processes kept busy on average over its ``wall_s`` seconds
    (:mod:`.load`), ``None`` where ``/proc`` could not be read."""

    first_batch_s: float
    steady_samples_per_s: Optional[float]
    total_s: float
    samples: int
    cpu_s: float
    h2d_bytes_per_s: Optional[float]
    peak_uss_bytes: Optional[int]
    peak_shm_bytes: Optional[int]
    peak_fds: Optional[int]
    cuda: bool
    pin_memory_warning: bool
    steady_samples: Optional[int] = None
    steady_cpu_s: Optional[float] = None
    started_at: Optional[float] = None
    others_cpus: Optional[float] = None
    host_cpus: Optional[int] = None
    wall_s: Optional[float] = None

    @property
    def throughput(self) -> float:
        """Steady-state samples/s, or overall samples/s when the run was too short for a steady part."""
        return self.steady_samples_per_s or (self.samples / self.total_s if self.total_s else 0.0)

    @property
    def widening(self) -> float:
        """How much faster this run could have been without other processes (:func:`.load.widening`)."""
        from .load import widening

        return widening(self.others_cpus, self.host_cpus)

    @property
    def cpu_per_sample_s(self) -> Optional[float]:
        """CPU seconds per sample (main and workers together) over the steady window, or over
        the whole loop when there was none; ``None`` without samples."""
        if self.steady_cpu_s is not None and self.steady_samples:
            return self.steady_cpu_s / self.steady_samples
        return self.cpu_s / self.samples if self.samples else None


@dataclass
class Result:
    """All repeats of one configuration, with their summary."""

    config: LoaderConfig
    runs: List[Run] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)

    def _values(self, name: str) -> List[float]:
        return [v for v in (getattr(r, name) for r in self.runs) if v is not None]

    def median(self, name: str) -> Optional[float]:
        vals = self._values(name)
        return statistics.median(vals) if vals else None

    def span(self, name: str):
        vals = self._values(name)
        return (min(vals), max(vals)) if vals else (None, None)

    @property
    def throughput(self) -> float:
        """Median steady-state samples/s over repeats."""
        return statistics.median([r.throughput for r in self.runs]) if self.runs else 0.0

    @property
    def throughput_span(self):
        """The slowest and fastest run's samples/s, ``(0.0, 0.0)`` without runs."""
        vals = [r.throughput for r in self.runs]
        return (min(vals), max(vals)) if vals else (0.0, 0.0)

    @property
    def median_interval(self) -> Tuple[float, float]:
        """An interval of the median throughput (samples/s) that narrows as runs are added:
        :func:`median_interval` of the runs, its upper end from each run's throughput times
        :func:`.load.widening` (what other processes may have taken from it, 1 on a quiet
        machine); ``(0.0, 0.0)`` without runs."""
        lo, _ = median_interval([r.throughput for r in self.runs])
        _, hi = median_interval([r.throughput * r.widening for r in self.runs])
        return lo, hi

    @property
    def others_cpus(self) -> Optional[float]:
        """Median over runs of :attr:`Run.others_cpus` (CPUs other processes kept busy)."""
        vals = self._values("others_cpus")
        return statistics.median(vals) if vals else None

    @property
    def cv(self) -> float:
        """Coefficient of variation of throughput over repeats (0 with one repeat)."""
        vals = [r.throughput for r in self.runs]
        if len(vals) < 2 or statistics.mean(vals) == 0:
            return 0.0
        return statistics.stdev(vals) / statistics.mean(vals)

    @property
    def cpu_per_sample_s(self) -> Optional[float]:
        """Median over repeats of :attr:`Run.cpu_per_sample_s` (CPU seconds per sample)."""
        vals = [v for v in (r.cpu_per_sample_s for r in self.runs) if v is not None]
        return statistics.median(vals) if vals else None

    @property
    def cpu_utilisation(self) -> Optional[float]:
        """CPUs busy on average during a run (CPU seconds of main and workers / wall seconds)."""
        vals = [r.cpu_s / r.total_s for r in self.runs if r.total_s]
        return statistics.median(vals) if vals else None


def _sample_until_exit(proc: subprocess.Popen):
    """Sample ``proc``'s tree until it exits; ``(peak USS sum, peak shm growth, peak fds)``,
    or ``None`` after ``RUN_TIMEOUT_S``."""
    sampler = Sampler(proc.pid, full_info_interval_s=SAMPLE_PERIOD_S * 2)
    peak_uss = peak_shm = peak_fds = None
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while proc.poll() is None:
        if time.monotonic() > deadline:
            return None
        s = sampler.sample()
        uss = [p.uss_bytes for p in s.processes if p.uss_bytes is not None]
        fds = [p.num_fds for p in s.processes if p.num_fds is not None]
        if uss:
            peak_uss = max(peak_uss or 0, sum(uss))
        if fds:
            peak_fds = max(peak_fds or 0, sum(fds))
        held = procfs.shm_held([p.pid for p in s.processes])  # the run's own files, not the tmpfs's use
        peak_shm = max(peak_shm or 0, held)
        time.sleep(SAMPLE_PERIOD_S)
    return peak_uss, peak_shm, peak_fds


def run_once(config: LoaderConfig, dataset: dict, warmup_batches: int) -> Run:
    """One fresh subprocess running ``config`` over ``dataset``.

    Raises:
        RunError: the child failed or printed no result (its last stderr line is given).
    """
    if "spec" in dataset:  # --dataset's module is found in the caller's working directory, last on sys.path
        dataset = {**dataset, "folder": os.getcwd()}
    spec = {"config": config.as_dict(), "dataset": dataset, "warmup_batches": warmup_batches}
    from .load import LoadMeter

    env = child_env()
    started_at = time.time()
    meter = LoadMeter()  # the child is waited for (reaped) before stop(): its CPU time counts as ours
    # Output goes to files, not pipes: a dataset that prints a lot must not block on a full pipe.
    # The child runs -s -P in a private folder: the caller's working directory may be one another
    # user writes, and a torch.py there must not be imported (probes.env.python).
    with tempfile.TemporaryFile("w+") as out_f, tempfile.TemporaryFile("w+") as err_f, work_dir() as cwd:
        proc = subprocess.Popen(
            python("-m", module_name("bench.child"), json.dumps(spec)),
            stdout=out_f,
            stderr=err_f,
            text=True,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        try:
            peaks = _sample_until_exit(proc)
        finally:
            if proc.poll() is None:  # timed out, interrupted or failed here: leave nothing behind
                from ..repro import kill_session

                kill_session(proc)
        if peaks is None:
            raise RunError(f"{config.label()}: no result within {RUN_TIMEOUT_S:g} s")
        out_f.seek(0)
        err_f.seek(0)
        out, err = out_f.read(), err_f.read()
    load = meter.stop()
    peak_uss, peak_shm, peak_fds = peaks
    line = next((x for x in out.splitlines() if x.startswith("BENCH-RESULT ")), None)
    if proc.returncode != 0 or line is None:
        last = (err.strip().splitlines() or ["no output"])[-1]
        raise RunError(f"{config.label()}: the run failed (exit code {proc.returncode}): {last}")
    data = json.loads(line[len("BENCH-RESULT ") :])
    return Run(
        first_batch_s=data["first_batch_s"] or 0.0,
        steady_samples_per_s=data["steady_samples_per_s"],
        total_s=data["total_s"],
        samples=data["samples"],
        cpu_s=data["cpu_s"],
        h2d_bytes_per_s=data["h2d_bytes_per_s"],
        peak_uss_bytes=peak_uss,
        peak_shm_bytes=peak_shm,
        peak_fds=peak_fds,
        cuda=data["cuda"],
        pin_memory_warning=data["pin_memory_warning"],
        steady_samples=data.get("steady_samples"),
        steady_cpu_s=data.get("steady_cpu_s"),
        started_at=started_at,
        others_cpus=load.others_cpus if load else None,
        host_cpus=load.host_cpus if load else None,
        wall_s=load.wall_s if load else None,
    )


def annotate(result: Result) -> Result:
    """Set ``result.notes`` from its runs (spread, short runs, pin_memory without CUDA); returns it."""
    notes = []
    if result.cv > WIDE_SPREAD_CV:
        notes.append(
            f"wide spread: throughput varies {result.cv:.0%} (coefficient of variation) over {len(result.runs)} repeats"
        )
    if any(r.steady_samples_per_s is None for r in result.runs):
        notes.append("some runs were too short for a steady state: their overall rate (samples / total time) was used")
    if result.config.pin_memory and not any(r.cuda for r in result.runs):
        notes.append("pin_memory: no effect without CUDA (torch starts no pin-memory thread)")
    result.notes = notes
    return result


def median_interval(values: Sequence[float], alpha: float = 0.05) -> Tuple[float, float]:
    """The distribution-free interval of the median of ``values`` at confidence ``1 - alpha``
    (or more): the order statistics ``x(j)`` and ``x(n+1-j)``, ``j`` the largest rank with
    ``P(Binomial(n, 1/2) < j) <= alpha / 2`` and at least 1. Up to 5 values it is their whole
    range; it narrows with more (ranks 2..8 of 9, 4..12 of 15), unlike the range, which only
    widens. The method: the sign-test interval of the median (W. J. Conover, *Practical
    Nonparametric Statistics*, the confidence interval for a quantile). ``(0.0, 0.0)`` for none."""
    xs = sorted(values)
    n = len(xs)
    if not n:
        return (0.0, 0.0)
    j, below = 1, 0.0
    for k in range(n):  # below: P(B < k + 1) after adding P(B = k)
        below += math.comb(n, k) / 2**n
        if below > alpha / 2:
            break
        j = k + 1
    j = max(1, min(j, (n + 1) // 2))
    return (xs[j - 1], xs[n - j])


def measure_side_by_side(
    results: Sequence[Result], dataset: dict, repeats: int, warmup_batches: int, on_run=None
) -> List[Result]:
    """``repeats`` more fresh runs of each result's configuration, added to its runs, side by
    side: each round runs every configuration once, in an order rotated by one each round, so
    that a drift of the machine (another job, thermal throttling, the page cache) falls on every
    configuration alike instead of on whichever ran last. ``on_run(result)`` is called after
    each run with the result it was added to (progress). Returns ``results``, annotated (:func:`annotate`).

    Raises:
        RunError: a run failed (the runs so far stay in their results).
    """
    n = len(results)
    for round_ in range(repeats):
        for k in range(n):
            r = results[(k + round_) % n]
            r.runs.append(run_once(r.config, dataset, warmup_batches))
            if on_run is not None:
                on_run(r)
    return [annotate(r) for r in results]
