"""``dlwatch verify`` on an ``input_bound`` warning: the change proven by throughput (issue #38).

NOTE [ Throughput A/B ]
A hang fix is proven by runs that stop (Boschloo's test in :mod:`watchdog.commands.verify_verdict`); a
change for an input-bound job (``remedy_apply`` of the ``input_bound`` warning: more workers,
``persistent_workers=True``, fewer workers) is proven by speed. ``verify`` runs the job's own
command without the change (A) and with it (B), alternating A B A B …, each run bounded by
batches: it ends once main's DataLoader iterators delivered ``warmup + measured`` batches (as the
job's recorder counts them, :class:`watchdog.commands.verify_runs.RunBound`) or after a time bound.
Each run's rate is batches per second past its first ``warmup`` batches (worker start, imports,
the first prefetch), from the ``(seconds, batches)`` points the bounded run records at each
sample (:func:`rate_past_warmup`).

The statistic: the log of each pair's ratio (run *i* with the change over run *i* without), and a
Student t-interval on their mean, exponentiated: the geometric mean ratio with its interval
(:func:`interval`; W. S. Gosset ("Student"), "The probable error of a mean", Biometrika 6, 1908;
ratios of paired runs with their confidence interval, as T. Kalibera and R. Jones recommend in
"Rigorous benchmarking in reasonable time", ISMM 2013). Pairing adjacent runs cancels a load on
the machine that changes slowly; a load that changes between the two runs of a pair shows in
the spread of the log-ratios, hence in the interval. On a busy machine the spread itself is
less to be trusted (the load need not vary at random), so the interval's half-width is
multiplied by :func:`widening`, ``1 / (1 - s)`` for others' share ``s`` of the CPUs (from
``BUSY_SHARE``; at most ``1 / (1 - WITHHOLD_SHARE)``, the factor ``dlwatch probe bench`` also
uses). Other processes' CPU use is not subtracted or modelled per run: the runs' own demand
changes it (a job with more workers leaves the others less), so it is no independent measure of
the conditions. The change **gains** only when the
interval's low end is above 1, **slows** the job when its high end is below 1, and is
**within the noise** otherwise; fewer than two measured pairs say nothing.

Other processes' CPU use during each run (:class:`LoadMeter`): the CPU time all CPUs spent busy
(``/proc/stat`` via ``psutil.cpu_times()``: user, nice, system, irq, softirq and steal; proc(5))
less the CPU time of the run's own processes (``dlwatch run``, the job and its workers, seen
by polling their ``/proc/PID/stat`` through ``psutil``) and of this process, over the wall
time. From ``BUSY_SHARE`` of the machine's CPUs on average the verdict says the machine was
busy; from ``--busy-limit`` (``WITHHOLD_SHARE`` by default) it withholds the verdict (the
ratio and interval are still given).

The ladder (``--ladder``, for a ``num_workers`` change): the candidates double from the
report's value up to the usable CPUs (:func:`ladder_candidates`); each rung runs the next
candidate against the last one that gained, and the ladder stops at the first rung whose
gain is not shown (:func:`ladder_pick`).
"""

from __future__ import annotations

import math
import os
import subprocess
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from ..types import THROUGHPUT_FIX_KINDS

# The report kinds whose change verify proves by throughput rather than by a failure that stops.
KINDS = THROUGHPUT_FIX_KINDS
# Batches of each run not measured: the workers' start, imports, the first prefetch.
WARMUP_BATCHES = 10
# The measured batches of a run by default: what the original delivered in this many seconds,
# within [MIN_MEASURED, MAX_MEASURED].
MEASURE_S = 12.0
MIN_MEASURED, MAX_MEASURED = 40, 2000
# The time bound by default is at most this (below verify's --max-run-s default, 900 s).
MAX_SECONDS = 600.0
# A run's rate needs at least this many measured batches over at least this many seconds.
MIN_RATE_BATCHES, MIN_RATE_S = 5, 1.0
# Pairs of runs (each A then B) by default: four degrees of freedom (t = 2.78 at 95 %).
DEFAULT_PAIRS = 5
CONFIDENCE = 0.95
# Other processes' CPU use as a share of the machine's CPUs (mean over the runs): from
# BUSY_SHARE the machine was busy (said); from WITHHOLD_SHARE (the default of --busy-limit) the
# verdict is withheld.
BUSY_SHARE = 0.10
WITHHOLD_SHARE = 0.50
# Seconds between the load meter's looks at the run's processes.
POLL_S = 1.0
# The most (seconds, batches) points a run keeps (thinned beyond).
MAX_PROGRESS = 4000

