"""Take one :class:`~watchdog.types.Sample` of the job: every process's cheap metrics on each
call, per-thread progress counters for main and workers, USS/PSS at a slower, adaptive cadence.

NOTE [ Tick cost ]
A tick must cost the job nothing it can measure (``dlwatch probe overhead``), so each call
reads only what may have changed, from ``/proc`` directly (proc(5); the kernel's
Documentation/filesystems/proc.rst):

* The tree is walked from main through each process's own children
  (``/proc/PID/task/TID/children``, ``CONFIG_PROC_CHILDREN``), not by scanning all of ``/proc``;
  without those files, one scan per tick (:func:`procfs.ppid_map`). While no task was created
  on the host since the last walk (:func:`procfs.last_pid`), nothing forked: the children known
  are kept without a read. A process of the tree that ended makes the next walk read every
  thread's children (an orphan may be adopted by a subreaper thread that did not run), and so
  does one walk every ``_ALL_CHILDREN_EVERY_S``.
* What identifies a process and decides its role (its command line, whether main's torch names
  its workers) is kept per ``(pid, create time)``; the rule (:func:`discovery.decide_role`) is
  applied again at each tick to the name and parent read then, and the command line is read
  again only while the role may change (a young or starting process) or when the name changed.
* One ``stat`` read gives a process's name, state, parent, CPU time, threads, start time and
  RSS; then ``io``, the descriptor count (a directory listing), ``prlimit`` and ``wchan`` (not
  read for a running process: the kernel shows 0 then).
* Values that did not change since the last sample are the same objects
  (:meth:`Sampler._kept`), so the timeline holds one copy of them.
* NOTE [ Run-queue wait ]: at a sample that reads threads, each process of the loader
  (main, workers, their children, starting workers) also costs one ``/proc/PID/schedstat``
  read (:func:`procfs.run_queue_wait_s`): how long its main thread waited runnable for a CPU.
  A stall is judged on such samples only, and a worker that computes on an overloaded machine
  (a small CPU share, but runnable all along) must not pass for one that sleeps
  (``detect.working``); a lean sample or one without threads reads none.
* Threads: see :class:`procfs.ThreadReader` (a thread that did not run since the last tick
  costs two reads and keeps its sample object), and NOTE [ Thread reads ] for when none is read.
* USS/PSS and private dirty memory (``smaps_rollup``, milliseconds on a torch process: the
  kernel walks its page tables), the map count and the mapped data files: when, decided by
  :func:`watchdog.collect.memory_plan.due` from the last reads.
* Lean samples (NOTE [ Lean ticks ] in ``watchdog/collect/read_plan.py``): three reads (main's
  main thread's children, ``/dev/shm``, the available memory), the last processes again.
* The inside view (``ReadPlan.inside``): every process's records at a full sample, main's
  counters first at a lean one; the processes borrowed from the ranks' samplers are not read
  again (``NodeShare``).

NOTE [ Exit records ]
A wait that only a process of the job could end (a producer that writes a marker, a Manager
lock's holder) can never end once that process is gone; the report says which process, when it
ended and how (issue #34, "waits on the dead"). The sampler keeps an :class:`ExitRecord` for each
process of role ``other`` or ``worker_starting`` that a sample held and the next no longer does,
at no cost on a tick where nothing ended: the walk already reads each process's ``stat`` and
skips a zombie (state ``Z``: ended, not yet reaped by its parent); only then is its exit status
kept, from the same ``stat`` line (field 52, ``exit_code``, proc(5), Linux 3.5 and later), once
``procfs.may_read_exit_status`` shows that the kernel printed the real value to us (else it
prints 0, which would claim a clean exit). A process reaped between two samples leaves no
status: its record says so (``NO_EXIT_RECORD``) and never guesses. Every sample carries the
records so far (``Sample.exits``, the same tuple until another ends; at most ``_EXITS_KEPT``,
the newest).

NOTE [ Thread reads ]
Per-thread counters and waits are what judges a stall: which thread waits where, whether it
woke (NOTE [ Hang criterion ] and NOTE [ Deadlock proof ] in ``watchdog/detect/``). While
the inside view shows main receiving batches, there is no stall to judge: a full sample then
reads no thread (``ReadPlan.threads`` false, the read plan's choice: it asks for threads at
the first tick that counted no batch, so a stall is judged from per-thread reads as before).
Without the inside view the workers' own counters stand in for the batch count: while a worker
moved, threads are read at least every ``stall_timeout_s / 4`` (NOTE [ Thread reads ] in
:mod:`watchdog.collect.read_plan`). The one rule that reads threads while batches flow,
``cpu_oversubscribed`` (more runnable threads than usable CPUs), needs CPUs kept busy by the
tree's threads: the plan also asks for threads while the tree used at least
``THREADS_CPU_SHARE`` of its usable CPUs between its last two full samples, and at least every
``stall_timeout_s / 4`` (:mod:`watchdog.collect.read_plan`). Each thread read costs two
``/proc`` reads; a rank of 1 + 8 processes runs 30 to 40 threads. Without thread reads,
which thread forked is not known either: a walk then reads each process's main thread's
children (where PyTorch forks its workers) and keeps the children the last walk found (so does
every walk for a process whose threads are never read: the launcher, a process of another
role); every thread's children are read at the walk of all of them (every
``_ALL_CHILDREN_EVERY_S``, and after a process of the tree ended), so a child forked by another
thread while batches flow is seen within that time, and at once when they stop.

Costs measured on the development machine (a 2-vCPU VM shared with other jobs; Linux 6.18,
torch 2.13): a ``/proc`` read 4–8 µs hot, but 10–20 times more for the first reads after the
tick's sleep (caches cold), which is what a 1 Hz sidecar pays; ``smaps_rollup`` 2–8 ms on
a torch process. ``dlwatch probe overhead`` measures the whole.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Deque, Dict, List, Optional, Set, Tuple

import psutil

from ..errors import ProcError, ProcessGone
from ..types import (
    LOADER_ROLES,
    ROLE_MAIN,
    ROLE_OTHER,
    ROLE_STARTING,
    ROLE_WORKER,
    ExitRecord,
    FdCensus,
    HostSample,
    ProcessRole,
    ProcessSample,
    ProcId,
    Sample,
)
from . import cgroup, discovery, memory_plan, procfs
from .inside import InsideReader
from .memory_plan import ANON_WINDOW, MemoryRead, MemoryReadBudget, memory_short
from .node import NodeReads
from .read_plan import PROCESSES, ReadPlan
from .tick_view import TickViews

# State letters kept as they are (psutil's statuses, mapped back); any other letter is "?".
_STATES = frozenset("RSDTtZXI")
# Exit records kept (NOTE [ Exit records ]): the newest; a job that starts thousands of short
# helpers keeps the latest ones.
_EXITS_KEPT = 64
# Seconds between reads of vm.max_map_count (a sysctl, changed by hand if ever).
_MAX_MAP_COUNT_EVERY_S = 60.0
# Seconds between walks that read every thread's children file, ran or not (a bound on how long
# an orphan adopted by a subreaper thread of the job could go unseen; see Sampler.sample).
_ALL_CHILDREN_EVERY_S = 30.0
# A process past this share of RLIMIT_NOFILE gets its descriptors counted by kind, at most
# every FD_CENSUS_INTERVAL_S seconds.
FD_CENSUS_SHARE = 0.5
FD_CENSUS_INTERVAL_S = 2.0


def host_sample(
    main_pid: Optional[int], memory: Optional[cgroup.MemoryCgroup] = None, node: Optional[NodeReads] = None
) -> HostSample:
    """``/dev/shm`` as the job sees it (``/proc/PID/root/dev/shm``, so a container's own shm
    mount is measured), available memory (``MemAvailable``) and the limit and usage of main's
    memory cgroup ``memory`` (:func:`cgroup.memory_cgroup`), in bytes; ``vm.max_map_count`` is
    read at most once a minute. ``node``: the readings shared by a job's ranks (NOTE [ Node
    reads ]); ``None``: read now."""
    node = node or NodeReads()
    shm_total, shm_used = node.shm(main_pid) or (None, None)
    total, available = node.meminfo()
    return HostSample(
        shm_total_bytes=shm_total,
        shm_used_bytes=shm_used,
        mem_available_bytes=available,
        max_map_count=_max_map_count(),
        mem_total_bytes=total,
        mem_limit_bytes=memory.limit_bytes if memory else None,
        mem_cgroup_usage_bytes=memory.usage_bytes if memory else None,
    )


_MAX_MAP_COUNT: List[float] = []  # [read at (monotonic seconds), value or nan]


def _max_map_count() -> Optional[int]:
    now = time.monotonic()
    if not _MAX_MAP_COUNT or now - _MAX_MAP_COUNT[0] >= _MAX_MAP_COUNT_EVERY_S:
        value = procfs.max_map_count()
        _MAX_MAP_COUNT[:] = [now, math.nan if value is None else float(value)]
    return None if math.isnan(_MAX_MAP_COUNT[1]) else int(_MAX_MAP_COUNT[1])


@dataclass
class _Known:
    """What is kept of one process between ticks: its comm and psutil-style name, its command
    line, and whether its role can still change (then the command line is read again)."""

    comm: str
    name: str
    cmdline: Tuple[str, ...]
    settled: bool = False


def _no_borrow(key: ProcId) -> Optional[Tuple[ProcessSample, ...]]:
    return None


def _no_borrowed_view(pids: Set[int]) -> Tuple[tuple, tuple]:
    return (), ()


@dataclass(frozen=True)
class NodeShare:
    """What the samplers of one node's ranks share, given at construction (NOTE [ Node reads ]
    in watchdog/collect/node.py; NOTE [ One loop for the node ] in watchdog/watch/node_loop.py).

    Attributes:
        reads: the node's readings (``/dev/shm``, memory, the memory cgroup, the last pid).
        memory_budget: the budget of memory reads the ranks' samplers share (``None``: only
            a sampler's own per-call budget).
        borrow: a process of the tree that another sampler watches as its main (a rank) ->
            that sampler's latest processes, main first, or ``None`` (walked): the job-level
            sampler's, so that every process of the node is read once a tick.
        borrowed_view: ``(loaders, fetches)`` of borrowed pids from their ranks' latest
            samples, for the inside view.
    """

    reads: NodeReads = field(default_factory=NodeReads)
    memory_budget: Optional[MemoryReadBudget] = None
    borrow: Callable[[ProcId], Optional[Tuple[ProcessSample, ...]]] = _no_borrow
    borrowed_view: Callable[[Set[int]], Tuple[tuple, tuple]] = _no_borrowed_view


def _name(comm: str, cmdline: Tuple[str, ...]) -> str:
    """psutil's process name: the comm, or the command's base name when the comm is cut at 15
    bytes and the base name starts with it."""
    if len(comm) >= 15 and cmdline:
        extended = os.path.basename(cmdline[0])
        if extended.startswith(comm):
            return extended
    return comm


class Sampler:
    """Samples the process tree under ``root_pid`` (see NOTE [ Tick cost ]).

    Holds, between calls, per live process: its identity and command line, its last slow-cadence
    memory read, and per live thread its last sample (:class:`procfs.ThreadReader`); everything
    of a process is dropped at the first call that no longer finds it.

    Args:
        root_pid: the job's root process (``dlwatch run``'s child, or ``attach``'s PID).
        full_info_interval_s: seconds between USS/PSS reads of one process while its memory
            moves (:meth:`_due_full_info`).
        inside: the reader of the job's own DataLoader records, read with a sample whose plan
            asks (``ReadPlan.inside``); ``None``: no inside view.
        share: what this sampler shares with the other samplers of a node (:class:`NodeShare`);
            ``None``: its own readings.
        on_error: told ``where`` after an unexpected exception in a read that the sample goes
            on without (the inside view), from within the ``except`` block.
        clock: ``time.time`` (seconds since the epoch), for the ages that roles depend on.
    """

    def __init__(
        self,
        root_pid: int,
        full_info_interval_s: float,
        inside: Optional[InsideReader] = None,
        share: Optional[NodeShare] = None,
        on_error: Callable[[str], None] = lambda where: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.root_pid = root_pid
        self.full_info_interval_s = full_info_interval_s
        self.clock = clock
        share = share or NodeShare()
        self.node = share.reads
        self.memory_budget = share.memory_budget
        self._borrow = share.borrow
        self.views = TickViews(inside, share.borrowed_view, on_error)
        self._root: Optional[psutil.Process] = None
        self._root_start = procfs.start_ticks(root_pid)  # the job's root, alive when watching begins
        self._main: Optional[psutil.Process] = None
        self._main_start: Optional[int] = None
        self._boot = psutil.boot_time()  # as psutil's create_time adds it; fixed, so keys stay equal
        self._facts: Dict[ProcId, _Known] = {}
        self._kids: Dict[ProcId, Tuple[int, ...]] = {}  # children at the last walk
        self._prev: Dict[ProcId, ProcessSample] = {}  # the last sample of each process
        self._short = False  # memory_short() at the last sample
        self._lean_kids: Optional[Set[int]] = None  # main's main thread's children at the first lean sample
        self._last_sample: Optional[Sample] = None
        self._last_pid: Optional[int] = None
        self._full: Dict[ProcId, MemoryRead] = {}
        self._vsize: Dict[ProcId, int] = {}  # each process's virtual size at the last walk (bytes)
        self._ended_at = float("-inf")  # when a process of the tree was last found ended
        # the job's anonymous memory at the last full samples (NOTE [ Memory reads on a still job ])
        self._anon: Deque[int] = collections.deque(maxlen=ANON_WINDOW)
        self._threads = procfs.ThreadReader()
        self._classifier = discovery.Classifier(clock)
        self._live: Set[ProcId] = set()
        self._lost = False  # a process of the tree ended since the previous walk
        self._all_children_at = float("-inf")
        self._threads_stale = False  # a walk without threads came after the thread reader's last read
        self._last_t: Optional[float] = None
        self._last_wall: Optional[float] = None
        # NOTE [ Exit records ]: how the ended processes ended, and the zombies this walk found
        # (their wait status, None when the kernel would not show it to us)
        self.exits: Tuple[ExitRecord, ...] = ()
        self._zombies: Dict[ProcId, Optional[int]] = {}
        self._quota_value: Optional[float] = None
        # pid -> role (set_roles: the launcher and its ranks, watchdog.watch.node_loop).
        self._role_overrides: Dict[int, ProcessRole] = {}
        self._relabelled: Dict[ProcId, Tuple[ProcessSample, ProcessSample]] = {}
        self._borrowed: Tuple[ProcessSample, ...] = ()  # the last walk's borrowed processes
        self._quota_read_at = float("-inf")
        self._census: Dict[ProcId, FdCensus] = {}  # the last fd census of a process near its limit
        # Main's memory cgroup at the last sample (read once a tick, for the sample and the watcher).
        self.memory_cgroup: Optional[cgroup.MemoryCgroup] = None

    def set_roles(self, roles: Dict[int, ProcessRole]) -> None:
        """Name processes by pid in the samples from now on (``roles``: the launcher and the
        ranks of a multi-rank job, :class:`~watchdog.watch.node_loop.NodeLoop`)."""
        self._role_overrides = dict(roles)

    def _create_time(self, start_ticks: int) -> float:
        return start_ticks / procfs.CLK_TCK + self._boot

    def _find_main(self) -> Tuple[Optional[psutil.Process], Optional[procfs.ProcStat]]:
        """Main and its ``stat`` now; main is looked for again (a walk from the root) only once
        the known one is gone."""
        if self._main is not None:
            st = procfs.proc_stat(self._main.pid)
            if st is not None and st.start_ticks == self._main_start:
                return self._main, st
            self._main = None
        try:
            if self._root is None:
                self._root = psutil.Process(self.root_pid)
            main = discovery.find_main(self._root)
        except psutil.Error:
            main = None
        st = procfs.proc_stat(main.pid) if main is not None else None
        if main is None or st is None:
            return None, None
        self._main, self._main_start = main, st.start_ticks
        return main, st

    def root_identity(self) -> List[ProcId]:
        """``[ProcId]`` of the job's root process (a shell or launcher above main) as it was when
        this sampler was made, or empty when it was gone already."""
        return [] if self._root_start is None else [ProcId(self.root_pid, self._root_start)]

    def sample(self, plan: ReadPlan = PROCESSES) -> Sample:
        """One sample of the job now, read as ``plan`` asks (:mod:`watchdog.collect.read_plan`);
        processes that vanish meanwhile are left out, and so are zombies (as psutil, whose
        command line read fails for them, left them out before).

        With ``plan.lean`` (the loader delivered at the last tick), a lean sample (:meth:`_lean`)
        when nothing can have changed in the tree; else a full one; ``Sample.lean`` says which.
        Without ``plan.threads``, a full sample reads no process's threads (NOTE [ Thread
        reads ]): each process's ``threads`` is empty and the sample's ``threads_read`` is
        ``False``. With ``plan.inside``, the inside view is read with it (:meth:`TickViews.with_view`).
        Never raises for the inside view: a failed read is told to ``on_error`` and the sample
        has a view that says so."""
        quick = self._lean() if plan.lean else None
        if quick is not None:
            self._last_sample = sample = quick
        else:
            self._lean_kids = self._last_sample = None  # none lean after a walk that raised
            self._last_sample = sample = self._sample(plan.threads)
            if not plan.threads:
                # the thread reader's children are those of its last read: the next walk with
                # threads reads every thread's (a child forked meanwhile would be missing from a
                # "cached" walk)
                self._threads_stale = True
        if plan.inside and sample.main is not None:
            sample = self.views.with_view(sample, {p.pid for p in self._borrowed})
        return sample

    def _lean(self) -> Optional[Sample]:
        """The last sample again, its process samples the same objects (the same tuple), from
        one read of the children of main's main thread (``/proc/PID/task/PID/children``, where
        PyTorch's workers are forked), to see that none is new or gone, and the host's
        ``/dev/shm`` and available memory (two reads). No process's own files are read: while
        main receives batches (the caller's condition, the inside view's counters) its workers
        work; what else may move (RSS, descriptors, a worker's state) is read at the next full
        sample, at most ``min(warning_interval_s, stall_timeout_s / 2)`` later (NOTE [ Lean
        ticks ] in watchdog/collect/read_plan.py).

        ``None`` when a full sample is needed: main's main thread has a child the last walk did
        not see, or lost one since the first lean sample after that walk; a child of the walk's
        that main's main thread has not is gone or a zombie (it ended before that first lean
        sample); no lean sample may follow the last full one (:attr:`Sample.may_lean`); memory
        is short now (:func:`memory_short`). The memory cgroup's figures are the last full sample's."""
        last = self._last_sample
        main = last.main if last is not None else None
        if last is None or main is None or not last.may_lean:  # ended, young, or memory short
            return None
        known = self._kids.get(main.ident)
        kids = set(procfs.thread_children(main.pid, main.pid))
        if known is None or not kids <= set(known):
            return None  # a child the last walk did not see
        if self._lean_kids is None:
            stats = [procfs.proc_stat(pid) for pid in set(known) - kids]  # another thread's child, or gone?
            if any(st is None or st.ppid != main.pid or st.state in ("Z", "X") for st in stats):
                return None
            self._lean_kids = kids
        elif kids != self._lean_kids:
            return None  # a child went
        shm = self.node.shm(main.pid)
        host = (
            last.host
            if shm is None
            else dataclasses.replace(
                last.host, shm_total_bytes=shm[0], shm_used_bytes=shm[1], mem_available_bytes=self.node.meminfo()[1]
            )
        )
        if memory_short(host):
            return None
        return Sample(
            time.monotonic(),
            time.time(),
            last.processes,
            host,
            threads_read=last.threads_read,
            exits=self.exits,
            lean=True,
            may_lean=True,
        )

    def _sample(self, threads: bool = True) -> Sample:
        t_mono, wall = time.monotonic(), time.time()
        main, main_st = self._find_main()
        found: List[dict] = []
        self._borrowed = ()
        if main is not None and main_st is not None:
            found = self._walk(main.pid, main_st, t_mono, threads)
        self.memory_cgroup = self.node.memory_cgroup(main.pid) if main is not None else None
        self._read_full_info(found, t_mono, self._job_anon())
        self._count_fds(found, t_mono)
        processes = tuple(self._kept(f) for f in found)
        if self._borrowed and main is not None:
            first = main.pid
            processes = tuple(sorted(processes + self._borrowed, key=lambda p: (p.pid != first, p.create_time, p.pid)))
        live = {p.ident for p in processes}
        self._lost = bool(self._live - live)
        if self._lost:
            self._ended_at = t_mono  # the pages it shared are the others' own now
            self._record_exits(self._live - live, t_mono, wall)
        self._zombies = {}
        self._live = live
        for table in (self._facts, self._full, self._kids, self._prev, self._census, self._relabelled, self._vsize):
            for key in [k for k in table if k not in live]:
                del table[key]
        self._threads.forget({p.pid for p in processes})
        self._last_t, self._last_wall = t_mono, wall
        host = host_sample(main.pid if main else None, self.memory_cgroup, self.node)
        self._short = memory_short(host)
        settled = all(getattr(self._facts.get(p.ident), "settled", False) for p in processes)
        may_lean = settled and not self._lost and not self._short
        return Sample(t_mono, wall, processes, host, threads_read=threads, exits=self.exits, may_lean=may_lean)

    def _record_exits(self, ended: Set[ProcId], t_mono: float, wall: float) -> None:
        """Add an :class:`ExitRecord` for each process of ``ended`` (alive at the last sample,
        not in this one) whose role was ``other`` or ``worker_starting`` (NOTE [ Exit
        records ]), with the wait status this walk read if it found it a zombie."""
        new = []
        for key in sorted(ended):
            p = self._prev.get(key)
            if p is None or p.role not in (ROLE_OTHER, ROLE_STARTING):
                continue
            new.append(
                ExitRecord(
                    pid=p.pid,
                    start_ticks=key.start_ticks,
                    ppid=p.ppid,
                    role=p.role,
                    name=p.name,
                    cmdline=p.cmdline,
                    last_seen_mono=self._last_t if self._last_t is not None else t_mono,
                    last_seen_wall=self._last_wall if self._last_wall is not None else wall,
                    ended_mono=t_mono,
                    ended_wall=wall,
                    status=self._zombies.get(key),
                )
            )
        if new:
            self.exits = (self.exits + tuple(new))[-_EXITS_KEPT:]

    def _job_anon(self) -> Optional[int]:
        """The job's anonymous memory in bytes, the least of the last ``ANON_WINDOW`` readings
        taken at full samples (this one's included): its memory cgroup's (``anon_bytes``), else
        the host's ``AnonPages``, less dlwatch's own where dlwatch is counted in it; ``None``
        when neither is known (NOTE [ Memory reads on a still job ])."""
        memcg = self.memory_cgroup
        if memcg is not None and memcg.anon_bytes is not None:
            now: Optional[int] = memcg.anon_bytes
            ours = self.node.memory_cgroup_folder(os.getpid()) == (memcg.version, memcg.path)
        else:
            now, ours = self.node.anon_pages(), True
        if now is None:
            self._anon.clear()
            return None
        if ours:  # dlwatch's own memory (its timeline grows for minutes) is not the job's
            now -= self.node.own_anon()
        self._anon.append(now)
        return min(self._anon)

    def _walk(self, main_pid: int, main_st: procfs.ProcStat, t_mono: float, threads_wanted: bool = True) -> List[dict]:
        """Main and every descendant (breadth first, each parent before its children), as the
        keyword arguments of their :class:`ProcessSample` (USS fields still to fill); main first,
        then by create time. Without ``threads_wanted``, no thread is read (the children of a
        process come from its threads' ``children`` files, or the last walk's when no task was
        created on the host since)."""
        ppids: Optional[Dict[int, List[int]]] = None
        newest = self.node.last_pid()
        stale = threads_wanted and self._threads_stale  # the thread reader missed walks without threads
        if self._lost or t_mono - self._all_children_at >= _ALL_CHILDREN_EVERY_S or stale:
            mode = "all"
            self._all_children_at = t_mono
        elif newest is None or newest != self._last_pid:
            mode = "changed"
        else:
            mode = "cached"  # no task was created on the host since the last walk: nothing forked
        self._last_pid = newest
        self._threads_stale = self._threads_stale and not threads_wanted
        if not procfs.children_files_supported() and mode != "cached":
            ppids = collections.defaultdict(list)
            for pid, ppid in procfs.ppid_map().items():
                ppids[ppid].append(pid)
        roles: Dict[int, discovery.Role] = {}
        out: List[dict] = []
        main_key = ProcId(main_pid, main_st.start_ticks)
        main_cmd: Tuple[str, ...] = ()
        modern_cache: List[bool] = []

        def modern() -> bool:
            if not modern_cache:
                modern_cache.append(self._classifier.modern(main_key))
            return modern_cache[0]

        queue: Deque[Tuple[int, Optional[procfs.ProcStat], Optional[int]]] = collections.deque(
            [(main_pid, main_st, None)]
        )
        visited = set()
        while queue:
            pid, st, parent = queue.popleft()
            if pid in visited:
                continue
            visited.add(pid)
            if st is None:
                st = procfs.proc_stat(pid)
                if st is None:
                    continue
            if parent is not None and st.ppid != parent:
                continue  # the pid was reused by a process outside the tree, or the child moved
            if st.state in ("Z", "X", "x"):
                key = ProcId(pid, st.start_ticks)
                if st.state == "Z" and key in self._live:  # it ended since the last sample (NOTE [ Exit records ])
                    self._zombies[key] = st.exit_status if procfs.may_read_exit_status(pid) else None
                continue
            create_time = self._create_time(st.start_ticks)
            key = ProcId(pid, st.start_ticks)
            borrowed = self._borrow(key) if pid != main_pid else None
            if borrowed:
                self._borrowed += self._relabel(key, borrowed)
                continue
            facts = self._facts_of(key, st)
            age = self.clock() - create_time
            if pid == main_pid:
                main_cmd = facts.cmdline
                role = discovery.Role(pid, ROLE_MAIN)
            else:
                role = discovery.decide_role(
                    pid, facts.name, st.ppid, facts.cmdline, age, roles.get(st.ppid), main_pid, main_cmd, modern
                )
            facts.settled = discovery.settled(role.role, age)
            roles[pid] = role
            name = self._role_overrides.get(pid, role.role)
            watched = name in (ROLE_MAIN, ROLE_WORKER)
            threaded = watched or name == ROLE_STARTING
            kids: Optional[Tuple[int, ...]]
            if threaded and threads_wanted:
                threads, kids = self._threads.read(
                    pid, pid if name == ROLE_MAIN else None, children=mode, num_threads=st.num_threads
                )
            else:
                threads = ()
                kids = self._kids.get(key) if mode == "cached" else None
                if kids is None and mode == "changed" and key in self._kids and procfs.children_files_supported():
                    # NOTE [ Thread reads ]: no thread read, so which thread forked is not known;
                    # the main thread's children (where PyTorch forks its workers) and those of
                    # the last walk (a pid that left is dropped below: its stat's parent is
                    # another) stand for every thread's until the next walk of all of them
                    kids = tuple(dict.fromkeys(procfs.thread_children(pid, pid) + self._kids[key]))
                if kids is None:
                    kids = procfs.children_of(pid)
            entry = self._process_entry(pid, key, st, facts, name, role, watched)
            if entry is None:
                continue
            self._vsize[key] = st.vsize_bytes
            entry["threads"] = threads
            # NOTE [ Run-queue wait ]: one small read, only for the loader's processes at a
            # sample that reads threads (where a stall is judged)
            entry["runq_wait_s"] = procfs.run_queue_wait_s(pid) if threads_wanted and name in LOADER_ROLES else None
            out.append(entry)
            if kids is None:
                kids = tuple(ppids.get(pid, ())) if ppids is not None else self._kids.get(key, ())
            self._kids[key] = kids
            queue.extend((c, None, pid) for c in dict.fromkeys(kids))
        out.sort(key=lambda e: (e["pid"] != main_pid, e["create_time"], e["pid"]))
        return out

    def _relabel(self, key: ProcId, borrowed: Tuple[ProcessSample, ...]) -> Tuple[ProcessSample, ...]:
        """A rank's processes as this sampler names them: its main (first) under its
        role given by :meth:`set_roles` (``rank``), the others as the rank's sampler named them. The
        relabelled main is made once per sample object of it."""
        head, rest = borrowed[0], borrowed[1:]
        role = self._role_overrides.get(head.pid, head.role)
        if role == head.role:
            return borrowed
        last = self._relabelled.get(key)
        if last is None or last[0] is not head:
            last = (head, dataclasses.replace(head, role=role))
            self._relabelled[key] = last
        return (last[1],) + rest

    def _count_fds(self, entries: List[dict], now: float) -> None:
        """Count the descriptors of each process above ``FD_CENSUS_SHARE`` of its
        RLIMIT_NOFILE by kind (:func:`procfs.fd_census`), at most every
        ``FD_CENSUS_INTERVAL_S`` a process; each entry carries its last census (a crash by
        EMFILE is explained by what filled the table: shared tensors, sockets, or files the job
        never closed)."""
        for e in entries:
            key = ProcId(e["pid"], e["start_ticks"])
            n, limit = e["num_fds"], e["rlimit_nofile_soft"]
            last = self._census.get(key)
            if (
                n
                and limit
                and n > FD_CENSUS_SHARE * limit
                and (last is None or now - last.t_mono >= FD_CENSUS_INTERVAL_S)
            ):
                found = procfs.fd_census(e["pid"], now)
                if found is not None:
                    self._census[key] = last = found
            e["fd_census"] = last

    def _kept(self, fields: dict) -> ProcessSample:
        """The :class:`ProcessSample` of ``fields``, holding the previous sample's objects for
        every value that did not change, or the previous sample itself when nothing did (a
        process asleep in a hang): the timeline keeps one copy of what stays the same."""
        key = ProcId(fields["pid"], fields["start_ticks"])
        prev = self._prev.get(key)
        if prev is not None:
            same = True
            for name, value in fields.items():
                old = getattr(prev, name)
                if old is value:
                    continue
                if old == value and type(old) is type(value):
                    fields[name] = old
                else:
                    same = False
            if same:
                return prev
        sample = ProcessSample(**fields)
        self._prev[key] = sample
        return sample

    def _facts_of(self, key: ProcId, st: procfs.ProcStat) -> _Known:
        """The kept facts of ``key``, its command line read again when its name changed or its
        role may still change."""
        facts = self._facts.get(key)
        if facts is None or not facts.settled or facts.comm != st.comm:
            cmd = procfs.cmdline(key[0])
            cmd = () if cmd is None else cmd
            if facts is not None and facts.cmdline == cmd:
                cmd = facts.cmdline  # one tuple shared by every sample of the timeline
            facts = _Known(st.comm, _name(st.comm, cmd), cmd)
            self._facts[key] = facts
        return facts

    def _process_entry(
        self,
        pid: int,
        key: ProcId,
        st: procfs.ProcStat,
        facts: _Known,
        role: str,
        decided: discovery.Role,
        watched: bool,
    ) -> Optional[dict]:
        """The cheap per-tick reads of one process; ``None`` when it vanished meanwhile."""
        num_fds: Optional[int] = None
        rlimit: Optional[int] = None
        rw: Tuple[Optional[int], Optional[int]] = (None, None)
        try:  # all three need ptrace-read access to the process
            num_fds = procfs.fd_count(pid)
            rlimit = procfs.nofile_limit(pid)
            rw = procfs.parse_io(procfs.read_checked(pid, "io"))
        except ProcessGone:
            return None
        except ProcError:  # another user's process, or dlwatch's own trouble (EMFILE): unknown this tick
            pass
        affinity = quota = None
        if watched:
            try:
                affinity = len(os.sched_getaffinity(pid))
            except OSError:
                affinity = None
            quota = self._quota(pid, role)
        full = self._full.get(key)
        return {
            "pid": pid,
            "ppid": st.ppid,
            "create_time": self._create_time(key.start_ticks),
            "start_ticks": key.start_ticks,
            "role": role,
            "name": facts.name,
            "cmdline": facts.cmdline,
            "state": st.state if st.state in _STATES else "?",
            "wchan": "0" if st.state == "R" else procfs.wchan(pid),  # the kernel prints 0 for a running task
            "cpu_s": st.cpu_ticks / procfs.CLK_TCK,
            "rss_bytes": st.rss_pages * procfs.PAGE_SIZE,
            "uss_bytes": full.uss if watched and full else None,
            "pss_bytes": full.pss if watched and full else None,
            "num_fds": num_fds,
            "rlimit_nofile_soft": None if rlimit is None or rlimit < 0 else rlimit,
            "num_threads": st.num_threads,
            "read_chars": rw[0],
            "write_chars": rw[1],
            "start_method": decided.start_method,
            "cpu_affinity": affinity,
            "cpu_quota": quota,
            "owner_pid": decided.owner_pid,
            "map_count": full.maps if watched and full else None,
            "pinned_bytes": full.pinned if watched and full else None,
            "mapped_files": full.files if watched and full else (),
            "dirty_bytes": full.dirty if watched and full else None,
            "anon_bytes": full.anon if watched and full else None,
            "memory_read_mono": full.at if watched and full else None,
        }

    def _due_full_info(self, entries: List[dict], now: float, job_anon: Optional[int] = None) -> List[dict]:
        """The watched processes (main, workers) whose USS, PSS, map count and pinned memory are
        read at this call (:func:`memory_plan.reads_due`, given this sampler's last reads; ``now``
        in monotonic seconds, ``job_anon`` the job's anonymous memory now in bytes, ``None``:
        unknown)."""
        beyond, granted = self._reads_due(entries, now, job_anon)
        return beyond + granted

    def _reads_due(self, entries: List[dict], now: float, job_anon: Optional[int]) -> Tuple[List[dict], List[dict]]:
        return memory_plan.reads_due(
            entries,
            now,
            base_s=self.full_info_interval_s,
            last_call=self._last_t,
            wall=self.clock(),
            reads=self._full,
            vsizes=self._vsize,
            short=self._short,
            ended_at=self._ended_at,
            budget=self.memory_budget,
            job_anon=job_anon,
        )

    def _read_full_info(self, entries: List[dict], now: float, job_anon: Optional[int] = None) -> None:
        """Read the due processes' USS, PSS, map count and pinned memory into their entries
        (:meth:`_due_full_info`; ``job_anon``: the job's anonymous memory now, in bytes)."""
        beyond, granted = self._reads_due(entries, now, job_anon)
        for e in beyond + granted:
            key = ProcId(e["pid"], e["start_ticks"])
            # what the shared budget granted is spent from it (memory_plan.reads_due)
            began = time.thread_time() if any(e is g for g in granted) else None
            rollup = procfs.smaps_rollup(e["pid"])
            st = procfs.proc_stat(e["pid"])
            if st is None or st.start_ticks != key.start_ticks:
                self._spend(began)
                continue  # gone, or another process under that pid already
            uss = rollup.uss if rollup else None
            pss = rollup.pss if rollup else None
            dirty = rollup.private_dirty if rollup else None
            anon = rollup.anonymous if rollup else None
            maps, nvidia, files = procfs.maps_summary(e["pid"])
            pinned = procfs.pinned_bytes(e["pid"]) if nvidia else None
            self._spend(began)
            interval = memory_plan.next_interval(self._full.get(key), uss, maps, pinned, now, self.full_info_interval_s)
            self._full[key] = MemoryRead(
                now,
                uss,
                pss,
                maps,
                pinned,
                e["rss_bytes"],
                interval,
                files,
                dirty,
                anon,
                st.vsize_bytes,
                job_anon,
            )
            e.update(
                uss_bytes=uss,
                pss_bytes=pss,
                map_count=maps,
                pinned_bytes=pinned,
                mapped_files=files,
                dirty_bytes=dirty,
                anon_bytes=anon,
                memory_read_mono=now,
            )

    def _spend(self, began: Optional[float]) -> None:
        """Spend the CPU time of one memory read begun at ``began`` (``time.thread_time()``;
        ``None``: a read made beyond the budget) from the budget the ranks share, if any."""
        if self.memory_budget is not None and began is not None:
            self.memory_budget.spend(time.thread_time() - began)

    def _quota(self, pid: int, role: str) -> Optional[float]:
        # cgroup limits change rarely: read main's once a minute, and give workers main's value.
        now = time.monotonic()
        if role == ROLE_MAIN and now - self._quota_read_at > 60:
            self._quota_value = cgroup.cpu_quota(pid)
            self._quota_read_at = now
        return self._quota_value
