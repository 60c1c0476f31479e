"""When the sampler reads a process's memory: the slow, adaptive cadence of its
``smaps_rollup`` and ``maps`` reads (USS, PSS, private dirty memory, the map count, the mapped
data files, pinned memory), decided from the last reads (:func:`due`, :func:`next_interval`),
and the budget of such reads a node's ranks share (:class:`MemoryReadBudget`). Reads nothing
itself: :class:`watchdog.collect.sampler.Sampler` does the reads and keeps the records.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import List, Mapping, Optional, Tuple

from ..types import ROLE_MAIN, ROLE_WORKER, HostSample, ProcId

# Adaptive USS cadence (due): a process whose USS moved less than this many
# bytes a second between two reads (a tenth of the slowest growth worker_memory_growth warns
# about, 1 MiB/s in watchdog/diagnose/live.py), whose map count moved less than
# _STABLE_MAPS_PER_S and whose pinned memory less than the same bytes rate, is next read after
# _FULL_INFO_STILL_FACTOR x full_info_interval_s, twice that after the next still read, and so on
# up to _FULL_INFO_MAX_FACTOR x full_info_interval_s; any move brings it back to
# full_info_interval_s. (smaps_rollup walks the page tables: ~8 ms a torch process on the
# development VM, the largest part of a settled sidecar's cost before this back-off.)
_STABLE_BYTES_PER_S = 0.1 * 2**20
_STABLE_MAPS_PER_S = 1.0
# ... or less than this much whatever the time between the reads (main's USS goes up and down
# by a few batches' worth): below what any of those rules could call growth.
_STABLE_BYTES = 4 * 2**20
_STABLE_MAPS = 16
_FULL_INFO_STILL_FACTOR = 6
_FULL_INFO_MAX_FACTOR = 24
# An RSS move of at least this many bytes (or this share of the RSS at the last read) since the
# last USS read makes the process due at full_info_interval_s whatever its backed-off cadence.
_RSS_MOVE_BYTES = 16 * 2**20
_RSS_MOVE_SHARE = 0.1
# A process younger than this (seconds) is read again one second after each read: a worker maps
# its data files and fills its first caches in its first seconds (a crash then must find them).
_YOUNG_S = 6.0
# NOTE [ Memory reads on a still job ]: a process's USS, map count and mapped files are read
# (smaps_rollup and maps, 3-8 ms a torch process) only when something cheap says they may have
# changed since its last read (still_since_read):
# * its RSS moved (_RSS_MOVE_BYTES): whatever it allocates or maps and touches;
# * its virtual size moved (_VSIZE_MOVE_BYTES): every new mapping grows it, touched or not;
# * the job's anonymous memory moved by more than _ANON_MOVE_BYTES_PER_S a second since (half
#   the slowest growth worker_memory_growth warns about, GROWTH_MIN_BYTES_PER_S in
#   watchdog/diagnose/live.py), or _STABLE_BYTES: a page a worker stops sharing with main
#   (copy-on-write, the one growth RSS does not show) is a new anonymous page of the job's
#   memory cgroup, else of the host, so a worker that grows as fast as the rule warns about
#   moves it at least that fast, while 72 processes whose allocators drift by a few KiB a second
#   do not. It is taken as its least over the last ANON_WINDOW full samples (ANON_WINDOW), so that batches
#   allocated and freed do not count as a move;
# * a process of the tree ended (the pages it shared are the others' own now).
# A process read GATED_MAX_FACTOR x full_info_interval_s ago is read whatever the signs say; a
# young one, one whose last read failed, one mapping CUDA's device (pinned memory) and all while
# memory is short keep their cadence. Seen only at that ceiling: a worker's private memory grown
# because main freed the copy it shared (main's RSS falls then, as it does with every batch).
_VSIZE_MOVE_BYTES = 16 * 2**20
_ANON_MOVE_BYTES_PER_S = 0.5 * 2**20
ANON_WINDOW = 6
GATED_MAX_FACTOR = 96
# Memory is short when what is left to the job (HostSample.mem_left_bytes) is below this share
# of its limit (the cgroup's, else the host's total): an OOM kill may come within seconds, and
# the memory a crash report quotes must be fresh, not a reading backed off while still.
_SHORT_SHARE = 0.25


# The memory reads (smaps_rollup and maps, and the pinned read where CUDA's device is mapped) of
# every sampler that shares one MemoryReadBudget (the ranks of a job: watchdog.watch.node_loop)
# take at most this share of one core together, in their own CPU time measured at each read:
# ~5.6 + 1.9 ms a torch process on a node of 8 ranks x (1 + 8) under `dlwatch probe overhead
# --node`, so about 0.13 reads a second there, and each of its 72 processes read every 9 min at
# worst (every one's memory moving: the job's anonymous memory, which 72 allocators move together,
# kept most of them due); a lighter process is read more often within the same share. A
# process's first read and the reads made while memory is short (memory_short()) are made
# beyond it and do not spend it: 72 first reads would leave a debt of minutes. At
# 0.5 reads a second they were a quarter of the sidecar's cost there; unbounded, ~5 % of a core.
NODE_MEMORY_READ_SHARE = 0.001


class MemoryReadBudget:
    """A token bucket of CPU seconds shared by samplers (one per rank) that bounds their memory
    reads together: ``share`` CPU seconds a second (:data:`NODE_MEMORY_READ_SHARE`, 0.1 % of one
    core, by default), at most ``burst_s`` saved up. :meth:`take` grants the reads the saved
    seconds cover at the reads' mean cost so far (``first_cost_s`` before any; one read while
    any is saved), and :meth:`spend` takes each read's measured CPU time: a read that cost more
    than was saved leaves a debt the next reads wait for. Safe from several threads.

    Raises:
        ValueError: ``share``, ``burst_s`` or ``first_cost_s`` not above 0.
    """

    def __init__(
        self, share: float = NODE_MEMORY_READ_SHARE, burst_s: float = 0.016, first_cost_s: float = 0.008
    ) -> None:
        if not (share > 0 and burst_s > 0 and first_cost_s > 0):
            raise ValueError(
                f"a memory read budget needs a share, a burst and a first cost above 0 (got {share}, {burst_s}, "
                f"{first_cost_s})"
            )
        self.share = share
        self.burst_s = burst_s
        self._tokens = burst_s
        self._cost = first_cost_s
        self._at = time.monotonic()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = time.monotonic()
        self._tokens = min(self.burst_s, self._tokens + (now - self._at) * self.share)
        self._at = now

    def take(self, wanted: int) -> int:
        """How many of ``wanted`` reads may be made now (0 to ``wanted``); their cost is spent
        as they are made (:meth:`spend`)."""
        with self._lock:
            self._refill()
            if wanted <= 0 or self._tokens <= 0:
                return 0
            return min(wanted, max(1, int(self._tokens / self._cost)))

    def spend(self, cpu_s: float) -> None:
        """Take the CPU seconds one read cost (``time.thread_time()`` around it) from the saved
        ones, and fold them into the mean cost (an exponential mean, weight 1/4)."""
        with self._lock:
            self._refill()
            self._tokens -= cpu_s
            self._cost = max(1e-6, 0.75 * self._cost + 0.25 * cpu_s)


@dataclass
class MemoryRead:
    """The last slow-cadence read of one process: when (monotonic seconds), its values, the RSS
    then (bytes), the seconds until the next read, and the signs it is compared with (NOTE [
    Memory reads on a still job ])."""

    at: float
    uss: Optional[int]
    pss: Optional[int]
    maps: Optional[int]
    pinned: Optional[int]
    rss: int
    interval: float
    files: Tuple[Tuple[str, int, int], ...] = ()
    dirty: Optional[int] = None
    anon: Optional[int] = None
    vsize: Optional[int] = None  # the process's virtual size then (bytes)
    job_anon: Optional[int] = None  # the job's anonymous memory then (bytes; NOTE [ Memory reads on a still job ])


def memory_short(host: HostSample) -> bool:
    """Whether the memory left to the job (:attr:`HostSample.mem_left_bytes`) is below
    ``_SHORT_SHARE`` of its limit (the memory cgroup's, else the host's total; ``False`` when
    neither is known)."""
    limit = host.mem_limit_bytes or host.mem_total_bytes
    return limit is not None and limit > 0 and host.mem_left_bytes < _SHORT_SHARE * limit


def due(entries: List[dict], now: float, **kw) -> List[dict]:
    """Every read :func:`reads_due` says to make now (the same arguments): those beyond the
    budget first, then those it granted."""
    beyond, granted = reads_due(entries, now, **kw)
    return beyond + granted


def reads_due(
    entries: List[dict],
    now: float,
    *,
    base_s: float,
    last_call: Optional[float],
    wall: float,
    reads: Mapping[ProcId, MemoryRead],
    vsizes: Mapping[ProcId, int],
    short: bool,
    ended_at: float,
    budget: Optional[MemoryReadBudget] = None,
    job_anon: Optional[int] = None,
) -> Tuple[List[dict], List[dict]]:
    """The watched processes (main, workers) of ``entries`` (a walk's, as the keyword arguments
    of their samples) whose USS, PSS, map count and pinned memory are to be read now, as
    ``(beyond, granted)``: those read beyond ``budget`` (a first read, one made urgent while
    memory is short, every one without a budget) and those ``budget`` granted, whose CPU time
    the caller spends from it (:meth:`MemoryReadBudget.spend`).

    ``now`` and ``last_call`` (the sampler's previous call, ``None`` at the first) are monotonic
    seconds, ``wall`` the epoch seconds that ``create_time`` is in; ``base_s`` is
    ``full_info_interval_s``; ``reads`` the last read of each process, ``vsizes`` each process's
    virtual size at the last walk (bytes); ``short`` whether memory was short at the last sample
    (:func:`memory_short`); ``ended_at`` when a process of the tree was last found ended
    (monotonic seconds); ``budget`` the memory reads shared with a node's other ranks (``None``:
    only the per-call budget); ``job_anon`` the job's anonymous memory now (bytes; ``None``:
    unknown, no process is held back). Spends tokens of ``budget``; otherwise pure.

    A process is due ``base_s`` after its last read while its memory moves, and
    ``_FULL_INFO_STILL_FACTOR`` times that after a read that found it still, twice as long
    after each further still read up to ``_FULL_INFO_MAX_FACTOR`` times (:func:`next_interval`:
    USS and pinned memory moved by at most ``_STABLE_BYTES_PER_S`` a second or ``_STABLE_BYTES``,
    the map count by at most ``_STABLE_MAPS_PER_S`` a second or ``_STABLE_MAPS``, since the read
    before); due ``base_s`` after its last read, whatever its backed-off cadence, when its RSS
    moved ``_RSS_MOVE_BYTES`` (or ``_RSS_MOVE_SHARE`` of it) since, and a second after its last
    read while it is younger than ``_YOUNG_S`` (its mappings form then). While memory is short,
    a process whose RSS moved is read at every call and outside the budget: the reading a crash
    report quotes is then at most one interval old. The rules that read these values
    (``worker_memory_growth``, ``map_count_pressure``, ``pinned_memory_growth``) warn about
    growth of 1 MiB/s or more, so a still process is read less, and a growth is seen within
    ``_FULL_INFO_MAX_FACTOR x base_s`` at worst (RSS-less growth: copy-on-write pages un-shared
    in place).

    At most ``ceil(watched processes x seconds since the last call / base_s)`` processes are
    read per call (at least one), never-read ones first, then the most overdue: the reads
    spread over ticks instead of landing on one (64 workers started together). With a
    ``budget`` (the ranks of a node share one), the reads after a process's first also wait for
    that budget.

    A process that would be due is not while nothing says its memory changed since its last
    read (:func:`still_since_read`, NOTE [ Memory reads on a still job ]).
    """
    watched = [e for e in entries if e["role"] in (ROLE_MAIN, ROLE_WORKER) and e["state"] != "Z"]
    if not watched:
        return [], []
    dt = min(base_s, now - last_call) if last_call is not None else min(base_s, 1.0)
    per_call = max(1, math.ceil(len(watched) * max(dt, 0.0) / base_s))
    due = []
    urgent = []
    for e in watched:
        key = ProcId(e["pid"], e["start_ticks"])
        full = reads.get(key)
        if full is None:
            due.append((float("-inf"), e["create_time"], e))
            continue
        moved = abs(e["rss_bytes"] - full.rss) >= min(_RSS_MOVE_BYTES, max(_RSS_MOVE_SHARE * full.rss, 2**20))
        if moved and short:
            urgent.append(e)
            continue
        young = wall - e["create_time"] < _YOUNG_S
        at = full.at + (min(base_s, 1.0) if young else base_s if moved else full.interval)
        if at <= now and (
            moved
            or young
            or not still_since_read(
                full, now, vsize=vsizes.get(key), job_anon=job_anon, short=short, ended_at=ended_at, base_s=base_s
            )
        ):
            due.append((at, e["create_time"], e))
    due.sort(key=lambda x: (x[0], x[1]))
    due = due[:per_call]
    if budget is None:
        return urgent + [e for _at, _ct, e in due], []
    # a first read is never held back (a crash soon after a worker starts needs its mappings);
    # the others wait for the shared budget
    first = [x for x in due if x[0] == float("-inf")]
    granted = due[len(first) : len(first) + budget.take(len(due) - len(first))]
    return urgent + [e for _at, _ct, e in first], [e for _at, _ct, e in granted]


def still_since_read(
    full: MemoryRead,
    now: float,
    *,
    vsize: Optional[int],
    job_anon: Optional[int],
    short: bool,
    ended_at: float,
    base_s: float,
) -> bool:
    """Whether nothing says the memory of a process whose RSS did not move changed since its
    last read ``full`` (NOTE [ Memory reads on a still job ]): its virtual size ``vsize`` (bytes,
    at the last walk) moved less than ``_VSIZE_MOVE_BYTES``, the job's anonymous memory
    ``job_anon`` by at most ``_ANON_MOVE_BYTES_PER_S`` a second (or ``_STABLE_BYTES``) since (a
    process cannot have grown more than the whole job did, unless others shrank as much
    meanwhile), its last read did not fail, it maps no CUDA pinned memory, memory is not
    ``short``, no process of the tree ended since (``ended_at``: what it shared with this one is
    this one's own now), and it was read less than ``GATED_MAX_FACTOR x base_s`` ago."""
    return (
        not short
        and full.uss is not None
        and full.pinned is None
        and full.at > ended_at
        and now - full.at < GATED_MAX_FACTOR * base_s
        and vsize is not None
        and full.vsize is not None
        and abs(vsize - full.vsize) < _VSIZE_MOVE_BYTES
        and job_anon is not None
        and full.job_anon is not None
        and abs(job_anon - full.job_anon) <= max(_ANON_MOVE_BYTES_PER_S * (now - full.at), _STABLE_BYTES)
    )


def next_interval(
    last: Optional[MemoryRead],
    uss: Optional[int],
    maps: Optional[int],
    pinned: Optional[int],
    now: float,
    base_s: float,
) -> float:
    """Seconds until the next read of a process read now (``now``, monotonic seconds) with these
    values, its read before ``last`` (``None``: none): ``base_s`` while its memory moves;
    after a read that found it :func:`still`, twice the last interval, at least
    ``_FULL_INFO_STILL_FACTOR`` and at most ``_FULL_INFO_MAX_FACTOR`` times ``base_s``."""
    if last is not None and still(last, uss, maps, pinned, now - last.at):
        return min(max(2 * last.interval, base_s * _FULL_INFO_STILL_FACTOR), base_s * _FULL_INFO_MAX_FACTOR)
    return base_s


def still(last: MemoryRead, uss: Optional[int], maps: Optional[int], pinned: Optional[int], elapsed_s: float) -> bool:
    """Whether memory stayed still between two slow-cadence reads ``elapsed_s`` seconds apart
    (see :func:`due`); a value unreadable at either read counts as still."""
    if elapsed_s <= 0:
        return False

    def moved(a: Optional[int], b: Optional[int], per_s: float, least: float) -> bool:
        return a is not None and b is not None and abs(a - b) > max(per_s * elapsed_s, least)

    return not (
        moved(last.uss, uss, _STABLE_BYTES_PER_S, _STABLE_BYTES)
        or moved(last.pinned, pinned, _STABLE_BYTES_PER_S, _STABLE_BYTES)
        or moved(last.maps, maps, _STABLE_MAPS_PER_S, _STABLE_MAPS)
    )