GAIN, LOSS, NOISE, WITHHELD, CANNOT = "gain", "slower", "noise", "withheld", "cannot"

# Two-sided 97.5 % quantiles of Student's t for 1..30 degrees of freedom (any statistics table,
# e.g. NIST/SEMATECH e-Handbook of Statistical Methods, table 1.3.6.7.2).
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t975(df: int) -> float:
    """The 97.5 % quantile of Student's t with ``df`` degrees of freedom (the factor of a 95 %
    two-sided interval): the table for 1..30, beyond it the normal quantile with the first
    term of its Cornish-Fisher expansion, ``z + (z**3 + z) / (4 df)`` (within 0.001 from 31 on).

    Raises:
        ValueError: ``df`` below 1.
    """
    if df < 1:
        raise ValueError("degrees of freedom must be at least 1")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df)


@dataclass(frozen=True)
class Bound:
    """How far each run goes: ``warmup`` batches not measured, then ``measured`` more (the
    run ends at ``warmup + measured``), or after ``seconds`` (whichever comes first)."""

    warmup: int
    measured: int
    seconds: float

    @property
    def batches(self) -> int:
        return self.warmup + self.measured


def bound_for(
    original_batches: Optional[int],
    original_s: Optional[float],
    batches: Optional[int] = None,
    seconds: Optional[float] = None,
    warmup: int = WARMUP_BATCHES,
) -> Bound:
    """The runs' :class:`Bound`: ``batches`` measured (``--batches``) or what the original
    delivered in ``MEASURE_S`` seconds (its batches over its running time, in seconds), within
    ``MIN_MEASURED``..``MAX_MEASURED``; ``seconds`` (``--seconds``) or three times the time the
    original would take for the whole run plus 30 s to start, within 60 s..``MAX_SECONDS``."""
    rate = original_batches / original_s if original_batches and original_s and original_s > 0 else None
    if batches is None:
        batches = MIN_MEASURED if rate is None else int(min(MAX_MEASURED, max(MIN_MEASURED, round(rate * MEASURE_S))))
    if seconds is None:
        seconds = 120.0 if rate is None else min(MAX_SECONDS, max(60.0, 3.0 * (warmup + batches) / rate + 30.0))
    return Bound(warmup, batches, float(seconds))


def parse_progress(value: object) -> Tuple[Tuple[float, int], ...]:
    """The ``progress`` of a run summary (``[[seconds, batches], …]``) as pairs, dropping any
    entry that is not two numbers; ``()`` for anything else. Raises nothing."""
    out = []
    if isinstance(value, list):
        for item in value:
            if (
                isinstance(item, list)
                and len(item) == 2
                and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in item)
            ):
                out.append((float(item[0]), int(item[1])))
    return tuple(out)


def thin(progress: List[Tuple[float, int]]) -> List[Tuple[float, int]]:
    """``progress`` with every other point dropped (the first and last kept), once it holds more
    than ``MAX_PROGRESS``: the rate past any warm-up moves by at most one sample's spacing."""
    if len(progress) <= MAX_PROGRESS:
        return progress
    return progress[:1] + progress[1:-1:2] + progress[-1:]


def rate_past_warmup(progress: Sequence[Tuple[float, int]], warmup: int) -> Optional[Tuple[int, float]]:
    """``(batches, seconds)`` measured past the warm-up: from the first point (seconds since the
    run's start, batches delivered) at or past ``warmup`` batches to the last one; ``None``
    when that is under ``MIN_RATE_BATCHES`` batches or ``MIN_RATE_S`` seconds (the run ended, or
    was ended, too soon to measure)."""
    start = next((p for p in progress if p[1] >= warmup), None)
    if start is None or not progress:
        return None
    end = progress[-1]
    n, s = end[1] - start[1], end[0] - start[0]
    if n < MIN_RATE_BATCHES or s < MIN_RATE_S:
        return None
    return n, s


@dataclass(frozen=True)
class Run:
    """One run as the statistics see it: ``arm`` (``"A"`` without the change, ``"B"`` with it),
    ``index`` (its pair, from 1), ``rate`` (batches/s past the warm-up; ``None``: not measured),
    ``others_cpus`` (other processes' CPUs in use on average during it; ``None``: not measured)
    of ``host_cpus``, and ``problem`` (why it does not count: it hung, crashed, the change was not
    seen applied, …; ``""``: it counts)."""

    arm: str
    index: int
    rate: Optional[float]
    others_cpus: Optional[float] = None
    host_cpus: Optional[int] = None
    problem: str = ""


def widening(share: Optional[float]) -> float:
    """The factor on the interval's half-width for other processes' ``share`` (0..1) of the
    CPUs during the runs: ``1 / (1 - share)`` from ``BUSY_SHARE`` on, at most ``1 / (1 -
    WITHHOLD_SHARE)`` (2.0); 1.0 below it or without a measurement."""
    if share is None or share < BUSY_SHARE:
        return 1.0
    return 1.0 / (1.0 - min(share, WITHHOLD_SHARE))


@dataclass(frozen=True)
class Interval:
    """The ratio B/A (geometric mean over ``n`` pairs) and its ``confidence`` interval
    ``low``..``high``; ``widened_by`` the factor on its half-width (in log units) for the
    others' load (1.0: not), ``sd`` the standard deviation of the log-ratios."""

    ratio: float
    low: float
    high: float
    n: int
    sd: float
    widened_by: float = 1.0
    confidence: float = CONFIDENCE


def interval(log_ratios: Sequence[float], widen: float = 1.0) -> Optional[Interval]:
    """Student's t-interval (95 %) on the mean of ``log_ratios`` (each ``ln(B_i / A_i)`` of one
    pair), its half-width multiplied by ``widen`` (at least 1), exponentiated; ``None`` with
    fewer than two. Raises nothing."""
    n = len(log_ratios)
    if n < 2:
        return None
    mean = sum(log_ratios) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in log_ratios) / (n - 1))
    widen = max(1.0, widen)
    half = t975(n - 1) * sd / math.sqrt(n) * widen
    return Interval(math.exp(mean), math.exp(mean - half), math.exp(mean + half), n, sd, widen)


def paired_interval(
    without: Sequence[float], with_: Sequence[float], share: Optional[float] = None
) -> Optional[Interval]:
    """The ratio with/without of paired runs and its :func:`interval`: pair *i* is
    ``(without[i], with_[i])`` (rates in one unit: batches/s, samples/s; runs adjacent in time),
    a pair with a rate that is not above 0 is left out; the half-width is widened by
    :func:`widening` of ``share`` (other processes' share of the CPUs during the runs, ``None``:
    not measured). ``None`` with fewer than two pairs. The one statistic of every paired A/B:
    ``dlwatch verify``'s throughput runs (:func:`judge`) and ``dlwatch probe seed-check``'s
    claims (``probes.bench.commands.ratio_interval``). Raises nothing."""
    logs = [math.log(b / a) for a, b in zip(without, with_) if a > 0 and b > 0]
    return interval(logs, widening(share))


@dataclass(frozen=True)
class Load:
    """Other processes' CPU use over the runs: ``others_cpus`` (CPUs they kept busy on average)
    of ``host_cpus``."""

    others_cpus: float
    host_cpus: int

    @property
    def share(self) -> float:
        return min(1.0, self.others_cpus / self.host_cpus) if self.host_cpus else 0.0


def load_of(runs: Sequence[Run]) -> Optional[Load]:
    """The mean of the runs' other-process loads (``None``: none measured)."""
    seen = [r for r in runs if r.others_cpus is not None and r.host_cpus]
    if not seen:
        return None
    return Load(sum(r.others_cpus or 0.0 for r in seen) / len(seen), max(r.host_cpus or 1 for r in seen))


@dataclass(frozen=True)
class Judgement:
    """The verdict on the runs: ``state`` (``gain``, ``slower``, ``noise``, ``withheld``,
    ``cannot``), its ``line``, the :class:`Interval` (``None``: too few pairs), the rates of
    each arm (batches/s), the others' :class:`Load` and the line that says it."""

    state: str
    line: str
    interval: Optional[Interval]
    rates_a: Tuple[float, ...]
    rates_b: Tuple[float, ...]
    load: Optional[Load]
    load_line: str

    @property
    def holds(self) -> bool:
        return self.state == GAIN

    def as_dict(self) -> Dict[str, object]:
        """The judgement as ``verify.json`` holds it (``throughput``)."""
        iv = self.interval
        return {
            "state": self.state,
            "line": self.line,
            "ratio": None if iv is None else round(iv.ratio, 4),
            "low": None if iv is None else round(iv.low, 4),
            "high": None if iv is None else round(iv.high, 4),
            "pairs": 0 if iv is None else iv.n,
            "confidence": CONFIDENCE,
            "method": "Student t-interval on the mean log-ratio of paired alternating runs",
            "widened_by": None if iv is None else round(iv.widened_by, 4),
            "batches_per_s_without": [round(x, 3) for x in self.rates_a],
            "batches_per_s_with": [round(x, 3) for x in self.rates_b],
            "others_cpus": None if self.load is None else round(self.load.others_cpus, 3),
            "host_cpus": None if self.load is None else self.load.host_cpus,
            "load": self.load_line,
        }


def _median(values: Sequence[float]) -> float:
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def load_line(load: Optional[Load], limit: float) -> str:
    """``the machine was busy: other processes used 1.30 of 2 CPUs on average during the runs …``
    or its quiet form; says when it was not measured."""
    if load is None:
        return "machine load: not measured (no /proc): other processes may have shared the machine"
    state = "busy" if load.share >= BUSY_SHARE else "quiet"
    line = (
        f"the machine was {state}: other processes used {load.others_cpus:.2f} of {load.host_cpus} CPUs on average "
        f"during the runs ({load.share:.0%})"
    )
    if load.share >= limit:
        return line + f"; at --busy-limit {limit:g} or more the verdict is withheld"
    if load.share >= BUSY_SHARE:
        return line + f"; the interval is widened {widening(load.share):.2f}x"
    return line


def _unmeasured(pairs: Sequence[Tuple[Run, Run]], what: str) -> str:
    """``; left out: …`` naming each run of ``pairs`` that has no rate (it ended within
    ``MIN_RATE_BATCHES`` batches or ``MIN_RATE_S`` seconds of its warm-up, or within one
    progress note of it), its pair with it; "" when every run was measured."""
    missing = [
        f"run {r.index} {'with' if r.arm == 'B' else 'without'} {what}" for a, b in pairs for r in (a, b) if not r.rate
    ]
    if not missing:
        return ""
    return f"; left out, too short past the warm-up to measure (give more --batches): {', '.join(missing)}"


def judge(runs: Sequence[Run], what: str, busy_limit: float = WITHHOLD_SHARE) -> Judgement:
    """Judge alternating runs (:class:`Run`, arm ``A`` then ``B`` for each index): pairs with a
    rate on both sides give the log-ratios; the interval (:func:`interval`) is widened by
    :func:`widening` of the others' share. ``what`` names the change in the line. A run with a ``problem``
    makes the verdict ``cannot`` (said with the run), as do fewer than two measured pairs; the
    machine busy at ``busy_limit`` (a share of its CPUs) or more makes it ``withheld``."""
    by = {(r.arm, r.index): r for r in runs}
    pairs = [(by[("A", i)], by[("B", i)]) for i in sorted({r.index for r in runs}) if ("A", i) in by and ("B", i) in by]
    load = load_of(runs)
    said = load_line(load, busy_limit)
    rates_a = tuple(r.rate for r in runs if r.arm == "A" and r.rate is not None)
    rates_b = tuple(r.rate for r in runs if r.arm == "B" and r.rate is not None)
    bad = next((r for r in runs if r.problem), None)
    if bad is not None:
        side = "with" if bad.arm == "B" else "without"
        return Judgement(
            CANNOT,
            f"not proven: run {bad.index} {side} {what} {bad.problem}",
            None,
            rates_a,
            rates_b,
            load,
            said,
        )
    measured = [(a.rate, b.rate) for a, b in pairs if a.rate and b.rate]
    iv = paired_interval([a for a, _ in measured], [b for _, b in measured], None if load is None else load.share)
    unmeasured = _unmeasured(pairs, what)
    if iv is None:
        return Judgement(
            CANNOT,
            f"cannot say: {len(measured)} pair(s) of runs measured past the warm-up (needs 2): give more --runs or "
            "more --batches" + unmeasured,
            None,
            rates_a,
            rates_b,
            load,
            said,
        )
    figures = (
        f"{iv.ratio:.2f}x the batches/s (95 % interval {iv.low:.2f}-{iv.high:.2f}x, a t-interval on the "
        f"log-ratios of {iv.n} alternating pairs"
        + (f", widened {iv.widened_by:.2f}x for the others' load" if iv.widened_by > 1.005 else "")
        + f"); median {_median(rates_a):.3g} batches/s without, {_median(rates_b):.3g} with"
        + unmeasured
    )
    if load is not None and load.share >= busy_limit:
        return Judgement(
            WITHHELD,
            f"withheld: the machine was busy ({load.share:.0%} of its CPUs used by other processes, --busy-limit "
            f"{busy_limit:g}); measured with {what}: {figures}",
            iv,
            rates_a,
            rates_b,
            load,
            said,
        )
    if iv.low > 1.0:
        state, head = GAIN, f"the change speeds the job up: with {what} it ran {figures}"
    elif iv.high < 1.0:
        state, head = LOSS, f"the change slows the job down: with {what} it ran {figures}"
    else:
        state, head = NOISE, f"no gain shown: the interval holds 1 (within the noise): with {what} it ran {figures}"
    return Judgement(state, head, iv, rates_a, rates_b, load, said)


def ladder_candidates(first: int, usable: int) -> List[int]:
    """``num_workers`` to try, in order: ``first`` (the report's), then doubling while at most
    ``usable`` CPUs (``first`` is tried whatever ``usable`` says)."""
    out = [max(0, first)]
    while out[-1] > 0 and out[-1] * 2 <= usable:
        out.append(out[-1] * 2)
    return out


def ladder_pick(rungs: Sequence[Tuple[int, str]]) -> Tuple[Optional[int], bool]:
    """``(the num_workers to recommend, whether to climb on)`` after ``rungs`` (each
    ``(candidate, state)`` of :func:`judge`, in order, each against the last that gained): the
    last candidate of the unbroken run of gains from the first rung (``None``: the first did not
    gain), and climb on only while every rung so far gained."""
    best: Optional[int] = None
    for candidate, state in rungs:
        if state != GAIN:
            return best, False
        best = candidate
    return best, True


def busy_cpu_s() -> Tuple[Optional[float], int]:
    """``(CPU seconds all CPUs spent busy since boot, CPUs)``: user + nice + system + irq +
    softirq + steal of ``psutil.cpu_times()`` (``/proc/stat``'s ``cpu`` line; guest time is
    inside user and nice, proc(5)); ``(None, cpus)`` when unreadable. Raises nothing."""
    import psutil

    cpus = psutil.cpu_count() or os.cpu_count() or 1
    try:
        t = psutil.cpu_times()
    except (OSError, psutil.Error):
        return None, cpus
    parts = ("user", "nice", "system", "irq", "softirq", "steal")
    return sum(float(getattr(t, p, 0.0) or 0.0) for p in parts), cpus


def _own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


class LoadMeter:
    """Other processes' CPU use during one run: :meth:`poll` (every ``POLL_S`` while the run
    goes) notes the CPU time of each process under the run's root (``dlwatch run``, the job,
    its workers: ``psutil`` children, keyed by pid and start time so a reused pid is another
    process); :meth:`stop` gives ``(others' CPUs on average, host CPUs)``: the machine's busy CPU
    time less theirs and this process's, over the wall time. The last ``POLL_S`` of a process
    that ended unseen counts as others'; a process shorter than ``POLL_S`` may be missed."""

    def __init__(self) -> None:
        self._wall = time.monotonic()
        self._busy, self._cpus = busy_cpu_s()
        self._own = _own_cpu_s()
        self._seen: Dict[Tuple[int, float], float] = {}

    def poll(self, root: int) -> None:
        """Note the CPU time of ``root`` and its descendants now. Raises nothing."""
        import psutil

        try:
            top = psutil.Process(root)
            procs = [top, *top.children(recursive=True)]
        except psutil.Error:
            return
        for p in procs:
            try:
                with p.oneshot():
                    key = (p.pid, p.create_time())
                    t = p.cpu_times()
            except psutil.Error:
                continue
            self._seen[key] = max(self._seen.get(key, 0.0), t.user + t.system)

    def stop(self) -> Tuple[Optional[float], int]:
        """``(others' CPUs on average since the start, host CPUs)``; ``None`` for the first
        when ``/proc/stat`` could not be read."""
        wall = time.monotonic() - self._wall
        busy, cpus = busy_cpu_s()
        if busy is None or self._busy is None or wall <= 0:
            return None, max(cpus, self._cpus)
        ours = sum(self._seen.values()) + (_own_cpu_s() - self._own)
        return max(0.0, (busy - self._busy) - ours) / wall, max(cpus, self._cpus)


def wait_measuring(proc: subprocess.Popen, timeout_s: float, meter: LoadMeter) -> int:
    """``proc.wait(timeout_s)``, polling ``meter`` on ``proc``'s tree every ``POLL_S`` meanwhile.

    Raises:
        subprocess.TimeoutExpired: ``proc`` still runs after ``timeout_s`` seconds.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise subprocess.TimeoutExpired(proc.args, timeout_s)
        meter.poll(proc.pid)
        try:
            return proc.wait(min(POLL_S, left))
        except subprocess.TimeoutExpired:
            continue
